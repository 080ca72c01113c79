"""TRL and verl reward functions, unchanged: dotted names, TRL's keyword arguments, async functions,
verl's compute_score (by prefix and by signature), and their failures counted, never raised."""

import ast
import asyncio
import importlib.util
import re
from pathlib import Path

import pytest

from rlvr.rewards import RewardFunction, combine_rewards, resolve_reward
from rlvr.rewards.verl_score import VerlScore, is_verl_compute_score

VERL_FILE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's contract: one response; a dict with `score` and more."""
    if extra_info and extra_info.get("index") == 1:
        raise RuntimeError("judge down for index 1")
    hit = solution_str.strip().endswith(str(ground_truth))
    return {"score": float(hit), "acc": hit, "pred": solution_str[-4:]}

def always_raises(data_source, solution_str, ground_truth, extra_info=None):
    raise KeyError("no rule for " + data_source)
'''


@pytest.fixture
def verl_file(tmp_path):
    path = tmp_path / "verl_reward.py"
    path.write_text(VERL_FILE)
    return str(path)


def test_dotted_module_function_names_resolve():
    from trl.rewards import accuracy_reward, think_format_reward

    assert resolve_reward("trl.rewards.accuracy_reward") is accuracy_reward
    assert resolve_reward("trl.rewards.think_format_reward") is think_format_reward
    assert resolve_reward("trl.rewards:accuracy_reward") is accuracy_reward  # the colon form still works
    with pytest.raises(ValueError, match="no attribute 'nope'"):
        resolve_reward("trl.rewards.nope")
    with pytest.raises(ValueError, match=r"unknown reward 'rewards\.py'.*file\.py:function"):
        resolve_reward("rewards.py")  # a file needs its function named


def test_trl_rewards_score_right_chat_completions_through_rlvr(pool):
    """TRL's accuracy and think-format rewards on TRL-style rows (chat prompt, `solution`), through rlvr's path."""
    from rlvr.data import normalize_rows
    from rlvr.train.rewarding import Rewarder

    rows = normalize_rows([{"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "solution": "5"},
                           {"prompt": [{"role": "user", "content": "What is 4 + 4?"}], "solution": "8"}], "trl")
    texts = [["<think>\nadd them\n</think>\nThe answer is $\\boxed{5}$.", "It is \\boxed{6}."],
             ["<think>\n4 and 4\n</think>\n\\boxed{8}", "<think>no close tag \\boxed{8}"]]
    rewarder = Rewarder(["trl.rewards.accuracy_reward", "trl.rewards.think_format_reward"], None,
                        verifier_workers=1, verifier_timeout=5.0, answer_extraction="boxed")
    try:
        totals, parts, stats, extras = rewarder._reward(rows, texts, [[[1], [2]], [[3], [4]]])
    finally:
        rewarder.close()
    assert parts["accuracy_reward"] == [1.0, 0.0, 1.0, 1.0]
    assert parts["think_format_reward"] == [1.0, 0.0, 1.0, 0.0]
    assert totals == [2.0, 0.0, 2.0, 1.0]
    assert stats["rewards/accuracy_reward/errors"] == stats["rewards/think_format_reward/errors"] == 0.0
    # accuracy_reward logs its parsed golds through log_extra: one value per completion
    assert extras["solution"] == ["5", "5", "8", "8"]
    assert len(extras["gold_parsed"]) == 4 and len(extras["answer_parsed"]) == 4


def _trl_calculate_rewards_source() -> str:
    """GRPOTrainer._calculate_rewards of the installed TRL, read from its file (importing the trainer
    pulls in optional trackers)."""
    spec = importlib.util.find_spec("trl")
    path = Path(spec.origin).parent / "trainer" / "grpo_trainer.py"
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_calculate_rewards"]
    return ast.get_source_segment(text, node)


def test_the_extra_keyword_arguments_are_trls():
    """What rlvr passes besides prompts/completions/columns is what TRL 1.16's GRPOTrainer passes."""
    from rlvr.train.rewarding import Rewarder

    source = _trl_calculate_rewards_source()
    trl_extra = set(re.findall(r'(?<!\w)reward_kwargs\["(\w+)"\] =', source)) - {"environments"}  # environments: TRL-only
    assert "completion_ids=completion_ids_list" in source
    seen = {}

    def record(**kwargs):
        seen.update(kwargs)
        return [0.0] * len(kwargs["completions"])

    rewarder = Rewarder([record], None, verifier_workers=1, verifier_timeout=5.0, answer_extraction="boxed")
    try:
        rewarder.reward_texts([{"id": "a", "prompt": "q", "answer": "1", "level": 3}], [["x", "y"]])
    finally:
        rewarder.close()
    columns = {"id", "answer", "level"}
    assert set(seen) == {"prompts", "completions", "completion_ids"} | columns | trl_extra
    assert trl_extra == {"trainer_state", "log_extra", "log_metric"}


def test_async_functions_run_concurrently_and_their_failures_are_counted():
    state = {}

    async def ping(prompts, completions, **kw):
        # completes only if pong runs at the same time (each waits for the other's event)
        state.setdefault("ping", asyncio.Event()).set()
        while "pong" not in state:
            await asyncio.sleep(0.001)
        await state["pong"].wait()
        return [1.0] * len(completions)

    async def pong(prompts, completions, **kw):
        state.setdefault("pong", asyncio.Event()).set()
        while "ping" not in state:
            await asyncio.sleep(0.001)
        await state["ping"].wait()
        return [2.0] * len(completions)

    async def broken(prompts, completions, **kw):
        raise RuntimeError("async backend down")

    async def hangs(prompts, completions, **kw):
        await asyncio.sleep(60)

    failures = {}
    totals, parts, counts = combine_rewards([ping, pong, broken, hangs], None, ["q", "q"], ["a", "b"], {},
                                            failures=failures, timeout_s=2.0)
    assert parts["ping"] == [1.0, 1.0] and parts["pong"] == [2.0, 2.0]
    assert totals == [3.0, 3.0]
    assert counts["broken/errors"] == 1 and parts["broken"] == [None, None]
    assert failures["broken"] == "RuntimeError: async backend down"
    assert counts["hangs/errors"] == 1 and "reward_timeout=2 s" in failures["hangs"]


def test_async_callable_objects_and_partials_are_awaited():
    import functools

    class Judge:
        __name__ = "judge"

        async def __call__(self, prompts, completions, **kw):
            return [0.5] * len(completions)

    async def scaled(prompts, completions, factor, **kw):
        return [factor] * len(completions)

    partial = functools.partial(scaled, factor=0.25)
    partial.__name__ = "scaled"
    _, parts, counts = combine_rewards([Judge(), partial], None, ["q"], ["a"], {})
    assert parts == {"judge": [0.5], "scaled": [0.25]}
    assert counts["judge/errors"] == counts["scaled/errors"] == 0


def test_verl_compute_score_by_prefix_and_by_signature(verl_file):
    explicit = resolve_reward(f"verl:{verl_file}:compute_score")
    detected = resolve_reward(f"{verl_file}:compute_score")
    assert isinstance(explicit, VerlScore) and isinstance(detected, VerlScore)
    assert isinstance(explicit, RewardFunction)
    assert explicit.__name__ == "compute_score"
    assert is_verl_compute_score(explicit.compute_score)
    assert not is_verl_compute_score(lambda prompts, completions, solution_str, ground_truth, **kw: [])  # TRL's
    with pytest.raises(ValueError, match="unknown reward 'accuracy'"):
        resolve_reward("verl:accuracy")  # a built-in is not a verl compute_score


def test_verl_compute_score_is_called_per_response_with_verls_arguments(verl_file):
    fn = resolve_reward(f"verl:{verl_file}:compute_score")
    logged = {}
    chat = lambda text: [{"role": "assistant", "content": text}]
    completions = [chat("so 72"), chat("so 71"), chat("so 9"), "plain 5"]
    values = fn(prompts=[None] * 4, completions=completions,
                reward_model=[{"style": "rule", "ground_truth": "72"}] * 2 + [{"style": "rule", "ground_truth": "9"},
                                                                               None],
                data_source=["openai/gsm8k"] * 3 + [None],
                extra_info=[{"index": 0}, {"index": 0}, {"index": 1}, None],
                answer=["72", "72", "9", "5"],  # rlvr's gold: used where a row has no reward_model
                log_metric=lambda name, value: logged.setdefault(name, value))
    assert values == [1.0, 0.0, None, 1.0]  # index 1 raised: None for that response only
    assert fn.pop_stats() == {"compute_score/response_errors": 1}
    assert fn.pop_stats() == {"compute_score/response_errors": 0}
    assert logged == {"compute_score/acc": 2 / 3}  # the dict's other numbers, averaged ("pred" is text)


def test_a_verl_compute_score_failing_on_every_response_fails_the_call(verl_file):
    fn = resolve_reward(f"{verl_file}:always_raises")
    failures = {}
    _, parts, counts = combine_rewards([fn], None, ["q", "q"], ["a", "b"],
                                       {"data_source": ["x", "x"], "answer": ["1", "2"]}, failures=failures)
    assert parts["always_raises"] == [None, None] and counts["always_raises/errors"] == 1
    assert failures["always_raises"] == "KeyError: 'no rule for x'"


def test_columns_may_not_shadow_trls_arguments():
    with pytest.raises(ValueError, match="'trainer_state' key"):
        combine_rewards([lambda prompts, completions, **kw: [1.0]], None, ["q"], ["a"], {"trainer_state": [1]},
                        extra_kwargs={"trainer_state": object()})
