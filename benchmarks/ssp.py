"""SSP - Support Strategy Prediction (paper Sec. 3, App. C, D.2; Table 4: Rec. = recall@1, MRR over a top-3
ranking).

The therapist speaks next, to a known target: which support strategy will that turn mainly use? The model sees the
rows before the therapist turn (never the turn itself) and the target the turn is directed to, and ranks the 3
most likely strategies of the scenario's closed set (couple: Table 9, family: Table 10).

Instances (App. C; reference-spec 6.1): the STP rows (``benchmarks.stp.support_rows``) whose strategy type is a key
of the scenario's strategy taxonomy (exact match). On the text release every strategy is in-taxonomy, so the
counts equal STP's: 1,290 couple + 347 family instances in 172 + 17 samples (Table 6).

The target is an input, as in the paper's conditional formulation (App. B: a = sigma(x, A)): ``inputs["target"]``
is the collapsed label (a name, or ``Couple``/``Family``) and ``inputs["target_members"]`` the real recipient
subset, so a family dyad is shown as the two people it is rather than just ``Family``. Unlike the authors' code,
an answer with no valid label scores as a miss and is counted, and a short list is never padded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.base import Instance, Prediction, PromptOptions, new_instance
from benchmarks.metrics import label_metrics
from benchmarks.prompting import (
    SCENARIO_SETTING,
    context_size,
    describe_window,
    envelope,
    label_block,
    render_rows,
    window,
)
from benchmarks.ranking import (
    RANKING_KEY,
    answer_example,
    baseline_answers,
    by_scenario,
    choice_keys,
    failure_counts,
    one_scenario,
    parse_ranked,
    ranked_by_score,
    ranked_summary,
    ranked_summary_draws,
    score_ranked,
)
from benchmarks.stp import support_rows
from rescue_env.data.domain import GROUP_SPEAKERS, is_client, scenario_of
from rescue_env.data.schema import Sample
from rescue_env.taxonomy import ALL_STRATEGY_KEYS, LabelSet, strategies
from rescue_env.text import has_any

name = "ssp"
title = "Support strategy prediction"
batch_size = 3
default_context = 3
generative = False


def choices(instance: Instance) -> LabelSet:
    """The closed strategy set an SSP answer is matched against."""
    return strategies(instance.scenario)


def build_instances(samples: Sequence[Sample]) -> list[Instance]:
    instances: list[Instance] = []
    for sample in samples:
        scenario = scenario_of(sample)
        taxonomy = strategies(scenario)
        for support in support_rows(sample):
            if support.strategy not in taxonomy:  # App. C: out-of-taxonomy strategies are dropped
                continue
            instances.append(
                new_instance(
                    name,
                    sample,
                    support.position,
                    scenario,
                    gold={"strategy": support.strategy, "target_source": support.source},
                    inputs={"target": support.target, "target_members": list(support.members)},
                )
            )
    return instances


def describe_target(instance: Instance) -> str:
    """``Maya``, or ``Family (recipients: Ada, Emeka)`` for a group or subgroup target."""
    target, members = instance.inputs["target"], instance.inputs.get("target_members") or []
    if target in GROUP_SPEAKERS and members:
        return f"{target} (recipients: {', '.join(members)})"
    return target


def render(batch: Sequence[Instance], samples: Mapping[str, Sample], options: PromptOptions) -> list[dict[str, str]]:
    size = context_size(options, default_context)
    scenario = one_scenario(batch)
    instructions = (
        f"Each item below shows {describe_window(size)} before a therapist turn in {SCENARIO_SETTING[scenario]}. "
        f"The therapist speaks next; you are NOT shown that turn, so do not guess its words. The person or group "
        f"the turn is directed to is GIVEN: use it as conditioning. Predict the primary intervention function of "
        f"the therapist's next turn and rank the 3 most likely strategies from the closed set below, most likely "
        f"first, each label at most once.\n"
        f"Prefer the most specific label that fits: track is the broadest and should win only when no more "
        f"specific label clearly fits. Use the given target to tell close labels apart (for instance, "
        f"counterbalance and safeguard are directed to the person who needs voice or protection)."
    )
    block = label_block(strategies(scenario), f"Closed-set support strategies ({scenario}):")
    items = []
    for instance in batch:
        rows = window(instance.row - 1, size)
        items.append(
            f"Rows shown:\n{render_rows(samples[instance.sample_id], rows, options.mode)}\n"
            f"The therapist takes row {instance.row + 1}, directed to: {describe_target(instance)}.\n"
            f"Which strategy will that turn mainly use?"
        )
    return envelope(scenario, instructions, items, answer_example("strategy"), options, extra_blocks=[block])


def parse(text: str | None, batch: Sequence[Instance]) -> list[Prediction]:
    return parse_ranked(text, batch, choices)


def score(instance: Instance, prediction: Prediction, extras: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return score_ranked(instance, prediction, "strategy")


def summary(scores: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """recall@1 (the paper's Rec.), recall@2, recall@3 and MRR."""
    return ranked_summary(scores)


summary_draws = ranked_summary_draws
"""``summary`` over blocks of bootstrap resamples (``benchmarks.bootstrap``; the same values, tested)."""


def _labels_for(scores: Sequence[Mapping[str, Any]]) -> list[str]:
    scenarios = {s["scenario"] for s in scores}
    if len(scenarios) == 1:
        return list(strategies(next(iter(scenarios))).keys())
    return list(ALL_STRATEGY_KEYS)  # a pooled couple + family set


def details(instances: Sequence[Instance], scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Failure counts, the top-1 label report (per-label P/R/F1 and the gold x top-1 confusion) and the headline
    metrics per scenario."""
    out: dict[str, Any] = failure_counts(scores)
    if scores:
        report = label_metrics([s["gold"] for s in scores], [s["top1"] for s in scores], _labels_for(scores))
        out["labels"] = report.model_dump()
    out["by_scenario"] = by_scenario(scores, summary)
    return out


oracle_answer, random_answer, majority_answer = baseline_answers("strategy", choices)


_BLAME = ("you always", "you never", "your fault", "blame", "ridiculous", "sick of", "shut up", "never enough")
_VULNERABLE = ("hurt", "scared", "afraid", "sad", "lonely", "alone", "cry", "crying", "miss", "ashamed", "need")
_APOLOGY = ("sorry", "apologise", "apologize", "my fault", "i was wrong", "forgive")
_TOGETHER = ("we", "us", "our", "together", "let's")
_HIERARCHY = ("mom", "mum", "dad", "parent", "parents", "rules", "in charge", "respect", "grounded")
# After the rules: track first (the broadest active label), then the usual next-broadest moves.
FALLBACK: dict[str, tuple[str, ...]] = {
    "couple": ("track", "reframe", "evoke", "join", "enact", "counterbalance", "safeguard", "repair", "detach",
               "goal_align"),
    "family": ("track", "reframe", "join", "boundary", "enact", "counterbalance", "safeguard", "repair"),
}  # fmt: skip


def heuristic_answer(instance: Instance, sample: Sample) -> dict[str, Any]:
    """Rules over the given target and the 3 rows before the therapist turn (speakers, words and overlapping
    speech only; never an annotation). Each rule that fires adds weight to a label:

    * the last client row blames ("you always", "your fault", ...) with overlapping speech or "!" -> safeguard 3;
    * a single-person target who did not speak in those rows -> counterbalance 2;
    * the last client row voices hurt, fear, sadness or need -> evoke 2 (couple) / join 2 (family);
    * an apology in the last client row -> repair 2;
    * a group target -> track 1 and, with blame in the rows, reframe 1; family rows about parents, rules or
      respect -> boundary 1;
    * "we", "together", "let's" in the last client row -> goal_align 1 (couple) / join 1 (family).

    Labels are ranked by weight, then the fixed order ``FALLBACK[scenario]`` (track, reframe, ...) fills up to 3.
    """
    scenario = instance.scenario
    rows = [sample.rows[p] for p in window(instance.row - 1, 3)]
    clients = [r for r in rows if is_client(r)]
    last = clients[-1] if clients else None
    text = last.dialogue_cleaned if last else ""
    target = instance.inputs["target"]
    weights: dict[str, float] = {}

    def add(label: str, weight: float) -> None:
        weights[label] = weights.get(label, 0.0) + weight

    if last is not None and has_any(text, _BLAME) and (last.background_dialogue or "!" in text):
        add("safeguard", 3)
    if target not in GROUP_SPEAKERS and target not in {r.primary_speaker.strip() for r in rows}:
        add("counterbalance", 2)
    if has_any(text, _VULNERABLE):
        add("evoke" if scenario == "couple" else "join", 2)
    if has_any(text, _APOLOGY):
        add("repair", 2)
    if target in GROUP_SPEAKERS:
        add("track", 1)
        if any(has_any(r.dialogue_cleaned, _BLAME) for r in clients):
            add("reframe", 1)
    if scenario == "family" and any(has_any(r.dialogue_cleaned, _HIERARCHY) for r in clients):
        add("boundary", 1)
    if has_any(text, _TOGETHER):
        add("goal_align" if scenario == "couple" else "join", 1)
    valid = set(choice_keys(choices(instance)))
    ranking = ranked_by_score({k: v for k, v in weights.items() if k in valid}, FALLBACK[scenario])
    return {RANKING_KEY: ranking}
