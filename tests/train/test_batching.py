"""Scoring: padded micro-batches give the same log-probs as each sequence alone."""

import pytest
import torch

from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.train.batching import collate, response_logprobs, response_logprobs_no_grad


def _reference_logprobs(model, prompt, response, temperature):
    # Independent computation: one unpadded sequence, full logits, log_softmax.
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0] / temperature  # [L, V]
    logp = torch.log_softmax(logits.float(), -1)
    positions = range(len(prompt) - 1, len(prompt) + len(response) - 1)
    return torch.stack([logp[p, ids[0, p + 1]] for p in positions])


def test_collate_layout():
    batch = collate([[5, 6, 7], [8]], [[1, 2], [3, 4, 9]], pad_token_id=0)
    input_ids, attention_mask, position_ids = batch.concatenated()
    assert input_ids.tolist() == [[5, 6, 7, 1, 2, 0], [0, 0, 8, 3, 4, 9]]
    assert attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert position_ids.tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]]
    assert batch.response_mask.tolist() == [[True, True, False], [True, True, True]]
    assert not batch.shares_prompts


def test_collate_keeps_each_distinct_prompt_once():
    batch = collate([[5, 6, 7], [8], [5, 6, 7], [8], [5, 6, 7]], [[1], [2], [3], [4, 4], [5]], pad_token_id=0)
    assert batch.prompt_ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert batch.prompt_mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch.prompt_index.tolist() == [0, 1, 0, 1, 0]
    assert batch.shares_prompts
    assert batch.concatenated()[0].tolist()[3] == [0, 0, 8, 4, 4]


def _grouped_batch():
    # Three groups of unequal prompt lengths, responses of unequal lengths (one empty-ish: 1 token).
    prompts = [[10, 11, 12, 13, 14]] * 3 + [[20, 21]] * 3 + [[30, 31, 32]] * 2
    responses = [[40, 41], [42, 43, 44, 45], [46], [50, 51, 52, 53, 54], [55], [56, 57],
                 [60, 61, 62], [63, 64, 65, 66, 67, 68]]
    return prompts, responses


def test_shared_prefix_matches_single_sequences():
    model, _ = tiny_random_model_and_tokenizer(seed=3)
    prompts, responses = _grouped_batch()
    for temperature in (1.0, 0.7):
        got = response_logprobs_no_grad(model, prompts, responses, pad_token_id=0, temperature=temperature, micro_batch_size=8)
        for p, r, lp in zip(prompts, responses, got):
            torch.testing.assert_close(lp, _reference_logprobs(model, p, r, temperature), rtol=1e-5, atol=1e-5)


def _loss_and_grads(model, batch, share_prefix):
    model.zero_grad(set_to_none=True)
    logprobs, entropy = response_logprobs(model, batch, temperature=0.8, with_entropy=True, share_prefix=share_prefix)
    weights = torch.linspace(-1.0, 1.0, logprobs.numel()).view_as(logprobs)  # distinct weight per token
    loss = (logprobs * weights * batch.response_mask).sum()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), entropy, grads


def test_shared_prefix_gives_the_same_logprobs_entropy_and_gradients():
    model, _ = tiny_random_model_and_tokenizer(seed=5)
    prompts, responses = _grouped_batch()
    batch = collate(prompts, responses, pad_token_id=0)
    assert batch.shares_prompts
    lp_a, ent_a, grads_a = _loss_and_grads(model, batch, share_prefix=True)
    lp_b, ent_b, grads_b = _loss_and_grads(model, batch, share_prefix=False)
    mask = batch.response_mask
    torch.testing.assert_close(lp_a[mask], lp_b[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_a[mask], ent_b[mask], rtol=1e-5, atol=1e-5)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) == len(list(model.parameters()))
    for name in grads_a:  # the prompt's parameters get their gradient from every response of the group
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-4, atol=1e-6, msg=name)


def test_shared_prefix_with_lora_adapters():
    from rlvr.models import apply_lora

    model, _ = tiny_random_model_and_tokenizer(seed=6)
    model = apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    for module in model.modules():  # non-zero B so the adapters matter
        if hasattr(module, "lora_B"):
            for layer in module.lora_B.values():
                torch.nn.init.normal_(layer.weight, std=0.1)
    batch = collate(*_grouped_batch(), pad_token_id=0)
    lp_a, _, grads_a = _loss_and_grads(model, batch, share_prefix=True)
    lp_b, _, grads_b = _loss_and_grads(model, batch, share_prefix=False)
    torch.testing.assert_close(lp_a[batch.response_mask], lp_b[batch.response_mask], rtol=1e-5, atol=1e-5)
    assert grads_a and grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-4, atol=1e-6, msg=name)


def test_padded_batch_matches_single_sequences():
    model, _ = tiny_random_model_and_tokenizer(seed=3)
    prompts = [[10, 11, 12, 13, 14], [20, 21], [30, 31, 32]]
    responses = [[40, 41], [50, 51, 52, 53], [60]]
    for temperature in (1.0, 0.7):
        got = response_logprobs_no_grad(model, prompts, responses, pad_token_id=0, temperature=temperature, micro_batch_size=2)
        for p, r, lp in zip(prompts, responses, got):
            torch.testing.assert_close(lp, _reference_logprobs(model, p, r, temperature), rtol=1e-5, atol=1e-5)


def test_score_entropy_shape_and_grad():
    model, _ = tiny_random_model_and_tokenizer(seed=0)
    batch = collate([[1, 2, 3]], [[4, 5]], pad_token_id=0)
    logprobs, entropy = response_logprobs(model, batch, temperature=1.0, with_entropy=True)
    assert logprobs.shape == entropy.shape == (1, 2)
    assert logprobs.requires_grad and not entropy.requires_grad
    assert (entropy > 0).all()


def test_shared_prefix_with_one_token_responses():
    model, _ = tiny_random_model_and_tokenizer(seed=7)
    batch = collate([[10, 11, 12]] * 2 + [[20]] * 2, [[40], [41], [42], [43]], pad_token_id=0)
    assert batch.response_width == 1 and batch.shares_prompts
    lp_a, ent_a, grads_a = _loss_and_grads(model, batch, share_prefix=True)
    lp_b, ent_b, grads_b = _loss_and_grads(model, batch, share_prefix=False)
    torch.testing.assert_close(lp_a, lp_b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_a, ent_b, rtol=1e-5, atol=1e-5)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-4, atol=1e-6, msg=name)


def _chunked_vs_plain(model, batch, *, share_prefix=True, chunk=3):
    model.zero_grad(set_to_none=True)
    got = {}
    for name, head_chunk in (("plain", 0), ("chunked", chunk)):
        model.zero_grad(set_to_none=True)
        logprobs, entropy = response_logprobs(model, batch, temperature=0.8, with_entropy=True, share_prefix=share_prefix,
                                  head_chunk=head_chunk)
        weights = torch.linspace(-1.0, 1.0, logprobs.numel()).view_as(logprobs)
        (logprobs * weights * batch.response_mask).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        got[name] = (logprobs.detach(), entropy, grads)
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = got["plain"], got["chunked"]
    mask = batch.response_mask
    torch.testing.assert_close(lp_b[mask], lp_a[mask], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent_b[mask], ent_a[mask], rtol=1e-6, atol=1e-6)
    assert g_a and g_a.keys() == g_b.keys()
    for name in g_a:  # every parameter, the (tied) LM head included: equal to 1e-6 of the gradient's size
        scale = float(g_a[name].abs().max())
        assert float((g_b[name] - g_a[name]).abs().max()) <= 1e-6 * max(scale, 1.0), name


def test_chunked_lm_head_equals_plain_logits_with_and_without_shared_prefix():
    model, _ = tiny_random_model_and_tokenizer(seed=5)
    batch = collate(*_grouped_batch(), pad_token_id=0)
    assert batch.shares_prompts
    _chunked_vs_plain(model, batch, share_prefix=True)
    _chunked_vs_plain(model, batch, share_prefix=False)
    one_token = collate([[10, 11, 12]] * 2 + [[20]] * 2, [[40], [41], [42], [43]], pad_token_id=0)
    _chunked_vs_plain(model, one_token, chunk=1)


def test_chunked_lm_head_with_lora_adapters_and_the_adapter_off_reference():
    from rlvr.models import apply_lora
    from rlvr.models.reference import AdapterOffReference

    model, _ = tiny_random_model_and_tokenizer(seed=6)
    model = apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    for module in model.modules():
        if hasattr(module, "lora_B"):
            for layer in module.lora_B.values():
                torch.nn.init.normal_(layer.weight, std=0.1)
    batch = collate(*_grouped_batch(), pad_token_id=0)
    _chunked_vs_plain(model, batch)
    prompts, responses = _grouped_batch()
    reference = AdapterOffReference(model)
    plain = response_logprobs_no_grad(reference, prompts, responses, pad_token_id=0, temperature=1.0, micro_batch_size=8)
    chunked = response_logprobs_no_grad(reference, prompts, responses, pad_token_id=0, temperature=1.0, micro_batch_size=8,
                            head_chunk=4)
    for a, b in zip(plain, chunked):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def test_chunked_lm_head_refuses_a_head_it_cannot_reproduce():
    from rlvr.train.batching import lm_head

    model, _ = tiny_random_model_and_tokenizer(seed=0)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="soft-capping"):
        lm_head(model)


def _weighted_grads(model, batch, *, share_prefix=True):
    model.zero_grad(set_to_none=True)
    logprobs, _ = response_logprobs(model, batch, temperature=0.8, share_prefix=share_prefix)
    weights = torch.linspace(-1.0, 1.0, logprobs.numel()).view_as(logprobs)
    (logprobs * weights * batch.response_mask).sum().backward()
    return logprobs.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("lora", [False, True])
def test_activation_checkpointing_gives_the_plain_gradients(lora):
    from rlvr.models import apply_lora
    from rlvr.models.activation_checkpointing import enable_activation_checkpointing

    batch = collate(*_grouped_batch(), pad_token_id=0)
    results = {}
    for name in ("plain", "checkpointed"):
        model, _ = tiny_random_model_and_tokenizer(seed=8)
        if lora:
            torch.manual_seed(0)  # the same adapters in both models
            model = apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules="all-linear")
        model.eval()  # as the trainer scores: checkpointing must act in eval mode too
        if name == "checkpointed":
            assert enable_activation_checkpointing(model) == 2  # the tiny model's two decoder layers
        results[name] = {share: _weighted_grads(model, batch, share_prefix=share) for share in (True, False)}
    for share in (True, False):
        (lp_a, g_a), (lp_b, g_b) = results["plain"][share], results["checkpointed"][share]
        torch.testing.assert_close(lp_b, lp_a, rtol=0, atol=1e-6)
        assert g_a and g_a.keys() == g_b.keys()
        for name in g_a:
            torch.testing.assert_close(g_b[name], g_a[name], rtol=1e-6, atol=1e-7, msg=name)


def test_activation_checkpointing_recomputes_in_the_backward():
    from rlvr.models.activation_checkpointing import decoder_layers, enable_activation_checkpointing

    model, _ = tiny_random_model_and_tokenizer(seed=8)
    enable_activation_checkpointing(model)
    calls = []
    for layer in decoder_layers(model):
        layer.mlp.register_forward_pre_hook(lambda *a: calls.append(1))  # (the recompute stops after the last saved tensor)
    batch = collate(*_grouped_batch(), pad_token_id=0)
    logprobs, _ = response_logprobs(model, batch, temperature=1.0)
    forward_calls = len(calls)
    logprobs.sum().backward()
    assert len(calls) == 2 * forward_calls  # every layer ran once more in the backward
    with torch.no_grad():
        calls.clear()
        response_logprobs(model, batch, temperature=1.0)
    assert len(calls) == forward_calls  # no gradients: nothing is checkpointed


def test_a_model_with_transformers_checkpointing_in_train_mode_is_scored_unshared():
    """transformers' own gradient checkpointing (TRL's default) drops the KV cache in train mode: the shared
    prompts' keys would reach no layer (the GPU check's TRL loss check crashed on it). The rows are then scored
    unshared: the same log-probs and gradients as the model without checkpointing."""
    prompts, responses = [[5, 6, 7]] * 3, [[8, 9, 10], [11, 12], [13]]
    batch = collate(prompts, responses, pad_token_id=0)
    assert batch.shares_prompts
    results = []
    for checkpointing in (False, True):
        model, _ = tiny_random_model_and_tokenizer(seed=4)
        model.config.dropout = 0.0
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        logprobs, _ = response_logprobs(model, batch, temperature=1.0)
        (logprobs * batch.response_mask).sum().backward()
        results.append((logprobs.detach(), [p.grad.clone() for p in model.parameters()]))
    (plain, plain_grads), (checkpointed, checkpointed_grads) = results
    torch.testing.assert_close(checkpointed[batch.response_mask], plain[batch.response_mask], rtol=1e-5, atol=1e-5)
    for a, b in zip(checkpointed_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # shared vs unshared sums: as in the tests above
