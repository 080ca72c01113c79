"""Supervised fine-tuning on expert solutions: DaGRPO's SFT baseline, in the same run format.

Each step takes B rows, turns each row's solution into an anchor response (formatted, verified,
tokenised as in DaGRPO) and minimises its negative log-likelihood given the prompt. This is the
anchor term of DaGRPO with Â = 1 and ψ = log: −Σ log π_θ(a_t), aggregated by ``loss_type``
(token_mean: the mean NLL per token). Rows without a usable solution are skipped and counted; data
with none at all is refused before the model is loaded.

``Trainer(cfg)`` with ``algo=sft`` runs this step in place of the RL one (``Trainer.training_step`` is
:func:`sft_training_step` then), with the same set-up, checkpoints and files; this module imports nothing of
the trainer (the objects it uses are the trainer's attributes).
"""

from __future__ import annotations

import logging
import time

import torch

from rlvr.data.anchors import ARITHMETIC_TASKS, anchor_text
from rlvr.rollout import Completion
from rlvr.train.experience import Experience
from rlvr.train.rollout_phase import Group
from rlvr.train.step_result import StepResult

logger = logging.getLogger(__name__)


def check_sft_rows(rows: list[dict], data: str) -> int:
    """The number of rows with an anchor text (a solution); ValueError when none has one."""
    usable = sum(anchor_text(row) is not None for row in rows)
    if usable == 0:
        raise ValueError(
            f"data={data}: none of its {len(rows)} rows has a solution to fine-tune on, so SFT would train "
            "nothing; use data whose rows have a `solution` column (e.g. data=gsm8k-100) or a reasoning-gym "
            f"arithmetic task with generated worked solutions ({', '.join(sorted(ARITHMETIC_TASKS))}, e.g. "
            "data=rg:chain_sum), or use `rlvr train` for RL on this data")
    return usable


def sft_rows(rows: list[dict], data: str, *, log: bool) -> list[dict]:
    """The rows, checked to hold solutions (before the model is loaded); ``log``: say how many do."""
    usable = check_sft_rows(rows, data)
    if usable < len(rows) and log:
        logger.info("sft: %d of the %d rows of data=%s have a solution and are trained on; the other %d "
                    "are skipped", usable, len(rows), data, len(rows) - usable)
    return rows


def sft_training_step(self, step: int) -> StepResult:
    """The trainer's step with algo=sft: take B rows, make each solution an anchor response, and minimise its
    NLL (Â = 1, ψ = log). ``self``: the Trainer (its sampler, prompts, anchors, update)."""
    t0 = time.perf_counter()
    bank = self.dagrpo.anchors
    rows = self.sampler.take(self.plan.rollout.prompts_per_step)
    groups = []
    for row in rows:
        anchor = bank.get(row)
        if anchor is None:
            continue
        completion = Completion(anchor.token_ids, [], truncated=anchor.truncated, is_anchor=True)
        groups.append(Group(group_id=self.group_ids.reserve(1), row=row, prompt_ids=self.prompt_builder.ids(row),
                            completions=[completion], texts=[anchor.text], rewards=[1.0]))
    metrics = {"step": step, "sft/rows": len(rows), "sft/anchor_rate": len(groups) / len(rows)}
    update = None
    if groups:
        experience = Experience.from_groups(groups)
        update = self.update(experience, torch.ones(len(experience)))
        metrics.update(update.metrics(with_kl=self.plan.update.needs_reference))
        metrics["sft/tokens"] = sum(len(ids) for ids in experience.response_ids)
    metrics.update(self.grad_spikes.update(metrics.get("train/grad_norm")))
    metrics["time/step_s"] = time.perf_counter() - t0
    samples = [{"step": step, "id": g.row["id"], "prompt": g.row["prompt"], "completion": g.texts[0]}
               for g in groups[: self.plan.num_completions_to_log]]
    return StepResult(metrics, samples, update=update)

