"""DaGRPO in the trainer: GRPO equivalence at tau 0, anchor gradients, injection, composition."""

import json
import logging

import pytest
import torch

import rlvr.train.setup as train_setup
from rlvr.cli import main as cli_main
from rlvr.config import build_config
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rewards import VerifierPool
from rlvr.rollout import Completion
from rlvr.train.batching import OptimizerBatch
from rlvr.train.dagrpo import AnchorBank, inject_anchor, should_inject
from rlvr.train.experience import Experience, compute_advantages
from rlvr.train.metrics import UpdateResult
from rlvr.train.plan import compile_plan
from rlvr.train.rollout_phase import Group
from rlvr.train.tagrpo import LogprobPrompts
from rlvr.train.trainer import Trainer
from rlvr.train.update import PolicyUpdate

from .conftest import tiny_overrides
from .test_update import NoScheduler, RecordingOptimizer, _experience, update_policy


def _cfg(**extra):
    return build_config({"model": "tiny-random", "prompts_per_step": 3, "num_generations": 4,
                         "max_completion_length": 8, **extra})


def _dagrpo(**extra):
    """The plan's DaGRPOSettings for ``_cfg(**extra)`` (None when DaGRPO is off)."""
    return compile_plan(_cfg(**extra)).dagrpo


def test_tau_zero_without_anchors_equals_grpo_advantages_and_gradients():
    exp = _experience()
    exp.scores = torch.rand(len(exp))
    grads, advs = {}, {}
    for name, cfg in {"grpo": _cfg(), "dagrpo": _cfg(algo="dagrpo_sgr", pair_tau=0.0)}.items():
        advs[name], metrics = compute_advantages(compile_plan(cfg).advantages, exp)
        model, tok = tiny_random_model_and_tokenizer(seed=0)
        model.eval()
        opt = RecordingOptimizer(model.parameters())
        update_policy(cfg, model, opt, NoScheduler(), exp, advs[name], pad_token_id=tok.pad_token_id)
        grads[name] = opt.grads[0]
    assert metrics["dagrpo/masked_pair_frac"] == 0.0
    torch.testing.assert_close(advs["dagrpo"], advs["grpo"], rtol=0, atol=1e-7)
    for a, b in zip(grads["grpo"], grads["dagrpo"]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_masking_changes_advantages_and_is_reported():
    exp = _experience()
    exp.scores = exp.rewards.clone()  # s = r: pairs with equal rewards carry no contrast anyway
    exp.scores[1] = exp.scores[0] - 0.1  # the (0, 1) pair becomes indistinct at tau 0.2
    adv, metrics = compute_advantages(compile_plan(_cfg(algo="dagrpo_sgr")).advantages, exp)
    grpo, _ = compute_advantages(compile_plan(_cfg()).advantages, exp)
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
    advantages = torch.tensor([2.0, 0.0])  # only the anchor carries a gradient
    old = [torch.full((4,), -30.0), torch.full((2,), -30.0)]  # ratios would be e^30: clipped if PPO
    cfg = _cfg(anchors="always", epsilon=0.2, max_grad_norm=0.0)  # no clipping of the recorded grads
    opt = RecordingOptimizer(model.parameters())
    update = PolicyUpdate(compile_plan(cfg).update, model, opt, NoScheduler(), pad_token_id=tok.pad_token_id)
    update.optimizer_step(OptimizerBatch(exp, advantages, old, None, [[0, 1]]), micro=2, result=UpdateResult(lr=0.0),
                          on_policy=False)
    # expected: d/dθ of -(2.0 * Σ_t log π(a_t)) / 6 tokens (token_mean over the mini-batch)
    ids = torch.tensor([prompt + anchor_ids])
    logp = torch.log_softmax(model(input_ids=ids).logits[0, 2:-1], -1).gather(-1, torch.tensor(anchor_ids)[:, None])
    model.zero_grad()
    (-(2.0 * logp.sum()) / 6).backward()
    for got, p in zip(opt.grads[0], model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-5, atol=1e-6)


def test_anchor_trigger_and_placement():
    settings = _dagrpo(anchors="failed", anchor_max_correct=1)
    assert should_inject(0, settings) and should_inject(1, settings) and not should_inject(2, settings)
    assert should_inject(5, _dagrpo(anchors="always"))

    def group():
        comps = [Completion([1], [0.0], False) for _ in range(3)]
        return Group(group_id=1, row={"id": "r"}, prompt_ids=[1], completions=comps, texts=["a", "b", "c"],
                     rewards=[0.0, 0.0, 0.0], reward_parts={"accuracy": [0.0, 0.0, 0.0]}, scores=[0.3, 0.1, 0.1])

    from rlvr.train.dagrpo import Anchor
    anchor = Anchor([7, 8], "sol", False, reward=1.0, reward_parts={"accuracy": 1.0})
    g = group()
    inject_anchor(g, anchor, _dagrpo(anchors="always").anchor_placement)  # the default: replace_worst
    assert [c.is_anchor for c in g.completions] == [False, True, False]  # lowest score, first of ties
    assert g.rewards == [0.0, 1.0, 0.0] and g.reward_parts["accuracy"][1] == 1.0
    assert g.before_anchor.texts == ["a", "b", "c"] and not any(c.is_anchor for c in g.before_anchor.completions)
    g = group()
    inject_anchor(g, anchor, _dagrpo(anchors="always", anchor_placement="append").anchor_placement)
    assert len(g.completions) == 4 and g.completions[-1].is_anchor and g.rewards[-1] == 1.0
    assert len(g.scores) == len(g.reward_parts["accuracy"]) == 4 and len(g.before_anchor.completions) == 3


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
    result = trainer.training_step(1).rollout
    trainer.rewarder.close()
    assert result.rounds == 1 and len(result.kept) == 4  # all-wrong groups got anchors: not uniform
    rescued = [g for g in result.kept if len({g.rewards[i] for i in g.on_policy}) == 1]
    assert rescued, "tiny-random should fail some chain_sum groups entirely"
    assert all(any(c.is_anchor for c in g.completions) for g in rescued)


def test_sft_lowers_the_nll_and_writes_the_run_directory(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "s", algo="sft", data="rg:chain_sum:size=8", max_steps=8,
                                      learning_rate=3e-3, max_completion_length=64))
    history = Trainer(cfg).train()
    losses = [m["train/loss"] for m in history]
    assert losses[-1] < losses[0] - 0.5, losses
    assert all(m["sft/anchor_rate"] == 1.0 for m in history)
    assert (tmp_path / "s" / "config.yaml").exists() and (tmp_path / "s" / "checkpoint-8").is_dir()
    assert (tmp_path / "s" / "model.safetensors").is_file()  # the final model, as for RL


class _ModelLoaded(Exception):
    pass


def _no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise _ModelLoaded  # the data check must come before the model is loaded
    monkeypatch.setattr(train_setup, "load_policy", refuse)  # (the trainer loads the policy in setup.build_models)


def test_sft_on_data_without_solutions_fails_before_the_model_with_the_fix(tmp_path, monkeypatch, capsys):
    _no_model(monkeypatch)
    cfg = build_config(tiny_overrides(tmp_path / "s", algo="sft", data="rg:leg_counting:size=4"))
    with pytest.raises(ValueError, match=r"data=rg:leg_counting:size=4: none of its 4 rows has a solution") as info:
        Trainer(cfg)
    assert "data=gsm8k-100" in str(info.value) and "rlvr train" in str(info.value)
    code = cli_main(["sft", "model=tiny-random", "data=rg:leg_counting:size=4", f"output_dir={tmp_path / 'c'}",
                     "progress_bar=false", "verifier_workers=1"])
    assert code == 2
    assert "none of its 4 rows has a solution" in capsys.readouterr().err


def test_sft_logs_how_many_rows_have_a_solution(tmp_path, monkeypatch, caplog):
    _no_model(monkeypatch)
    data = tmp_path / "mixed.jsonl"
    rows = [{"question": f"{i} + 1?", "answer": str(i + 1)} for i in range(4)]
    rows[0]["solution"], rows[2]["solution"] = "Add one.\n#### 1", "Add one.\n#### 3"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    cfg = build_config(tiny_overrides(tmp_path / "s", algo="sft", data=str(data)))
    with caplog.at_level(logging.INFO, logger="rlvr.train.sft"), pytest.raises(_ModelLoaded):
        Trainer(cfg)
    assert f"2 of the 4 rows of data={data} have a solution" in caplog.text


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


def _variant_group(rewards, *, variants=None):
    """A TA-GRPO-shaped group (variants set, as GroupGenerator makes them) with given accuracy rewards."""
    n = len(rewards)
    return Group(group_id=1, row={"id": "r", "prompt": "q", "answer": "7"}, prompt_ids=[1, 2],
                 completions=[Completion([5 + i, 9], [0.0, 0.0], False) for i in range(n)],
                 texts=[f"t{i}" for i in range(n)], rewards=list(rewards),
                 reward_parts={"accuracy": list(rewards)}, variants=list(variants or [0] * n),
                 variant_prompt_ids=[[1, 2], [3, 4]], correctness="accuracy")


@pytest.mark.parametrize("placement", ["replace_worst", "append"])
def test_anchor_placements_flatten_with_variants(placement):
    # The append crash: generate_groups always sets `variants`; the anchor must get an entry too.
    from rlvr.train.dagrpo import Anchor
    g = _variant_group([0.0, 0.0, 0.0], variants=[0, 1, 1])
    inject_anchor(g, Anchor([7, 257], "sol", False, 1.0, {"accuracy": 1.0}), placement)
    exp = Experience.from_groups([g], LogprobPrompts.for_ratio_anchor("unanchored"))
    anchor = int(exp.is_anchor.nonzero())
    assert len(exp) == (4 if placement == "append" else 3)
    # an anchor answers q_0: variant 0 and scored on q_0 in every mode, even in a slot sampled from q_1
    assert exp.variants[anchor] == 0 and exp.prompt_ids[anchor] == [1, 2] and exp.behaviour_prompt_ids[anchor] == [1, 2]


def test_anchor_replacing_a_q1_slot_is_scored_on_q0_in_every_ratio_mode():
    from rlvr.train.dagrpo import Anchor
    for mode in ("original", "unanchored", "truncated_is"):
        g = _variant_group([1.0, 1.0, 0.0], variants=[0, 0, 1])  # the worst response was sampled from q_1
        inject_anchor(g, Anchor([7, 257], "sol", False, 1.0, {"accuracy": 1.0}), "replace_worst")
        exp = Experience.from_groups([g], LogprobPrompts.for_ratio_anchor(mode))
        assert bool(exp.is_anchor[2]) and exp.variants[2] == 0
        assert exp.prompt_ids[2] == [1, 2] and exp.behaviour_prompt_ids[2] == [1, 2], mode
        assert bool(exp.on_own_prompt[2])


def test_rollout_metrics_describe_the_policy_samples_before_injection():
    # 3 of 4 right; anchors=always replaces the wrong one. The policy's accuracy is 0.75 and the
    # group is not uniform, whatever the anchor did to the group that trains.
    from rlvr.train.dagrpo import Anchor
    from rlvr.train.metrics import rollout_metrics
    from rlvr.train.rollout_phase import RolloutResult
    g = _variant_group([1.0, 1.0, 0.0, 1.0])
    inject_anchor(g, Anchor([7, 257], "sol", False, 1.0, {"accuracy": 1.0}),
                  _dagrpo(anchors="always").anchor_placement)
    assert g.uniform and g.rewards == [1.0] * 4  # the group as trained: all 1.0
    m = rollout_metrics(RolloutResult(compile_plan(_cfg()).rollout, 1, kept=[g], generated=[g], rounds=1), ["accuracy"])
    assert m["rollout/reward_mean"] == 0.75 and m["rollout/accuracy"] == 0.75
    assert m["rollout/frac_uniform_groups"] == 0.0 and m["rollout/frac_all_correct"] == 0.0
    assert m["rewards/accuracy_mean"] == 0.75
    assert m["rollout/response_len_mean"] == 2.0  # the policy's responses (2 tokens each), not the anchor's


def test_anchor_is_rewarded_by_the_runs_reward_functions():
    # With accuracy + 0.1·format the expert solution (boxed, correct) scores 1.1 like the best
    # on-policy answer, not the hard-coded 1.0 that ranked it below one.
    from rlvr.train.rewarding import Rewarder
    _, tok = tiny_random_model_and_tokenizer()
    rewarder = Rewarder(["accuracy", "format"], [1.0, 0.1], verifier_workers=1, verifier_timeout=5.0,
                        answer_extraction="boxed")
    row = {"id": "a", "prompt": "3 + 4 = ?", "answer": "7", "solution": "3 + 4 = 7\n#### 7"}
    try:
        phase = build_dagrpo_phase_for_test(rewarder, tok, rows=[row])
        assert phase.anchors.texts == {"a": "3 + 4 = 7\nThe answer is \\boxed{7}."}  # written at set-up
        anchor = phase.anchors.get(row)
    finally:
        rewarder.close()
    assert anchor is not None and anchor.reward == pytest.approx(1.1)
    assert anchor.reward_parts == {"accuracy": 1.0, "format": 1.0}


def build_dagrpo_phase_for_test(rewarder, tok, *, rows):
    """The phase as the trainer builds it: the plan's settings, the config's scorer (none here: s = r)."""
    from rlvr.train.dagrpo import build_dagrpo_phase
    from rlvr.train.setup import build_scorer
    cfg = _cfg(anchors="failed", max_completion_length=64)
    scorer = build_scorer(cfg, device="cpu")
    return build_dagrpo_phase(compile_plan(cfg).dagrpo, scorer, rows=rows, max_completion_length=64, tokenizer=tok,
                              eos_token_id=257, rewarder=rewarder)


def test_dagrpo_run_with_appended_anchors(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "a", algo="dagrpo", anchor_placement="append",
                                      data="rg:chain_sum:size=32", max_steps=2, num_completions_to_log=100))
    history = Trainer(cfg).train()
    assert all(m["dagrpo/anchor_rate"] > 0 and m["train/skipped_steps"] == 0 for m in history)
    samples = [json.loads(x) for x in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()]
    anchors = [s for s in samples if s["anchor"]]
    assert anchors and all(s["variant"] == 0 and s["reward"] == 1.0 for s in anchors)
