"""STP - Support Target Prediction (paper Sec. 3, App. C; Table 4: Rec. = recall@1, MRR over a top-3 ranking).

The therapist speaks next: whom is that supportive move mainly directed to? The model sees the rows before the
therapist turn (never the turn itself) and ranks the 3 most likely targets among the sample's candidates.

Instances (App. C; reference-spec 5.1): every therapist row whose first support-strategy item has a non-empty
``strategy_type`` and whose target resolves: the strategy's target, else the row's own target (App. C fallback),
collapsed to one label, a multi-person target becoming ``Couple``/``Family`` (``domain.collapse_target``). On the
text release: 1,290 couple + 347 family instances in 172 + 17 samples (Table 6).

Candidates: the sample's participants (``domain.participants``) and the group label, each once. The authors'
candidate list also maps every therapist-row target tuple through the same collapse, so ``Couple`` could appear two
or three times; ours holds each label once (a duplicate adds no choice, only noise in the prompt). Every gold is a
candidate: a therapist row whose target is not (a name that never speaks, is never addressed and is not in the
sample's ``participants``) is dropped and counted (``outside_candidates``; ``rescue-bench tasks count``), never
added to the list: a name that only the annotation knows would be the answer, shown to the model (0 of the
release's rows; on a copy with annotations shuffled across samples, 520 of 628 instances, and a trained solver
scored 44.0 by picking the added name). Unlike the authors' code, an answer with no valid candidate scores as a
miss and is counted, and a short list is never padded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from benchmarks.base import Instance, Prediction, PromptOptions, new_instance
from benchmarks.prompting import SCENARIO_SETTING, context_size, describe_window, envelope, render_rows, window
from benchmarks.ranking import (
    RANKING_KEY,
    TOP_K,
    answer_example,
    baseline_answers,
    by_scenario,
    failure_counts,
    one_scenario,
    parse_ranked,
    ranked_summary,
    ranked_summary_draws,
    score_ranked,
)
from rescue_env.data.domain import (
    GROUP_SPEAKERS,
    THERAPIST,
    collapse_target,
    group_label,
    is_client,
    is_therapist,
    participants,
    primary_strategy,
    scenario_of,
    support_target,
    target_members,
)
from rescue_env.data.schema import Sample

name = "stp"
title = "Support target prediction"
batch_size = 3
default_context = 3
generative = False


class SupportRow(NamedTuple):
    """A therapist row with a strategy and a resolvable target (shared with SSP)."""

    position: int
    strategy: str
    target: str
    """The collapsed target label: one name or the group label."""
    members: tuple[str, ...]
    """The real recipient subset (``domain.target_members``)."""
    source: str
    """``support_strategy`` or ``row_target`` (App. C fallback)."""


def support_rows(sample: Sample) -> Iterator[SupportRow]:
    """Therapist rows whose first support-strategy item has a non-empty type and whose target resolves."""
    scenario = scenario_of(sample)
    people = participants(sample)
    for position, row in enumerate(sample.rows):
        if not is_therapist(row):
            continue
        strategy = primary_strategy(row)
        if not strategy:
            continue
        names = support_target(row)
        target = collapse_target(names, scenario)
        if not target:
            continue
        from_strategy = any(t.strip() and t.strip() != THERAPIST for t in row.support_strategy[0].target)
        yield SupportRow(
            position=position,
            strategy=strategy,
            target=target,
            members=target_members(names, people),
            source="support_strategy" if from_strategy else "row_target",
        )


def candidates_of(sample: Sample) -> list[str]:
    """The sample's participants, then the group label, each once."""
    return list(dict.fromkeys([*participants(sample), group_label(scenario_of(sample))]))


def outside_candidates(samples: Sequence[Sample]) -> list[tuple[str, int]]:
    """(sample id, row position) of the therapist rows left out of STP because their target is no candidate."""
    out: list[tuple[str, int]] = []
    for sample in samples:
        candidates = candidates_of(sample)
        out += [(sample.sample_id, s.position) for s in support_rows(sample) if s.target not in candidates]
    return out


def choices(instance: Instance) -> list[str]:
    return list(instance.inputs["candidates"])


def build_instances(samples: Sequence[Sample]) -> list[Instance]:
    instances: list[Instance] = []
    for sample in samples:
        scenario = scenario_of(sample)
        candidates = candidates_of(sample)
        for support in support_rows(sample):
            if support.target not in candidates:  # see outside_candidates: kept, the list would carry the answer
                continue
            instances.append(
                new_instance(
                    name,
                    sample,
                    support.position,
                    scenario,
                    gold={"target": support.target, "members": list(support.members), "source": support.source},
                    inputs={"candidates": list(candidates)},
                )
            )
    return instances


def render(batch: Sequence[Instance], samples: Mapping[str, Sample], options: PromptOptions) -> list[dict[str, str]]:
    size = context_size(options, default_context)
    scenario = one_scenario(batch)
    group = group_label(scenario)
    whole = "the couple" if scenario == "couple" else "the family"
    instructions = (
        f"Each item below shows {describe_window(size)} before a therapist turn in {SCENARIO_SETTING[scenario]}. "
        f"The therapist speaks next; you are NOT shown that turn, so do not guess its words. Predict whom the "
        f"therapist's next supportive move is mainly directed to, and rank the 3 most likely targets from the "
        f"item's candidates, most likely first, each candidate at most once.\n"
        f"Target rules:\n"
        f"- The candidates are a closed set: the participants by name and {group} for {whole} as a whole.\n"
        f"- Use {group} when the move addresses {whole} jointly, a shared pattern or a shared task, or two or "
        f"more participants together.\n"
        f"- Prefer one person when the move mainly invites, protects, challenges, reassures or redirects that "
        f"person.\n"
        f"- Weigh who holds the floor, who is activated or withdrawn, who pursues whom and where the therapist's "
        f"attention has been; a move that restores balance or protects someone is directed to that person."
    )
    items = []
    for instance in batch:
        rows = window(instance.row - 1, size)
        items.append(
            f"Rows shown:\n{render_rows(samples[instance.sample_id], rows, options.mode)}\n"
            f"Candidates: {', '.join(choices(instance))}\n"
            f"The therapist takes row {instance.row + 1}. Whom is that turn mainly directed to?"
        )
    return envelope(scenario, instructions, items, answer_example("target"), options)


def parse(text: str | None, batch: Sequence[Instance]) -> list[Prediction]:
    return parse_ranked(text, batch, choices)


def score(instance: Instance, prediction: Prediction, extras: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return score_ranked(instance, prediction, "target")


def summary(scores: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """recall@1 (the paper's Rec.), recall@2, recall@3 and MRR."""
    return ranked_summary(scores)


summary_draws = ranked_summary_draws
"""``summary`` over blocks of bootstrap resamples (``benchmarks.bootstrap``; the same values, tested)."""


def _kind(label: str | None) -> str:
    if label is None:
        return "failed"
    return "group" if label in GROUP_SPEAKERS else "individual"


def details(instances: Sequence[Instance], scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Failure counts; gold vs top-1 as individual/group (``failed`` for no answer); how often the top-1 named
    the wrong individual for an individual gold; metrics per scenario."""
    out: dict[str, Any] = failure_counts(scores)
    confusion = {g: {p: 0 for p in ("individual", "group", "failed")} for g in ("individual", "group")}
    for s in scores:
        confusion[_kind(s["gold"])][_kind(s["top1"])] += 1
    out["gold_counts"] = {g: sum(row.values()) for g, row in confusion.items()}
    out["target_kind_confusion"] = confusion
    out["wrong_individual"] = sum(
        _kind(s["gold"]) == "individual" and _kind(s["top1"]) == "individual" and s["top1"] != s["gold"] for s in scores
    )
    out["by_scenario"] = by_scenario(scores, summary)
    return out


# Names rarely recur across samples while the group label does, so the majority answer is mostly
# "the group label first".
oracle_answer, random_answer, majority_answer = baseline_answers("target", choices)


def heuristic_answer(instance: Instance, sample: Sample) -> dict[str, Any]:
    """The client who spoke last before the therapist row, then the group label, then the other candidates in
    candidate order (speakers only; with no earlier client row, the group label comes first)."""
    candidates = choices(instance)
    last = next(
        (
            sample.rows[p].primary_speaker.strip()
            for p in range(instance.row - 1, -1, -1)
            if is_client(sample.rows[p]) and sample.rows[p].primary_speaker.strip() in candidates
        ),
        None,
    )
    group = group_label(instance.scenario)
    ranking = [*([last] if last else []), group, *candidates]
    return {RANKING_KEY: [c for c in dict.fromkeys(ranking) if c in candidates][:TOP_K]}
