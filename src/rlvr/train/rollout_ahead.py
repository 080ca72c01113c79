"""Where a step's responses come from: sampled now, or sampled ahead while the previous step updated.

``async_generation=false`` (the default): each step draws its B prompts and samples them from the
current weights, then updates — exactly what the trainer always did.

``async_generation=true`` (one-step-off-policy, like verl's one-step-off async trainer), with θ_k the
weights after k updates::

    step t:  take its responses (sampled ahead from θ_{t-2}; step 1 samples its own from θ_0)
             → reward, score → start sampling step t+1's round on the engine's copy, θ_{t-1}
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

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from rlvr.data import PromptSampler
from rlvr.rollout.completion import Completion
from rlvr.train.experience import Group
from rlvr.train.group_ids import GroupIds
from rlvr.train.rollout_phase import GroupGenerator, RoundRequests


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
        return {"step": p.step, "completions": [[c.token_ids, c.logprobs, c.truncated] for c in p.result()]}

    def restore(self, saved: dict | None) -> None:
        """Take back what :meth:`saved_completions` wrote (at resume; the sampler is restored by the caller)."""
        if saved is None:
            self.pending = None
            return
        completions = [Completion(list(ids), [float(x) for x in lps], bool(truncated))
                       for ids, lps, truncated in saved["completions"]]
        self.pending = Pending(int(saved["step"]), None, None, None, completions=completions)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
