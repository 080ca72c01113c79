"""Reward a step's groups with the configured reward functions (TRL signature), and stop a run
whose reward functions keep failing.

Reward functions receive TRL GRPOTrainer's keyword arguments (``rlvr.rewards.reward_function``):
``prompts`` (the dataset prompt: a string or a message list), ``completions`` (strings; for
message-list prompts, ``[{"role": "assistant", "content": ...}]``, as in TRL; with function tools the turns as TRL
gives them: assistant messages with their ``tool_calls``, and ``tool`` messages), ``completion_ids``
(token ids), every other dataset column as a keyword list aligned with the completions
(:func:`reward_columns`, as TRL's ``_calculate_rewards``: a TRL config's rows pass the dataset's columns as they
are; rlvr's own add ``answer``, its gold, and ``id``, and a short ``solution`` read as the gold still arrives as
``solution``; a function declaring ``reads_gold``, rlvr's verifier, gets the gold as ``answer`` in both),
``trainer_state`` (a ``transformers.TrainerState``: ``global_step`` = steps finished before this one,
``max_steps``), ``log_extra`` and ``log_metric``. ``log_metric(name, value)`` values are averaged over the step's
calls (every rank, every round) into ``reward_fn/<name>`` in metrics.jsonl (TRL's log: ``name``, as TRL logs it,
rlvr.train.trl_log); ``log_extra(column, values)`` (one value per
completion of the call) adds ``column`` to those completions' records in samples.jsonl.

Failure policy (docs/training.md, "When a reward function fails"). A call *fails* when the
function raises (``SystemExit`` included), takes longer than ``reward_timeout``, or returns the
wrong number of values or non-numbers (``rewards/<name>/errors``
counts them; ``rewards/calls`` counts the calls each function got, summed over ranks). A run
stops with the function's name and its exception, exit code 3, when
- the function failed at every call of the first step this process runs (it cannot work: a
  missing column, a wrong signature, a missing package), or
- later, more than ``max_reward_error_frac`` of its calls over the last
  ``ERROR_WINDOW_STEPS`` steps failed.
A value of None (TRL's "not applicable") is not a failure; a completion for which every function
returned None is *unrewarded* (``rewards/all_none``) and gets advantage 0 (``train/advantages``).
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import random
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from transformers import TrainerState

from rlvr.data.rows import DATASET_ROW, GOLD_ONLY_SOLUTION, INTERNAL_FIELDS
from rlvr.rewards import MathAccuracy, VerifierPool, resolve_reward
from rlvr.rewards.combine import combine_rewards, logged_names
from rlvr.run.stopping import TrainingStopped

if TYPE_CHECKING:
    from rlvr.train.rollout_phase import Group

logger = logging.getLogger(__name__)

ERROR_WINDOW_STEPS = 10
GOLD_CHECK_SAMPLE = 1000  # distinct golds read at start-up (a seeded sample of larger datasets)
LOGGED_METRIC_PREFIX = "reward_fn/"  # log_metric(name, v): reward_fn/<name>#sum and #n, a mean in metrics.jsonl


class RewardFunctionFailed(TrainingStopped):
    """A reward function failed too often for the run to learn anything (see the module docstring)."""



@dataclass(frozen=True)
class RewarderRecipe:
    """What builds a :class:`Rewarder`, decided once at set-up (``rlvr.train.setup.rewarder_recipe``): the training's
    reward phase and each TRL evaluation's are built from it, so nothing after set-up reads the config."""

    specs: tuple  # reward specs or callables (code rewards bound to the run's sandbox)
    weights: tuple | None
    options: dict = field(default_factory=dict)  # Rewarder's options: verifier, extraction, failure policy, names

    def build(self, *, max_steps: int, tokenizer) -> Rewarder:
        return Rewarder(list(self.specs), None if self.weights is None else list(self.weights), max_steps=max_steps,
                        tokenizer=tokenizer, **self.options)


class Rewarder:
    """Owns the verifier pool and the reward functions of a run."""

    def __init__(self, reward_funcs: list, reward_weights: list[float] | None, *,
                 verifier_workers: int, verifier_timeout: float, answer_extraction: str,
                 max_reward_error_frac: float = 0.5, reward_timeout: float | None = None,
                 max_steps: int | None = None, tokenizer=None, names: str = "rlvr"):
        """``reward_funcs``: specs (``resolve_reward``) or callables; ``tokenizer`` gives the
        ``completion_ids`` of texts scored without them (DaGRPO's anchors); ``names``: the config's preset,
        whose reward names apply (``accuracy`` is open-r1's with preset=trl)."""
        self.pool = VerifierPool(num_workers=verifier_workers, timeout_s=verifier_timeout)
        self.state = TrainerState(global_step=0, max_steps=max_steps or 0)  # reward functions' trainer_state
        self.tokenizer = tokenizer
        self.funcs = [resolve_reward(spec, self.pool, answer_extraction=answer_extraction, names=names)
                      for spec in reward_funcs]
        self.names = logged_names(self.funcs)  # what metrics call them: rewards/<name>_mean, <name>/errors
        # the reward that says "correct": the first function declaring it (the built-in accuracy does); None:
        # a response is correct when its total reward is > 0
        self.correctness = next((name for name, fn in zip(self.names, self.funcs)
                                 if getattr(fn, "is_correctness", False)), None)
        self.weights = list(reward_weights) if reward_weights is not None else [1.0] * len(self.funcs)
        self.max_error_frac = max_reward_error_frac
        self.timeout_s = reward_timeout
        self.last_failure: dict[str, str] = {}  # name -> "Type: message", on this rank
        self._window: deque[tuple[float, dict[str, float]]] = deque(maxlen=ERROR_WINDOW_STEPS)

    def close(self) -> None:
        self.pool.close()

    def reward_texts(self, rows: list[dict], texts: list[list[str]]) -> tuple[list[float], dict[str, list], dict[str, float]]:
        """Rewards for ``texts[k]`` (completions) answering ``rows[k]``'s prompt: (totals, parts, counters).

        ``parts`` maps each function's logged name to its values (None: not applicable or failed).
        """
        totals, parts, stats, _ = self._reward(rows, texts, None)
        return totals, parts, stats

    def _reward(self, rows: list[dict], texts: list[list[str]], ids: list[list[list[int]]] | None,
                messages: list[list[tuple]] | None = None, environments: list | None = None):
        """``reward_texts``, with the completions' token ids (None: tokenised here) and the ``log_extra`` columns;
        ``messages``: per completion its turns as messages (chat-template tools; () none), which a chat prompt's
        completion is then given as (TRL's ``completions`` of a tool run)."""
        if ids is None:
            encode = (lambda text: self.tokenizer(text, add_special_tokens=False)["input_ids"]) if self.tokenizer else None
            ids = [[encode(text) if encode else None for text in row_texts] for row_texts in texts]
        keys = sorted({key for row in rows for key in reward_columns(row)})
        prompts, completions, golds = [], [], []  # golds: for the functions that read rlvr's gold (reads_gold)
        columns: dict[str, list] = {key: [] for key in keys}
        for r, (row, row_texts) in enumerate(zip(rows, texts)):
            conversational = isinstance(row["prompt"], list)
            row_columns = reward_columns(row)
            for k, text in enumerate(row_texts):
                prompts.append(row["prompt"])
                golds.append(row.get("answer"))
                turns = messages[r][k] if messages is not None else ()
                completions.append(([dict(m) for m in turns] if turns else [{"role": "assistant", "content": text}])
                                   if conversational else text)
                for key in keys:  # a column missing from some rows is passed as None there
                    columns[key].append(row_columns.get(key))
        failures: dict[str, str] = {}
        logged, extras = LoggedValues(), {}
        trl_kwargs = {"completion_ids": [i for row_ids in ids for i in row_ids], "trainer_state": self.state,
                      "log_extra": lambda column, values: extras.setdefault(column, []).extend(values),
                      "log_metric": logged.log_metric}
        if environments is not None:  # environment_factory: each completion's instance (TRL's ``environments``)
            trl_kwargs["environments"] = environments
        totals, parts, counts = combine_rewards(self.funcs, self.weights, prompts, completions, columns,
                                                failures=failures, timeout_s=self.timeout_s, extra_kwargs=trl_kwargs,
                                                gold=golds)
        self.last_failure.update(failures)
        stats = {f"rewards/{key}": float(value) for key, value in counts.items()}
        stats["rewards/calls"] = 1.0
        for func in self.funcs:
            pop = getattr(func, "pop_stats", None)
            if pop is not None:
                stats.update({f"rewards/{key}": float(value) for key, value in pop().items()})
        stats.update(logged.counters())
        return totals, parts, stats, _extra_columns(extras, len(completions))

    def reward_groups(self, groups: list[Group], *, step: int | None = None) -> dict[str, float]:
        """Fill ``rewards``, ``reward_parts``, ``reward_extras``, ``rewarded`` and ``correctness`` of each group;
        return counters for this call (``rewards/`` metrics, summed over rounds and ranks).

        ``step``: the training step (``trainer_state.global_step`` = step - 1, the steps finished).
        """
        if step is not None:
            self.state.global_step = step - 1
        ids = [[c.token_ids for c in g.completions] for g in groups]
        messages = [[c.tool_use.messages if c.tool_use is not None else () for c in g.completions] for g in groups]
        environments = None
        if any(g.observed is not None for g in groups):
            environments = [instance for g in groups for instance in g.observed.instances]
        totals, parts, stats, extras = self._reward([g.row for g in groups], [g.texts for g in groups], ids, messages,
                                                    environments)
        start = 0
        for group in groups:
            end = start + len(group.texts)
            group.rewards = totals[start:end]
            group.reward_parts = {name: values[start:end] for name, values in parts.items()}
            group.reward_weights = dict(zip(self.names, self.weights))
            group.reward_extras = {column: values[start:end] for column, values in extras.items()}
            group.rewarded = [any(values[i] is not None for values in parts.values()) for i in range(start, end)]
            group.correctness = self.correctness
            start = end
        return stats

    def check_golds(self, rows: list[dict], source: str) -> dict[str, int]:
        """Warn once when most golds of the dataset are not math to the verifier (so the accuracy
        reward compares them as text). Returns ``{"math": k, "text": m}`` over the golds read.

        Only with the built-in ``accuracy`` reward; at most ``GOLD_CHECK_SAMPLE`` distinct golds.
        """
        if not any(isinstance(fn, MathAccuracy) for fn in self.funcs):
            return {}
        golds = sorted({row["answer"] for row in rows})
        if len(golds) > GOLD_CHECK_SAMPLE:
            golds = random.Random(0).sample(golds, GOLD_CHECK_SAMPLE)
        kinds = self.pool.gold_kinds(golds)
        text = [gold for gold, kind in zip(golds, kinds) if kind != "math"]
        if 2 * len(text) > len(golds):
            examples = ", ".join(repr(gold[:60]) for gold in text[:3])
            logger.warning(
                "%d of %d golds of %s are not math the verifier can read as a whole (e.g. %s): the accuracy "
                "reward compares them as normalised text (rewards/accuracy/text_compared counts them), so a "
                "correct answer worded differently scores 0. If the gold column holds prose, use a reward "
                "function for it (reward_funcs=file.py:fn); if it holds full solutions, map the final answer "
                "to `answer`", len(text), len(golds), source, examples)
        return {"math": len(golds) - len(text), "text": len(text)}

    def check_failures(self, step: int, stats: dict[str, float]) -> None:
        """Stop the run (``RewardFunctionFailed``) when a function fails as the policy says.

        ``stats``: the step's counters summed over rounds and ranks, so every rank decides alike.
        """
        calls = stats.get("rewards/calls", 0.0)
        errors = {name: stats.get(f"rewards/{name}/errors", 0.0) for name in self.names}
        self._window.append((calls, errors))
        for name in self.names:
            first_step = len(self._window) == 1  # the window only grows until it holds ERROR_WINDOW_STEPS
            if first_step and calls and errors[name] == calls:
                raise RewardFunctionFailed(
                    f"step {step}: reward function {name!r} failed at every call of the first step "
                    f"({self._cause(name)}); the run would learn nothing. {self._advice(name, first=True)}")
            window_calls = sum(c for c, _ in self._window)
            window_errors = sum(e[name] for _, e in self._window)
            if window_calls and window_errors / window_calls > self.max_error_frac:
                raise RewardFunctionFailed(
                    f"step {step}: reward function {name!r} failed at {window_errors:.0f} of its "
                    f"{window_calls:.0f} calls over the last {len(self._window)} steps (more than "
                    f"max_reward_error_frac={self.max_error_frac}); last failure: {self._cause(name)}. "
                    f"{self._advice(name)}, or raise max_reward_error_frac (1 never stops)")

    def _advice(self, name: str, *, first: bool = False) -> str:
        """What to fix: the user's function, or — for rlvr's, TRL's and verl's own rewards, which score model
        output without raising — the dataset's rows or the environment the cause names."""
        fn = self.funcs[self.names.index(name)]
        fn = getattr(fn, "compute_score", fn)  # a verl compute_score wrapped in rlvr's VerlScore: the user's
        module = getattr(fn, "__module__", None) or type(fn).__module__
        if getattr(fn, "environment_class", None) is not None:  # an environment's get_reward: the user's method
            return f"Fix {fn.environment_class.__name__}.get_reward (it runs once per rollout and returns a float)"
        if module.split(".")[0] in ("rlvr", "trl", "verl"):
            return (f"It is {module.split('.')[0]}'s built-in reward: the cause is in the dataset's rows or the machine (see the "
                    "cause above); fix those" + (", or remove it from reward_funcs" if first else ""))
        if first:
            return ("Fix the function (it must accept `prompts`, `completions` and the dataset's columns as keyword "
                    "lists, and return one float or None per completion), or remove it from reward_funcs")
        return "Fix the function"

    def _cause(self, name: str) -> str:
        return self.last_failure.get(name, "the failure happened on another rank: see its log")


class LoggedValues:
    """``log_metric(name, value)`` for one scoring call: sums and counts, averaged once the step is summed."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()  # async functions log from the event loop's thread

    def log_metric(self, name: str, value: float) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"log_metric(name, value): name must be a non-empty string, got {name!r}")
        if hasattr(value, "item"):  # a 0-d tensor or numpy number
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise TypeError(f"log_metric({name!r}, {value!r}): the value must be a finite number")
        with self._lock:
            self.sums[name] = self.sums.get(name, 0.0) + float(value)
            self.counts[name] = self.counts.get(name, 0) + 1

    def counters(self) -> dict[str, float]:
        out = {}
        for name, total in self.sums.items():
            out[f"{LOGGED_METRIC_PREFIX}{name}#sum"] = total
            out[f"{LOGGED_METRIC_PREFIX}{name}#n"] = float(self.counts[name])
        return out


def logged_metric_means(counts: dict[str, float]) -> dict[str, float]:
    """``reward_fn/<name>`` = the mean of the ``log_metric`` values, from the step's summed ``#sum``/``#n``."""
    return {key[: -len("#sum")]: value / counts[key[: -len("#sum")] + "#n"] for key, value in counts.items()
            if key.startswith(LOGGED_METRIC_PREFIX) and key.endswith("#sum")}


def _extra_columns(extras: dict[str, list], n: int) -> dict[str, list]:
    """The ``log_extra`` columns with one value per completion, made JSON-safe (others: str); a column
    with another count is left out, with a warning naming it."""
    out = {}
    for column, values in extras.items():
        if len(values) != n:
            logger.warning("log_extra(%r, ...) got %d values for the call's %d completions; the column is left "
                           "out of samples.jsonl (log one value per completion)", column, len(values), n)
            continue
        out[column] = [_json_value(value) for value in values]
    return out


def _json_value(value):
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return str(value)


def reset_columns(row: dict) -> dict:
    """What an environment's ``reset`` receives for ``row`` (rlvr.rollout.environments): the dataset's row as it was
    given, as TRL passes it (no ``prompt`` when the row had none; rows read for environments keep it: ``row_rules``)."""
    return dict(row[DATASET_ROW])


def reward_columns(row: dict) -> dict:
    """The columns a reward function receives for ``row`` (TRL's convention, ``_calculate_rewards``:
    every dataset column but the prompt), under the names the dataset gave them.

    A row kept as given (a TRL config, or environments: ``DATASET_ROW``) passes exactly the dataset's columns,
    as TRL does. rlvr's own rows pass the gold in ``answer`` (as rlvr verifies it) and ``id`` too, and the gold
    under the column it was read from: a row whose only answer was a short ``solution`` (TRL's math datasets)
    still passes ``solution``, so ``trl.rewards.accuracy_reward(completions, solution)`` finds it.
    """
    if DATASET_ROW in row:  # the dataset's columns as given, exactly TRL's
        return {key: value for key, value in row[DATASET_ROW].items() if key not in ("prompt", "completion",
                                                                                      "completion_ids")}
    columns = {key: value for key, value in row.items() if key not in INTERNAL_FIELDS}
    if GOLD_ONLY_SOLUTION in row:
        columns["solution"] = row[GOLD_ONLY_SOLUTION]
    return columns
