"""``rescue-bench dynamics validate`` (``benchmarks.reports.closed_loop``): every section on the demo data with tiny
settings, checked by properties one can verify by hand, and the command line (JSON, files, one-line errors)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.reports.closed_loop import (
    LISTEN,
    OPTIMUM,
    RATES,
    Validation,
    action_category,
    closed_loop_validation,
    entropy_bits,
    format_validation,
    shares,
    therapist_distribution,
    total_variation,
    write_validation,
)
from policies.reference import AlwaysLastSpeaker, ContentBlindPolicy
from rescue_env.cli import main
from rescue_env.data import load_dataset
from rescue_env.dynamics.outcome import SupportAction
from rescue_env.taxonomy import ALL_STRATEGY_KEYS

EPISODES = 2


@pytest.fixture(scope="module")
def demo():
    return load_dataset("demo")


@pytest.fixture(scope="module")
def run(demo) -> tuple[Validation, list[str]]:
    """One validation for the whole module (the demo env builds in about 20 s the first time), and its progress."""
    lines: list[str] = []
    return closed_loop_validation(demo, episodes=EPISODES, bootstrap=50, progress=lines.append), lines


@pytest.fixture(scope="module")
def validation(run) -> Validation:
    return run[0]


@pytest.fixture(scope="module")
def rows(validation) -> dict[str, dict]:
    return {row["policy"]: row for row in validation.summary["policies"]["rows"]}


# ----- pure pieces ------------------------------------------------------------------------------------------


def test_distribution_helpers_by_hand() -> None:
    p = shares(["listen", "listen", "everyone x join", "last x track"])
    assert p == {"listen": 0.5, "everyone x join": 0.25, "last x track": 0.25}
    assert math.isclose(sum(p.values()), 1.0)
    assert total_variation(p, p) == 0.0
    assert total_variation({"a": 1.0}, {"b": 1.0}) == 1.0
    assert math.isclose(total_variation(p, {"listen": 1.0}), 0.5)
    assert entropy_bits([3, 3]) == 1.0 and entropy_bits([7]) == 0.0 and entropy_bits([]) == 0.0
    assert math.isclose(entropy_bits([1, 1, 1, 1]), 2.0)


def test_action_categories_by_hand() -> None:
    everyone = action_category(SupportAction(True, frozenset({0, 1, 2}), "join"), 3, 1)
    assert everyone[:2] == ("everyone", "join")
    assert action_category(SupportAction(True, frozenset({1}), "track"), 3, 1)[:2] == ("last", "track")
    assert action_category(SupportAction(True, frozenset({0}), "track"), 3, 1)[:2] == ("other", "track")
    assert action_category(SupportAction(True, frozenset({0, 2}), "track"), 3, 1)[:2] == ("subset", "track")
    # an intervention that supports no one is read as listening, as F and pi_b read it
    assert action_category(SupportAction(True, frozenset(), "track"), 3, 1)[0] is None
    assert action_category(SupportAction(False), 3, None)[0] is None


def test_therapist_distribution_is_factorised_over_unlabelled_interventions() -> None:
    valid = frozenset({"join", "track"})
    points = [
        (SupportAction(False), 2, 0, valid),
        (SupportAction(False), 2, 0, valid),
        (SupportAction(True, frozenset({0, 1}), "join"), 2, 0, valid),
        (SupportAction(True, frozenset({0, 1}), None), 2, 0, valid),  # no strategy: not in the split
    ]
    out = therapist_distribution(points)
    assert out["shares"] == {LISTEN: 0.5, "everyone x join": 0.5}
    assert (out["decision_points"], out["interventions"], out["labelled_interventions"]) == (4, 2, 1)


def test_content_blind_and_last_speaker_policies(demo) -> None:
    from rescue_env.envs.sim_v1 import RescueSimEnvV1

    env = RescueSimEnvV1(demo, starts="test")
    observation, _ = env.reset(seed=0)
    always, never = ContentBlindPolicy(1.0, {"couple": 4, "family": 4}), ContentBlindPolicy(0.0)
    assert all(always.act(observation, env)["intervene"] == 1 for _ in range(50))
    assert all(never.act(observation, env)["intervene"] == 0 for _ in range(50))
    half = ContentBlindPolicy(0.5, seed=3)
    first = [half.act(observation, env)["intervene"] for _ in range(20)]
    half.reset(3)
    assert [half.act(observation, env)["intervene"] for _ in range(20)] == first
    action = always.act(observation, env)
    assert action["strategy"] == ALL_STRATEGY_KEYS.index("join") and action["target"][-1] == 1
    with pytest.raises(ValueError):
        ContentBlindPolicy(1.5)
    slot = int(observation["last_speaker"])
    action = AlwaysLastSpeaker(ALL_STRATEGY_KEYS.index("join")).act(observation, env)
    assert action["intervene"] == 1 and action["strategy"] == ALL_STRATEGY_KEYS.index("join")
    if slot < int(np.sum(observation["participants"])):
        assert action["target"][slot] == 1


# ----- the sections -----------------------------------------------------------------------------------------


def test_a_heads_against_persistence_and_the_mean(validation) -> None:
    heads = validation.summary["heads"]
    for name in ("F distress", "F1 distress", "F viewpoint"):
        h = heads[name]
        assert h["n_test"] > 0 and h["groups"] >= 1
        for predictor in ("model", "persistence", "training mean"):
            mean, low, high = h["mse"][predictor]
            assert 0 <= low <= mean <= high
        gain = h["gain_over_persistence"][0]
        assert math.isclose(gain, h["mse"]["persistence"][0] - h["mse"]["model"][0], abs_tol=1e-12)
    # the same test rows for F and F1: the baselines are identical, and F1's gain is the paired MSE difference
    assert heads["F distress"]["mse"]["persistence"][0] == heads["F1 distress"]["mse"]["persistence"][0]
    f1_over_f = heads["F distress"]["mse"]["model"][0] - heads["F1 distress"]["mse"]["model"][0]
    assert math.isclose(heads["F1 over F"][0], f1_over_f, abs_tol=1e-12)


def test_b_action_terms_name_their_data(validation) -> None:
    terms = validation.summary["terms"]
    names = [t["term"] for t in terms["terms"]]
    assert names[:11] == [f"strategy={s}" for s in ALL_STRATEGY_KEYS]
    assert {"recipient_alone", "recipient_pair", "recipient_subgroup", "recipient_group"} <= set(names)
    assert {t["block"] for t in terms["terms"]} == {"strategy", "kind", *terms["blocks"]}
    for t in terms["terms"]:
        assert 0 <= t["groups"] <= t["n"] <= terms["training_rows"]
        assert (t["n"] == 0) == (t["groups"] == 0)
        assert t["shrinkage"] == terms["shrinkage"].get(t["block"], 1.0)
    assert terms["selection"] and terms["selection"][-1]["added"] is None  # the forward selection stops
    assert [s["added"] for s in terms["selection"][:-1]] == terms["blocks"]


def test_c_the_optimum_profile(validation) -> None:
    optimum = validation.summary["optimum"]
    points = validation.summary["split"]["test_decision_points"]
    assert sum(p["steps"] for p in optimum.values()) == points * EPISODES
    for p in optimum.values():
        assert math.isclose(sum(p["shares"].values()), 1.0)
        assert p["top_share"] == max(p["shares"].values())
        assert 0 <= p["entropy_strategy"] <= p["entropy_strategy_max"] + 1e-12
        assert 0 <= p["entropy_target"] <= p["entropy_target_max"] + 1e-12


def test_d_policy_table(validation, rows) -> None:
    table = validation.summary["policies"]
    starts = validation.summary["split"]["test_starts"]
    reference = rows[table["reference"]]
    assert not reference["privileged"]
    plain = [r for r in rows.values() if not r["privileged"]]
    assert reference["per_step_return"] == max(r["per_step_return"] for r in plain)
    for key in ("per_step_return", "per_step_group", "mean_log_pi_b"):
        assert [reference[f"{key}_minus_reference{s}"] for s in ("", "_low", "_high")] == [0.0, 0.0, 0.0]
    expected = {"never", "heuristic", "perceived", "behaviour", "recorded", OPTIMUM}
    expected |= {f"content-blind[{r:g}]" for r in RATES}
    assert expected <= set(rows) and not table["skipped"]
    assert {"always-everyone[join]", "last-speaker[track]"} <= set(rows)
    for r in rows.values():
        assert r["starts"] == starts and r["episodes"] == starts * EPISODES
        for key in ("per_step_return", "per_step_group", "mean_log_pi_b"):
            assert r[f"{key}_low"] <= r[key] <= r[f"{key}_high"]
        assert r["early_end_share"] == 0.0  # v1 runs every episode to the horizon
    assert rows["content-blind[1]"]["intervention_rate"] == 1.0
    assert rows["content-blind[0]"]["intervention_rate"] == 0.0
    # the same env seeds for every policy: rate 0 is never, step for step
    for key in ("per_step_return", "per_step_group", "mean_log_pi_b"):
        assert rows["content-blind[0]"][key] == rows["never"][key]
    assert (
        validation.per_start["never"]["per_step_return"] == validation.per_start["content-blind[0]"]["per_step_return"]
    )
    assert rows["recorded"]["privileged"] and rows[OPTIMUM]["privileged"]
    assert rows[OPTIMUM]["per_step_return"] >= rows["never"]["per_step_return"]


def test_e_total_variation_to_the_therapist(validation, rows) -> None:
    s = validation.summary
    therapist = s["therapist"]["all"]["shares"]
    assert math.isclose(sum(therapist.values()), 1.0)
    for name, row in rows.items():
        own = s["distributions"][name]["all"]
        assert math.isclose(sum(own.values()), 1.0)
        assert total_variation(own, own) == 0.0
        assert 0.0 <= row["tv_to_therapist"] <= 1.0
        assert row["tv_to_therapist"] == total_variation(own, therapist)
    assert s["distributions"]["never"]["all"] == {LISTEN: 1.0}
    assert math.isclose(rows["never"]["tv_to_therapist"], 1.0 - therapist[LISTEN])


def test_f_calibration(validation) -> None:
    c = validation.summary["calibration"]
    assert c["bins"] == 10 and set(c["courses"]) == {"observed", "recorded", "never"}
    for b, gap in enumerate(c["gaps"]):
        if np.isfinite(gap):
            assert math.isclose(gap, c["courses"]["recorded"][b][0] - c["courses"]["observed"][b][0])
    assert c["within_tolerance"] == (c["mean_abs_gap"] <= c["tolerance"])


def test_g_verdicts(validation, rows) -> None:
    verdicts = {v["criterion"]: v for v in validation.summary["verdicts"]}
    assert set(verdicts) == {
        "optimum_not_constant",
        "no_constant_near_trained",
        "rate_not_monotone",
        "never_ends_early",
        "trained_closer_to_therapist",
    }
    assert verdicts["never_ends_early"]["passed"] is True and verdicts["never_ends_early"]["share"] == 0.0
    tops = [p["top_share"] for p in validation.summary["optimum"].values()]
    assert verdicts["optimum_not_constant"]["passed"] == all(t <= 0.6 for t in tops)
    values = [rows[f"content-blind[{r:g}]"]["per_step_return"] for r in RATES]
    monotone = all(b >= a for a, b in zip(values, values[1:])) or all(b <= a for a, b in zip(values, values[1:]))
    assert verdicts["rate_not_monotone"]["passed"] == (not monotone)
    assert verdicts["no_constant_near_trained"]["passed"] is None  # no trained policy given
    assert verdicts["trained_closer_to_therapist"]["passed"] is None


def test_printed_sections_and_progress(run) -> None:
    validation, progress = run
    text = format_validation(validation)
    for section in ("(a)", "(b)", "(c)", "(d)", "(e)", "(f)", "(g)"):
        assert f"\n{section} " in text
    assert "[PASS]" in text and "n/a" in text
    assert any("never" in line for line in progress) and any(OPTIMUM in line for line in progress)


def test_files(validation, tmp_path: Path) -> None:
    import pandas as pd

    written = write_validation(validation, tmp_path, config={"episodes": EPISODES}, versions={"numpy": np.__version__})
    for name in (
        "results.json",
        "policies.csv",
        "episodes.csv",
        "heads.csv",
        "action_terms.csv",
        "selection.csv",
        "distributions.csv",
        "calibration.csv",
        "report.md",
        "report.html",
        "figures/policies.png",
        "figures/calibration.png",
    ):
        assert (tmp_path / name).is_file() and tmp_path / name in written, name
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["config"] == {"episodes": EPISODES} and results["data"]["sha256"]
    assert results["versions"]["numpy"] == np.__version__ and results["per_start"]["never"]
    policies = pd.read_csv(tmp_path / "policies.csv")
    assert list(policies["policy"]) == [r["policy"] for r in validation.summary["policies"]["rows"]]
    episodes = pd.read_csv(tmp_path / "episodes.csv")
    assert len(episodes) == sum(policies["episodes"])
    assert (tmp_path / "figures" / "policies.png").read_bytes()[:4] == b"\x89PNG"


# ----- the command line -------------------------------------------------------------------------------------


def test_cli_json_parses(capsys) -> None:
    assert main(["dynamics", "validate", "--episodes", "1", "--bootstrap", "20", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["format"] == "rescue-env/closed-loop-validation" and out["config"]["episodes"] == 1
    assert {v["criterion"] for v in out["verdicts"]} >= {"optimum_not_constant", "never_ends_early"}
    assert "per_start" not in out
    assert "one-step-optimum" in captured.err  # progress lines go to stderr


@pytest.mark.parametrize("content", [None, b"not a zip", "sidecar"])
def test_cli_bad_ppo_is_one_line(tmp_path: Path, capsys, content) -> None:
    path = tmp_path / "model.zip"
    if content == "sidecar":
        path.write_bytes(b"PK")
        (tmp_path / "model.json").write_text('{"format": "rescue-env/sim-maskable-ppo", "version": 7}')
    elif content is not None:
        path.write_bytes(content)
    assert main(["dynamics", "validate", "--ppo", str(path), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --ppo") and err.count("\n") == 1 and "Traceback" not in err


def test_cli_with_a_trained_model(tmp_path: Path, capsys) -> None:
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import MaskablePPO

    from rescue_env.envs.wrappers import make_sim_flat_env

    env = make_sim_flat_env(hash_dim=16, data="demo", starts="train")
    from policies.sb3 import quiet_logger

    model = MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu")
    model.set_logger(quiet_logger())  # no SB3-<date> folder in the temp directory
    model.learn(16)
    model.save(tmp_path / "model.zip")
    sidecar = {
        "format": "rescue-env/sim-maskable-ppo",
        "version": 1,
        "algo": "maskable-ppo",
        "feature_kwargs": {"hash_dim": 16},
        "env_settings": {"max_participants": 6},
    }
    (tmp_path / "model.json").write_text(json.dumps(sidecar))
    output = tmp_path / "out"
    argv = ["dynamics", "validate", "--ppo", str(tmp_path / "model.zip"), "--episodes", "1", "--bootstrap", "20"]
    assert main([*argv, "--output", str(output)]) == 0
    text = capsys.readouterr().out
    assert "(g) Verdicts" in text
    results = json.loads((output / "results.json").read_text(encoding="utf-8"))
    trained = [r for r in results["policies"]["rows"] if r["kind"] == "trained"]
    assert [r["policy"] for r in trained] == [f"ppo:{tmp_path / 'model.zip'}"]
    verdicts = {v["criterion"]: v for v in results["verdicts"]}
    assert verdicts["no_constant_near_trained"]["passed"] is not None
    assert verdicts["trained_closer_to_therapist"]["passed"] is not None
