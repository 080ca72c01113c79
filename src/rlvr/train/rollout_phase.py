"""Rollout and reward phases of a training step, with DAPO dynamic sampling.

    groups = []
    repeat up to max_num_gen_batches times:
        draw B prompts → sample G responses each → reward them
        (DaGRPO) fine-grained scores, anchors into failed groups
        keep every group (GRPO) or only the groups with mixed rewards (dynamic sampling)
        stop once B groups are kept

Rollout statistics are computed over *every* group generated in the step, so the uniform fraction
shows what the sampler really produced, not what survived the filter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rlvr.train.experience import Group


@dataclass
class RolloutResult:
    kept: list[Group]
    generated: list[Group]
    rounds: int
    rollout_s: float = 0.0
    reward_s: float = 0.0
    reward_stats: dict[str, float] = field(default_factory=dict)


def collect_groups(run, step: int) -> RolloutResult:
    """Generate and reward groups for one step (``run`` is the :class:`~rlvr.train.trainer.Trainer`)."""
    cfg = run.cfg
    B = cfg.rollout.prompts_per_step
    result = RolloutResult(kept=[], generated=[], rounds=0)
    while result.rounds < cfg.algorithm.max_num_gen_batches:
        result.rounds += 1
        t0 = time.perf_counter()
        groups = generate_groups(run, run.sampler.take(B), seed=run.generation_seed(step, result.rounds))
        t1 = time.perf_counter()
        stats = run.rewarder.reward_groups(groups)
        result.reward_s += time.perf_counter() - t1
        if run.dagrpo is not None:  # score + anchors, before the dynamic-sampling filter
            stats.update(run.dagrpo.process(groups))
        result.rollout_s += t1 - t0
        for key, value in stats.items():
            result.reward_stats[key] = result.reward_stats.get(key, 0.0) + value
        result.generated.extend(groups)
        if not cfg.algorithm.dynamic_sampling:
            result.kept = groups
            break
        kept_pools = [pool for pool in pools(groups) if not all(g.uniform for g in pool)]
        result.kept.extend(g for pool in kept_pools[: B - len(pools(result.kept))] for g in pool)
        if len(pools(result.kept)) >= B:
            break
    return result


def pools(groups: list[Group]) -> list[list[Group]]:
    """Consecutive groups sharing a pool id (TA-GRPO unpooled variants); one group per pool otherwise."""
    out: list[list[Group]] = []
    for group in groups:
        if out and out[-1][0].pool == group.pool:
            out[-1].append(group)
        else:
            out.append([group])
    return out


def generate_groups(run, rows: list[dict], *, seed: int) -> list[Group]:
    """Sample responses for each row and group them with fresh group ids.

    GRPO: G responses to the question. TA-GRPO: G responses to q_0 and to each rephrasing q_j,
    one pooled group per question (or, unpooled, one group per variant sharing a pool id).
    ``equal_sampling``: (N+1)·G responses to q_0 only.
    """
    t = run.cfg.tagrpo
    G = run.cfg.rollout.num_generations * (t.responses_per_prompt_factor if t.equal_sampling else 1)
    variant_prompts = [run.variant_prompts(row) for row in rows]  # per row: [q_0, q_1, ...] token ids
    completions = run.engine.generate(
        [ids for variants in variant_prompts for ids in variants for _ in range(G)],
        max_new_tokens=run.cfg.rollout.max_completion_length,
        temperature=run.cfg.rollout.temperature,
        top_p=run.cfg.rollout.top_p,
        generator_seed=seed,
    )
    texts = [run.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
    groups, start = [], 0
    for row, variants in zip(rows, variant_prompts):
        members = []  # (variant j, completion, text)
        for j in range(len(variants)):
            members += [(j, completions[k], texts[k]) for k in range(start, start + G)]
            start += G
        if t.pooled or len(variants) == 1:
            groups.append(_group(run, row, variants, members, pool_id=None))
        else:
            pool = None
            for j in range(len(variants)):
                group = _group(run, row, variants, [m for m in members if m[0] == j], pool_id=pool)
                pool = group.pool if pool is None else pool
                group.pool_id = pool
                groups.append(group)
    return groups


def _group(run, row, variants, members, *, pool_id) -> Group:
    return Group(
        group_id=run.next_group_id(), row=row, prompt_ids=variants[0],
        completions=[c for _, c, _ in members], texts=[text for _, _, text in members],
        variants=[j for j, _, _ in members], variant_prompt_ids=variants, pool_id=pool_id,
    )
