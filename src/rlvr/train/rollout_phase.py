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
        result.kept.extend(g for g in groups if not g.uniform)
        if len(result.kept) >= B:
            break
    result.kept = result.kept[:B]
    return result


def generate_groups(run, rows: list[dict], *, seed: int) -> list[Group]:
    """Sample G responses for each row; responses of one prompt share a fresh group id."""
    G = run.cfg.rollout.num_generations
    prompt_ids = [run.prompt_ids(row) for row in rows]
    completions = run.engine.generate(
        [ids for ids in prompt_ids for _ in range(G)],
        max_new_tokens=run.cfg.rollout.max_completion_length,
        temperature=run.cfg.rollout.temperature,
        top_p=run.cfg.rollout.top_p,
        generator_seed=seed,
    )
    groups = []
    for k, (row, ids) in enumerate(zip(rows, prompt_ids)):
        mine = completions[k * G : (k + 1) * G]
        texts = [run.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in mine]
        groups.append(Group(group_id=run.next_group_id(), row=row, prompt_ids=ids, completions=mine, texts=texts))
    return groups
