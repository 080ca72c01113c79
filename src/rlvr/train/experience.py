"""Experience: the responses of one training step, grouped, with their rewards, and their advantages.

A :class:`Group` is one prompt with its G responses. Every response carries its group's stable
``group_id`` (a run-wide counter assigned when the prompt was drawn), and advantages are computed
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
from dataclasses import dataclass, field

import torch

from rlvr.core.advantages import ADVANTAGE_ESTIMATORS, AdvantageInputs, normalize_then_sum, pair_mask
from rlvr.rollout import Completion
from rlvr.train.plan import AdvantagePlan
from rlvr.train.tagrpo import SAMPLED, LogprobPrompts, logprob_prompt


@dataclass
class Observed:
    """An environment group's responses (``environment_factory``, rlvr.rollout.environments): per response, the
    prompt it was sampled from (the row's, with its reset observation appended), the observation, and its instance
    (None once the round is over: instances stay on their rank)."""

    prompt_ids: list[list[int]]
    observations: list[str | None]
    instances: list | None


@dataclass
class Group:
    """One prompt and its responses: the unit of group-relative advantages.

    TA-GRPO: a pooled group holds the responses to the original question q_0 and to its
    rephrasings q_1..q_N (``variants`` says which, ``variant_prompt_ids[j]`` is q_j's prompt);
    unpooled, each variant is its own group and ``pool_id`` ties the pool together.
    """

    group_id: int
    row: dict
    prompt_ids: list[int]  # q_0's prompt: responses are scored on it unless ratios are unanchored
    completions: list[Completion]
    texts: list[str]
    rewards: list[float] = field(default_factory=list)
    reward_parts: dict[str, list[float | None]] = field(default_factory=dict)
    reward_weights: dict[str, float] = field(default_factory=dict)  # each reward function's weight, by name
    reward_extras: dict[str, list] = field(default_factory=dict)  # log_extra columns, per response (samples.jsonl)
    scores: list[float] | None = None  # DaGRPO combined scores s (None: s = r)
    variants: list[int] | None = None  # per response: 0 = q_0, j = rephrasing j (None: all 0)
    variant_prompt_ids: list[list[int]] | None = None  # index j -> q_j's prompt (None: [prompt_ids])
    pool_id: int | None = None  # TA-GRPO pool (None: the group itself)
    rewarded: list[bool] | None = None  # per response: some reward function gave a value (None: all)
    before_anchor: Group | None = None  # DaGRPO: the policy's own samples, as they were before injection
    correctness: str | None = None  # the reward function whose 1.0 means correct (Rewarder.correctness)
    observed: Observed | None = None  # environment_factory: each response's own prompt and environment


    def snapshot(self) -> Group:
        """A copy whose per-response lists are copies (the group before it is changed in place)."""
        copy = lambda value: list(value) if isinstance(value, list) else value
        return dataclasses.replace(
            self, completions=list(self.completions), texts=list(self.texts), rewards=list(self.rewards),
            reward_parts={name: list(values) for name, values in self.reward_parts.items()},
            scores=copy(self.scores), variants=copy(self.variants), rewarded=copy(self.rewarded),
            observed=None if self.observed is None else dataclasses.replace(
                self.observed, prompt_ids=list(self.observed.prompt_ids), observations=list(self.observed.observations),
                instances=copy(self.observed.instances)))

    @property
    def policy_samples(self) -> Group:
        """The group as the policy sampled it, before DaGRPO put an anchor in (replacing a response,
        or appended): what ``rollout/`` metrics describe. The group itself when no anchor went in."""
        return self.before_anchor if self.before_anchor is not None else self

    def is_rewarded(self, i: int) -> bool:
        return self.rewarded is None or self.rewarded[i]

    @property
    def pool(self) -> int:
        return self.group_id if self.pool_id is None else self.pool_id

    def variant_of(self, i: int) -> int:
        return 0 if self.variants is None else self.variants[i]

    def generation_prompt(self, i: int) -> list[int]:
        """The prompt response i was sampled from (q_j; an environment rollout's own)."""
        if self.observed is not None:
            return self.observed.prompt_ids[i]
        j = self.variant_of(i)
        return self.prompt_ids if j == 0 or self.variant_prompt_ids is None else self.variant_prompt_ids[j]

    @property
    def uniform(self) -> bool:
        """All rewards of the rewarded responses equal (anchors included): no group-relative signal."""
        values = [r for i, r in enumerate(self.rewards) if self.is_rewarded(i)]
        return not values or max(values) == min(values)

    @property
    def correct(self) -> list[bool]:
        """Per response: the correctness reward gave 1.0 (when the run has one), else the total reward is > 0."""
        if self.correctness is not None and self.correctness in self.reward_parts:
            return [value == 1.0 for value in self.reward_parts[self.correctness]]
        return [reward > 0 for reward in self.rewards]

    @property
    def on_policy(self) -> list[int]:
        """Indices of the responses sampled from the policy (not anchors)."""
        return [i for i, c in enumerate(self.completions) if not c.is_anchor]


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


def minibatches(group_ids: torch.Tensor, num_minibatches: int) -> list[list[int]]:
    """Split response indices into ``num_minibatches`` runs of whole groups (never a split group).

    Pass pool ids to keep TA-GRPO pools whole.

    Groups are dealt in order of first appearance; the split balances the number of groups.
    """
    order: list[int] = []
    members: dict[int, list[int]] = {}
    for index, gid in enumerate(group_ids.tolist()):
        if gid not in members:
            members[gid] = []
            order.append(gid)
        members[gid].append(index)
    count = max(1, min(num_minibatches, len(order)))
    bounds = [round(i * len(order) / count) for i in range(count + 1)]
    return [
        [index for gid in order[bounds[i] : bounds[i + 1]] for index in members[gid]]
        for i in range(count)
    ]


def length_buckets(rows: list[int], lengths: list[int], max_rows: int, *, max_tokens: int | None = None) -> list[list[int]]:
    """Cut ``rows`` into micro-batches of at most ``max_rows`` rows of similar response length.

    A micro-batch is padded to its longest response, so mixing 20- and 256-token responses makes
    the forward and backward process mostly padding (measured: 42 % of the positions at
    max_completion_length 256, docs/performance.md). Rows sorted longest first are cut when a
    chunk is full or the next row is shorter than half the chunk's longest, so at most half of a
    chunk's response positions are padding. Exact: the loss of a micro-batch is divided by the
    mini-batch's global token/sequence counts, so any grouping gives the same loss and gradient.

    With ``max_tokens`` (verl's ``ppo_max_token_len_per_gpu``, counted in padded response tokens)
    a chunk is also cut before its rows × longest would exceed the budget; a single response longer
    than the budget is a micro-batch of its own.

    Args:
        rows: response indices (``lengths[i]`` is the length of response ``rows[i]``).
        max_rows: the micro-batch size.
        max_tokens: padded response tokens per micro-batch at most (None: no budget).
    """
    order = sorted(range(len(rows)), key=lambda i: -lengths[i])  # stable: ties keep their order
    chunks: list[list[int]] = []
    longest = 0
    budget = max_tokens if max_tokens is not None else float("inf")
    for i in order:
        full = chunks and (len(chunks[-1]) >= max_rows or (len(chunks[-1]) + 1) * longest > budget)
        if not chunks or full or 2 * lengths[i] < longest:
            chunks.append([])
            longest = lengths[i]
        chunks[-1].append(rows[i])
    return chunks


def pad_rows(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Stack 1-D tensors into [n, width], zero-padded on the right."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row
    return out


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
