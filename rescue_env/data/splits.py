"""The project's one grouped train/test split, and a scenario-stratified subset for short runs.

Samples are segments of longer therapy sessions, so a split by sample lets one couple or family sit on both sides
and inflates every score (shared/data/README.md, "Groups for any split"). Every split, fold or results file in the
project therefore goes through ``group_of`` and ``assign`` here:

- a **couple** group is the sample id up to the first ``/`` (``ana_and_ben/003_...`` -> ``couple:ana_and_ben``);
- a **family** group is a connected component of family samples that share a specific participant name: the
  release's ``family_therapy/NNN`` numbers are not one family each (the same people appear under several numbers).
  Generic role names (``Father``, ``Mother``, ``Family``, ...) never join groups: two families both with a
  ``Father`` are not one family.

Everything is a pure function of the samples and the seed, independent of input order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from rescue_env.data.domain import GROUP_LABELS, THERAPIST, participants, scenario_of
from rescue_env.data.schema import SCENARIOS, Sample, Scenario

Split = Literal["train", "test", "all"]
Side = Literal["train", "test"]
SPLITS: tuple[Split, ...] = ("train", "test", "all")
SIDES: tuple[Side, ...] = ("train", "test")

_ROLE_WORDS = """
    father mother mom mum mommy mummy momma mama dad daddy papa parent parents
    stepfather stepmother stepdad stepmom stepmum stepson stepdaughter stepbrother stepsister
    son daughter child children kid kids baby boy girl teen teenager
    brother sister sibling siblings twin
    grandmother grandfather grandma grandpa granny grandparent grandparents grandson granddaughter grandchild
    husband wife partner spouse boyfriend girlfriend fiance fiancee
    aunt uncle cousin nephew niece
    man woman male female person people someone somebody everyone everybody all both others other group
    speaker unknown unidentified unk unnamed inaudible multiple crosstalk none n/a
    client clients patient patients member members
    counselor counsellor cotherapist co-therapist doctor dr host interviewer narrator producer
""".split()

GENERIC_NAMES: frozenset[str] = frozenset(
    [THERAPIST.lower(), *(label.lower() for label in GROUP_LABELS.values()), *_ROLE_WORDS]
)
"""Lower-cased speaker/target names that name a role, not a person, so they never join two samples into one group.

The release itself uses ``Therapist``, ``Couple``, ``Family`` and ``Father`` (families 012 and 019 each have a
``Father`` and are different families); the other role words are there for other exports and transcriptions
(``Mom``, ``Speaker``, ``Unknown``, ...). A numbered or lettered role (``Speaker 2``, ``Son_B``) is generic too.
"""

_ROLE_SUFFIX = re.compile(r"(?:[\s_-]*\d+|[\s_-]+[a-z])$")

METHOD = (
    "grouped split: couple = sample id up to the first '/', family = samples sharing a specific participant name "
    "(generic role names ignored); per scenario, groups sorted by id, shuffled with numpy "
    "default_rng([seed, scenario index]) and put greedily on the test side while that brings its sample count "
    "closer to test_fraction of the scenario's samples; each side keeps a group when the scenario has two or more"
)
"""One line for results files: how the split was made."""


# --- configuration -----------------------------------------------------------------------------------------


def _check_split(split: object) -> Split:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (expected one of: {', '.join(SPLITS)})")
    return split  # type: ignore[return-value]


def _check_fraction(test_fraction: float) -> float:
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be a number strictly between 0 and 1, got {test_fraction!r}")
    return float(test_fraction)


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


class SplitConfig(BaseModel):
    """What determines a split; written into results files so that a run can be repeated on the same samples.

    Constructing it with a bad value raises ``ValueError`` with a one-line message (``model_validate`` on a
    results file raises pydantic's ``ValidationError``, itself a ``ValueError``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    split: Split = "all"
    seed: int = 0
    test_fraction: float = 0.2

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ValueError(_one_line(exc)) from None

    @field_validator("split", mode="before")
    @classmethod
    def _valid_split(cls, value: object) -> object:
        return _check_split(value)

    @field_validator("seed", mode="before")
    @classmethod
    def _valid_seed(cls, value: Any) -> int:
        return _check_seed(value)

    @field_validator("test_fraction", mode="before")
    @classmethod
    def _valid_fraction(cls, value: Any) -> float:
        return _check_fraction(value)


def _one_line(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ValueError):
        return str(cause)
    where = ".".join(str(part) for part in error["loc"]) or "SplitConfig"
    return f"SplitConfig {where}: {error['msg']}"


# --- groups ------------------------------------------------------------------------------------------------


def is_generic_name(name: str) -> bool:
    """True for a role word (``Father``, ``mom``, ``Speaker 2``): compared case-insensitively, never a person."""
    key = " ".join(name.split()).lower()
    if not key or key in GENERIC_NAMES:
        return True
    stripped = _ROLE_SUFFIX.sub("", key)
    return stripped != key and stripped in GENERIC_NAMES


def _people(sample: Sample) -> set[str]:
    """Lower-cased specific names of the people in a family sample: the ones that can join it to another sample.

    Source: ``domain.participants`` = primary speakers, row targets, strategy targets and the ``participants``
    field. All of these are people in the room (someone speaking, someone addressed, someone the release lists),
    and the field alone misses speakers, so it cannot be the only source; a missed join would leak a family across
    the split, a spurious one only costs balance. Viewpoint targets and emotion ``person`` fields are left out:
    they can name people who are only talked about. (On the release, speakers plus the field give the same groups.)
    """
    return {name.lower() for name in participants(sample) if not is_generic_name(name)}


def _samples(samples: Iterable[Sample]) -> list[Sample]:
    out = list(samples)
    seen: set[str] = set()
    for sample in out:
        if sample.sample_id in seen:
            raise ValueError(f"duplicate sample id {sample.sample_id!r}: a split needs unique sample ids")
        seen.add(sample.sample_id)
    return out


def group_of(samples: Iterable[Sample]) -> dict[str, str]:
    """Map each sample id to its group id, in input order.

    Couple groups are ``couple:<id prefix>``; family groups are ``family:<smallest sample id of the group>``, so a
    group id is readable and does not depend on input order. Family samples without any specific name are alone.
    """
    items = _samples(samples)
    out: dict[str, str] = {}
    families: list[Sample] = []
    for sample in items:
        if scenario_of(sample) == "family":
            families.append(sample)
        else:
            out[sample.sample_id] = "couple:" + sample.sample_id.split("/", 1)[0]
    family_groups = _family_groups(families)
    return {s.sample_id: out.get(s.sample_id) or family_groups[s.sample_id] for s in items}


def _family_groups(families: Sequence[Sample]) -> dict[str, str]:
    """Union-find over family samples, joined through shared specific names."""
    parent = {s.sample_id: s.sample_id for s in families}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[str, str] = {}
    for sample in families:
        for name in _people(sample):
            if name in owner:
                a, b = find(owner[name]), find(sample.sample_id)
                if a != b:
                    parent[max(a, b)] = min(a, b)  # the root is always the smallest id of its component
            else:
                owner[name] = sample.sample_id
    return {s.sample_id: "family:" + find(s.sample_id) for s in families}


# --- assignment --------------------------------------------------------------------------------------------


def _rng(seed: int, scenario: Scenario) -> np.random.Generator:
    """One generator per scenario, so the family split does not change when couples are added or removed."""
    index = SCENARIOS.index(scenario) if scenario in SCENARIOS else len(SCENARIOS)
    return np.random.default_rng([seed, index])


def _test_groups(sizes: dict[str, int], rng: np.random.Generator, test_fraction: float) -> list[str]:
    """Greedy over shuffled groups: a group goes to test when that brings the test count strictly closer to target."""
    ids = sorted(sizes)
    order = [ids[i] for i in rng.permutation(len(ids))]
    target = test_fraction * sum(sizes.values())
    chosen: list[str] = []
    held = 0
    for group in order:
        if abs(held + sizes[group] - target) < abs(held - target):
            chosen.append(group)
            held += sizes[group]
    if len(ids) >= 2:
        if not chosen:
            chosen.append(order[0])
        elif len(chosen) == len(ids):
            chosen.pop()
    return chosen


def assign(samples: Iterable[Sample], *, seed: int = 0, test_fraction: float = 0.2) -> dict[str, Side]:
    """Map each sample id (input order) to ``train`` or ``test``; whole groups move together.

    Stratified by scenario so that both sides hold couples and families: within each scenario the sorted group ids
    are shuffled with a seeded generator, and the greedy rule of ``_test_groups`` brings the test side close to
    ``test_fraction`` of that scenario's samples. A scenario with two or more groups has a group on each side.
    """
    seed, test_fraction = _check_seed(seed), _check_fraction(test_fraction)
    items = _samples(samples)
    groups = group_of(items)
    sizes: dict[Scenario, Counter[str]] = {}
    for sample in items:
        sizes.setdefault(scenario_of(sample), Counter())[groups[sample.sample_id]] += 1
    test: set[str] = set()
    for scenario in sorted(sizes):
        test.update(_test_groups(dict(sizes[scenario]), _rng(seed, scenario), test_fraction))
    return {s.sample_id: "test" if groups[s.sample_id] in test else "train" for s in items}


def split_samples(samples: Iterable[Sample], config: SplitConfig) -> list[Sample]:
    """The samples on ``config.split``'s side, in input order (``all``: every sample, no split computed)."""
    items = _samples(samples)
    split = _check_split(config.split)
    if split == "all":
        return items
    sides = assign(items, seed=config.seed, test_fraction=config.test_fraction)
    return [s for s in items if sides[s.sample_id] == split]


def describe(samples: Iterable[Sample], config: SplitConfig) -> dict[str, Any]:
    """A JSON-able summary for results files: the config, the method, and both sides of the partition.

    Both sides are given even for ``split="all"`` (the partition that ``seed``/``test_fraction`` would make), so a
    results file always says which samples a later train/test run would see. ``selected`` is what ``config`` picks.
    """
    items = _samples(samples)
    groups = group_of(items)
    sides = assign(items, seed=config.seed, test_fraction=config.test_fraction)
    present = sorted({scenario_of(s) for s in items})
    summary: dict[str, Any] = {
        "config": config.model_dump(mode="json"),
        "method": METHOD,
        "selected": {"split": config.split, "samples": len(split_samples(items, config))},
        "groups": {},
        "samples": {},
        "group_ids": {},
        "sample_ids": {},
    }
    for side in SIDES:
        chosen = [s for s in items if sides[s.sample_id] == side]
        side_groups = {groups[s.sample_id]: scenario_of(s) for s in chosen}
        summary["groups"][side] = {sc: sum(1 for g in side_groups.values() if g == sc) for sc in present}
        summary["samples"][side] = {sc: sum(1 for s in chosen if scenario_of(s) == sc) for sc in present}
        summary["group_ids"][side] = sorted(side_groups)
        summary["sample_ids"][side] = [s.sample_id for s in chosen]
    return summary


# --- subsets -----------------------------------------------------------------------------------------------


def _quotas(counts: dict[Scenario, int], n: int) -> dict[Scenario, int]:
    """Largest-remainder apportionment of ``n`` over scenarios, then at least one per scenario when n allows."""
    total = sum(counts.values())
    order = sorted(counts)
    exact = {sc: n * counts[sc] / total for sc in order}
    quota = {sc: int(exact[sc]) for sc in order}
    by_remainder = sorted(order, key=lambda sc: (-(exact[sc] - quota[sc]), order.index(sc)))
    for sc in by_remainder[: n - sum(quota.values())]:
        quota[sc] += 1
    if n >= len(order):
        for sc in order:
            if quota[sc] == 0:
                donor = max(order, key=lambda d: (quota[d], -order.index(d)))
                quota[donor] -= 1
                quota[sc] = 1
    return quota


def stratified_subset(samples: Iterable[Sample], n: int, *, seed: int = 0) -> list[Sample]:
    """``n`` samples drawn per scenario in proportion to each scenario's share, returned in input order.

    For short runs (``rollout --episodes N``): the first N samples of the release are all couples. Quotas use
    largest-remainder rounding with at least one sample per scenario present when ``n`` is at least the number of
    scenarios; within a scenario the samples (sorted by id, so input order does not matter) are drawn without
    replacement with a seeded generator. ``n >= len(samples)`` returns every sample.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"subset size must be an integer >= 1, got {n!r}")
    seed = _check_seed(seed)
    items = _samples(samples)
    if n >= len(items):
        return items
    by_scenario: dict[Scenario, list[str]] = {}
    for sample in items:
        by_scenario.setdefault(scenario_of(sample), []).append(sample.sample_id)
    quota = _quotas({sc: len(ids) for sc, ids in by_scenario.items()}, int(n))
    keep: set[str] = set()
    for scenario in sorted(by_scenario):
        pool = sorted(by_scenario[scenario])
        picks = _rng(seed, scenario).choice(len(pool), size=quota[scenario], replace=False)
        keep.update(pool[i] for i in picks)
    return [s for s in items if s.sample_id in keep]
