"""The update: k micro-batches of b equal one batch of k*b; mini-batches keep groups whole."""

import pytest
import torch

from rlvr.config import build_config
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout import Completion
from rlvr.train.batching import length_buckets, minibatches
from rlvr.train.experience import Experience
from rlvr.train.plan import compile_plan
from rlvr.train.rollout_phase import Group
from rlvr.train.update import PolicyUpdate


class RecordingOptimizer:
    """Stands in for AdamW: records the gradient of every step instead of applying it."""

    def __init__(self, params):
        self.params = list(params)
        self.grads = []

    def step(self):
        self.grads.append([p.grad.detach().clone() for p in self.params])

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None


class NoScheduler:
    def step(self):
        pass

    def get_last_lr(self):
        return [0.0]


def _experience(seed=0):
    gen = torch.Generator().manual_seed(seed)
    groups = []
    for g in range(3):
        completions = []
        for i in range(4):
            n = int(torch.randint(1, 9, (1,), generator=gen))
            ids = torch.randint(0, 250, (n,), generator=gen).tolist()
            completions.append(Completion(ids, [0.0] * n, truncated=(i == 3)))
        prompt = torch.randint(0, 250, (3 + g,), generator=gen).tolist()
        group = Group(group_id=100 + g, row={"id": str(g)}, prompt_ids=prompt, completions=completions,
                      texts=[""] * 4, rewards=[1.0, 0.0, float(g % 2), 0.5])
        groups.append(group)
    return Experience.from_groups(groups)


ADVANTAGES = torch.tensor([0.9, -0.7, 0.3, -0.5] * 3)  # for _experience()'s 12 responses


def update_policy(cfg, model, opt, scheduler, exp, advantages=ADVANTAGES, *, pad_token_id, ref_model=None):
    """Run the configured update once on ``exp`` (the trainer's PolicyUpdate); return its UpdateResult."""
    update = PolicyUpdate(compile_plan(cfg).update, model, opt, scheduler, pad_token_id=pad_token_id, ref_model=ref_model)
    return update(exp, advantages)


@pytest.mark.parametrize("loss_type", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
@pytest.mark.parametrize("extra", [{}, {"beta": 0.1}, {"mask_truncated_completions": True}])
def test_micro_batches_equal_one_batch(loss_type, extra):
    grads = {}
    for micro in (None, 1, 3):  # (3 splits the groups of 4; a size must divide the step, as in TRL)
        model, tok = tiny_random_model_and_tokenizer(seed=0)
        model.eval()
        ref, _ = tiny_random_model_and_tokenizer(seed=1)
        cfg = build_config({"model": "tiny-random", "loss_type": loss_type, "per_device_train_batch_size": micro,
                            "prompts_per_step": 3, "num_generations": 4, "max_completion_length": 8, **extra})
        opt = RecordingOptimizer(model.parameters())
        update_policy(cfg, model, opt, NoScheduler(), _experience(), pad_token_id=tok.pad_token_id, ref_model=ref)
        grads[micro] = opt.grads[0]
    for micro in (1, 3):
        for a, b in zip(grads[None], grads[micro]):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_minibatches_never_split_a_group():
    ids = torch.tensor([5, 5, 9, 9, 9, 2, 2, 7])
    batches = minibatches(ids, 3)
    assert len(batches) == 3
    seen = set()
    for batch in batches:
        groups = {int(ids[i]) for i in batch}
        assert not groups & seen
        seen |= groups
    assert sorted(i for b in batches for i in b) == list(range(8))


def test_steps_per_generation_makes_that_many_optimizer_steps():
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    cfg = build_config({"model": "tiny-random", "steps_per_generation": 3, "num_iterations": 2,
                        "prompts_per_step": 3, "num_generations": 4})
    opt = RecordingOptimizer(model.parameters())
    result = update_policy(cfg, model, opt, NoScheduler(), _experience(), pad_token_id=tok.pad_token_id)
    assert len(opt.grads) == 6
    assert result.optimizer_steps == 6 and result.skipped_steps == 0


def test_length_buckets_example_and_invariants():
    lengths = [256, 20, 130, 128, 64, 250]
    assert length_buckets([10, 11, 12, 13, 14, 15], lengths, 4) == [[10, 15, 12, 13], [14], [11]]
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        n = int(torch.randint(1, 40, (1,), generator=gen))
        lengths = torch.randint(1, 300, (n,), generator=gen).tolist()
        max_rows = int(torch.randint(1, 12, (1,), generator=gen))
        chunks = length_buckets(list(range(n)), lengths, max_rows)
        assert sorted(i for c in chunks for i in c) == list(range(n))
        for chunk in chunks:
            longest = max(lengths[i] for i in chunk)
            assert len(chunk) <= max_rows and all(2 * lengths[i] >= longest for i in chunk)


def test_length_bucketed_update_equals_plain_micro_batches(monkeypatch):
    # Same gradient whether micro-batches are length buckets or consecutive rows.
    from rlvr.train import update

    def plain(rows, lengths, max_rows, max_tokens=None):
        return [rows[i : i + max_rows] for i in range(0, len(rows), max_rows)]

    grads = {}
    for name in ("bucketed", "plain"):
        if name == "plain":
            monkeypatch.setattr(update, "length_buckets", plain)
        model, tok = tiny_random_model_and_tokenizer(seed=0)
        model.eval()
        cfg = build_config({"model": "tiny-random", "prompts_per_step": 3, "num_generations": 4,
                            "max_completion_length": 8})
        opt = RecordingOptimizer(model.parameters())
        exp = _experience(seed=4)
        lengths = [len(r) for r in exp.response_ids]
        assert max(lengths) > 2 * min(lengths)  # several buckets
        update_policy(cfg, model, opt, NoScheduler(), exp, pad_token_id=tok.pad_token_id)
        grads[name] = opt.grads[0]
    for a, b in zip(grads["bucketed"], grads["plain"]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_token_budget_buckets_respect_the_budget():
    lengths = [256, 20, 130, 128, 64, 250]
    # 256+250 padded to 2 x 256 = 512 > 400: apart; 130 and 128 pad to 260
    assert length_buckets([10, 11, 12, 13, 14, 15], lengths, 8, max_tokens=400) == [[10], [15], [12, 13], [14], [11]]
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        n = int(torch.randint(1, 40, (1,), generator=gen))
        lengths = torch.randint(1, 300, (n,), generator=gen).tolist()
        budget = int(torch.randint(1, 900, (1,), generator=gen))
        chunks = length_buckets(list(range(n)), lengths, 1000, max_tokens=budget)
        assert sorted(i for c in chunks for i in c) == list(range(n))
        for chunk in chunks:
            assert len(chunk) == 1 or len(chunk) * max(lengths[i] for i in chunk) <= budget


@pytest.mark.parametrize("budget", [1, 9, 20])
def test_token_budget_micro_batches_give_the_gradient_of_one_batch(budget):
    grads = {}
    for name, extra in (("one batch", {}), ("budget", {"max_tokens_per_micro_batch": budget})):
        model, tok = tiny_random_model_and_tokenizer(seed=0)
        model.eval()
        cfg = build_config({"model": "tiny-random", "prompts_per_step": 3, "num_generations": 4,
                            "max_completion_length": 8, "beta": 0.1, **extra})
        ref, _ = tiny_random_model_and_tokenizer(seed=1)
        opt = RecordingOptimizer(model.parameters())
        update_policy(cfg, model, opt, NoScheduler(), _experience(seed=4), pad_token_id=tok.pad_token_id, ref_model=ref)
        grads[name] = opt.grads[0]
    for a, b in zip(grads["one batch"], grads["budget"]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("head_chunk", [0, 5])
def test_entropy_bonus_gradient_equals_the_hand_loss(head_chunk, monkeypatch):
    # token_mean with entropy_coef c, on-policy (ρ = 1), every response token sampled (no anchors), the step in
    # one micro-batch (TRL's bonus is a mean per micro-batch: with one, the step's token mean):
    #   L = Σ_i Σ_t [−A_i·ρ_it − c·H_it] / Σ_i |o_i|,   H = −Σ_v p_v log p_v of the policy at that position
    # computed here one sequence at a time from the model's logits; the update's gradient must equal it.
    from rlvr.train import update

    monkeypatch.setattr(update, "length_buckets", lambda rows, lengths, max_rows, max_tokens=None: [rows])
    c = 0.05
    exp = _experience()
    grads = {}
    for coef in (0.0, c):
        model, tok = tiny_random_model_and_tokenizer(seed=0)
        model.eval()
        cfg = build_config({"model": "tiny-random", "loss_type": "token_mean", "prompts_per_step": 3,
                            "num_generations": 4, "max_completion_length": 8, "entropy_coef": coef,
                            "lm_head_chunk_tokens": head_chunk, "max_grad_norm": 0})  # unclipped: the raw gradient
        opt = RecordingOptimizer(model.parameters())
        update_policy(cfg, model, opt, NoScheduler(), exp, pad_token_id=tok.pad_token_id)
        grads[coef] = opt.grads[0]
    model, _ = tiny_random_model_and_tokenizer(seed=0)
    model.eval()
    total = sum(len(r) for r in exp.response_ids)
    loss = 0.0
    for prompt, response, advantage in zip(exp.prompt_ids, exp.response_ids, ADVANTAGES):
        ids = torch.tensor([list(prompt) + list(response)])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # [|o|, V]
        logp = torch.log_softmax(logits, dim=-1)
        picked = logp.gather(-1, torch.tensor(list(response))[:, None]).squeeze(-1)  # [|o|]
        entropy = -(logp.exp() * logp).sum(-1)  # [|o|]
        loss = loss + (-advantage * torch.exp(picked - picked.detach()) - c * entropy).sum() / total
    loss.backward()
    by_hand = [p.grad for p in model.parameters()]
    for a, b in zip(by_hand, grads[c]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert max(float((x - y).abs().max()) for x, y in zip(grads[c], grads[0.0])) > 1e-6  # the bonus is in it
