"""What the update learns from: the step's groups as one flat batch (:class:`Experience`) and its advantages
(:func:`compute_advantages`).

The groups come from the rollout phase (``rlvr.train.rollout_phase.Group``: one prompt with its G responses);
how the update cuts the batch into mini- and micro-batches is ``rlvr.train.batching``'s. Every response carries
its group's stable ``group_id`` (a run-wide counter assigned when the prompt was drawn), and advantages are computed
from those ids, never from positions in the batch (docs/design/pitfalls.md #9).

Advantages (:func:`compute_advantages`): advantages for a step: the configured estimator, or DaGRPO's masked pairwise form.

A batch holding anchors, or a run with DaGRPO's pair masking, uses the ``dagrpo`` estimator (with
τ = 0 and no anchors it equals GRPO exactly, so plain GRPO runs keep their configured estimator). A
DaGRPO run logs the pair metrics on every step (on a step without pairwise advantages, what the
τ = 0 mask removes: pairs of equal scores), so its metrics have the same keys throughout.

Unscorable responses (every reward function returned None: ``Experience.rewarded`` is False) are
left out: the statistics (group mean, std, size; batch std) are computed over the rewarded
responses only, and an unrewarded response gets advantage exactly 0 (TRL treats None the same
way: "not applicable", not "wrong").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from rlvr.core.advantages import ADVANTAGE_ESTIMATORS, AdvantageInputs, normalize_then_sum, pair_mask
from rlvr.train.plan import AdvantagePlan
from rlvr.train.rollout_phase import Group
from rlvr.train.tagrpo import SAMPLED, LogprobPrompts, logprob_prompt


@dataclass
class Experience:
    """Flat per-response view of the groups, in group order. N responses."""

    groups: list[Group]
    group_ids: torch.Tensor  # [N] long
    prompt_ids: list[list[int]]  # the prompts the policy scores the responses on
    response_ids: list[list[int]]
    tool_masks: list[tuple[int, ...] | None]  # per token: 1 the model's, 0 a tool result's (None: all the model's)
    sampling_logprobs: list[list[float]]
    truncated: torch.Tensor  # [N] bool
    rewards: torch.Tensor  # [N] float32
    scores: torch.Tensor  # [N] float32, DaGRPO's s (= rewards without a scorer)
    is_anchor: torch.Tensor  # [N] bool
    pool_ids: torch.Tensor  # [N] long: TA-GRPO pools (= group_ids otherwise); never split across steps
    variants: torch.Tensor  # [N] long: 0 = sampled from q_0
    behaviour_prompt_ids: list[list[int]]  # prompts for the old (behaviour) log-probs
    reference_prompt_ids: list[list[int]]  # prompts for the reference log-probs
    sampled_prompt_ids: list[list[int]]  # the prompts the responses were sampled from (q_j; the IS correction's)
    on_own_prompt: torch.Tensor  # [N] bool: the policy scores it on the prompt it was sampled from
    rewarded: torch.Tensor  # [N] bool: some reward function gave a value (else advantage 0, out of the statistics)
    reward_parts: torch.Tensor | None = None  # [N, K] each reward function's value, NaN where none (K: the run's)
    reward_weights: torch.Tensor | None = None  # [K] their weights (per function, not per response)

    @classmethod
    def from_groups(cls, groups: list[Group], prompts: LogprobPrompts | None = None) -> Experience:
        """Flatten groups; ``prompts``: TA-GRPO's choice of prompt (q_0 or the sampled q_j) for each log-prob
        pass (``train/tagrpo.py``; None: no rephrasings, every response is scored on the q_0 it came from)."""
        group_ids, policy, responses, sampled, truncated, rewards, scores, anchor, tools = ([] for _ in range(9))
        pools, variants, behaviour, reference, rewarded, generation = [], [], [], [], [], []
        for group in groups:
            group_scores = group.scores if group.scores is not None else group.rewards
            for i, (completion, reward, score) in enumerate(zip(group.completions, group.rewards, group_scores)):
                question, sampled_from = group.prompt_ids, group.generation_prompt(i)
                if prompts is None:  # no rephrasings: every pass scores on the prompt it was sampled from (q_0;
                    on_policy = on_old = on_reference = sampled_from  # an environment rollout's own)
                else:
                    on_policy, on_old, on_reference = (logprob_prompt(choice, question, sampled_from)
                                                       for choice in (prompts.policy, prompts.old, prompts.reference))
                group_ids.append(group.group_id)
                pools.append(group.pool)
                variants.append(group.variant_of(i))
                policy.append(on_policy)
                behaviour.append(on_old)
                reference.append(on_reference)
                generation.append(sampled_from)
                responses.append(completion.token_ids)
                tools.append(completion.tool_mask)
                sampled.append(completion.logprobs)
                truncated.append(completion.truncated)
                rewards.append(reward)
                scores.append(score)
                anchor.append(completion.is_anchor)
                rewarded.append(group.is_rewarded(i))
        return cls(
            groups=groups,
            group_ids=torch.tensor(group_ids, dtype=torch.long),
            prompt_ids=policy,
            response_ids=responses,
            tool_masks=tools,
            sampling_logprobs=sampled,
            truncated=torch.tensor(truncated, dtype=torch.bool),
            rewards=torch.tensor(rewards, dtype=torch.float32),
            scores=torch.tensor(scores, dtype=torch.float32),
            is_anchor=torch.tensor(anchor, dtype=torch.bool),
            pool_ids=torch.tensor(pools, dtype=torch.long),
            variants=torch.tensor(variants, dtype=torch.long),
            behaviour_prompt_ids=behaviour,
            reference_prompt_ids=reference,
            sampled_prompt_ids=generation,
            on_own_prompt=torch.tensor([(prompts is not None and prompts.policy == SAMPLED) or v == 0
                                        for v in variants], dtype=torch.bool),
            rewarded=torch.tensor(rewarded, dtype=torch.bool),
            reward_parts=_reward_parts(groups),
            reward_weights=torch.tensor([groups[0].reward_weights.get(name, 1.0) for name in groups[0].reward_parts],
                                        dtype=torch.float64) if groups and groups[0].reward_parts else None,
        )

    def __len__(self) -> int:
        return len(self.response_ids)

    def model_tokens(self, i: int) -> int:
        """Response ``i``'s tokens the model wrote (a tool result's are not trained on)."""
        mask = self.tool_masks[i]
        return len(self.response_ids[i]) if mask is None else sum(mask)

    def model_token_mask(self, rows: list[int], width: int) -> torch.Tensor:
        """[len(rows), width] bool: True at the tokens the model wrote (tool results and padding: False)."""
        out = torch.zeros((len(rows), width), dtype=torch.bool)
        for k, i in enumerate(rows):
            mask = self.tool_masks[i]
            if mask is None:
                out[k, : len(self.response_ids[i])] = True
            else:
                out[k, : len(mask)] = torch.tensor(mask, dtype=torch.bool)
        return out

    def subset(self, keep: torch.Tensor) -> Experience:
        """The responses where ``keep`` [N] bool is True, every per-response field filtered alike."""
        rows = keep.nonzero().flatten().tolist()
        pick = lambda value: (value[keep] if isinstance(value, torch.Tensor)
                              else [value[i] for i in rows] if isinstance(value, list) else value)
        fields = {f.name: pick(getattr(self, f.name)) for f in dataclasses.fields(self)
                  if f.name not in ("groups", "reward_weights")}
        return Experience(groups=self.groups, reward_weights=self.reward_weights, **fields)


def _reward_parts(groups: list[Group]) -> torch.Tensor | None:
    """[N, K] the groups' per-function rewards (NaN: none), the first group's function order (None: no parts)."""
    names = list(groups[0].reward_parts) if groups else []
    if not names:
        return None
    rows = [[nan_if_none(g.reward_parts[name][i]) for name in names] for g in groups for i in range(len(g.completions))]
    return torch.tensor(rows, dtype=torch.float64)


def nan_if_none(value: float | None) -> float:
    return math.nan if value is None else float(value)


def compute_advantages(plan: AdvantagePlan, exp: Experience) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages [N] and the dagrpo/ pair metrics (the same keys on every step of a DaGRPO run; none otherwise)."""
    keep = exp.rewarded  # [N] bool
    advantages = torch.zeros_like(exp.rewards)  # [N]; unrewarded responses keep 0
    if not bool(keep.any()):
        return advantages, ({"dagrpo/masked_pair_frac": 0.0, "dagrpo/masked_contrast_frac": 0.0,
                             "dagrpo/zero_adv_frac": 1.0} if plan.report_pairs else {})
    if bool(keep.all()):
        return _advantages(plan, exp)
    advantages[keep], metrics = _advantages(plan, exp.subset(keep))
    if metrics:
        metrics["dagrpo/zero_adv_frac"] = _zero_frac(advantages)
    return advantages, metrics


def _advantages(plan: AdvantagePlan, exp: Experience) -> tuple[torch.Tensor, dict[str, float]]:
    s = plan.settings
    has_anchors = bool(exp.is_anchor.any())
    stats_mask = ~exp.is_anchor if has_anchors and not plan.anchor_in_stats else None
    if plan.normalize_then_sum:  # TRL's multi_objective_aggregation (GDPO): each function normalised, then summed
        return normalize_then_sum(exp.reward_parts, exp.reward_weights, exp.group_ids, eps=s.eps), {}
    inputs = AdvantageInputs(exp.rewards, exp.group_ids, scores=exp.scores, stats_mask=stats_mask)
    advantages = ADVANTAGE_ESTIMATORS["dagrpo" if has_anchors else s.estimator](inputs, s)
    if not plan.report_pairs:
        return advantages, {}
    mask = pair_mask(exp.scores, exp.group_ids, tau=s.tau, tau_kappa=s.tau_kappa)  # [N, N], for the metrics
    return advantages, pair_metrics(mask, exp, advantages, contrast=s.contrast)


def pair_metrics(mask: torch.Tensor, exp: Experience, advantages: torch.Tensor, *, contrast: str) -> dict[str, float]:
    """Fractions of within-group pairs that the distinctiveness mask removed."""
    same = exp.group_ids.unsqueeze(0) == exp.group_ids.unsqueeze(1)  # [N, N]
    same &= ~torch.eye(len(exp), dtype=torch.bool)
    c = exp.rewards if contrast == "reward" else exp.scores
    contrasting = same & (c.unsqueeze(0) != c.unsqueeze(1))  # pairs that carry a gradient in GRPO
    masked = same & ~mask
    return {
        "dagrpo/masked_pair_frac": float(masked.sum()) / max(1.0, float(same.sum())),
        "dagrpo/masked_contrast_frac": float((masked & contrasting).sum()) / max(1.0, float(contrasting.sum())),
        "dagrpo/zero_adv_frac": _zero_frac(advantages),
    }


def _zero_frac(advantages: torch.Tensor) -> float:
    return float((advantages == 0).float().mean())
