"""DaGRPO in the trainer: GRPO equivalence at tau 0, anchor gradients, injection, composition."""

import json

import pytest
import torch

from rlvr.config import build_config
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rewards import VerifierPool
from rlvr.rollout import Completion
from rlvr.train.advantages import compute_advantages
from rlvr.train.anchors import AnchorBank, inject_anchor, should_inject
from rlvr.train.experience import Experience, Group
from rlvr.train.rollout_phase import collect_groups
from rlvr.train.sft import SFTTrainer
from rlvr.train.trainer import Trainer
from rlvr.train.update import UpdateStats, optimizer_step, update_policy

from .conftest import tiny_overrides
from .test_update import NoScheduler, RecordingOptimizer, _experience


def _cfg(**extra):
    return build_config({"model": "tiny-random", "prompts_per_step": 3, "num_generations": 4,
                         "max_completion_length": 8, **extra})


def test_tau_zero_without_anchors_equals_grpo_advantages_and_gradients():
    exp = _experience()
    exp.scores = torch.rand(len(exp))
    grads, advs = {}, {}
    for name, cfg in {"grpo": _cfg(), "dagrpo": _cfg(algo="dagrpo_sgr", pair_tau=0.0)}.items():
        advs[name], metrics = compute_advantages(cfg, exp)
        exp.advantages = advs[name]
        model, tok = tiny_random_model_and_tokenizer(seed=0)
        model.eval()
        opt = RecordingOptimizer(model.parameters())
        update_policy(cfg, model, opt, NoScheduler(), exp, pad_token_id=tok.pad_token_id)
        grads[name] = opt.grads[0]
    assert metrics["dagrpo/masked_pair_frac"] == 0.0
    torch.testing.assert_close(advs["dagrpo"], advs["grpo"], rtol=0, atol=1e-7)
    for a, b in zip(grads["grpo"], grads["dagrpo"]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_masking_changes_advantages_and_is_reported():
    exp = _experience()
    exp.scores = exp.rewards.clone()  # s = r: pairs with equal rewards carry no contrast anyway
    exp.scores[1] = exp.scores[0] - 0.1  # the (0, 1) pair becomes indistinct at tau 0.2
    adv, metrics = compute_advantages(_cfg(algo="dagrpo_sgr"), exp)
    grpo, _ = compute_advantages(_cfg(), exp)
    assert not torch.allclose(adv, grpo)
    assert metrics["dagrpo/masked_contrast_frac"] > 0


def test_anchor_gradient_is_minus_adv_grad_logp_and_never_clipped():
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    model.eval()
    prompt, anchor_ids, own_ids = [10, 11, 12], [40, 41, 42, 257], [50, 51]
    group = Group(group_id=1, row={"id": "x"}, prompt_ids=prompt,
                  completions=[Completion(anchor_ids, [], False, is_anchor=True), Completion(own_ids, [0.0, 0.0], False)],
                  texts=["", ""], rewards=[1.0, 0.0])
    exp = Experience.from_groups([group])
    exp.advantages = torch.tensor([2.0, 0.0])  # only the anchor carries a gradient
    exp.old_logprobs = [torch.full((4,), -30.0), torch.full((2,), -30.0)]  # ratios would be e^30: clipped if PPO
    cfg = _cfg(anchors="always", epsilon=0.2, max_grad_norm=0.0)  # no clipping of the recorded grads
    opt = RecordingOptimizer(model.parameters())
    optimizer_step(cfg, model, opt, NoScheduler(), exp, [[0, 1]], micro=2, pad_token_id=tok.pad_token_id,
                   stats=UpdateStats(grad_norms=[]), on_policy=False)
    # expected: d/dθ of -(2.0 * Σ_t log π(a_t)) / 6 tokens (token_mean over the mini-batch)
    ids = torch.tensor([prompt + anchor_ids])
    logp = torch.log_softmax(model(input_ids=ids).logits[0, 2:-1], -1).gather(-1, torch.tensor(anchor_ids)[:, None])
    model.zero_grad()
    (-(2.0 * logp.sum()) / 6).backward()
    for got, p in zip(opt.grads[0], model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-5, atol=1e-6)


def test_anchor_trigger_and_placement():
    cfg = _cfg(anchors="failed", anchor_max_correct=1).dagrpo
    assert should_inject(0, cfg) and should_inject(1, cfg) and not should_inject(2, cfg)
    assert should_inject(5, _cfg(anchors="always").dagrpo)

    def group():
        comps = [Completion([1], [0.0], False) for _ in range(3)]
        return Group(group_id=1, row={"id": "r"}, prompt_ids=[1], completions=comps, texts=["a", "b", "c"],
                     rewards=[0.0, 0.0, 0.0], reward_parts={"accuracy": [0.0, 0.0, 0.0]}, scores=[0.3, 0.1, 0.1])

    from rlvr.train.anchors import Anchor
    anchor = Anchor([7, 8], "sol", False)
    g = group()
    inject_anchor(g, anchor, _cfg(anchors="always").dagrpo)
    assert [c.is_anchor for c in g.completions] == [False, True, False]  # lowest score, first of ties
    assert g.rewards == [0.0, 1.0, 0.0] and g.reward_parts["accuracy"][1] == 1.0
    g = group()
    inject_anchor(g, anchor, _cfg(anchors="always", anchor_placement="append").dagrpo)
    assert len(g.completions) == 4 and g.completions[-1].is_anchor and g.rewards[-1] == 1.0


def test_anchor_bank_verifies_and_truncates():
    _, tok = tiny_random_model_and_tokenizer()
    with VerifierPool(num_workers=1, timeout_s=5) as pool:
        bank = AnchorBank(tok, eos_token_id=257, pool=pool, max_tokens=10, overlong="truncate")
        good = bank.get({"id": "a", "answer": "7", "solution": "3 + 4 = 7\n#### 7"})
        wrong = bank.get({"id": "b", "answer": "8", "solution": "3 + 4 = 7\n#### 7"})
        none = bank.get({"id": "c", "answer": "8"})
        skip = AnchorBank(tok, eos_token_id=257, pool=pool, max_tokens=10, overlong="skip")
        skipped = skip.get({"id": "a", "answer": "7", "solution": "3 + 4 = 7\n#### 7"})
    assert good is not None and good.truncated and len(good.token_ids) == 10
    assert wrong is None and none is None and skipped is None
    assert bank.counts["rejected"] == 1 and bank.counts["missing"] == 1


def test_dagrpo_run_on_gsm8k_injects_anchors_and_masks(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "d", algo="dagrpo", data="gsm8k-100", max_steps=2,
                                      max_completion_length=16, scorer="reward", num_completions_to_log=100))
    history = Trainer(cfg).train()
    for m in history:
        assert m["dagrpo/anchor_rate"] == 1.0  # tiny-random never solves GSM8K: every group triggers
        assert m["dagrpo/anchor_truncated"] == 4  # GSM8K solutions are longer than 16 tokens
        assert m["train/skipped_steps"] == 0 and m["train/grad_norm"] > 0
    samples = [json.loads(x) for x in (tmp_path / "d" / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["variant"] == 0 for s in samples)
    anchors = [s for s in samples if s["anchor"]]  # every response logged: one anchor per group and step
    assert len(anchors) == 2 * 4 and all(s["reward"] == 1.0 for s in anchors)
    assert all(not s["anchor"] for s in samples if s["reward"] == 0.0)


def test_dynamic_sampling_keeps_groups_rescued_by_anchors(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "d", algo="dapo", anchors="failed", data="rg:chain_sum:size=32",
                                      max_num_gen_batches=2, max_completion_length=8))
    trainer = Trainer(cfg)
    result = collect_groups(trainer, step=1)
    trainer.rewarder.close()
    assert result.rounds == 1 and len(result.kept) == 4  # all-wrong groups got anchors: not uniform
    rescued = [g for g in result.kept if len({g.rewards[i] for i in g.on_policy}) == 1]
    assert rescued, "tiny-random should fail some chain_sum groups entirely"
    assert all(any(c.is_anchor for c in g.completions) for g in rescued)


def test_sft_lowers_the_nll_and_writes_the_run_directory(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "s", algo="sft", data="rg:chain_sum:size=8", max_steps=8,
                                      learning_rate=3e-3, max_completion_length=64))
    history = SFTTrainer(cfg).train()
    losses = [m["train/loss"] for m in history]
    assert losses[-1] < losses[0] - 0.5, losses
    assert all(m["sft/anchor_rate"] == 1.0 for m in history)
    assert (tmp_path / "s" / "config.yaml").exists() and (tmp_path / "s" / "checkpoints").is_dir()


@pytest.mark.parametrize("bad", [{"algo": "dagrpo", "advantage_estimator": "rloo"},
                                 {"scorer": "judge"}, {"scorer": "judge", "judge_base_url": "http://x"}])
def test_bad_dagrpo_options_are_refused(bad):
    with pytest.raises(ValueError):
        build_config(bad)


def test_dagrpo_preset_with_steps_scorer_on_reasoning_gym(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "d", algo="dagrpo", data="rg:chain_sum:size=32", max_steps=2))
    assert cfg.dagrpo.scorer == "steps"
    history = Trainer(cfg).train()
    for m in history:
        assert m["dagrpo/scorer_fail_frac"] == 0.0  # the steps scorer never fails; no equation -> q = r
        assert 0.0 <= m["dagrpo/masked_pair_frac"] <= 1.0
        assert m["dagrpo/anchor_rate"] > 0  # tiny-random fails whole groups; chain_sum anchors are generated
        assert m["time/score_s"] >= 0


def test_judge_over_http_never_writes_the_api_key(tmp_path, monkeypatch):
    from tests.helpers.openai_server import FakeServer
    from tests.helpers.secret_scan import assert_no_secret_in_dir

    key = "sk-secret-never-in-files-2718"
    monkeypatch.setenv("RLVR_TEST_JUDGE_KEY", key)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    server = FakeServer()
    server.default = ("ok", "Score: 7")
    try:
        cfg = build_config(tiny_overrides(tmp_path / "j", algo="dagrpo_sgr", scorer="judge", max_steps=1,
                                          judge_base_url=server.base_url, judge_model_name="judge",
                                          judge_api_key_env="RLVR_TEST_JUDGE_KEY"))
        (metrics,) = Trainer(cfg).train()
    finally:
        server.close()
    assert server.requests and server.requests[0][1]["Authorization"] == f"Bearer {key}"
    assert metrics["dagrpo/scorer_fail_frac"] == 0.0
    assert metrics["dagrpo/score_mean"] == pytest.approx(0.5 * metrics["rollout/reward_mean"] + 0.5 * 0.7, abs=1e-6)
    assert_no_secret_in_dir(tmp_path / "j", key)


def test_judge_with_a_local_model_back_end(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "j", algo="dagrpo_sgr", scorer="judge", judge_model="tiny-random",
                                      max_steps=1))
    (metrics,) = Trainer(cfg).train()
    # tiny-random writes no "Score: N": every score fails and falls back to s = r, counted.
    assert metrics["dagrpo/scorer_fail_frac"] == 1.0
    assert metrics["train/skipped_steps"] == 0
