"""Every TA-GRPO option (rlvr.config.tagrpo) has an effect a test sees, asserted on the unit that reads it with values
chosen so that the default, an inverted rule or a sibling option's value gives another result
(docs/algorithms/tagrpo.md is the spec; docs/design/option_tests.md the map). The last tests pin DAPO's dynamic
sampling over TA-GRPO pools: which responses are kept, and their advantages."""

from __future__ import annotations

import json
import math
import sys
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import build_config
from rlvr.config.tagrpo import TAGRPOConfig
from rlvr.core.losses import policy_loss
from rlvr.data.prompts import PromptBuilder
from rlvr.models.tiny import tiny_byte_tokenizer
from rlvr.parallel.runtime import DistContext
from rlvr.rollout import Completion
from rlvr.train import setup
from rlvr.train.experience import Experience, Group, compute_advantages
from rlvr.train.plan import compile_plan
from rlvr.train.rollout_phase import GroupGenerator, GroupIds, RolloutResult
from rlvr.train.tagrpo import QUESTION, SAMPLED, LogprobPrompts

EPS = 1e-6  # advantage_eps's default
ROWS = [{"id": "a", "prompt": "Tom has 3 apples and buys 4 more. How many apples does he have?", "answer": "7"},
        {"id": "b", "prompt": "What is 2 + 5?", "answer": "7"}]
FILE_REPHRASINGS = ["A1: how many apples now?", "A2: apples after buying?", "A3: count the apples."]


@pytest.fixture
def data(tmp_path, monkeypatch):
    """The rows (row a has three rephrasings in a rephrasings file, row b none) and that file."""
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))  # rule rephrasings are cached here
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    rephrasings = tmp_path / "rephrasings.jsonl"
    rephrasings.write_text(json.dumps({"id": "a", "rephrasings": FILE_REPHRASINGS}) + "\n")
    return SimpleNamespace(rows=str(rows), rephrasings=str(rephrasings))


def _cfg(data=None, **options):
    base = {"model": "tiny-random", "prompts_per_step": 2, "num_generations": 2, "max_completion_length": 16}
    return build_config({**base, **({"data": data.rows} if data is not None else {}), **options})


def _rows(cfg):
    return setup.load_training_rows(cfg, DistContext())


# ----------------------------------------------------------------------------- the plan carries each option

def test_the_plan_carries_every_tagrpo_step_option():
    options = dict(num_rephrasings=2, pooled=False, ratio_anchor="truncated_is", truncated_is_cap=3.5,
                   diversity_steps=3, diversity_groups=5)
    defaults = TAGRPOConfig()
    assert all(value != getattr(defaults, name) for name, value in options.items())  # (the test can fail)
    plan = compile_plan(_cfg(**options))
    assert plan.rollout.rephrased is True and plan.rollout.pooled is False and plan.tagrpo_metrics is True
    assert plan.rollout.responses_per_prompt == 2  # G per variant
    assert plan.scoring_prompts == LogprobPrompts(policy=QUESTION, old=SAMPLED, reference=QUESTION)
    assert plan.update.loss.ratio_cap == 3.5 and plan.update.needs_old_logprobs is True
    assert (plan.diversity_every, plan.diversity_groups) == (3, 5)
    # equal_sampling: (N+1)·G = 3·2 responses to q_0, no rephrasings sampled, no prompt choice to make
    equal = compile_plan(_cfg(num_rephrasings=2, equal_sampling=True))
    assert (equal.rollout.responses_per_prompt, equal.rollout.rephrased, equal.scoring_prompts) == (6, False, None)
    assert compile_plan(_cfg(num_rephrasings=0)).rollout.rephrased is False  # 0: TA-GRPO off


# ----------------------------------------------------------------------------- the rows' rephrasings

@pytest.mark.parametrize("n", [1, 2])
def test_num_rephrasings_and_rephrasings_file(data, n):
    """Row a takes its first N from the file (of 3); row b, with none there, gets N rule rephrasings (rules)."""
    rows = _rows(_cfg(data, num_rephrasings=n, rephrasings_file=data.rephrasings))
    assert rows[0]["rephrasings"] == FILE_REPHRASINGS[:n]
    assert len(rows[1]["rephrasings"]) == n and ROWS[1]["prompt"] not in rows[1]["rephrasings"]
    assert all(text not in FILE_REPHRASINGS for text in rows[1]["rephrasings"])


def test_rephrase_missing_error_refuses_a_row_without_rephrasings(data):
    with pytest.raises(ValueError, match=r"1 rows have no rephrasings \(first: 'b'\)"):
        _rows(_cfg(data, num_rephrasings=2, rephrasings_file=data.rephrasings, rephrase_missing="error"))
    # and without the file, both rows lack them (the file was read: only b was missing above)
    with pytest.raises(ValueError, match=r"2 rows have no rephrasings \(first: 'a'\)"):
        _rows(_cfg(data, num_rephrasings=2, rephrase_missing="error"))


# ----------------------------------------------------------------------------- what a round samples and groups

def _round(cfg):
    """The plan's GroupGenerator on the rows: (its requests, the groups of one completion per request)."""
    plan, rows, tok = compile_plan(cfg), _rows(cfg), tiny_byte_tokenizer()
    prompts = PromptBuilder(tok, setup.prompt_format(cfg, tok, rows, tools=None), rephrased=plan.rollout.rephrased)
    generate = GroupGenerator(plan.rollout, SimpleNamespace(supports_row_seeds=True), tok, prompts, GroupIds(),
                              DistContext(), policy=None)
    requests = generate.requests(rows, seed=0)
    completions = [Completion([65 + k], [0.0], False) for k in range(len(requests.prompts))]
    return plan, prompts, rows, requests, generate.groups(requests, completions)


def test_pooled_variants_form_one_group_per_question(data):
    _, prompts, rows, requests, groups = _round(_cfg(data, num_rephrasings=2, rephrasings_file=data.rephrasings))
    q = [[prompts.ids(rows[0], j) for j in range(3)], [prompts.ids(rows[1], j) for j in range(3)]]
    assert requests.prompts == [q[r][j] for r in range(2) for j in range(3) for _ in range(2)]  # G = 2 per variant
    assert [(g.group_id, g.pool) for g in groups] == [(1, 1), (2, 2)]
    assert all(g.variants == [0, 0, 1, 1, 2, 2] for g in groups)


def test_unpooled_variants_are_groups_of_one_pool(data):
    *_, groups = _round(_cfg(data, num_rephrasings=2, rephrasings_file=data.rephrasings, pooled=False))
    assert [(g.group_id, g.pool, g.variants) for g in groups] == [
        (1, 1, [0, 0]), (2, 1, [1, 1]), (3, 1, [2, 2]), (4, 4, [0, 0]), (5, 4, [1, 1]), (6, 4, [2, 2])]


def test_equal_sampling_samples_n_plus_one_times_g_responses_to_the_question(data):
    _, prompts, rows, requests, groups = _round(_cfg(data, num_rephrasings=2, equal_sampling=True))
    assert requests.prompts == [prompts.ids(rows[0])] * 6 + [prompts.ids(rows[1])] * 6
    assert [(g.group_id, len(g.completions), set(g.variants)) for g in groups] == [(1, 6, {0}), (2, 6, {0})]


@pytest.mark.parametrize(("pooled", "expected"), [
    # one pool, r = [1, 1, 0, 0] (q_0 right, q_1 wrong): mean 0.5, σ = √(1/3): ±0.5/0.57735 = ±0.8660
    (True, [0.5, 0.5, -0.5, -0.5]),
    (False, [0.0, 0.0, 0.0, 0.0]),  # two uniform groups, [1, 1] and [0, 0]: no signal
])
def test_pooled_advantages_are_joint_over_the_pool(data, pooled, expected):
    plan, *_, groups = _round(_cfg(data, num_rephrasings=1, rephrasings_file=data.rephrasings, pooled=pooled))
    first = [g for g in groups if g.pool == groups[0].pool]  # row a's pool
    for g in first:
        g.rewards = [1.0 if j == 0 else 0.0 for j in g.variants]
    advantages, _ = compute_advantages(plan.advantages, Experience.from_groups(first, plan.scoring_prompts))
    sigma = math.sqrt(1 / 3) if pooled else 1.0
    torch.testing.assert_close(advantages, torch.tensor(expected) / (sigma + EPS) if pooled else torch.zeros(4))


@pytest.mark.parametrize(("ratio_anchor", "passes"), [
    ("original", ("q0", "q0", "q0")),
    ("unanchored", ("q1", "q1", "q1")),
    ("truncated_is", ("q0", "q1", "q0")),
])
def test_ratio_anchor_picks_the_prompt_of_each_log_prob_pass(data, ratio_anchor, passes):
    """A response sampled from q_1 is scored (policy, old, reference) on these prompts; one from q_0 always on q_0."""
    plan, prompts, rows, _, groups = _round(_cfg(data, num_rephrasings=1, rephrasings_file=data.rephrasings,
                                                 ratio_anchor=ratio_anchor))
    groups[0].rewards = [0.0] * len(groups[0].completions)  # (a group is flattened with its rewards)
    exp = Experience.from_groups(groups[:1], plan.scoring_prompts)
    q = {"q0": prompts.ids(rows[0], 0), "q1": prompts.ids(rows[0], 1)}
    assert q["q0"] != q["q1"]
    i = exp.variants.tolist().index(1)
    assert (exp.prompt_ids[i], exp.behaviour_prompt_ids[i], exp.reference_prompt_ids[i]) == tuple(q[p] for p in passes)
    assert (exp.prompt_ids[0], exp.behaviour_prompt_ids[0], exp.reference_prompt_ids[0]) == (q["q0"],) * 3


@pytest.mark.parametrize(("options", "expected"), [
    ({"ratio_anchor": "truncated_is", "truncated_is_cap": 2.5}, 2.5),
    ({"ratio_anchor": "truncated_is"}, 2.0),  # the default cap
    ({"truncated_is_cap": 2.5}, 3.0),  # ratio_anchor=original: no truncation, whatever the cap
])
def test_truncated_is_cap(options, expected):
    """ρ = 3 on a token with A = −1 (ε = 0.2): L = −min(ρA, clip(ρ, 0.8, 1.2)A) = max(ρ, 1.2) with ρ first cut to
    min(ρ, C): 2.5 with C = 2.5, 2.0 with the default C = 2, 3 without truncated IS."""
    loss = compile_plan(_cfg(num_rephrasings=1, **options)).update.loss
    mask = torch.ones(1, 1, dtype=torch.bool)
    out = policy_loss(torch.tensor([[math.log(3.0)]]), torch.zeros(1, 1), torch.tensor([-1.0]), mask, loss)
    torch.testing.assert_close(out.per_token, torch.tensor([[expected]]))


def test_diversity_steps_and_groups(tmp_path, monkeypatch):
    """rollout/diversity every diversity_steps = 2 steps (step 2 of 3, not 1 or 3) on the first diversity_groups = 3
    groups of the step (of 4), each with its G = 2 texts."""
    import rlvr.train.trainer

    calls = []

    def diversity(texts, device="cpu"):
        calls.append([len(t) for t in texts])
        return 0.123

    for module in [m for name, m in sys.modules.items() if name.startswith("rlvr.train") and m is not None]:
        if hasattr(module, "group_diversity"):
            monkeypatch.setattr(module, "group_diversity", diversity)
        if hasattr(module, "require_embedding_packages"):
            monkeypatch.setattr(module, "require_embedding_packages", lambda what: None)
    cfg = build_config({"model": "tiny-random", "data": "rg:basic_arithmetic:size=16", "max_steps": 3,
                        "prompts_per_step": 4, "num_generations": 2, "max_completion_length": 4,
                        "output_dir": str(tmp_path / "run"), "progress_bar": False, "verifier_workers": 1,
                        "diversity_steps": 2, "diversity_groups": 3})
    history = rlvr.train.trainer.Trainer(cfg).train()
    assert calls == [[2, 2, 2]]
    assert ["rollout/diversity" in m for m in history] == [False, True, False]
    assert history[1]["rollout/diversity"] == 0.123


# ----------------------------------------------------------------------------- DAPO's dynamic sampling over pools

def _pool_group(gid, pool, variant, rewards):
    return Group(group_id=gid, row={"id": f"p{pool}"}, prompt_ids=[1], texts=[""] * len(rewards),
                 completions=[Completion([1], [0.0], False) for _ in rewards], rewards=list(rewards),
                 variants=[variant] * len(rewards), pool_id=pool)


def test_dynamic_sampling_keeps_whole_unpooled_pools_with_a_mixed_variant_group():
    """tagrpo_unpooled, B = 2 pools a step. Each variant is its own group (its advantages its own), so a pool is kept
    when one of its variant groups has mixed rewards, and then whole (its uniform group too, never split).

    round 1: pool 1 = v0 [1, 1] + v1 [0, 1]  → kept (group 2 is mixed)
             pool 3 = v0 [1, 1] + v1 [0, 0]  → dropped: each group uniform (mixed only across groups: no signal)
             pool 5 = v0 [0, 0] + v1 [0, 0]  → dropped
    round 2: pool 7 = v0 [0, 1] + v1 [1, 0]  → kept (the second pool: B reached)
             pool 9 = v0 [1, 0] + v1 [0, 0]  → mixed, but B pools are kept already
    Advantages, per group: [1, 1] → 0; [0, 1] → (r − 0.5)/(σ + ε), σ = std([0, 1]) = √(1/2): ∓0.7071."""
    plan = compile_plan(_cfg(algo="tagrpo_unpooled", dynamic_sampling=True, num_rephrasings=1))
    result = RolloutResult(plan.rollout, step=1)
    assert result.wants_another_round()
    result.add(DistContext(), [_pool_group(1, 1, 0, [1, 1]), _pool_group(2, 1, 1, [0, 1]),
                               _pool_group(3, 3, 0, [1, 1]), _pool_group(4, 3, 1, [0, 0]),
                               _pool_group(5, 5, 0, [0, 0]), _pool_group(6, 5, 1, [0, 0])], {}, None)
    assert [g.group_id for g in result.kept] == [1, 2] and result.wants_another_round()
    result.add(DistContext(), [_pool_group(7, 7, 0, [0, 1]), _pool_group(8, 7, 1, [1, 0]),
                               _pool_group(9, 9, 0, [1, 0]), _pool_group(10, 9, 1, [0, 0])], {}, None)
    assert [g.group_id for g in result.kept] == [1, 2, 7, 8] and not result.wants_another_round()
    assert len(result.generated) == 10 and result.rounds == 2
    exp = Experience.from_groups(result.kept, plan.scoring_prompts)
    advantages, _ = compute_advantages(plan.advantages, exp)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(advantages, torch.tensor([0.0, 0.0, -a, a, -a, a, a, -a]))


def test_dynamic_sampling_keeps_mixed_pools_when_pooled():
    """tagrpo (pooled), B = 2: a pool is one group of every variant's responses, kept when its rewards are mixed —
    also when each variant's own responses are uniform (pool 1: q_0 all right, q_1 all wrong).

    pool 1 [1, 1 | 0, 0] kept: mean 0.5, σ = √(1/3): ±0.8660
    pool 2 [1, 1 | 1, 1] dropped (uniform)
    pool 3 [0, 1 | 0, 0] kept: mean 0.25, σ = √((3·0.0625 + 0.5625)/3) = 0.5: [−0.5, 1.5, −0.5, −0.5]
    pool 4 [0, 1 | 1, 1] mixed, but B pools are kept"""
    plan = compile_plan(_cfg(algo="tagrpo", dynamic_sampling=True, num_rephrasings=1))
    result = RolloutResult(plan.rollout, step=1)

    def pool(gid, rewards):
        group = _pool_group(gid, None, 0, rewards)
        group.variants = [0, 0, 1, 1]
        return group

    result.add(DistContext(), [pool(1, [1, 1, 0, 0]), pool(2, [1, 1, 1, 1]), pool(3, [0, 1, 0, 0]),
                               pool(4, [0, 1, 1, 1])], {}, None)
    assert [g.group_id for g in result.kept] == [1, 3] and not result.wants_another_round()
    advantages, _ = compute_advantages(plan.advantages, Experience.from_groups(result.kept, plan.scoring_prompts))
    b = 0.5 / (math.sqrt(1 / 3) + EPS)
    expected = [b, b, -b, -b] + [v * 0.5 / (0.5 + EPS) for v in (-0.5, 1.5, -0.5, -0.5)]
    torch.testing.assert_close(advantages, torch.tensor(expected))


def test_without_dynamic_sampling_every_pool_is_kept():
    plan = compile_plan(_cfg(algo="tagrpo_unpooled", num_rephrasings=1))
    result = RolloutResult(plan.rollout, step=1)
    groups = [_pool_group(1, 1, 0, [1, 1]), _pool_group(2, 1, 1, [0, 0])]
    result.add(DistContext(), groups, {}, None)
    assert result.kept == groups and not result.wants_another_round()
