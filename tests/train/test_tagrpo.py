"""TA-GRPO in the trainer: pools, anchored ratios, controls, metrics, composition with DaGRPO."""

import pytest
import torch

from rlvr.config import build_config
from rlvr.rollout import Completion
from rlvr.train.batching import minibatches, response_logprobs_no_grad
from rlvr.train.experience import Experience
from rlvr.train.rollout_phase import Group
from rlvr.train.tagrpo import LogprobPrompts, tagrpo_rollout_metrics
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides

REPHRASED = [{"id": f"q{i}", "prompt": f"What is {i} + 2?", "answer": str(i + 2),
              "rephrasings": [f"Compute {i} plus 2.", f"Add 2 to {i}.", f"Find the sum of {i} and 2."]}
             for i in range(8)]


def _trainer(tmp_path, rows_file=True, **extra):
    path = tmp_path / "rows.jsonl"
    import json
    path.write_text("".join(json.dumps(r) + "\n" for r in REPHRASED))
    cfg = build_config(tiny_overrides(tmp_path / "run", data=str(path), num_rephrasings=3, **extra))
    return Trainer(cfg)


def test_pools_hold_every_variant_and_share_one_group_id(tmp_path):
    trainer = _trainer(tmp_path, algo="tagrpo")
    groups = trainer.generate_groups(trainer.sampler.take(2), seed=0)
    trainer.rewarder.close()
    assert len(groups) == 2
    for g in groups:
        assert len(g.completions) == 4 * 4  # (N+1) * G
        assert sorted(set(g.variants)) == [0, 1, 2, 3] and g.variants.count(0) == 4
        assert len(g.variant_prompt_ids) == 4 and g.variant_prompt_ids[0] == g.prompt_ids


def test_unpooled_variants_are_groups_of_one_pool_never_split(tmp_path):
    trainer = _trainer(tmp_path, algo="tagrpo_unpooled", steps_per_generation=2)
    groups = trainer.generate_groups(trainer.sampler.take(2), seed=0)
    trainer.rewarder.close()
    assert len(groups) == 8 and len({g.group_id for g in groups}) == 8
    assert len({g.pool for g in groups}) == 2
    exp = Experience.from_groups(groups)
    for batch in minibatches(exp.pool_ids, 2):
        pools = {int(exp.pool_ids[i]) for i in batch}
        assert all(int(exp.pool_ids[i]) in pools for i in batch)
        assert sum(1 for i in range(len(exp)) if int(exp.pool_ids[i]) in pools) == len(batch)


def _independent_logprobs(model, prompt, response):
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1], -1)
    return logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def test_anchored_scores_on_q0_and_unanchored_on_qj(tmp_path):
    trainer = _trainer(tmp_path, algo="tagrpo")
    (group,) = trainer.generate_groups(trainer.sampler.take(1), seed=0)
    trainer.rewarder.close()
    group.rewards = [0.0] * len(group.completions)
    for mode in ("original", "unanchored"):
        exp = Experience.from_groups([group], LogprobPrompts.for_ratio_anchor(mode))
        got = response_logprobs_no_grad(trainer.policy, exp.prompt_ids, exp.response_ids, pad_token_id=trainer.tokenizer.pad_token_id,
                            temperature=1.0, micro_batch_size=5)
        for i, c in enumerate(group.completions):
            j = group.variants[i]
            prompt = group.variant_prompt_ids[0 if mode == "original" else j]
            torch.testing.assert_close(got[i], _independent_logprobs(trainer.policy, prompt, c.token_ids),
                                       rtol=1e-5, atol=1e-5)
            if mode == "original" and j > 0:
                assert group.variant_prompt_ids[j] != group.variant_prompt_ids[0]
    exp = Experience.from_groups([group], LogprobPrompts.for_ratio_anchor("truncated_is"))
    assert all(p == group.prompt_ids for p in exp.prompt_ids)
    assert [p == group.prompt_ids for p in exp.behaviour_prompt_ids] == [v == 0 for v in group.variants]


def test_equal_sampling_uses_n_plus_one_times_g_responses_to_q0(tmp_path):
    trainer = _trainer(tmp_path, algo="equal_sampling")
    seen = []
    original = trainer.engine.generate
    trainer.engine.generate = lambda prompts, **kw: seen.append(prompts) or original(prompts, **kw)
    groups = trainer.generate_groups(trainer.sampler.take(2), seed=0)
    trainer.rewarder.close()
    assert [len(g.completions) for g in groups] == [16, 16]  # (3 + 1) * 4
    assert all(v == 0 for g in groups for v in g.variants)
    q0 = {tuple(trainer.prompt_builder.ids(row)) for row in REPHRASED}
    assert len(seen[0]) == 32 and all(tuple(p) in q0 for p in seen[0])


def test_zero_rephrasings_is_exactly_grpo(tmp_path):
    # algo=tagrpo num_rephrasings=0 is refused (it would silently be GRPO); TA-GRPO's other knobs
    # with N = 0 must change nothing.
    with pytest.raises(ValueError, match="num_rephrasings"):
        build_config({"algo": "tagrpo", "num_rephrasings": 0})
    params = {}
    for name, algo in (("grpo", {}), ("tagrpo", {"num_rephrasings": 0, "pooled": False, "ratio_anchor": "unanchored"})):
        cfg = build_config(tiny_overrides(tmp_path / name, max_steps=2, learning_rate=1e-3,
                                          reward_funcs=[str(tmp_path / "r.py") + ":lowercase_frac"], **algo))
        (tmp_path / "r.py").write_text("def lowercase_frac(prompts, completions, **kw):\n"
                                       "    return [sum(c.islower() for c in t) / max(1, len(t)) for t in completions]\n")
        trainer = Trainer(cfg)
        trainer.train()
        params[name] = trainer.policy.state_dict()
    for key in params["grpo"]:
        assert torch.equal(params["grpo"][key], params["tagrpo"][key])


def test_uniform_fractions_per_variant_and_per_pool():
    def group(gid, pool, variants, rewards):
        comps = [Completion([1], [0.0], False) for _ in rewards]
        return Group(group_id=gid, row={"id": "x"}, prompt_ids=[1], completions=comps, texts=[""] * len(rewards),
                     rewards=rewards, variants=variants, pool_id=pool)
    # pool 1: variant 0 all wrong, variant 1 mixed -> 1 uniform variant group rescued by its pool.
    # pool 2: both variants all wrong -> uniform pool, nothing rescued.
    groups = [group(1, 1, [0, 0, 1, 1], [0.0, 0.0, 1.0, 0.0]), group(2, 2, [0, 0, 1, 1], [0.0] * 4)]
    m = tagrpo_rollout_metrics(groups)
    assert m["tagrpo/frac_uniform_variant_groups"] == 3 / 4
    assert m["tagrpo/frac_uniform_pools"] == 1 / 2
    assert m["tagrpo/pool_rescue_frac"] == 1 / 3
    assert m["tagrpo/variants_per_pool"] == 2


def test_tagrpo_runs_end_to_end_with_rule_rephrasings_and_logs_the_gap(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))
    cfg = build_config(tiny_overrides(tmp_path / "t", algo="tagrpo", data="rg:chain_sum:size=16", max_steps=2))
    history = Trainer(cfg).train()
    assert list((tmp_path / "cache" / "rephrasings").glob("rules-*.jsonl"))
    for m in history:
        assert m["tagrpo/variants_per_pool"] > 1
        assert m["tagrpo/anchor_logp_gap"] > 0 and m["rollout/logprob_mismatch"] < 1e-4
        assert m["train/skipped_steps"] == 0


def test_truncated_is_and_dagrpo_composition_run(tmp_path):
    trainer = _trainer(tmp_path, algo="tagrpo", ratio_anchor="truncated_is", pair_masking=True, scorer="reward",
                       anchors="failed", max_steps=1)
    assert trainer.plan.update.needs_old_logprobs
    (metrics,) = trainer.train()
    assert metrics["train/skipped_steps"] == 0
    assert "dagrpo/anchor_rate" in metrics and "tagrpo/frac_uniform_pools" in metrics


def test_dynamic_sampling_keeps_whole_pools(tmp_path, lowercase_reward):
    trainer = _trainer(tmp_path, algo="tagrpo_unpooled", dynamic_sampling=True, max_num_gen_batches=1,
                       reward_funcs=[lowercase_reward])
    result = trainer.training_step(1).rollout
    trainer.rewarder.close()
    pools = {}
    for g in result.kept:
        pools.setdefault(g.pool, []).append(g)
    assert len(pools) == 4  # the lowercase reward is never uniform over 16 responses
    assert all(len(members) == 4 for members in pools.values())  # q_0 + 3 rephrasings, never split


def test_diversity_is_logged_every_k_steps(tmp_path):
    import pytest

    pytest.importorskip("sentence_transformers", reason="needs the embed extra")
    cfg = build_config(tiny_overrides(tmp_path / "d", max_steps=2, diversity_steps=2, diversity_groups=2))
    history = Trainer(cfg).train()
    assert "rollout/diversity" not in history[0]
    assert 0.0 <= history[1]["rollout/diversity"] <= 2.0
