"""MathAccuracy and format_reward with TRL's reward signature."""


import pytest

from rlvr.rewards import (
    FORMAT_MAX_TAIL_CHARS,
    MathAccuracy,
    completion_text,
    format_reward,
)


def chat(text):
    return [{"role": "assistant", "content": text}]


def test_accuracy_plain_and_conversational(pool):
    accuracy = MathAccuracy(pool)
    completions = [
        r"Half of it: \boxed{\frac{1}{2}}",        # equals 0.5
        "They paid 1,000 dollars.\n#### 1,000",     # fast path after normalisation
        "The answer is 7.",                         # wrong
        "I am not sure.",                           # no answer
    ]
    answers = ["0.5", "1000", "8", "3"]
    assert accuracy(["p"] * 4, completions, answer=answers) == [1.0, 1.0, 0.0, 0.0]
    assert accuracy(["p"] * 4, [chat(c) for c in completions], answer=answers) == [1.0, 1.0, 0.0, 0.0]
    assert accuracy.stats == {"calls": 8, "correct": 4, "no_answer": 2, "timeouts": 0, "verifier_errors": 0,
                              "gold_unparsed": 0, "text_compared": 0, "unevaluated": 0}
    assert accuracy.pop_stats() == {"accuracy/calls": 8, "accuracy/correct": 4,
                                    "accuracy/no_answer": 2, "accuracy/timeouts": 0,
                                    "accuracy/verifier_errors": 0, "accuracy/gold_unparsed": 0,
                                    "accuracy/text_compared": 0, "accuracy/unevaluated": 0}
    assert accuracy.stats == {"calls": 0, "correct": 0, "no_answer": 0, "timeouts": 0, "verifier_errors": 0,
                              "gold_unparsed": 0, "text_compared": 0, "unevaluated": 0}


def test_accuracy_counts_timeouts_and_survives_huge_inputs(pool):
    accuracy = MathAccuracy(pool)
    completions = [r"\boxed{9^{9^{9^{9^{9}}}}}", "a" * 1_000_000, r"\boxed{" + "{" * 10_000, r"\boxed{3}"]
    # the tower's gold is an expression (a numeric gold would reject it unevaluated, before sympy)
    assert accuracy(None, completions, answer=["3^{9}", "3", "3", "3"]) == [0.0, 0.0, 0.0, 1.0]
    stats = accuracy.stats
    assert (stats["timeouts"], stats["no_answer"], stats["correct"]) == (1, 2, 1)
    assert accuracy(None, completions[:1], answer=["3"]) == [0.0]
    assert (accuracy.stats["unevaluated"], accuracy.stats["timeouts"]) == (1, 1)


def _nested(command, depth, core):
    for _ in range(depth):
        core = command.format(core)
    return core


ADVERSARIAL = {
    "2 MB of digits": "9" * 2_000_000,
    "2 MB of words, then a box": "word " * 400_000 + r"\boxed{3}",
    "2 MB answer-is": "The answer is " + "1" * 2_000_000,
    "nested frac": r"\boxed{" + _nested(r"\frac{{{}}}{{2}}", 40, "1") + "}",
    "nested sqrt": r"\boxed{" + _nested(r"\sqrt{{{}}}", 60, "2") + "}",
    "power tower": r"\boxed{10^10^10^10}",
    "braced power tower": r"\boxed{10^{10^{10^{10}}}}",
    "factorial tower": r"\boxed{100000!!}",
    "unbalanced box": r"\boxed{\frac{1}{{2}",
    "unbalanced inside": r"The answer is \frac{1}{{{2}",
    "unmatched left": r"\boxed{\left( \frac{1}{2} \right.}",
}


@pytest.mark.parametrize("answer_extraction", ["boxed", "flexible"])
def test_adversarial_completions_score_zero_and_the_pool_keeps_working(pool, answer_extraction):
    accuracy = MathAccuracy(pool, answer_extraction)
    # every comparison is bounded by the pool's hard kill (timeout_s + KILL_GRACE_S): a hang would
    # stall this call, and CI's time limit would catch it (no wall-clock assert in tests)
    rewards = accuracy(None, list(ADVERSARIAL.values()), answer=["4"] * len(ADVERSARIAL))
    assert rewards == [0.0] * len(ADVERSARIAL)
    assert accuracy.stats["calls"] == len(ADVERSARIAL) and accuracy.stats["correct"] == 0
    assert accuracy(None, [r"\boxed{\frac{8}{2}}", "#### 4"], answer=["4", "4"]) == [1.0, 1.0]


def test_a_gold_that_does_not_parse_scores_zero_and_is_counted(pool):
    accuracy = MathAccuracy(pool)
    completions = [r"\boxed{\sqrt{2}}", r"\boxed{√2}", r"\boxed{1}", "no answer"]
    # "√2" and "\frac{" are not math to math-verify: only a textual match scores.
    assert accuracy(None, completions, answer=["√2", "√2", r"\frac{", r"\frac{"]) == [0.0, 1.0, 0.0, 0.0]
    stats = accuracy.pop_stats()
    # every answered completion with such a gold is counted, whatever its score
    assert stats["accuracy/gold_unparsed"] == 3 and stats["accuracy/text_compared"] == 3
    assert stats["accuracy/verifier_errors"] == 0 and stats["accuracy/no_answer"] == 1
    assert accuracy(None, [r"\boxed{\sqrt{4}}"], answer=["2"]) == [1.0]  # the pool is unaffected


def test_prose_golds_are_compared_as_text_and_counted(pool):
    accuracy = MathAccuracy(pool)
    completions = [r"\boxed{on}", r"\boxed{\text{No}}", r"\boxed{3}", r"\boxed{2}", "no answer"]
    golds = ["No", "No", "3 is the only possible value", "2^floor(n/2)*floor(n/2)!", "No"]
    assert accuracy(None, completions, answer=golds) == [0.0, 1.0, 1.0, 0.0, 0.0]
    stats = accuracy.pop_stats()
    # "No" twice (the unanswered one is not compared), the floor gold once; the core gold is math
    assert (stats["accuracy/text_compared"], stats["accuracy/gold_unparsed"]) == (3, 1)


def test_restating_the_question_is_not_an_answer(pool):
    """The reward hack a TA-GRPO run found here (docs/results.md): "The answer is: 84 - 12" to
    "84 - 12 =" — math-verify evaluates the expression and calls it equal to 72."""
    accuracy = MathAccuracy(pool, answer_extraction="flexible")
    completions = [
        "To find 84 - 12, subtract 12 from 84: 84 - 12 = 76.\n\nThe answer is: 84 - 12",  # the hack
        r"\boxed{-67 \times -17}",       # boxed, still unevaluated
        r"\boxed{2^{3}}",
        "84 - 12 = 72. The answer is 72.",  # worked and answered
        "So 84 - 12 = 72",                 # an equation whose value is the answer (last number too)
        r"\boxed{\frac{3}{4}}",           # a fraction is a number
    ]
    golds = ["72", "1139", "8", "72", "72", "0.75"]
    assert accuracy(None, completions, answer=golds) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    stats = accuracy.pop_stats()
    assert stats["accuracy/unevaluated"] == 3 and stats["accuracy/verifier_errors"] == 0
    # a gold that is itself an expression is compared by math-verify as before
    assert accuracy(None, [r"\boxed{1 + x}"], answer=["x + 1"]) == [1.0]
    assert accuracy.pop_stats()["accuracy/unevaluated"] == 0


@pytest.mark.parametrize(("gold", "pred", "unevaluated"), [
    ("72", "84 - 12", True), ("-2", "36 - 38", True), ("1139", "-67 * -17", True), ("8", "2^3", True),
    ("3", "(1+2)", True), ("2", "-(16 - 69)", True), ("72", r"12 \times 6", True), ("72", r"12 \cdot 6", True),
    ("72", "84 - 12 = 72", False), ("72", "x = 72", False), ("5", "-5", False), ("0.75", "3/4", False),
    ("0.75", r"\frac{3}{4}", False), ("1,000", "1,000", False), ("18", "$18.00", False), ("50", "50%", False),
    ("x+1", "x + 1", False), (r"\frac{1}{2}", "1 - 1/2", False),
])
def test_is_unevaluated(gold, pred, unevaluated):
    from rlvr.rewards.verify import is_unevaluated

    assert is_unevaluated(gold, pred) is unevaluated


def test_accuracy_needs_answer_column(pool):
    accuracy = MathAccuracy(pool)
    with pytest.raises(ValueError, match="`answer` column"):
        accuracy(["p"], ["x"], solution=["1"])
    with pytest.raises(ValueError, match="once per generated completion"):
        accuracy(["p", "p"], ["x", "y"], answer=["1"])
    with pytest.raises(TypeError, match="VerifierPool"):
        MathAccuracy("not a pool")


def test_reward_names(pool):
    # TRL and combine_rewards log a reward under its __name__: keep them the registry names.
    assert format_reward.__name__ == "format"
    assert MathAccuracy(pool).__name__ == "accuracy"


def test_format_reward():
    tail_ok = " " + "." * FORMAT_MAX_TAIL_CHARS + "\n"
    tail_long = "." * (FORMAT_MAX_TAIL_CHARS + 1)
    completions = [
        r"so $\boxed{4}$.",              # 1: one box, 2-char tail
        r"\boxed{4}" + tail_ok,          # 1: tail exactly at the limit (spaces do not count)
        r"\boxed{4}" + tail_long,        # 0: tail one over
        r"\boxed{3} no wait \boxed{4}",  # 0: two boxes
        "The answer is 4.",              # 0: no box
        r"\boxed{4",                     # 0: unbalanced
        r"\fbox{4}",                     # 1: \fbox is a box
    ]
    assert format_reward(None, completions) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert format_reward(None, [chat(c) for c in completions]) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("completion, text", [
    ("plain", "plain"),
    ([{"role": "assistant", "content": "last"}], "last"),
    ([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "ab"),
    ({"role": "assistant", "content": "dict"}, "dict"),
    ([{"role": "assistant", "content": None}], ""),
])
def test_completion_text(completion, text):
    assert completion_text(completion) == text


@pytest.mark.parametrize("bad", [None, 3, [], [{"role": "assistant"}]])
def test_completion_text_rejects_other_shapes(bad):
    with pytest.raises(TypeError, match="role"):
        completion_text(bad)
