"""open-r1's rewards (rlvr.rewards.open_r1) on hand-computed cases, TRL's script names, how names
resolve per dialect, and a reward module found in the working directory as TRL's script finds it."""

import importlib
import math
import os
import sys
import threading

import pytest

from rlvr.rewards import MathAccuracy, format_reward, open_r1, resolve_reward
from rlvr.rewards.open_r1 import OPEN_R1_CODE_REWARDS, OPEN_R1_GRADER_REWARDS, OPEN_R1_REWARDS
from rlvr.rewards.registry import BUILTIN_REWARDS, TRL_SCRIPT_REWARDS

FORMATTED = "<think>\nadd\n</think>\n<answer>\n5\n</answer>"


def chat(text):
    return [{"role": "assistant", "content": text}]


def plain(text):
    return text


# open-r1 scores conversational completions; a plain string is scored the same (rlvr's addition)
both_forms = pytest.mark.parametrize("wrap", [chat, plain], ids=["chat", "string"])


@both_forms
def test_format_reward(wrap):
    texts = [FORMATTED,
             FORMATTED + "\nP.S.",  # MULTILINE, as open-r1: `$` matches at the end of </answer>'s line
             "<think>add</think><answer>5</answer>",  # no newlines around the contents
             "Sure. " + FORMATTED]  # must start with <think>
    assert open_r1.format_reward([wrap(t) for t in texts]) == [1.0, 1.0, 0.0, 0.0]


@both_forms
def test_tag_count_reward(wrap):
    texts = [FORMATTED,  # all four tags once: 4 · 0.25
             "<think>\nhmm\n</think>\n",  # "<think>\n" and "\n</think>\n": 2 · 0.25
             "<think>\n<think>\n\n</answer>",  # "<think>\n" twice: 0; "\n</answer>" once: 0.25
             ""]
    assert open_r1.tag_count_reward([wrap(t) for t in texts]) == [1.0, 0.5, 0.25, 0.0]


@both_forms
def test_reasoning_steps_reward(wrap):
    texts = ["Step 1: a\nStep 2: b\nFinally, c",  # 3 markers: min(1, 3/3)
             "Step 1: a\nStep 2: b\n- c\n- d",  # 4 markers: min(1, 4/3) = 1
             "1. a\n2. b",  # ^\d+\. only at the text's start (no MULTILINE): 1 marker, 1/3
             "First, x. Next, y.",  # 2 markers: 2/3
             "no steps"]
    assert open_r1.reasoning_steps_reward([wrap(t) for t in texts]) == pytest.approx([1.0, 1.0, 1 / 3, 2 / 3, 0.0])


@both_forms
def test_accuracy_reward(wrap):
    texts = [r"The answer is \boxed{\frac{1}{3}}.",  # equal to the gold
             r"The answer is \boxed{\frac{1}{2}}.",  # not equal
             "I think it is 1/3",  # no boxed or anchored LaTeX answer: parses to [], verify is False
             r"\boxed{5}"]  # its gold does not parse: None, left out of the sum
    golds = [r"\frac{1}{3}", r"\frac{1}{3}", r"\frac{1}{3}", "garbage words"]
    assert open_r1.accuracy_reward([wrap(t) for t in texts], solution=golds) == [1.0, 0.0, 0.0, None]


def test_accuracy_reward_is_correctness_and_needs_a_solution_column():
    assert open_r1.accuracy_reward.is_correctness is True
    with pytest.raises(ValueError, match="`solution` column.*rlvr:accuracy"):
        open_r1.accuracy_reward([chat(r"\boxed{5}")], answer=["5"])
    with pytest.raises(ValueError, match="2 completions but 1 solutions"):
        open_r1.accuracy_reward([chat("a"), chat("b")], solution=["5"])


def test_a_failing_verify_gives_none_and_threads_need_no_alarm(monkeypatch):
    completions, golds = [chat(r"\boxed{5}"), chat(r"\boxed{6}")], ["5", "5"]
    # math_verify's timeouts set signal.alarm, which raises outside the main thread; rlvr's reward_timeout
    # runs a reward in a thread, so there the timeouts are off and the values the same
    box = {}
    thread = threading.Thread(target=lambda: box.update(values=open_r1.accuracy_reward(completions, solution=golds)))
    thread.start()
    thread.join()
    assert box["values"] == [1.0, 0.0]

    import math_verify

    def broken(*args, **kwargs):
        raise RuntimeError("sympy blew up")

    monkeypatch.setattr(math_verify, "verify", broken)
    assert open_r1.accuracy_reward(completions, solution=golds) == [None, None]
    cosine = OPEN_R1_REWARDS["cosine"]
    assert cosine(completions, solution=["$5$", "$5$"]) == [None, None]  # open-r1 would raise here


@both_forms
def test_len_reward(wrap):
    texts = [r"\boxed{5}",  # 9 characters, correct
             r"\boxed{6}" + " " * 5,  # 14, wrong
             r"\boxed{5}" + "." * 20,  # 29, correct
             r"\boxed{6}" + "." * 20]  # 29, wrong
    # min_len 9, max_len 29: λ = 0.5 - (len - 9) / 20 = 0.5, 0.25, -0.5, -0.5
    # correct: λ; wrong: min(0, λ)
    values = open_r1.len_reward([wrap(t) for t in texts], solution=["$5$"] * 4)
    assert values == pytest.approx([0.5, 0.0, -0.5, -0.5])
    # a gold that does not parse (LaTeX only: "5" has no $...$) counts as correct: λ for both
    values = open_r1.len_reward([wrap(texts[1]), wrap(texts[3])], solution=["5", "5"])
    assert values == pytest.approx([0.5, -0.5])  # lengths 14 and 29: λ = 0.5 - 0/15, 0.5 - 15/15
    assert open_r1.len_reward([wrap("ab"), wrap("cd")], solution=["$1$", "$2$"]) == [0.0, 0.0]  # equal lengths
    assert open_r1.len_reward([], solution=[]) == []


@both_forms
def test_cosine_scaled_reward_with_open_r1_script_defaults(wrap):
    cosine = OPEN_R1_REWARDS["cosine"]
    assert (cosine.min_value_wrong, cosine.max_value_wrong, cosine.min_value_correct, cosine.max_value_correct,
            cosine.max_len) == (0.0, -0.5, 0.5, 1.0, 1000)

    def text(answer, length):
        return wrap(rf"\boxed{{{answer}}}".ljust(length))

    # r = lo + 0.5·(hi - lo)·(1 + cos(π·len/1000)); correct: (lo, hi) = (0.5, 1.0); wrong: (-0.5, 0.0)
    completions = [text(5, 500),  # correct, cos(π/2) = 0: 0.5 + 0.25 = 0.75
                   text(5, 1000),  # correct, cos(π) = -1: 0.5
                   text(5, 2000),  # correct, cos(2π) = 1: 1.0 (len is not clipped at max_len, as in open-r1)
                   text(6, 500),  # wrong, cos(π/2) = 0: -0.5 + 0.25 = -0.25
                   text(6, 1000)]  # wrong, cos(π) = -1: -0.5
    values = cosine(completions, solution=["$5$"] * 5)
    assert values == pytest.approx([0.75, 0.5, 1.0, -0.25, -0.5])
    assert cosine([text(6, 500)], solution=["5"]) == [1.0]  # a gold that does not parse scores 1.0


@both_forms
def test_repetition_penalty_reward(wrap):
    penalty = OPEN_R1_REWARDS["repetition_penalty"]
    assert (penalty.ngram_size, penalty.max_penalty) == (3, -1.0)
    texts = ["a b c a b c",  # trigrams abc bca cab abc: 3 distinct of 4: (1 - 3/4)·-1
             "The the THE the",  # lower-cased: (the the the) twice, 1 distinct of 2: (1 - 1/2)·-1
             "a b c d",  # 2 distinct of 2: 0
             "a b",  # fewer words than ngram_size: 0
             ""]
    assert penalty([wrap(t) for t in texts]) == [-0.25, -0.5, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="should not be positive"):
        open_r1.RepetitionPenaltyReward(max_penalty=0.5)


def test_soft_overlong_punishment_with_open_r1_script_defaults():
    punish = OPEN_R1_REWARDS["soft_overlong_punishment"]
    # L_max = 16384, L_cache = 4096: free up to 12288 tokens, then (12288 - L) / 4096, past 16384 -1
    lengths = [12288, 12289, 14336, 16384, 16385]
    values = punish(completion_ids=[[0] * n for n in lengths], completions=["x"] * 5)
    assert values == pytest.approx([0.0, -1 / 4096, -0.5, -1.0, -1.0])
    with pytest.raises(ValueError, match="completion_ids"):
        punish(completions=["x"])


def test_names_are_open_r1s():
    expected = {"accuracy": "accuracy_reward", "format": "format_reward", "tag_count": "tag_count_reward",
                "reasoning_steps": "reasoning_steps_reward", "length": "len_reward",
                "cosine": "cosine_scaled_reward", "repetition_penalty": "repetition_penalty_reward",
                "soft_overlong_punishment": "soft_overlong_punishment_reward"}
    assert {name: fn.__name__ for name, fn in OPEN_R1_REWARDS.items()} == expected


def test_bare_accuracy_and_format_follow_the_dialect(pool):
    assert isinstance(resolve_reward("accuracy", pool), MathAccuracy)
    assert resolve_reward("format", pool, names="rlvr") is format_reward
    assert resolve_reward("accuracy", names="trl") is open_r1.accuracy_reward  # no pool needed
    assert resolve_reward("format", names="trl") is open_r1.format_reward


@pytest.mark.parametrize("names", ["rlvr", "trl"])
def test_prefixes_and_the_other_names_mean_the_same_in_both_dialects(pool, names):
    assert isinstance(resolve_reward("rlvr:accuracy", pool, names=names), MathAccuracy)
    assert resolve_reward("rlvr:format", names=names) is format_reward
    assert resolve_reward("open-r1:accuracy", names=names) is open_r1.accuracy_reward
    assert resolve_reward("open_r1:format", names=names) is open_r1.format_reward
    for name in (n for n in OPEN_R1_REWARDS if n not in BUILTIN_REWARDS):  # open-r1's names rlvr has none of
        assert resolve_reward(name, names=names) is OPEN_R1_REWARDS[name]
        assert resolve_reward(f"open-r1:{name}", names=names) is OPEN_R1_REWARDS[name]


@pytest.mark.parametrize("names", ["rlvr", "trl"])
def test_trl_script_names_are_trls_rewards(names):
    import trl.rewards

    for name, build in TRL_SCRIPT_REWARDS.items():  # TRL's own function, or the closure its script builds
        fn, again = resolve_reward(name, names=names), build(trl.rewards)
        assert getattr(fn, "__code__", type(fn)) is getattr(again, "__code__", type(again)), name
        assert fn.__module__.startswith("trl.rewards"), name
    punish = resolve_reward("get_soft_overlong_punishment", names=names)
    ids = [[0] * n for n in (1024, 1025, 1152, 1280, 1281)]
    # L_max 1280, L_cache 256 (TRL's script): 0, (1024 - 1025)/256, (1024 - 1152)/256, -1, -1
    assert punish(completion_ids=ids) == pytest.approx([0.0, -1 / 256, -0.5, -1.0, -1.0])
    reference = trl.rewards.get_soft_overlong_punishment(max_completion_len=1280, soft_punish_cache=256)
    assert punish(completion_ids=ids) == reference(completion_ids=ids)


def test_trl_script_names_without_trl_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl.rewards", None)  # what an environment without trl raises
    with pytest.raises(ValueError, match=r"'think_format_reward'.*pip install trl"):
        resolve_reward("think_format_reward")


@pytest.mark.parametrize("name", OPEN_R1_GRADER_REWARDS)
def test_piston_graded_code_rewards_are_refused_with_the_way_out(name):
    for spec in (name, f"open-r1:{name}"):
        with pytest.raises(ValueError, match=r"Piston service.*`code` or `binary_code`.*path/to/file\.py:fn"):
            resolve_reward(spec, names="trl")


@pytest.mark.parametrize("name", OPEN_R1_CODE_REWARDS)
def test_open_r1_code_rewards_resolve_in_both_dialects_and_prefixed(name):
    """They run in rlvr's sandbox now (tests/rewards/code/); open-r1's names and metric names."""
    for spec, names in ((name, "trl"), (name, "rlvr"), (f"open-r1:{name}", "rlvr")):
        assert resolve_reward(spec, names=names).__name__ == f"{name}_reward"


def _listed(names, prefix=""):
    return ", ".join(prefix + name for name in names)


@pytest.mark.parametrize("spec, names, match", [
    ("acuracy", "rlvr", (rf"valid names \(rlvr\): {_listed(BUILTIN_REWARDS)} \(rlvr's.*tag_count.*accuracy_reward"
                         r".*file\.py")),
    ("acuracy", "trl", (rf"valid names \(trl\): {_listed(OPEN_R1_REWARDS)} \(open-r1's; rlvr's are "
                        rf"{_listed(BUILTIN_REWARDS, 'rlvr:')}\).*think_format_reward")),
    ("open-r1:nope", "rlvr", rf"unknown open-r1 reward 'nope'; valid: {_listed(OPEN_R1_REWARDS)}"),
    ("rlvr:tag_count", "trl", rf"valid: {_listed(BUILTIN_REWARDS, 'rlvr:')}$"),
])
def test_unknown_names_list_the_dialects_names(spec, names, match):
    with pytest.raises(ValueError, match=match):
        resolve_reward(spec, names=names)


def test_an_unknown_dialect_is_refused():
    with pytest.raises(ValueError, match=r"names must be one of \('rlvr', 'trl'\)"):
        resolve_reward("accuracy", names="open-r1")


PROBE = "rlvr_cwd_reward_probe"


@pytest.fixture
def console_script_cwd(tmp_path, monkeypatch):
    """A working directory holding a reward module, with sys.path as the `rlvr` console script has it."""
    (tmp_path / f"{PROBE}.py").write_text("def shout(completions, **kwargs):\n"
                                          "    return [1.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    cwd = os.getcwd()
    # neither the working directory nor "" (which stands for it) is on a console script's sys.path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p and os.path.abspath(p) != cwd])
    importlib.invalidate_caches()
    yield cwd
    sys.modules.pop(PROBE, None)


def test_a_module_in_the_working_directory_is_found(console_script_cwd):
    fn = resolve_reward(f"{PROBE}.shout")  # TRL's script: sys.path.insert(0, os.getcwd()), import_module
    assert fn(completions=["a", "b"]) == [1.0, 1.0]
    assert sys.path[0] == console_script_cwd
    resolve_reward(f"{PROBE}:shout")
    assert sys.path.count(console_script_cwd) == 1  # added once, not at every lookup


def test_the_working_directory_is_not_added_when_on_the_path_as_empty_string(console_script_cwd, monkeypatch):
    monkeypatch.setattr(sys, "path", ["", *sys.path])  # python -c / -m put "" (or the path) first
    assert resolve_reward(f"{PROBE}.shout")(completions=["a"]) == [1.0]
    assert console_script_cwd not in sys.path


def test_cosine_formula_reference():
    # the cosine formula at len 9 (the shortest boxed answer), spelled out once: r = 0.5 + 0.25·(1 + cos(9π/1000))
    value = OPEN_R1_REWARDS["cosine"]([r"\boxed{5}"], solution=["$5$"])[0]
    assert value == pytest.approx(0.5 + 0.25 * (1 + math.cos(9 * math.pi / 1000)))
