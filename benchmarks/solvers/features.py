"""What a trained solver reads of an instance: exactly what the task's prompt shows a model, and nothing else.

The source is the task's own prompt for a batch of this one instance (``task.render``): its item block (the rows
shown, in the chosen ``--mode``; the candidates; the question) parsed back with ``rescue_env.rendering``'s row
parser. So a solver sees the same rows, words, speakers, addressees, timing and (by mode) tone and visual cues as
an LLM, and no annotation of any row: ``render`` never reads one (tested for the prompts), and a test rewrites every
annotation of a copy of the data and checks that every feature of every instance is unchanged.

``InstanceView`` holds the parsed item; ``text_fields`` and ``structure`` turn it into the inputs of the models in
``benchmarks.solvers.models``; ``candidate_features`` describes one STP candidate against the rows shown, and
``candidate_turns`` / ``candidate_document`` / ``candidate_rows`` / ``candidate_slots`` add what the ``targeted``
solver reads of it (the therapist's last row shown and whom it addressed, the candidate's own last row, its words,
its relation to each of the last rows); ``target_features`` and ``target_document`` describe SSP's given target
(the prompt's "directed to: ...") against the rows shown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from benchmarks.base import Instance, PromptOptions
from rescue_env.data.domain import GROUP_SPEAKERS, THERAPIST
from rescue_env.data.schema import Sample
from rescue_env.rendering import ROW_START, ParsedRow

__all__ = [
    "NEGATIVE",
    "InstanceView",
    "addressed",
    "candidate_document",
    "candidate_features",
    "candidate_rows",
    "candidate_slots",
    "candidate_turns",
    "last_rows_text",
    "given_target",
    "structure",
    "target_document",
    "target_features",
    "text_fields",
    "view",
]

TAIL = 2  # rows whose words form the "tail" text field: the last turns carry most of the signal
CONTEXT = 8  # rows of the "context" text field (RPP shows every earlier row: the recent ones say what is going on)
_ITEM = re.compile(r"### Item 1\n(.*?)\n\nAnswer every item", re.S)
_GROUP_WORDS = ("we", "us", "our", "both", "together", "each other", "family", "everyone", "all of you")
# Distress and absolutes in a client's row: the rows a therapist tends to turn to next (``candidate_turns``).
NEGATIVE = re.compile(
    r"\b(?:hurt\w*|angry|mad|sad|scared|afraid|upset|frustrat\w*|never|always|hate\w*|tired|alone|cry\w*|fault|"
    r"blam\w*|sick of|don't know)\b"
)
_WORD = re.compile(r"[a-z']+|[?!]")
_THIRD_PERSON = re.compile(r"\b(?:he|she|him|her|his|hers|he's|she's)\b")  # a client speaking *about* someone
_GROUP_TALK = re.compile(r"\b(?:we|us|our|both|together|each other|family|everyone)\b")
SLOTS = 3  # the last rows ``candidate_slots`` describes one by one (STP and SSP show 3 rows by default)
_TARGET = re.compile(r"directed to: (.+?)(?: \(recipients: (.*)\))?\.$", re.M)  # SSP's item line (ssp.render)


@dataclass(frozen=True)
class InstanceView:
    """The item block of an instance's prompt, parsed: the rows shown and the other lines (question, candidates)."""

    rows: tuple[ParsedRow, ...]
    other: str
    """The item's lines that are not rows (e.g. "Candidates: ...", "Target row: ... spoken by ...")."""


def item_block(task: ModuleType, instance: Instance, samples: Mapping[str, Sample], options: PromptOptions) -> str:
    """The ``### Item 1`` block of the prompt ``task`` sends for this one instance."""
    content = task.render([instance], samples, options)[-1]["content"]
    match = _ITEM.search(content)
    if match is None:  # every task's envelope has this shape (benchmarks.prompting.envelope)
        raise ValueError(f"{task.name}: no item block in the prompt of {instance.instance_id}")
    return match.group(1)


def view(task: ModuleType, instance: Instance, samples: Mapping[str, Sample], options: PromptOptions) -> InstanceView:
    blocks: list[str] = []
    other: list[str] = []
    for line in item_block(task, instance, samples, options).split("\n"):
        if ROW_START.match(line):
            blocks.append(line)
        elif line.startswith("    ") and blocks:
            blocks[-1] += "\n" + line  # a row's evidence line (overlapping speech, tone, visual cues)
        elif line.strip() and line.strip() != "Rows shown:":
            other.append(line)
    return InstanceView(rows=tuple(ParsedRow(b) for b in blocks), other="\n".join(other))


def _role(speaker: str) -> str:
    if speaker == THERAPIST:
        return "therapist"
    return "group" if speaker in GROUP_SPEAKERS else "client"


def text_fields(item: InstanceView) -> tuple[str, str]:
    """Two documents: the last ``CONTEXT`` rows shown (words and evidence, each row prefixed by its speaker's
    role, names dropped so that a model learns roles, not people) and the last ``TAIL`` rows with the item's
    other lines (the question, the candidates)."""

    def document(rows: Sequence[ParsedRow]) -> str:
        parts = []
        for row in rows:
            role = _role(row.speaker)
            evidence = row.body.partition("\n")[2]  # tone / visual / overlapping lines, when the mode shows them
            parts.append(f"{role}_says {row.words} {evidence}")
        return "\n".join(parts)

    return document(item.rows[-CONTEXT:]), document(item.rows[-TAIL:]) + "\n" + item.other


def last_rows_text(item: InstanceView, rows: int = 3) -> str:
    """The words of the last ``rows`` rows shown, one row per line (what the ``minilm`` solver embeds)."""
    return "\n".join(r.words for r in item.rows[-rows:])


def structure(item: InstanceView) -> np.ndarray:
    """Turn-taking and timing features of the rows shown (all observable): how far into the session (the row
    number shown, binned and logged), how many rows, the therapist's share, who spoke last and second last, a
    question at the end, the last row's length, overlapping speech, and whether the last client addressed the
    therapist or another participant."""
    rows = item.rows
    last = rows[-1] if rows else None
    before = rows[-2] if len(rows) > 1 else None
    therapist = [r.speaker == THERAPIST for r in rows]
    last_words = last.words if last else ""
    number = (last.position or 0) if last else 0  # the row number the prompt shows: how far into the session
    bins = [float(low <= number < high) for low, high in ((0, 10), (10, 25), (25, 45), (45, 10**6))]
    return np.array(
        [
            *bins,
            math.log1p(number),
            math.log1p(len(rows)),
            float(np.mean(therapist)) if rows else 0.0,
            float(bool(last and last.speaker == THERAPIST)),
            float(bool(before and before.speaker == THERAPIST)),
            float(last_words.rstrip().endswith("?")),
            math.log1p(len(last_words.split())),
            float(any(r.overlapping for r in rows[-TAIL:])),
            float(bool(last and THERAPIST in last.addressees)),
            float(bool(last and any(a not in (THERAPIST, "") for a in last.addressees))),
            float(len({r.speaker for r in rows if r.speaker and r.speaker != THERAPIST})),
        ],
        dtype=np.float64,
    )


def candidate_features(item: InstanceView, candidate: str, candidates: Sequence[str]) -> np.ndarray:
    """One STP candidate against the rows shown: is it the group label; did it speak last, second last, at all;
    its share of the client turns; how recently it spoke; was it addressed in the last rows; is it named in
    them; and, for the group label, how often the tail speaks of the group ("we", "both", "together")."""
    rows = item.rows
    is_group = candidate in GROUP_SPEAKERS
    clients = [r for r in rows if r.speaker and r.speaker != THERAPIST]
    spoke = [k for k, r in enumerate(rows) if r.speaker == candidate]
    since = len(rows) - 1 - spoke[-1] if spoke else len(rows) + 1
    tail = rows[-TAIL:]
    tail_words = " ".join(r.words.lower() for r in tail)
    group_talk = sum(len(re.findall(rf"\b{re.escape(w)}\b", tail_words)) for w in _GROUP_WORDS)
    clients_shown = len({r.speaker for r in clients})
    return np.array(
        [
            float(is_group),
            float(bool(rows) and rows[-1].speaker == candidate),
            float(len(rows) > 1 and rows[-2].speaker == candidate),
            float(bool(spoke)),
            (len([r for r in clients if r.speaker == candidate]) / len(clients)) if clients else 0.0,
            1.0 / (1.0 + since),
            float(any(candidate in r.addressees for r in tail)),
            float(candidate.lower() in tail_words) if not is_group else 0.0,
            math.log1p(group_talk) if is_group else 0.0,
            float(is_group) * clients_shown,
            float(len(candidates)),
        ],
        dtype=np.float64,
    )


def addressed(row: ParsedRow, candidate: str) -> bool:
    """Does ``row`` address ``candidate``: by name, or, for the group label, the group or two or more people."""
    if candidate in GROUP_SPEAKERS:
        people = [a for a in row.addressees if a != THERAPIST]
        return any(a in GROUP_SPEAKERS for a in row.addressees) or len(people) > 1
    return candidate in row.addressees


def candidate_rows(item: InstanceView, candidate: str) -> tuple[ParsedRow | None, ParsedRow | None]:
    """The candidate's last row shown and the therapist's last row shown (``None`` when there is none)."""
    mine = [r for r in item.rows if r.speaker == candidate]
    therapist = [r for r in item.rows if r.speaker == THERAPIST]
    return (mine[-1] if mine else None), (therapist[-1] if therapist else None)


def candidate_turns(item: InstanceView, candidate: str) -> np.ndarray:
    """What ``candidate_features`` leaves out of one STP candidate: its turns among the last 3 rows; whether the
    therapist's last row shown addressed it (therapists tend to stay with the person they just turned to), whether
    there is such a row and whether it is the last row; whether the last row and the last client row addressed
    it, and whether it spoke the last client row; of its own last row: addressed to the therapist, a question, an
    exclamation, distress words, its length (log), overlapping speech; for the group label: whether the last two
    client rows come from different people, how many client rows address another client, and whether the
    therapist's last row addressed two or more people or the group."""
    rows = item.rows
    is_group = candidate in GROUP_SPEAKERS
    clients = [r for r in rows if r.speaker and r.speaker != THERAPIST]
    mine, therapist = candidate_rows(item, candidate)
    last_client = clients[-1] if clients else None
    words = mine.words.lower() if mine else ""
    exchange = len({r.speaker for r in clients[-2:]}) if len(clients) >= 2 else 0
    to_client = sum(any(a not in (THERAPIST, "") and a != r.speaker for a in r.addressees) for r in clients)
    therapist_several = therapist is not None and len([a for a in therapist.addressees if a != THERAPIST]) > 1
    return np.array(
        [
            float(sum(r.speaker == candidate for r in rows[-3:])),
            float(therapist is not None and addressed(therapist, candidate)),
            float(therapist is not None),
            float(therapist is not None and therapist is rows[-1]),
            float(bool(rows) and addressed(rows[-1], candidate)),
            float(last_client is not None and last_client.speaker == candidate),
            float(last_client is not None and addressed(last_client, candidate)),
            float(mine is not None and THERAPIST in mine.addressees),
            float("?" in words),
            float("!" in words),
            float(len(NEGATIVE.findall(words))),
            math.log1p(len(words.split())),
            float(mine is not None and mine.overlapping),
            float(is_group) * exchange,
            float(is_group) * to_client,
            float(is_group and therapist_several),
            float(is_group and therapist is not None and any(a in GROUP_SPEAKERS for a in therapist.addressees)),
        ],
        dtype=np.float64,
    )


def candidate_slots(item: InstanceView, candidate: str) -> np.ndarray:
    """One STP candidate against each of the last ``SLOTS`` rows shown, the last first, 13 values a row (zeros
    for a row not shown): the row exists; the therapist spoke it; the candidate spoke it; it addressed the
    candidate; it names the candidate (for the group label: group words, "we", "both"); it addressed the
    therapist; it holds a question; another client spoke it; another client spoke it about a third person ("he",
    "her": a partner talking about the candidate); the candidate spoke it about a third person; the candidate's
    words in it (log) and whether they are a short reply (3 words or fewer); whether another client's (for the
    group label: any client's) words in it are a short reply. ``candidate_turns`` summarises the rows; this keeps
    their order, so that the model can weigh "the therapist asked X, X answered" against "X answered, then the
    partner cut in"."""
    rows = item.rows
    is_group = candidate in GROUP_SPEAKERS
    out: list[float] = []
    for back in range(1, SLOTS + 1):
        if len(rows) < back:
            out += [0.0] * 13
            continue
        row = rows[-back]
        words = row.words.lower()
        therapist = row.speaker == THERAPIST
        own = row.speaker == candidate
        other = not therapist and not own and not is_group  # another client spoke it (an individual candidate)
        short = float(len(words.split()) <= 3)
        named = bool(_GROUP_TALK.search(words)) if is_group else candidate.lower() in words
        out += [
            1.0,
            float(therapist),
            float(own),
            float(addressed(row, candidate)),
            float(named),
            float(THERAPIST in row.addressees),
            float("?" in words),
            float(other),
            float(other and bool(_THIRD_PERSON.search(words))),
            float(not therapist and own and bool(_THIRD_PERSON.search(words))),
            math.log1p(len(words.split())) * float(own),
            short * float(own),
            short * float(not therapist and not own),
        ]
    return np.array(out, dtype=np.float64)


def candidate_document(item: InstanceView, candidate: str) -> str:
    """The words around one STP candidate as tagged tokens, so that a linear model can weigh a word by its
    relation to the candidate: ``me_`` for the candidate's own last row; the therapist's last row as ``grp_``
    (the candidate is the group label), ``adr_`` (that row addressed the candidate) or ``oth_``; the last row,
    when a client spoke it, as ``Lgrp_``, ``Lself_`` (the candidate spoke it) or ``Loth_``."""
    rows = item.rows
    is_group = candidate in GROUP_SPEAKERS
    mine, therapist = candidate_rows(item, candidate)

    def tagged(tag: str, row: ParsedRow) -> list[str]:
        return [f"{tag}_{w}" for w in _WORD.findall(row.words.lower())]

    parts = tagged("me", mine) if mine else []
    if therapist is not None:
        parts += tagged("grp" if is_group else ("adr" if addressed(therapist, candidate) else "oth"), therapist)
    if rows and rows[-1].speaker != THERAPIST:
        parts += tagged("L" + ("grp" if is_group else ("self" if rows[-1].speaker == candidate else "oth")), rows[-1])
    return " ".join(parts)


def given_target(item: InstanceView) -> tuple[str, tuple[str, ...]] | None:
    """SSP's given target as its prompt shows it: the label and, for a group label, its recipients."""
    match = _TARGET.search(item.other)
    if match is None:
        return None
    return match.group(1).strip(), tuple(n.strip() for n in (match.group(2) or "").split(",") if n.strip())


def target_document(item: InstanceView) -> str:
    """SSP's given target's ``candidate_document``: the words of its own last row, of the therapist's last row
    and of the last row, tagged by their relation to the target ("" when the item names none). Which words the
    target said, and whether the therapist's last words were for it, tell strategies apart (evoke after a
    partner's hurt, counterbalance for the one not addressed)."""
    target = given_target(item)
    return candidate_document(item, target[0]) if target is not None else ""


def target_features(item: InstanceView) -> np.ndarray:
    """SSP's given target against the rows shown (the paper's conditional formulation, App. B: the strategy
    depends on whom the turn is for): is it the group label; did it speak in the rows shown, speak the last row,
    how many rows; was it addressed in them, by the therapist's last row; how many clients spoke; how many
    recipients a group target has. A silent target invites counterbalance, a group one track or reframe."""
    target = given_target(item)
    if target is None:
        return np.zeros(8)
    name, recipients = target
    rows = item.rows
    is_group = name in GROUP_SPEAKERS
    spoke = [r for r in rows if r.speaker == name]
    _, therapist = candidate_rows(item, name)
    return np.array(
        [
            float(is_group),
            float(bool(spoke)),
            float(bool(rows) and rows[-1].speaker == name),
            float(len(spoke)),
            float(any(name in r.addressees for r in rows)),
            float(therapist is not None and name in therapist.addressees),
            float(len({r.speaker for r in rows if r.speaker != THERAPIST})),
            float(len(recipients)) if is_group else 0.0,
        ],
        dtype=np.float64,
    )
