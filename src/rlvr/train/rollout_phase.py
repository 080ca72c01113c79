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

import hashlib
import time
from dataclasses import dataclass, field

from rlvr.train.experience import Group
from rlvr.train.fsdp import full_weights


@dataclass
class RolloutResult:
    kept: list[Group]
    generated: list[Group]
    rounds: int
    rollout_s: float = 0.0
    reward_s: float = 0.0
    reward_stats: dict[str, float] = field(default_factory=dict)


def collect_groups(run, step: int) -> RolloutResult:
    """Generate and reward groups for one step (``run`` is the :class:`~rlvr.train.trainer.Trainer`).

    On W ranks each rank generates, rewards and scores its share of the prompts; the groups are
    then gathered, so what follows sees the step's groups in the 1-process order on every rank.
    """
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
        groups, stats = gather_round(run.dist, groups, stats)
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
    run.rewarder.check_failures(step, result.reward_stats)  # a reward function that keeps failing stops the run
    return result


def gather_round(ctx, groups: list[Group], stats: dict[str, float]) -> tuple[list[Group], dict[str, float]]:
    """Every rank's groups in rank order (= prompt order) and the counters summed (times: the max)."""
    if not ctx.enabled:
        return groups, stats
    gathered = ctx.gather_objects((groups, stats))
    merged: dict[str, float] = {}
    for _, rank_stats in gathered:
        for key, value in rank_stats.items():
            merged[key] = max(merged.get(key, value), value) if key.startswith("time/") else merged.get(key, 0.0) + value
    return [g for rank_groups, _ in gathered for g in rank_groups], merged


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
    """Sample responses for this rank's share of ``rows`` and group them with run-wide group ids.

    GRPO: G responses to the question. TA-GRPO: G responses to q_0 and to each rephrasing q_j,
    one pooled group per question (or, unpooled, one group per variant sharing a pool id).
    ``equal_sampling``: (N+1)·G responses to q_0 only.

    Request k of the step (row-major over rows, variants, samples) is drawn with seed
    ``request_seed(seed, k)``, and group ids are numbered over all rows, so a rank's groups are
    the ones a single process would make for the same rows.
    """
    t = run.cfg.tagrpo
    G = run.cfg.rollout.num_generations * (t.responses_per_prompt_factor if t.equal_sampling else 1)
    variant_prompts = [run.variant_prompts(row) for row in rows]  # per row: [q_0, q_1, ...] token ids
    first_request = [0]
    first_group = [run.group_counter + 1]
    for variants in variant_prompts:
        first_request.append(first_request[-1] + len(variants) * G)
        first_group.append(first_group[-1] + (1 if t.pooled or len(variants) == 1 else len(variants)))
    run.group_counter = first_group[-1] - 1
    mine = run.dist.share(len(rows))
    prompts = [ids for i in mine for ids in variant_prompts[i] for _ in range(G)]
    seeds = [request_seed(seed, k) for i in mine for k in range(first_request[i], first_request[i + 1])]
    sampling = {"row_seeds": seeds} if run.engine.supports_row_seeds else {"generator_seed": seed + run.dist.rank}
    with full_weights(run.policy):  # FSDP2: ranks finish at different steps, so no per-forward gathers
        completions = run.engine.generate(
            prompts, max_new_tokens=run.cfg.rollout.max_completion_length,
            temperature=run.cfg.rollout.temperature, top_p=run.cfg.rollout.top_p, **sampling,
        )
    texts = [run.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
    groups, start = [], 0
    for i in mine:
        row, variants, group_id = rows[i], variant_prompts[i], first_group[i]
        members = []  # (variant j, completion, text)
        for j in range(len(variants)):
            members += [(j, completions[k], texts[k]) for k in range(start, start + G)]
            start += G
        if t.pooled or len(variants) == 1:
            groups.append(_group(row, variants, members, group_id=group_id, pool_id=None))
        else:
            for j in range(len(variants)):
                group = _group(row, variants, [m for m in members if m[0] == j], group_id=group_id + j,
                               pool_id=group_id)
                groups.append(group)
    return groups


def request_seed(step_seed: int, request: int) -> int:
    """A 63-bit seed for request ``request`` of a step (SHA-256 of both: independent streams)."""
    key = f"{step_seed}\x1f{request}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1


def _group(row, variants, members, *, group_id: int, pool_id: int | None) -> Group:
    return Group(
        group_id=group_id, row=row, prompt_ids=variants[0],
        completions=[c for _, c, _ in members], texts=[text for _, _, text in members],
        variants=[j for j, _, _ in members], variant_prompt_ids=variants, pool_id=pool_id,
    )
