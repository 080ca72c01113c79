"""The rollout side of a training step: sampling groups, the rounds of DAPO's dynamic sampling, and
where a step's responses come from (sampled now, or ahead while the previous step updated). What it produces
is a list of :class:`Group` (one prompt and its responses: the unit of group-relative advantages), defined here.

A step runs rounds (``Trainer.training_step`` shows them):

    repeat (once; under dynamic sampling up to max_num_gen_batches times):
        draw B prompts → sample G responses each (TA-GRPO: to each variant) → reward them
        (DaGRPO) fine-grained scores, anchors into failed groups
        gather every rank's groups; keep all (GRPO) or the pools with mixed rewards (dynamic sampling)
    until B pools are kept

Rollout statistics are computed over *every* group generated in the step, so the uniform fraction
shows what the sampler really produced, not what survived the filter. Every group gets a run-wide id
when its prompt is drawn (``GroupIds``); advantages are computed per group id, never from positions in
the batch (docs/design/pitfalls.md #9), and the counter is saved in each checkpoint, so a resumed run
numbers its groups as an uninterrupted one.

``async_generation=false`` (the default): each step draws its B prompts and samples them from the
current weights, then updates. ``async_generation=true`` (one-step-off-policy, like verl's one-step-off
async trainer; ``Rollouts``), with θ_k the weights after k updates::

    step t:  take its responses (sampled ahead from θ_{t-2}; step 1 samples its own from θ_0)
             → reward, DaGRPO's scores → start sampling step t+1's round on the engine's copy, θ_{t-1}
             → update θ_{t-1} → θ_t (in parallel) → wait for step t+1's responses → push θ_t to the engine

So step t trains on responses sampled by the weights step t−1 started from — one update behind the
weights it updates (step 2's come from θ_0 too). The update's old log-probs are the trainer's own
under θ_{t-1} (on the first pass, logp.detach()), so the clipped ratio π_θ/π_{θ_{t-1}} stays the
PPO ratio, and the importance-sampling correction (rlvr.core.importance, on by default with vLLM)
weighs each token by π_{θ_{t-1}}/π_sampler, the sampler being θ_{t-2}: the lag and the engine's own
numerics in one ratio (docs/training.md, "Async generation").

The prompts, seeds and group ids of step t+1 are the ones a synchronous run uses (the sampler and
the group-id counter advance in the same order); only the weights that sample them differ.
Exact resume: a checkpoint written at the end of step t holds the sampler and group-id counter as
they were *before* step t+1's prompts were taken, and step t+1's responses (every rank's); a resumed
run takes the same prompts again and uses those responses instead of sampling them from θ_t.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from rlvr.data import PromptSampler
from rlvr.data.prompts import PromptBuilder
from rlvr.parallel.runtime import autocast, full_weights
from rlvr.rollout.completion import Completion, ToolUse
from rlvr.train.plan import RolloutSettings
from rlvr.train.rewarding import reset_columns


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

class GroupIds:
    def __init__(self, last: int = 0):
        self.last = last  # the id given most recently (0: none yet)

    def reserve(self, count: int) -> int:
        """Take ``count`` consecutive ids; return the first."""
        first = self.last + 1
        self.last += count
        return first


@dataclass
class RolloutResult:
    """One step's rounds: the groups kept for the update, every group generated, and the summed counters."""

    settings: RolloutSettings
    step: int
    kept: list[Group] = field(default_factory=list)
    generated: list[Group] = field(default_factory=list)
    rounds: int = 0
    reward_counts: dict[str, float] = field(default_factory=dict)  # rewards/ counters, summed
    dagrpo_counts: Counter | None = None  # the DaGRPO phase's counters, summed (None: DaGRPO off)

    def wants_another_round(self) -> bool:
        if self.rounds == 0:
            return True
        s = self.settings
        return s.dynamic_sampling and self.rounds < s.max_rounds and len(pools(self.kept)) < s.prompts_per_step

    @property
    def seed(self) -> int:
        """The generation seed of the next round (per-request seeds are derived from it)."""
        return generation_seed(self.settings.seed, self.step, self.rounds + 1)

    def add(self, ctx, groups: list[Group], reward_counts: dict[str, float], dagrpo_counts: Counter | None) -> None:
        """End a round: gather every rank's groups (1-process order), sum counters, keep what trains."""
        for group in groups:  # (the environments' instances stay here: rewarded, they are not needed further)
            if group.observed is not None:
                group.observed.instances = None
        groups, reward_counts, dagrpo_counts = gather_round(ctx, groups, reward_counts, dagrpo_counts)
        self.rounds += 1
        for key, value in reward_counts.items():
            self.reward_counts[key] = self.reward_counts.get(key, 0.0) + value
        if dagrpo_counts is not None:  # Counter.update adds (``+`` would drop sums that are <= 0)
            self.dagrpo_counts = self.dagrpo_counts or Counter()
            self.dagrpo_counts.update(dagrpo_counts)
        self.generated.extend(groups)
        if not self.settings.dynamic_sampling:
            self.kept = groups
            return
        kept_pools = [pool for pool in pools(groups) if not all(g.uniform for g in pool)]
        self.kept.extend(g for pool in kept_pools[: self.settings.prompts_per_step - len(pools(self.kept))]
                         for g in pool)

    @property
    def generated_tokens(self) -> int:
        """Tokens the policy sampled in this step (anchors are not sampled)."""
        return sum(len(g.policy_samples.completions[i].token_ids) for g in self.generated
                   for i in g.policy_samples.on_policy)


def gather_round(ctx, groups: list[Group], reward_counts: dict[str, float], dagrpo_counts: Counter | None):
    """Every rank's groups in rank order (= prompt order), and their counters summed."""
    if not ctx.enabled:
        return groups, reward_counts, dagrpo_counts
    gathered = ctx.gather_objects((groups, reward_counts, dagrpo_counts))
    merged: dict[str, float] = {}
    for _, counts, _ in gathered:
        for key, value in counts.items():
            merged[key] = merged.get(key, 0.0) + value
    dagrpo = None
    if dagrpo_counts is not None:
        dagrpo = Counter()
        for _, _, counts in gathered:
            dagrpo.update(counts)
    return [g for rank_groups, *_ in gathered for g in rank_groups], merged, dagrpo


def pools(groups: list[Group]) -> list[list[Group]]:
    """Consecutive groups sharing a pool id (TA-GRPO unpooled variants); one group per pool otherwise."""
    out: list[list[Group]] = []
    for group in groups:
        if out and out[-1][0].pool == group.pool:
            out[-1].append(group)
        else:
            out.append([group])
    return out


class GroupGenerator:
    """Samples this rank's share of a round's prompts and groups the responses with run-wide ids.

    GRPO: G responses to the question. TA-GRPO: G responses to q_0 and to each rephrasing q_j,
    one pooled group per question (or, unpooled, one group per variant sharing a pool id).
    ``equal_sampling``: (N+1)·G responses to q_0 only.

    Request k of the round (row-major over rows, variants, samples) is drawn with seed
    ``request_seed(seed, k)``, and group ids are numbered over all rows, so a rank's groups are
    the ones a single process would make for the same rows.
    """

    def __init__(self, settings: RolloutSettings, engine, tokenizer, prompt_builder: PromptBuilder, group_ids: GroupIds,
                 ctx, *, policy):
        self.s, self.engine, self.tokenizer = settings, engine, tokenizer
        self.prompt_builder, self.group_ids, self.ctx = prompt_builder, group_ids, ctx
        self.policy = policy  # FSDP2: gathered whole while the engine generates

    def __call__(self, rows: list[dict], *, seed: int, completions: list[Completion] | None = None) -> list[Group]:
        """This rank's groups for ``rows``; ``completions``: this rank's responses already sampled (async
        generation, or read back from a checkpoint) in request order, instead of sampling them now."""
        requests = self.requests(rows, seed=seed)
        return self.groups(requests, self.sample(requests) if completions is None else completions)

    def requests(self, rows: list[dict], *, seed: int) -> RoundRequests:
        """What this rank samples for ``rows``: its prompts (G per variant) and their seeds, group ids reserved."""
        G, s = self.s.responses_per_prompt, self.s
        variant_prompts = [self.prompt_builder.variants(row) for row in rows]  # per row: [q_0, q_1, ...] token ids
        per_row = [1 if s.pooled or len(v) == 1 else len(v) for v in variant_prompts]  # groups per row
        first_group = [self.group_ids.reserve(sum(per_row))]
        first_request = [0]
        for variants, count in zip(variant_prompts, per_row):
            first_request.append(first_request[-1] + len(variants) * G)
            first_group.append(first_group[-1] + count)
        mine = self.ctx.share(len(rows))
        prompts = [ids for i in mine for ids in variant_prompts[i] for _ in range(G)]
        seeds = [request_seed(seed, k) for i in mine for k in range(first_request[i], first_request[i + 1])]
        seeding = {"row_seeds": seeds} if self.engine.supports_row_seeds else {"generator_seed": seed + self.ctx.rank}
        requests = RoundRequests(rows, variant_prompts, per_row, first_group, mine, prompts, seeding)
        if s.tools is not None and s.tools.environments is not None:
            self._start_environments(requests)
        return requests

    def _start_environments(self, requests: RoundRequests) -> None:
        """environment_factory: each request's instance (the pool's next), ``reset`` with its row's columns, and its
        prompt (the observation appended, that environment's tools listed) and tools (rlvr.rollout.environments)."""
        envs, G = self.s.tools.environments, self.s.responses_per_prompt
        rows = [requests.rows[i] for i in requests.mine for _ in range(G)]
        names = [envs.name_of(row) for row in rows]
        requests.instances = envs.take(names)
        requests.observations = [envs.reset(instance, reset_columns(row))
                                 for row, instance in zip(rows, requests.instances)]
        requests.prompts = [self.prompt_builder.observed(row, observation, envs.tools[name])
                            for row, observation, name in zip(rows, requests.observations, names)]
        requests.tools = [envs.runners(instance) for instance in requests.instances]

    def sample(self, requests: RoundRequests) -> list[Completion]:
        """The engine's completions for ``requests`` (may run on another thread: async generation)."""
        with full_weights(self.policy), autocast(next(self.policy.parameters()).device, self.s.autocast):
            # FSDP2: gathered whole (ranks finish at different steps); bf16=true: computed as the update computes
            tools = {} if requests.tools is None else {"tools": requests.tools}  # (environments: per request)
            return self.engine.generate(requests.prompts, max_new_tokens=self.s.max_completion_length,
                                        sampling=self.s.sampling, **requests.seeding, **tools)

    def groups(self, requests: RoundRequests, completions: list[Completion]) -> list[Group]:
        """The completions of ``requests`` grouped with their run-wide ids."""
        G, rows, variant_prompts = self.s.responses_per_prompt, requests.rows, requests.variant_prompts
        if len(completions) != len(requests.prompts):
            raise ValueError(f"{len(completions)} completions for {len(requests.prompts)} requests")
        texts = [self.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
        groups, start = [], 0
        for i in requests.mine:
            row, variants, group_id = rows[i], variant_prompts[i], requests.first_group[i]
            members = []  # (variant j, completion, text)
            for j in range(len(variants)):
                members += [(j, completions[k], texts[k]) for k in range(start, start + G)]
                start += G
            if requests.instances is not None:  # environments: each response on its own prompt
                first = start - G
                groups.append(_group(row, [requests.prompts[first]], members, group_id=group_id, pool_id=None))
                groups[-1].observed = Observed(requests.prompts[first:start], requests.observations[first:start],
                                               requests.instances[first:start])
            elif requests.per_row[i] == 1:
                groups.append(_group(row, variants, members, group_id=group_id, pool_id=None))
            else:
                groups += [_group(row, variants, [m for m in members if m[0] == j], group_id=group_id + j,
                                  pool_id=group_id) for j in range(len(variants))]
        return groups


@dataclass
class RoundRequests:
    """One round's sampling requests on this rank, and what it takes to group their responses."""

    rows: list[dict]
    variant_prompts: list[list[list[int]]]  # per row: [q_0, q_1, ...] token ids
    per_row: list[int]  # groups per row
    first_group: list[int]  # per row: its first group id
    mine: list[int]  # the rows this rank samples
    prompts: list[list[int]]  # this rank's requests, row-major over rows, variants, samples
    seeding: dict  # row_seeds=[...] or generator_seed=...
    # environment_factory: per request its instance, reset's observation and tools (None: no environments)
    instances: list | None = None
    observations: list[str | None] | None = None
    tools: list[dict] | None = None


def _tool_use(saved: dict) -> ToolUse:
    """A response's ToolUse from its JSON (turns as lists again tuples)."""
    return ToolUse(**{**saved, "turns": tuple(tuple(turn) for turn in saved.get("turns", ())),
                      "messages": tuple(saved.get("messages", ()))})


def generation_seed(seed: int, step: int, round_: int) -> int:
    """The seed of one generation round of a step."""
    return (seed * 1_000_003 + step * 1_009 + round_) % (2**63)


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


@dataclass
class Pending:
    """Step ``step``'s round, sampled ahead (``future``) or read back from a checkpoint (``completions``)."""

    step: int
    sampler_state: dict | None  # the sampler before this step's prompts were taken (None: restored)
    group_counter: int | None
    requests: RoundRequests | None  # None: restored; the prompts are taken again
    future: Future | None = None
    completions: list[Completion] | None = None

    def result(self) -> list[Completion]:
        if self.completions is None:
            self.completions = self.future.result()  # an engine error (a server down) is raised here
        return self.completions


class Rollouts:
    """Each step's round of responses for this rank: sampled now, or sampled ahead (``ahead=True``)."""

    def __init__(self, generate: GroupGenerator, sampler: PromptSampler, group_ids: GroupIds, *,
                 prompts_per_step: int, ahead: bool):
        self.generate, self.sampler, self.group_ids = generate, sampler, group_ids
        self.prompts_per_step, self.ahead = prompts_per_step, ahead
        self.pending: Pending | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlvr-rollout") if ahead else None

    def round(self, step: int, *, seed: int) -> list[Group]:
        """This rank's groups of ``step``'s round (generation seed ``seed``)."""
        pending, self.pending = self.pending, None
        if pending is not None and pending.step != step:
            raise RuntimeError(f"responses sampled ahead for step {pending.step} reached step {step}")
        if pending is None or pending.requests is None:
            requests = self.generate.requests(self.sampler.take(self.prompts_per_step), seed=seed)
        else:
            requests = pending.requests
        completions = pending.result() if pending is not None else self.generate.sample(requests)
        return self.generate.groups(requests, completions)

    def start(self, step: int, *, seed: int) -> None:
        """Begin sampling ``step``'s round on another thread, from the engine's weights as they are now."""
        if not self.ahead:
            return
        before = self.sampler.state_dict(), self.group_ids.last
        requests = self.generate.requests(self.sampler.take(self.prompts_per_step), seed=seed)
        self.pending = Pending(step, *before, requests, future=self._pool.submit(self.generate.sample, requests))

    def wait(self) -> None:
        """Block until the round sampled ahead is done (before the engine takes new weights)."""
        if self.pending is not None:
            self.pending.result()

    # ------------------------------------------------------------------ checkpoints
    def resume_state(self) -> tuple[dict, int]:
        """(sampler state, group-id counter) to save: as they were before a round sampled ahead."""
        p = self.pending
        if p is not None and p.sampler_state is not None:
            return p.sampler_state, p.group_counter
        return self.sampler.state_dict(), self.group_ids.last

    def saved_completions(self) -> dict | None:
        """This rank's responses sampled ahead, as JSON ({"step", "completions"}); None when there are none."""
        p = self.pending
        if p is None:
            return None
        return {"step": p.step, "completions": [
            [c.token_ids, c.logprobs, c.truncated, *([] if c.tool_use is None else [c.tool_mask, asdict(c.tool_use)])]
            for c in p.result()]}  # (with tools: the tool mask and what the calls did too)

    def restore(self, saved: dict | None) -> None:
        """Take back what :meth:`saved_completions` wrote (at resume; the sampler is restored by the caller)."""
        if saved is None:
            self.pending = None
            return
        completions = [Completion(list(ids), [float(x) for x in lps], bool(truncated),
                                  tool_mask=tuple(tools[0]) if tools and tools[0] is not None else None,
                                  tool_use=_tool_use(tools[1]) if tools and tools[1] is not None else None)
                       for ids, lps, truncated, *tools in saved["completions"]]
        self.pending = Pending(int(saved["step"]), None, None, None, completions=completions)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
