"""The paper's published figures that the reports put next to a run's or a dataset's own (numbers only).

Table 11 gives every model per scenario (its "Both" rows are Table 5); the paper's ITP figures came from prompts
that contained the answer (reference-spec: ``candidate_type`` named the gold in every candidate record), so they
are not a leak-free reference, and every report that shows them says so (:data:`ITP_NOTE`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (task, metric key) of each Table 5/11 column, in the table's order; values: % for ITP-SSP, 1-5 for the judge,
# raw F1 for BERTScore (the units of ``benchmarks.results.TABLE_COLUMNS``).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("itp", "precision"), ("itp", "recall"), ("itp", "f1"), ("rpp", "accuracy"), ("stp", "recall@1"),
    ("stp", "mrr"), ("ssp", "recall@1"), ("ssp", "mrr"), ("er", "s_er"), ("er", "bertscore"),
    ("vp", "judge"), ("vp", "bertscore"),
)  # fmt: skip

# Table 11 as printed (model | scenario | the COLUMNS); "Average" is the paper's mean over the ten models.
_TABLE_11 = """
Qwen-Plus         | Couple |  55.95  90.72  69.22  40.58  68.45  81.81  23.49  33.81   3.54 0.8155   3.18 0.8599
Qwen-Plus         | Family |  53.66  81.48  64.71  29.98  55.04  69.55  36.31  48.61   4.04 0.8289   3.41 0.8471
Qwen-Plus         | Both   |  55.78  89.99  68.87  38.27  65.61  79.21  26.21  36.95   3.58 0.8167   3.20 0.8587
Qwen3-Max         | Couple |  80.30  70.39  75.02  43.23  63.64  78.77  30.08  44.11   4.05 0.8219   3.30 0.8659
Qwen3-Max         | Family |  75.69  76.76  76.22  43.21  51.59  67.00  38.62  51.92   3.94 0.8278   3.80 0.8516
Qwen3-Max         | Both   |  79.81  70.99  75.14  43.22  61.09  76.28  31.89  45.76   4.04 0.8224   3.35 0.8646
Qwen3.5-Plus      | Couple |  97.88  91.48  94.57  39.25  72.09  84.07  31.16  44.53   4.22 0.8316   3.95 0.8656
Qwen3.5-Plus      | Family |  99.23  90.85  94.85  43.92  59.37  72.29  33.72  46.64   4.16 0.8373   3.84 0.8494
Qwen3.5-Plus      | Both   |  98.00  91.42  94.60  40.27  69.40  81.57  31.70  44.98   4.22 0.8321   3.94 0.8641
DeepSeek-R1       | Couple |  90.85  72.23  80.47  37.98  63.72  78.91  28.68  38.55   4.09 0.8221   3.31 0.8648
DeepSeek-R1       | Family |  89.38  71.13  79.22  37.57  55.04  69.31  31.99  44.00   4.04 0.8295   3.71 0.8500
DeepSeek-R1       | Both   |  90.71  72.12  80.36  37.89  61.88  76.88  29.38  39.71   4.08 0.8227   3.35 0.8634
DeepSeek-V3.2     | Couple |  93.64  81.19  86.97  37.00  65.04  79.56  31.40  44.08   4.14 0.8257   3.86 0.8599
DeepSeek-V3.2     | Family |  91.27  80.99  85.82  32.80  53.89  68.16  39.19  53.94   4.10 0.8287   3.92 0.8482
DeepSeek-V3.2     | Both   |  93.42  81.17  86.86  36.08  62.68  77.14  33.05  46.17   4.13 0.8259   3.86 0.8588
DeepSeek-V4-Flash | Couple |  90.85  78.10  84.00  36.56  65.66  80.37  28.22  42.17   4.05 0.8151   4.12 0.8587
DeepSeek-V4-Flash | Family |  93.44  80.28  86.36  49.56  51.30  67.34  37.18  51.39   3.91 0.8169   3.73 0.8478
DeepSeek-V4-Flash | Both   |  91.10  78.31  84.22  39.39  62.61  77.61  30.12  44.13   4.04  0.815   4.08 0.8576
DeepSeek-V4-Pro   | Couple |  92.59  75.24  83.02  43.82  73.41  84.46  35.81  50.84   4.18 0.8238   3.88 0.8582
DeepSeek-V4-Pro   | Family |  89.31  82.39  85.71  52.03  62.25  73.97  42.65  56.29   4.07 0.8324   4.01 0.8485
DeepSeek-V4-Pro   | Both   |  92.24  75.91  83.28  45.60  71.04  82.23  37.26  52.00   4.17 0.8246   3.90 0.8573
Kimi K2.5         | Couple |  88.32  83.32  85.75  44.11  61.16  77.75  33.33  46.51   4.18 0.8222   3.62 0.8638
Kimi K2.5         | Family |  85.43  90.85  88.05  49.38  51.59  67.58  37.18  51.92   4.13 0.8259   3.81 0.8443
Kimi K2.5         | Both   |  88.01  84.03  85.98  45.26  59.13  75.60  34.15  47.66   4.18 0.8225   3.64 0.8619
MiniMax M2.5      | Couple |  90.12  75.75  82.32  38.02  65.35  79.70  26.98  40.76   4.01 0.8195   3.21 0.8574
MiniMax M2.5      | Family |  85.38  78.17  81.62  45.15  52.16  67.00  36.89  50.82   3.98 0.8256   3.59 0.8428
MiniMax M2.5      | Both   |  89.64  75.98  82.25  39.85  62.55  77.01  29.08  42.89   4.01 0.8201   3.25 0.8561
GPT-4o            | Couple |  87.09  82.29  84.62  41.46  70.31  82.52  36.28  49.17   4.02 0.8200   3.19 0.8684
GPT-4o            | Family |  82.99  85.92  84.43  28.75  56.48  70.65  34.58  50.05   3.90 0.8258   3.74 0.8573
GPT-4o            | Both   |  86.67  82.63  84.60  38.69  67.38  80.00  35.92  49.36   4.01 0.8206   3.24 0.8674
Average           | Couple |  86.76  80.07  82.60  40.20  66.88  80.79  30.54  43.45   4.05 0.8217   3.56 0.8623
Average           | Family |  84.58  81.88  82.70  41.23  54.87  69.28  36.83  50.56   4.03 0.8279   3.76 0.8487
Average           | Both   |  86.54  80.25  82.62  40.45  64.34  78.35  31.88  44.96   4.05 0.8223   3.58 0.8610
"""


# The paper's scorers (Sec. 5.2; the authors' code, ref-spec 8.5): a BERTScore or judge column of a run is only
# comparable with the paper's when it was scored the same way; the reports mark every other one.
PAPER_BERTSCORE = "distilbert-base-uncased"  # layer 5, bert-score's default for it; raw F1
PAPER_BERTSCORE_LAYERS = (None, 5)
PAPER_JUDGE = "GPT-5.4"  # on the 1-5 Likert scale
BERTSCORE_COLUMNS = (("er", "bertscore"), ("vp", "bertscore"))
JUDGE_COLUMNS = (("er", "s_er"), ("vp", "judge"))


def _model_name(model: str) -> str:
    """``openai/gpt-5.4`` or ``/models/distilbert-base-uncased/`` -> the bare, lower-case model name."""
    return model.strip().rstrip("/").rsplit("/", 1)[-1].lower()


def incomparable(config: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """The Table 5 columns of a run (``results.json``'s config) that were scored differently from the paper, each
    with why in a few words; a column that was not run is not listed (there is nothing to compare)."""
    out: dict[tuple[str, str], str] = {}
    if config.get("bertscore", True):
        model = str(config.get("bertscore_model") or "")
        same = _model_name(model) == PAPER_BERTSCORE and config.get("bertscore_num_layers") in PAPER_BERTSCORE_LAYERS
        if not same:
            out.update({column: f"BERTScore on {model} (the paper: DistilBERT)" for column in BERTSCORE_COLUMNS})
    judge = config.get("judge_model")
    if judge:
        if _model_name(str(judge)) != PAPER_JUDGE.lower():
            out.update({column: f"judge {judge} (the paper: {PAPER_JUDGE})" for column in JUDGE_COLUMNS})
        elif config.get("vp_rubric") == "authors":
            out[("vp", "judge")] = "VP judge on the authors' 0-6 rubric (the paper: 1-5)"
    return out


ITP_NOTE = (
    "The paper's ITP figures are not a leak-free reference: the authors' ITP prompts contained the answer "
    "(every candidate record named it), so a leak-free ITP score is not comparable with them."
)

# App. E.2, text: label shares (%) of the RPP / SSP instance sets, per scenario (Figs. 6-9 as far as the text
# gives them), and the shares of the most frequent strategies together.
LABEL_SHARES: dict[str, dict[str, dict[str, float]]] = {
    "relation_patterns": {
        "couple": {"pursue_withdraw": 38.7, "repair_softening": 27.0},
        "family": {"cooperative_family_alliance": 41.9},
    },
    "strategies": {
        "couple": {"reframe": 23.3, "evoke": 18.9, "track": 18.2, "goal_align": 17.1, "repair": 0.9},
        "family": {},
    },
}
TOP_STRATEGY_COVERAGE: dict[str, tuple[tuple[str, ...], float]] = {
    "couple": (("reframe", "evoke", "track", "goal_align"), 77.4),
    "family": (("reframe", "join", "counterbalance", "track", "boundary"), 90.2),
}
# App. E.2: per-label RPP accuracy (%) averaged over the ten models.
RPP_LABEL_ACCURACY: dict[str, dict[str, float]] = {
    "couple": {"pursue_withdraw": 77.38, "repair_softening": 35.45, "mixed_transition": 2.23},
    "family": {
        "pursue_withdraw": 72.73, "cooperative_family_alliance": 54.24, "repair_softening": 48.46,
        "cross_generational_coalition": 17.25, "mutual_disengagement": 14.81, "escalation_conflict": 14.73,
        "mixed_transition": 1.59,
    },
}  # fmt: skip

# Table 3 (couple / family / all), as ``rescue_env.data.stats.CorpusStats`` fields (turn share as a fraction).
TABLE_3: dict[str, dict[str, float]] = {
    "couple": {"samples": 174, "total_minutes": 824.9, "turns": 5875, "avg_minutes": 4.74, "avg_turns": 33.76,
               "avg_speakers": 3.00, "therapist_turn_share": 0.354},
    "family": {"samples": 17, "total_minutes": 239.9, "turns": 1204, "avg_minutes": 14.11, "avg_turns": 70.82,
               "avg_speakers": 4.06, "therapist_turn_share": 0.471},
    "all": {"samples": 191, "total_minutes": 1064.8, "turns": 7079, "avg_minutes": 5.57, "avg_turns": 37.06,
            "avg_speakers": 3.09, "therapist_turn_share": 0.374},
}  # fmt: skip

SCOPES = {"Couple": "couple", "Family": "family", "Both": "all"}


def table_11() -> dict[str, dict[str, dict[tuple[str, str], float]]]:
    """``{model: {scope: {(task, metric): value}}}``, scopes ``couple``, ``family``, ``all``, in the
    units of ``benchmarks.results`` (fractions for ITP-SSP, as results.json stores them)."""
    out: dict[str, dict[str, dict[tuple[str, str], float]]] = {}
    for line in _TABLE_11.strip().splitlines():
        model, scope, values = (part.strip() for part in line.split("|"))
        cells = {}
        for (task, metric), text in zip(COLUMNS, values.split(), strict=True):
            value = float(text)
            cells[(task, metric)] = value / 100 if task in ("itp", "rpp", "stp", "ssp") else value
        out.setdefault(model, {})[SCOPES[scope]] = cells
    return out


def best_and_average(scope: str = "all") -> dict[tuple[str, str], tuple[float, float]]:
    """(best model's value, the ten models' average) per column: Table 5's "best / average"."""
    table = table_11()
    models = [m for m in table if m != "Average"]
    return {
        column: (max(table[m][scope][column] for m in models), table["Average"][scope][column]) for column in COLUMNS
    }


# Table 6: instances (covered samples) of the label sets behind Figs. 5-9: RPP rows (relation patterns) and SSP
# rows (strategies). The couple RPP coverage "172" is STP's, not that of the rows counted (shared/data/README.md).
LABEL_INSTANCES: dict[str, dict[str, tuple[int, int]]] = {
    "relation_patterns": {"couple": (1608, 172), "family": (525, 17)},
    "strategies": {"couple": (1290, 172), "family": (347, 17)},
}
# App. E.2, text and Figs. 6-7 captions: the two rarest couple relation patterns together cover under 10 %; five
# family relation patterns are each under 10 %; the most frequent relation patterns, in order.
RAREST_RELATIONS: dict[str, tuple[tuple[str, ...], float]] = {
    "couple": (("mixed_transition", "withdraw_withdraw"), 10.0),
}
RELATIONS_UNDER_10: dict[str, int] = {"family": 5}
TOP_RELATIONS: dict[str, tuple[str, ...]] = {
    "couple": ("pursue_withdraw", "repair_softening"),
    "family": ("cooperative_family_alliance", "boundary_hierarchy_strain", "repair_softening"),
}
# Sec. 4.3 on Fig. 3 (couple): pursue-withdraw "frequently reappears after" these patterns (the report reads it as
# one of the row's two most frequent next patterns), and the negative cycles
# move to repair softening more often than "directly into" constructive alignment.
TRANSITION_ATTRACTOR: tuple[str, tuple[str, ...]] = (
    "pursue_withdraw", ("withdraw_withdraw", "repair_softening", "mixed_transition"),
)  # fmt: skip
TRANSITION_VIA_REPAIR: tuple[tuple[str, ...], str, str] = (
    ("pursue_withdraw", "attack_attack"), "repair_softening", "constructive_alignment",
)  # fmt: skip
