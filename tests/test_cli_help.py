"""`--help` of every command reads like lm-evaluation-harness's: every option that has a value shows its default,
every command has a description or help, and `tasks list` / `data stats` explain themselves."""

from __future__ import annotations

import argparse

import pytest

from rescue_env.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(build_parser()))


@pytest.mark.parametrize("path,parser", COMMANDS, ids=[" ".join(p) or "rescue-bench" for p, _ in COMMANDS])
def test_every_option_with_a_value_shows_its_default(path, parser) -> None:
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        if not action.option_strings or action.default in (None, argparse.SUPPRESS) or action.default is False:
            continue
        help_text = " ".join((parser.formatter_class(prog="x")._get_help_string(action) or "").split())
        assert "default" in help_text, f"{' '.join(path)} {action.option_strings[0]} hides its default"
        assert action.option_strings[0] in text


def test_every_command_says_what_it_does() -> None:
    """Each subcommand has a line in its parent's listing (the help of ``add_parser``)."""
    for path, parser in COMMANDS:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {choice.dest: choice.help for choice in action._choices_actions}
                assert set(helps) == set(action.choices), path
                assert all(helps.values()), f"{' '.join(path)}: a subcommand without help: {helps}"
    synth = dict(COMMANDS)[("data", "synth")]
    assert synth.description and "synthetic" in synth.description


def test_tasks_list_explains_the_context_column(capsys) -> None:
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    assert "all (-1)" in out and "-1 = every earlier row" in out


def test_data_stats_prints_label_names_in_full(capsys) -> None:
    assert main(["data", "stats", "demo"]) == 0
    out = capsys.readouterr().out
    transitions = out[out.index("Relation transitions - couple") :]
    assert "pursue_withdraw" in transitions and "constructive_alignment" in transitions
    assert "pursue_wit " not in out
