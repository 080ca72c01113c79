"""Tool results are context, never trained on (issue 49): the update's gradient with tool masks equals the hand
loss over the model's tokens only, in every loss type, with the KL and the entropy bonus; the token counts
(TRL's dapo normaliser, the logged lengths) count the model's tokens."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import build_config
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout import Completion
from rlvr.train.experience import Experience
from rlvr.train.rollout_phase import Group
from tests.train.test_update import NoScheduler, RecordingOptimizer, update_policy

ADVANTAGES = torch.tensor([0.9, -0.7, 0.3, -0.5, 0.6, -0.2])


def _experience(with_tools: bool) -> Experience:
    """Two groups of three; responses 0 and 4 hold a tool result (mask 0) between model tokens."""
    gen = torch.Generator().manual_seed(3)
    groups = []
    for g in range(2):
        completions = []
        for i in range(3):
            n = 10 if i == 0 else 6
            ids = torch.randint(0, 250, (n,), generator=gen).tolist()
            mask = (1, 1, 1, 0, 0, 0, 0, 1, 1, 1) if (i == 0 and with_tools) else None
            completions.append(Completion(ids, [0.0] * n, truncated=False, tool_mask=mask))
        prompt = torch.randint(0, 250, (4,), generator=gen).tolist()
        groups.append(Group(group_id=g, row={"id": str(g)}, prompt_ids=prompt, completions=completions,
                            texts=[""] * 3, rewards=[1.0, 0.0, 0.5]))
    return Experience.from_groups(groups)


def _hand_loss(model, exp: Experience, loss_type: str, *, beta: float, reference) -> torch.Tensor:
    """On-policy (ρ = 1) GRPO loss over the model's tokens only, one sequence at a time from the logits."""
    terms, counts = [], []
    for k, (prompt, response, advantage) in enumerate(zip(exp.prompt_ids, exp.response_ids, ADVANTAGES)):
        own = torch.tensor(exp.tool_masks[k] or (1,) * len(response), dtype=torch.bool)
        ids = torch.tensor([list(prompt) + list(response)])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1: -1].float(), -1)
        picked = logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
        per_token = -advantage * torch.exp(picked - picked.detach())
        if beta:
            with torch.no_grad():
                ref = torch.log_softmax(reference(input_ids=ids).logits[0, len(prompt) - 1: -1].float(), -1)
                ref = ref.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
            per_token = per_token + beta * (torch.exp(ref - picked) - (ref - picked) - 1)
        terms.append(per_token[own])
        counts.append(int(own.sum()))
    if loss_type == "token_mean":
        return sum(t.sum() for t in terms) / sum(counts)
    return sum(t.sum() / c for t, c in zip(terms, counts)) / len(terms)  # seq_mean_token_mean


@pytest.mark.parametrize("loss_type", ["token_mean", "seq_mean_token_mean"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_the_gradient_is_the_hand_loss_over_the_models_tokens_only(loss_type, beta, monkeypatch):
    from rlvr.train import update

    monkeypatch.setattr(update, "length_buckets", lambda rows, lengths, max_rows, max_tokens=None: [rows])
    exp = _experience(with_tools=True)
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    model.eval()
    reference, _ = tiny_random_model_and_tokenizer(seed=1)
    reference.eval()
    cfg = build_config({"model": "tiny-random", "loss_type": loss_type, "prompts_per_step": 2, "num_generations": 3,
                        "max_completion_length": 16, "beta": beta, "max_grad_norm": 0})
    opt = RecordingOptimizer(model.parameters())
    result = update_policy(cfg, model, opt, NoScheduler(), exp, ADVANTAGES, pad_token_id=tok.pad_token_id,
                           ref_model=reference if beta else None)
    fresh, _ = tiny_random_model_and_tokenizer(seed=0)
    fresh.eval()
    _hand_loss(fresh, exp, loss_type, beta=beta, reference=reference).backward()
    for by_hand, got in zip((p.grad for p in fresh.parameters()), opt.grads[0]):
        torch.testing.assert_close(got, by_hand, rtol=1e-5, atol=1e-6)
    assert result is not None
    # the same responses without masks give another gradient: the mask is what changed it
    opt_plain = RecordingOptimizer(model.parameters())
    update_policy(cfg, model, opt_plain, NoScheduler(), _experience(with_tools=False), ADVANTAGES,
                  pad_token_id=tok.pad_token_id, ref_model=reference if beta else None)
    assert max(float((a - b).abs().max()) for a, b in zip(opt.grads[0], opt_plain.grads[0])) > 1e-6


def test_token_counts_are_the_models_tokens():
    exp = _experience(with_tools=True)
    assert [exp.model_tokens(i) for i in range(len(exp))] == [6, 6, 6, 6, 6, 6]
    mask = exp.model_token_mask([0, 1], 10)
    assert mask[0].tolist() == [True] * 3 + [False] * 4 + [True] * 3
    assert mask[1].tolist() == [True] * 6 + [False] * 4
    assert exp.subset(torch.tensor([True, True, False, False, False, False])).tool_masks == [exp.tool_masks[0], None]
