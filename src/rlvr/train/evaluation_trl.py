"""TRL's evaluation of a GRPO run (``GRPOTrainer.evaluate``): the rollout metrics of the evaluation prompts.

TRL's ``evaluate()`` samples G completions for each evaluation prompt with the current policy, scores them
with the run's reward functions and logs the step's rollout metrics (``reward``, ``rewards/<name>/mean``,
``completions/mean_length``, ...) under ``eval_``. This does the same with the run's own prompt format,
engine and reward functions (rlvr.train.metrics.trl_rollout_metrics), on a group counter of its own (the
training run's group ids and sampling seeds are untouched). rlvr's other evaluation, ``eval_data``, is
pass@k with the verifier (rlvr.train.evaluation).
"""

from __future__ import annotations

from rlvr.data.sources import load_python_rows
from rlvr.train.metrics import trl_rollout_metrics
from rlvr.train.rollout_phase import GroupGenerator, GroupIds
from rlvr.train.setup import build_rewarder, chat_rows, question_rows, row_rules

EVAL_SEED = 1_000_003  # the evaluation's sampling seed: the same prompts draw the same samples at every call


def rollout_metrics(trainer, data) -> dict:
    """TRL's rollout metrics of ``data`` (a Dataset or row dicts) sampled by ``trainer``'s policy."""
    cfg = trainer.cfg
    rows = chat_rows(question_rows(load_python_rows(data, **row_rules(cfg)), cfg), cfg)
    generator = GroupGenerator(trainer.plan.rollout, trainer.engine, trainer.tokenizer, trainer.prompts, GroupIds(),
                               trainer.dist, policy=trainer.policy)
    requests = generator.requests(rows, seed=EVAL_SEED)
    groups = generator.groups(requests, generator.sample(requests))
    rewarder = build_rewarder(cfg, max_steps=trainer.max_steps, tokenizer=trainer.tokenizer,
                              tools=trainer.plan.rollout.tools)  # (an environment's get_reward too)
    try:
        rewarder.reward_groups(groups, step=getattr(trainer, "step_done", 0) + 1)
    finally:
        rewarder.close()
    return trl_rollout_metrics(groups, rewarder.names, scale_rewards=trainer.plan.advantages.settings.scale_rewards)
