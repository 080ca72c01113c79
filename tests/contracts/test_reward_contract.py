"""The reward-function contract (``rlvr.rewards.reward_function``), checked on every reward a name resolves to.

Generated from the registries ``resolve_reward`` reads (``rlvr.rewards.registry``): ``BUILTIN_REWARDS`` (as
``rlvr:<name>``), open-r1's ``OPEN_R1_REWARDS`` (as ``open-r1:<name>``), ``CODE_REWARDS`` (their programs run in
rlvr's sandbox, as in tests/rewards/code) and ``TRL_SCRIPT_REWARDS`` (from ``trl.rewards``): a name registered
there gets every test below without an edit here.

Each reward is called as TRL's trainer calls it, ``fn(prompts=..., completions=..., completion_ids=..., **columns,
trainer_state=..., log_extra=..., log_metric=...)``, and must:

- return one value per completion, each a finite float or None;
- never raise on model output: empty, 100k characters, unbalanced braces, ``\\boxed{`` left open, null bytes,
  lone surrogates, a syntax error in a code block, ...; as plain strings and as chat messages (TRL passes a
  conversational dataset's completions as ``[{"role": "assistant", "content": ...}]``, a tool run's as several);
- give None, not 0.0 and not an exception, for a row it cannot score (its gold or its tests missing), unless such a
  row never reaches it: a reward with ``check_rows`` refuses it when the data loads (``check_rows`` raises
  ValueError for it), and one that declares ``reads_gold`` gets rlvr's gold, which every row it sees has
  (``rlvr.data.rows.normalize_row`` refuses a row without one);
- read the row only through the columns it declares (``required_columns``, its parameters without a default,
  ``answer`` with ``reads_gold``): what ``rlvr train --dry-run`` checks the dataset for, and what the test above
  takes away.

Departures, each documented where the reward is:

- ``TRL_SCRIPT_REWARDS`` are TRL's own functions, taken from ``trl.rewards`` unchanged: TRL documents them for
  conversational completions only (they read ``completion[0]["content"]``), so only chat completions are given;
- open-r1's ``cosine`` and ``length`` score a row whose gold does not parse as open-r1 does (1.0; counted correct),
  ``rlvr.rewards.open_r1``'s "Convention".
"""

from __future__ import annotations

import inspect
import json
import math

import pytest
from transformers import TrainerState

from rlvr.data.rows import normalize_row
from rlvr.rewards import RewardFunction, VerifierPool
from rlvr.rewards.combine import reward_name
from rlvr.rewards.open_r1 import OPEN_R1_REWARDS
from rlvr.rewards.registry import (
    BUILTIN_REWARDS,
    CODE_REWARDS,
    OPEN_R1_PREFIXES,
    RLVR_PREFIX,
    TRL_SCRIPT_REWARDS,
    resolve_reward,
)

# TRL's keyword arguments: every call has them, none is a column of the row
TRL_ARGUMENTS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}
CHAT_ONLY = set(TRL_SCRIPT_REWARDS)  # TRL's own functions read completion[0]["content"] (module docstring)
UPSTREAM_GOLD_RULES = {f"{OPEN_R1_PREFIXES[0]}{name}" for name in ("cosine", "length")}  # open-r1's Convention


def registered_rewards() -> list[str]:
    """Every reward name the registries hold, as a spec that means it in either dialect."""
    return ([RLVR_PREFIX + name for name in BUILTIN_REWARDS] + [OPEN_R1_PREFIXES[0] + name for name in OPEN_R1_REWARDS]
            + list(CODE_REWARDS) + list(TRL_SCRIPT_REWARDS))


SPECS = registered_rewards()
FORMS = [(spec, form) for spec in SPECS for form in (("chat",) if spec in CHAT_ONLY else ("text", "chat"))]

PROMPT = "What is 1 + 2? Or write add(a, b), or a program printing the sum of two numbers read from stdin."


def _tests(total: int) -> dict:
    """Each code reward's tests of a + b (1 + 2 = ``total``), every gold column of the row: one right, one wrong."""
    return {
        "answer": str(total), "solution": f"${total}$",
        "verification_info": {"language": "python", "test_cases": [
            {"input": "1 2\n", "output": f"{total}\n", "type": "stdin_stdout"}]},
        "test": f"def check(candidate):\n    assert candidate(1, 2) == {total}\n", "entry_point": "add",
        "data_source": "codecontests",
        "reward_model": {"ground_truth": json.dumps({"inputs": ["1 2\n"], "outputs": [f"{total}\n"]})},
    }


RIGHT, WRONG = _tests(3), _tests(4)
# answers right under RIGHT, one per kind of reward; the math one the shortest (the length rewards compare lengths)
GOOD = [
    "<think>\n1+2=3\n</think>\n<answer>\n\\boxed{3}\n</answer>",
    "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
    "```python\ndef add(a, b):\n    return a + b\n```",
]
HOSTILE = [
    "", " ", "x" * 100_000, "{" * 64 + "}", "}" * 64, "\\boxed{", "\\boxed{\\frac{1}{", "\\boxed{" * 300,
    "\\boxed{}", "\\boxed{3}\x00\x00", "a\x00b", "\ud800 \\boxed{\udfff}", "9" * 5000, "$$$\\left(\\right.",
    "```python\n" + "(" * 2000 + "\n```", "```python\nimport os\nos._exit(3)\n```", "<think>\n</think>\n<answer>\n",
    "<|im_end|>\ufffd\U0010ffff",
]


def chat(texts: list[str]) -> list[list[dict]]:
    return [[{"role": "assistant", "content": text}] for text in texts]


def tool_run(text: str) -> list[dict]:
    """A conversational completion with a tool call, as TRL hands a tool run's messages to reward functions."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    return [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "name": "add", "content": "3"},
            {"role": "assistant", "content": text}]


@pytest.fixture(scope="module")
def rewards():
    """``get(spec)``: the reward ``spec`` resolves to (rlvr's dialect), built once for the module."""
    built = {}
    with VerifierPool(num_workers=1, timeout_s=2.0) as pool:
        yield lambda spec: built.setdefault(spec, resolve_reward(spec, pool))


def call(fn, completions: list, row: dict) -> list:
    """``fn`` on ``completions``, every one with the columns of ``row``, as TRL's trainer calls it; checks the values
    and what it logged (one per completion, a finite float or None)."""
    n, logged = len(completions), {}
    conversational = bool(completions) and not isinstance(completions[0], str)
    prompts = [[{"role": "user", "content": PROMPT}] if conversational else PROMPT] * n
    ids = [[7] * min(len(str(c)), 4096) for c in completions]
    values = fn(prompts=prompts, completions=completions, completion_ids=ids, trainer_state=TrainerState(),
                log_extra=lambda column, vals: logged.setdefault(column, list(vals)),
                log_metric=lambda name, value: None, **{key: [value] * n for key, value in row.items()})
    values = list(values)
    assert len(values) == n, f"{reward_name(fn)}: {len(values)} values for {n} completions"
    bad = [v for v in values if not (v is None or (isinstance(v, float) and math.isfinite(v)))]
    assert not bad, f"{reward_name(fn)}: values must be finite floats or None, got {bad[:3]}"
    assert all(len(vals) == n for vals in logged.values()), f"{reward_name(fn)}: log_extra wants one value each"
    return values


def gold_columns(fn) -> set[str]:
    """The columns ``fn`` declares it reads: ``required_columns``, parameters without a default, ``answer`` with
    ``reads_gold``."""
    params = inspect.signature(fn).parameters.values()
    needed = {p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return (set(getattr(fn, "required_columns", ())) | (needed - TRL_ARGUMENTS)
            | ({"answer"} if getattr(fn, "reads_gold", False) else set()))


def refused_at_load(fn, row: dict) -> bool:
    """Whether ``row`` cannot reach ``fn``: its ``check_rows`` refuses it, or (``reads_gold``) rlvr's row check does."""
    checks = [lambda: fn.check_rows([row])] if hasattr(fn, "check_rows") else []
    if getattr(fn, "reads_gold", False):
        checks.append(lambda: normalize_row({**row, "prompt": PROMPT}, 0, "the contract's row"))
    for check in checks:
        try:
            check()
        except ValueError:
            return True
    return False


@pytest.mark.parametrize("spec", SPECS)
def test_is_a_reward_function(spec, rewards):
    fn = rewards(spec)
    assert isinstance(fn, RewardFunction) and reward_name(fn), f"{spec}: a callable with a __name__ (its metrics)"
    for flag in ("is_correctness", "reads_gold"):
        assert isinstance(getattr(fn, flag, False), bool), f"{spec}: {flag} must be a bool"
    assert all(isinstance(c, str) for c in getattr(fn, "required_columns", ())), f"{spec}: required_columns: names"


def scores(spec: str, fn, completions: list, row: dict, what: str) -> list:
    """``call``, an exception turned into the contract's failure: model output never makes a reward raise."""
    try:
        return call(fn, completions, row)
    except Exception as error:
        raise AssertionError(f"reward {spec!r} raised {type(error).__name__}: {error} on {what}; score such a "
                             "completion (0.0 when it is wrong) or give it None") from error


@pytest.mark.parametrize("spec, form", FORMS)
def test_never_raises_on_hostile_output(spec, form, rewards):
    completions = HOSTILE if form == "text" else chat(HOSTILE) + [tool_run(text) for text in HOSTILE[:4]]
    scores(spec, rewards(spec), completions, RIGHT, f"hostile model output ({form} completions)")


@pytest.mark.parametrize("spec, form", FORMS)
def test_one_value_per_completion(spec, form, rewards):
    completions = GOOD if form == "text" else chat(GOOD) + [tool_run(GOOD[0])]
    for row in (RIGHT, WRONG):
        scores(spec, rewards(spec), completions, row, f"{form} completions")
    assert call(rewards(spec), [], RIGHT) == [], f"{spec}: an empty batch has no values"


@pytest.mark.parametrize("spec", SPECS)
def test_a_row_it_cannot_score_gives_none_or_never_reaches_it(spec, rewards):
    fn = rewards(spec)
    columns = gold_columns(fn)
    missing = {**RIGHT, **dict.fromkeys(columns)}
    try:
        values = call(fn, chat(GOOD), missing)
    except Exception as error:  # noqa: BLE001 (whatever it raises, the row must never reach it)
        assert refused_at_load(fn, missing), (
            f"reward {spec!r} raised {type(error).__name__}: {error} on a row without {sorted(columns)}: give None "
            "for a row it cannot score, or refuse such rows when the data loads (check_rows)")
        return
    if spec in UPSTREAM_GOLD_RULES:
        return  # open-r1's own rule for a gold that does not parse
    right, wrong = call(fn, chat(GOOD), RIGHT), call(fn, chat(GOOD), WRONG)
    # a value the gold decides is None without it; one the gold does not change (no answer at all) may stay
    scored = [v for v, r, w in zip(values, right, wrong) if v is not None and not r == w == v]
    assert not scored, (
        f"reward {spec!r} gave {values} for rows without {sorted(columns)} (with them: {right}): a completion it "
        "cannot score without the row's gold gives None (left out of the sum), not 0.0")


@pytest.mark.parametrize("spec", SPECS)
def test_reads_the_row_only_through_its_declared_columns(spec, rewards):
    fn = rewards(spec)
    columns = gold_columns(fn)
    unknown = columns - set(RIGHT)
    assert not unknown, f"{spec} reads {sorted(unknown)}: add right and wrong values of it to _tests() here"
    completions = chat(GOOD)
    right = call(fn, completions, RIGHT)
    undeclared_wrong = {**WRONG, **{column: RIGHT[column] for column in columns}}
    assert call(fn, completions, undeclared_wrong) == right, (
        f"reward {spec!r} reads a column it does not declare: declare it in required_columns (or reads_gold)")
    if columns:
        assert call(fn, completions, WRONG) != right, f"{spec}: the wrong gold changed nothing: fix _tests() here"
