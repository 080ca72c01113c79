"""The ``clip`` policy loss, log-ratio, the anchor term and the named aggregation: hand values, safety,
equivalences; the policy-loss registry."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import build_config
from rlvr.core.losses import (
    AGGREGATIONS,
    LOG_RATIO_CLAMP,
    POLICY_LOSSES,
    LossSettings,
    aggregate,
    anchor_surrogate,
    clip,
    kl_k3,
    log_ratio,
    policy_loss,
    register_policy_loss,
)
from rlvr.core.names import (
    AGGREGATION_ALIASES,
    AGGREGATION_MODES,
    POLICY_LOSS_NAMES,
    TRL_LOSS_TYPES,
    resolve_aggregation,
)

F64 = torch.float64


def clipped_surrogate(logprobs, old_logprobs, advantages, mask, **settings):
    """The registered ``clip`` policy loss with LossSettings(**settings): (loss [N, T], clipped [N, T])."""
    return POLICY_LOSSES["clip"](logprobs, old_logprobs, advantages, mask, LossSettings(**settings))


def _t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def _mask(lengths, width):
    return torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # [N, T] bool


# ---------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------

# Per-token losses [[1, 3], [2, 2, 2, 6]]; padding holds garbage (99) that the mask must drop.
CROSS_LOSS = [[1.0, 3.0, 99.0, 99.0], [2.0, 2.0, 2.0, 6.0]]
CROSS_MASK = [[1, 1, 0, 0], [1, 1, 1, 1]]


CROSS_EXPECTED = {
    "token_mean": 16 / 6,  # (1+3+2+2+2+6) / 6 tokens = 2.6667
    "seq_mean_token_mean": 2.5,  # ((1+3)/2 + (2+2+2+6)/4) / 2 = (2 + 3)/2
    "seq_mean_token_sum_norm": 1.0,  # 16 / (2 sequences · L_max 8)
    "seq_mean_token_sum": 8.0,  # (4 + 12) / 2 sequences (verl's seq-mean-token-sum, TRL's luspo)
    "dapo": 16 / 6,  # TRL's dapo: Σ / the normaliser passed, here this batch's 6 tokens
    "bnpo": 16 / 6,  # TRL's bnpo: this micro-batch's token mean × n/N = 16/6 × 2/2
}


@pytest.mark.parametrize(("mode", "expected"), list(CROSS_EXPECTED.items()))
def test_aggregation_cross_check(mode, expected):
    out = aggregate(_t(CROSS_LOSS), _t(CROSS_MASK), mode, max_completion_length=8)
    assert out.shape == ()
    torch.testing.assert_close(out, _t(expected))


def test_aggregation_accepts_bool_mask():
    out = aggregate(_t(CROSS_LOSS), _t(CROSS_MASK).bool(), "token_mean")
    torch.testing.assert_close(out, _t(16 / 6))


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("token-mean", "token_mean"),  # verl
        ("grpo", "seq_mean_token_mean"),  # TRL
        ("seq-mean-token-mean", "seq_mean_token_mean"),  # verl
        ("dr_grpo", "seq_mean_token_sum_norm"),  # TRL
        ("seq-mean-token-sum-norm", "seq_mean_token_sum_norm"),  # verl
        ("seq-mean-token-sum", "seq_mean_token_sum"),  # verl
        ("luspo", "seq_mean_token_sum"),  # TRL
        ("cispo", "dapo"),  # TRL's loss types that choose the policy loss too: their aggregation
        ("sapo", "seq_mean_token_mean"),
        ("vespo", "dapo"),
        ("token_mean", "token_mean"),
        ("seq_mean_token_mean", "seq_mean_token_mean"),
        ("seq_mean_token_sum_norm", "seq_mean_token_sum_norm"),
        ("dapo", "dapo"),  # TRL's own normaliser (the caller passes it)
        ("bnpo", "bnpo"),  # TRL's per-micro-batch token mean
    ],
)
def test_aliases_resolve(alias, canonical):
    # the config resolves an alias once (AlgorithmConfig.aggregation); aggregate takes the canonical name
    assert resolve_aggregation(alias) == canonical
    out = aggregate(_t(CROSS_LOSS), _t(CROSS_MASK), resolve_aggregation(alias), max_completion_length=8)
    torch.testing.assert_close(out, _t(CROSS_EXPECTED[canonical]))
    if alias != canonical and alias not in ("cispo", "sapo", "vespo"):  # (policy-loss names, not aggregations)
        with pytest.raises(KeyError):
            aggregate(_t(CROSS_LOSS), _t(CROSS_MASK), alias, max_completion_length=8)


def test_alias_table_is_exactly_the_tested_one():
    # A new alias must come with a line in test_aliases_resolve.
    assert set(AGGREGATION_ALIASES) == {
        "token-mean", "grpo", "seq-mean-token-mean", "dr_grpo", "seq-mean-token-sum-norm", "seq-mean-token-sum", "luspo",
    }  # fmt: skip
    assert set(TRL_LOSS_TYPES) == {"cispo", "sapo", "vespo"}
    assert set(AGGREGATION_MODES) == {"token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm",
                                      "dapo", "bnpo"}
    assert set(AGGREGATIONS) == set(AGGREGATION_MODES) == set(CROSS_EXPECTED)


def test_bnpo_is_each_micro_batch_s_own_token_mean_over_the_micro_batches():
    # TRL's bnpo: (token mean of micro-batch 1 + token mean of micro-batch 2) / 2, not the token mean of all:
    # rows [1, 3] (2 tokens) and [2, 2, 2, 6] (4 tokens) as two micro-batches of one row each:
    # (4/2)·(1/2) + (12/4)·(1/2) = 1 + 1.5 = 2.5, where token_mean gives 16/6
    loss, mask = _t(CROSS_LOSS), _t(CROSS_MASK)
    parts = [aggregate(loss[i : i + 1], mask[i : i + 1], "bnpo", num_sequences=2) for i in range(2)]
    torch.testing.assert_close(sum(parts), _t(2.5))


@pytest.mark.parametrize("bad", ["mean", "sum", "token_sum", "seq-mean-token-sum-mean", ""])
def test_unknown_aggregation_lists_valid_names(bad):
    # the name is checked where it is resolved (the config, through resolve_aggregation)
    with pytest.raises(ValueError) as err:
        resolve_aggregation(bad)
    message = str(err.value)
    assert repr(bad) in message
    for name in (*AGGREGATION_MODES, *AGGREGATION_ALIASES):
        assert name in message


@pytest.mark.parametrize("max_len", [None, 0, -1])
def test_sum_norm_needs_max_completion_length(max_len):
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate(_t(CROSS_LOSS), _t(CROSS_MASK), "seq_mean_token_sum_norm", max_completion_length=max_len)


def test_empty_sequence_counts_in_n_but_adds_nothing():
    # Sequence 1 has no response tokens: seq_mean_token_mean = ((1+3)/2 + 0) / 2 = 1.0.
    out = aggregate(_t([[1.0, 3.0], [7.0, 7.0]]), _t([[1, 1], [0, 0]]), "seq_mean_token_mean")
    torch.testing.assert_close(out, _t(1.0))


def test_all_masked_is_zero_not_nan():
    for mode in AGGREGATION_MODES:
        out = aggregate(_t([[5.0, 5.0]]), _t([[0, 0]]), mode, max_completion_length=4)
        assert torch.equal(out, _t(0.0))


# ---------------------------------------------------------------------------------------------
# Micro-batch equivalence: k micro-batches of b with global denominators == one batch of k·b
# ---------------------------------------------------------------------------------------------

K, B, T, V, D, L_MAX = 3, 2, 5, 7, 4, 6
LENGTHS = [5, 1, 3, 4, 2, 5]  # unequal, so a local token_mean differs from the global one


def _policy_setup():
    gen = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(V, D, generator=gen, dtype=F64))
    x = torch.randn(K * B, T, D, generator=gen, dtype=F64)  # [N, T, D]
    tokens = torch.randint(0, V, (K * B, T), generator=gen)  # [N, T]
    mask = _mask(LENGTHS, T)  # [N, T]
    with torch.no_grad():
        lp = _logprobs(weight, x, tokens)
        # Behaviour and reference policies drift from the current one so that some tokens clip.
        old_logprobs = lp + 0.3 * torch.randn(lp.shape, generator=gen, dtype=F64)
        ref_logprobs = lp + 0.2 * torch.randn(lp.shape, generator=gen, dtype=F64)
    advantages = torch.randn(K * B, generator=gen, dtype=F64)  # [N]
    return weight, x, tokens, mask, old_logprobs, ref_logprobs, advantages


def _logprobs(weight, x, tokens):
    logits = x @ weight.T  # [N, T, V]
    return torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [N, T]


def _loss(weight, x, tokens, mask, old, ref, adv, mode, importance_level, **denominators):
    logprobs = _logprobs(weight, x, tokens)
    pg, _ = clipped_surrogate(
        logprobs, old, adv, mask, epsilon=0.2, epsilon_high=0.28, importance_level=importance_level
    )
    per_token = pg + 0.05 * kl_k3(logprobs, ref, mask)
    return aggregate(per_token, mask, mode, max_completion_length=L_MAX, **denominators)


# bnpo is the one mode whose value depends on the micro-batches (by TRL's definition): tested above; the
# aliases are these modes (test_aliases_resolve)
@pytest.mark.parametrize("mode", [m for m in AGGREGATION_MODES if m != "bnpo"])
@pytest.mark.parametrize("importance_level", ["token", "sequence"])
def test_micro_batches_equal_one_batch(mode, importance_level):
    weight, x, tokens, mask, old, ref, adv = _policy_setup()

    full = _loss(weight, x, tokens, mask, old, ref, adv, mode, importance_level)
    full.backward()
    full_grad = weight.grad.clone()
    weight.grad = None

    num_tokens, num_sequences = mask.sum(), K * B
    total = torch.zeros((), dtype=F64)
    for i in range(K):
        s = slice(i * B, (i + 1) * B)
        part = _loss(
            weight, x[s], tokens[s], mask[s], old[s], ref[s], adv[s], mode, importance_level,
            num_tokens=num_tokens, num_sequences=num_sequences,
        )  # fmt: skip
        part.backward()  # gradients accumulate in weight.grad
        total = total + part.detach()

    torch.testing.assert_close(total, full.detach())
    torch.testing.assert_close(weight.grad, full_grad)
    assert full_grad.abs().sum() > 0


def test_local_token_mean_is_not_the_global_one():
    # Why the global denominator matters (docs/design/pitfalls.md #6): averaging per-micro-batch token means
    # weights tokens of short micro-batches more, so it differs when lengths are unequal.
    weight, x, tokens, mask, old, ref, adv = _policy_setup()
    with torch.no_grad():
        full = _loss(weight, x, tokens, mask, old, ref, adv, "token_mean", "token")
        local = sum(
            _loss(weight, x[s], tokens[s], mask[s], old[s], ref[s], adv[s], "token_mean", "token")
            for s in (slice(i * B, (i + 1) * B) for i in range(K))
        ) / K
    assert not torch.allclose(local, full)


# ---------------------------------------------------------------------------------------------
# Clipped surrogate
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("adv_shape", ["sequence", "token"])
@pytest.mark.parametrize("importance_level", ["token", "sequence"])
def test_ratio_one_is_plain_policy_gradient(adv_shape, importance_level):
    # On the first pass old = logprobs.detach(): ρ = 1, so L_t = −A exactly and
    # ∂L/∂logp_t = −A·ρ = −A, the gradient of the plain policy-gradient loss −A·logp.
    gen = torch.Generator().manual_seed(1)
    mask = _mask([3, 4], 4)
    seq_adv = _t([1.5, -0.7])
    advantages = seq_adv if adv_shape == "sequence" else torch.randn(2, 4, generator=gen, dtype=F64)
    adv_tok = advantages.unsqueeze(-1).expand(2, 4) if adv_shape == "sequence" else advantages

    logprobs = torch.log(torch.rand(2, 4, generator=gen, dtype=F64)).requires_grad_()
    loss, clipped = clipped_surrogate(
        logprobs, logprobs.detach(), advantages, mask, epsilon=0.2, epsilon_high=0.28,
        dual_clip=3.0, importance_level=importance_level,
    )  # fmt: skip
    torch.testing.assert_close(loss, torch.where(mask, -adv_tok, 0.0))
    assert not clipped.any()
    loss.sum().backward()
    pg_grad = logprobs.grad.clone()

    plain = logprobs.detach().clone().requires_grad_()
    torch.where(mask, -adv_tok * plain, 0.0).sum().backward()
    if importance_level == "token":
        torch.testing.assert_close(pg_grad, plain.grad)
    else:
        # Sequence level: L_t = −A_t·ρ_seq and ∂ρ_seq/∂logp_s = ρ/|o| for each token s, so
        # ∂(Σ_t L_t)/∂logp_s = −(Σ_t A_t)/|o|; for per-sequence A this is −A, as in plain PG.
        lengths = mask.sum(-1, keepdim=True)
        expected = torch.where(mask, -(adv_tok * mask).sum(-1, keepdim=True) / lengths, 0.0)
        torch.testing.assert_close(pg_grad, expected)
        if adv_shape == "sequence":
            torch.testing.assert_close(pg_grad, plain.grad)


def _clip_case(ratios, advantage, **kwargs):
    """Loss, clip flags and ∂loss/∂logp for one sequence with the given token ratios."""
    old = _t([[-1.0] * len(ratios)])
    logprobs = (old + torch.log(_t([ratios]))).requires_grad_()
    loss, clipped = clipped_surrogate(
        logprobs, old, _t([advantage]), torch.ones(1, len(ratios), dtype=torch.bool), **kwargs
    )
    loss.sum().backward()
    return loss[0], clipped[0], logprobs.grad[0]


def test_clip_positive_advantage_clip_higher():
    # A = +2, ε_low 0.2, ε_high 0.28 → clip range [0.8, 1.28]. L = max(−ρA, −clip(ρ)A).
    #   ρ=0.5 : max(−1.0, −1.6)  = −1.0  unclipped, grad −ρA = −1.0
    #   ρ=1.1 : max(−2.2, −2.2)  = −2.2  inside,    grad −2.2
    #   ρ=1.25: max(−2.5, −2.5)  = −2.5  inside (symmetric 0.2 would clip it), grad −2.5
    #   ρ=1.5 : max(−3.0, −2.56) = −2.56 clipped,   grad 0
    loss, clipped, grad = _clip_case([0.5, 1.1, 1.25, 1.5], 2.0, epsilon=0.2, epsilon_high=0.28)
    torch.testing.assert_close(loss, _t([-1.0, -2.2, -2.5, -2.56]))
    assert clipped.tolist() == [False, False, False, True]
    torch.testing.assert_close(grad, _t([-1.0, -2.2, -2.5, 0.0]))


def test_clip_positive_advantage_symmetric():
    # ε_high defaults to ε = 0.2: ρ=1.25 now clips at 1.2 → max(−2.5, −2.4) = −2.4, grad 0.
    loss, clipped, grad = _clip_case([0.5, 1.1, 1.25, 1.5], 2.0, epsilon=0.2)
    torch.testing.assert_close(loss, _t([-1.0, -2.2, -2.4, -2.4]))
    assert clipped.tolist() == [False, False, True, True]
    torch.testing.assert_close(grad, _t([-1.0, -2.2, 0.0, 0.0]))


def test_clip_negative_advantage():
    # A = −2, clip range [0.8, 1.28]. L = max(2ρ, 2·clip(ρ)).
    #   ρ=0.5: max(1.0, 1.6) = 1.6 clipped (low side), grad 0
    #   ρ=0.9: max(1.8, 1.8) = 1.8 inside, grad −ρA = 1.8
    #   ρ=1.5: max(3.0, 2.56) = 3.0 unclipped (high side never clips for A<0), grad 3.0
    #   ρ=4.0: max(8.0, 2.56) = 8.0 unclipped, grad 8.0
    loss, clipped, grad = _clip_case([0.5, 0.9, 1.5, 4.0], -2.0, epsilon=0.2, epsilon_high=0.28)
    torch.testing.assert_close(loss, _t([1.6, 1.8, 3.0, 8.0]))
    assert clipped.tolist() == [True, False, False, False]
    torch.testing.assert_close(grad, _t([0.0, 1.8, 3.0, 8.0]))


def test_dual_clip_caps_negative_advantage():
    # Dual clip c = 3 for A = −2: L = min(max(2ρ, 2·clip(ρ)), −cA = 6).
    #   ρ=0.5: 1.6 (< 6), ρ=0.9: 1.8, ρ=1.5: 3.0, ρ=4.0: min(8.0, 6.0) = 6.0 capped, grad 0
    loss, clipped, grad = _clip_case(
        [0.5, 0.9, 1.5, 4.0], -2.0, epsilon=0.2, epsilon_high=0.28, dual_clip=3.0
    )
    torch.testing.assert_close(loss, _t([1.6, 1.8, 3.0, 6.0]))
    assert clipped.tolist() == [True, False, False, True]
    torch.testing.assert_close(grad, _t([0.0, 1.8, 3.0, 0.0]))


def test_dual_clip_does_nothing_for_positive_advantage():
    # A = +2: −cA = −6 would be a floor, not a cap; dual clip must leave A > 0 untouched.
    ratios = [0.5, 1.1, 4.0, 10.0]
    with_dual = _clip_case(ratios, 2.0, epsilon=0.2, epsilon_high=0.28, dual_clip=3.0)
    without = _clip_case(ratios, 2.0, epsilon=0.2, epsilon_high=0.28)
    for a, b in zip(with_dual, without, strict=True):
        assert torch.equal(a, b)
    torch.testing.assert_close(with_dual[0], _t([-1.0, -2.2, -2.56, -2.56]))


@pytest.mark.parametrize("bad", [1.0, 0.5])
def test_dual_clip_must_exceed_one(bad):
    # option values are validated once, by the config
    with pytest.raises(ValueError, match="dual_clip"):
        build_config({"model": "tiny-random", "dual_clip": bad})


def test_clip_mask_is_false_at_padding():
    # ρ = 3 everywhere with A = +1 clips every token, but padding must not count as clipped.
    mask = _mask([2, 1], 3)
    old = torch.zeros(2, 3, dtype=F64)
    loss, clipped = clipped_surrogate(old + math.log(3.0), old, _t([1.0, 1.0]), mask)
    assert torch.equal(clipped, mask)
    torch.testing.assert_close(loss, torch.where(mask, _t(-1.2), _t(0.0)))


@pytest.mark.parametrize("importance_level", ["token", "sequence"])
@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_masked_garbage_gives_zero_gradient_and_no_nan(importance_level, mode):
    # docs/design/pitfalls.md #4: padded positions hold ±inf, ±1e30 and NaN in logprobs, old and ref log-probs.
    # The masked, clamped log-ratio must keep loss and gradients finite and exactly 0 at padding.
    inf, nan = math.inf, math.nan
    mask = _mask([2, 3], 7)
    logprobs = _t(
        [[-0.5, -1.0, inf, -inf, 1e30, -1e30, nan], [-0.2, -2.0, -0.7, inf, -inf, 1e30, nan]]
    ).requires_grad_()
    old = _t([[-0.6, -0.8, -1e30, inf, -inf, nan, 1e30], [-0.3, -1.5, -0.7, inf, -1e30, -inf, 0.0]])
    ref = _t([[-0.4, -0.9, nan, -inf, inf, 1e30, -1e30], [-0.1, -2.5, -0.6, -1e30, inf, nan, -inf]])

    pg, _ = clipped_surrogate(
        logprobs, old, _t([1.0, -1.0]), mask, dual_clip=3.0, importance_level=importance_level
    )
    kl = kl_k3(logprobs, ref, mask)
    loss = aggregate(pg + 0.1 * kl, mask, mode, max_completion_length=7)
    assert torch.isfinite(loss)
    assert torch.isfinite(pg).all() and torch.isfinite(kl).all()
    assert (pg[~mask] == 0).all() and (kl[~mask] == 0).all()
    loss.backward()
    assert torch.isfinite(logprobs.grad).all()
    assert (logprobs.grad[~mask] == 0).all()
    assert (logprobs.grad[mask] != 0).any()

    # The same loss as with clean padding: garbage changes nothing.
    clean = torch.where(mask, logprobs.detach(), -1.0).requires_grad_()
    pg_c, _ = clipped_surrogate(
        clean, torch.where(mask, old, -1.0), _t([1.0, -1.0]), mask, dual_clip=3.0,
        importance_level=importance_level,
    )  # fmt: skip
    kl_c = kl_k3(clean, torch.where(mask, ref, -1.0), mask)
    loss_c = aggregate(pg_c + 0.1 * kl_c, mask, mode, max_completion_length=7)
    loss_c.backward()
    torch.testing.assert_close(loss, loss_c)
    torch.testing.assert_close(logprobs.grad, clean.grad)


def test_log_ratio_clamped_to_20():
    # diff = [50, −50, 3, 20.5]: clamped to [20, −20, 3, 20]; ρ = e^20 ≈ 4.85e8 stays finite.
    old = torch.zeros(1, 4, dtype=F64)
    logprobs = _t([[50.0, -50.0, 3.0, 20.5]]).requires_grad_()
    mask = torch.ones(1, 4, dtype=torch.bool)
    lr = log_ratio(logprobs, old, mask)
    torch.testing.assert_close(lr, _t([[20.0, -20.0, 3.0, 20.0]]))
    lr.sum().backward()
    # A clamped position passes no gradient.
    torch.testing.assert_close(logprobs.grad, _t([[0.0, 0.0, 1.0, 0.0]]))


def test_log_ratio_clamp_constant_and_surrogate_stays_finite():
    old = torch.zeros(1, 2, dtype=F64)
    logprobs = _t([[400.0, -400.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    assert LOG_RATIO_CLAMP == 20.0
    torch.testing.assert_close(log_ratio(logprobs, old, mask), _t([[LOG_RATIO_CLAMP, -LOG_RATIO_CLAMP]]))
    # A = −1, no dual clip: L = max(ρ, clip(ρ)) = e^20 at the first token (not exp(400) = inf).
    loss, _ = clipped_surrogate(logprobs, old, _t([-1.0]), mask)
    torch.testing.assert_close(loss, _t([[math.exp(20.0), 0.8]]))


def test_log_ratio_masks_padding():
    mask = _mask([1], 2)
    lr = log_ratio(_t([[-1.0, math.inf]]), _t([[-1.5, -math.inf]]), mask)
    assert torch.equal(lr, _t([[0.5, 0.0]]))


def test_gspo_sequence_ratio():
    # Token log-ratios: seq 0 = [0.1, 0.3, pad], seq 1 = [0.2, −0.4, 0.5].
    # Sequence log-ratio = mean over response tokens: 0.4/2 = 0.2 and 0.3/3 = 0.1,
    # broadcast to the response tokens, 0 at padding. ρ_seq = exp(0.2) = 1.2214028, exp(0.1).
    old = _t([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    diffs = _t([[0.1, 0.3, 7.0], [0.2, -0.4, 0.5]])
    mask = _mask([2, 3], 3)
    logprobs = (old + diffs).requires_grad_()
    lr = log_ratio(logprobs, old, mask, importance_level="sequence")
    torch.testing.assert_close(lr, _t([[0.2, 0.2, 0.0], [0.1, 0.1, 0.1]]))

    # Clipped surrogate, A = [+1, −1], ε = 0.2:
    #   seq 0: ρ = 1.2214028 > 1.2 → L = −1.2 on both tokens, clipped, no gradient.
    #   seq 1: ρ = exp(0.1) = 1.1051709 inside → L = ρ = 1.1051709; ∂(Σ_t L_t)/∂logp_s = 3·ρ/3 = ρ.
    loss, clipped = clipped_surrogate(
        logprobs, old, _t([1.0, -1.0]), mask, importance_level="sequence"
    )
    rho1 = math.exp(0.1)
    torch.testing.assert_close(loss, _t([[-1.2, -1.2, 0.0], [rho1, rho1, rho1]]))
    assert clipped.tolist() == [[True, True, False], [False, False, False]]
    loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, _t([[0.0, 0.0, 0.0], [rho1, rho1, rho1]]))


def test_unknown_importance_level():
    # option values are validated once, by the config
    with pytest.raises(ValueError, match="importance_sampling_level"):
        build_config({"model": "tiny-random", "importance_sampling_level": "seq"})


# --- DaGRPO anchor term --------------------------------------------------------------------------


def test_anchor_log_psi_gradient_is_minus_adv_grad_logp():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    tokens = torch.tensor([[1, 2, 3], [0, 4, 4]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    adv = torch.tensor([2.5, -0.5])
    logp = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    loss = anchor_surrogate(logp, adv, mask, LossSettings()).sum()
    (grad,) = torch.autograd.grad(loss, logits, retain_graph=True)
    expected_loss = -(2.5 * logp[0].sum() - 0.5 * logp[1, 0])
    (expected,) = torch.autograd.grad(expected_loss, logits)
    torch.testing.assert_close(grad, expected)


def test_anchor_luffy_psi_value_and_masking():
    logp = torch.log(torch.tensor([[0.1, 0.9], [0.5, 0.5]]))
    mask = torch.tensor([[True, True], [True, False]])
    out = anchor_surrogate(logp, torch.tensor([1.0, 2.0]), mask, LossSettings(anchor_psi="luffy", anchor_gamma=0.1))
    # -A * p/(p+0.1): 0.1/0.2 = 0.5, 0.9/1.0 = 0.9, 0.5/0.6 = 0.8333
    torch.testing.assert_close(out, torch.tensor([[-0.5, -0.9], [-2 * 0.5 / 0.6, 0.0]]))
    # an unknown psi is refused by the config: tests/core/test_objective.py::test_unknown_anchor_psi_is_refused


def test_anchor_has_no_ratio_so_no_clipping():
    # The same log-probs give the same loss whatever the behaviour policy was: nothing to clip.
    logp = torch.tensor([[-3.0, -0.2]])
    out = anchor_surrogate(logp, torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool), LossSettings())
    torch.testing.assert_close(out, torch.tensor([[3.0, 0.2]]))


# --- the policy-loss registry ----------------------------------------------------------------------


def test_clip_is_the_registered_default():
    assert POLICY_LOSSES["clip"] is clip and LossSettings().policy_loss == "clip"
    # <=: another test may register (and remove) a toy loss of its own
    assert {"clip"} <= set(POLICY_LOSSES)
    assert set(POLICY_LOSSES) == POLICY_LOSS_NAMES


def test_register_policy_loss_adds_a_loss_the_registry_and_the_config_accept():
    name = "toy_plain_pg"
    assert name not in POLICY_LOSSES and name not in POLICY_LOSS_NAMES
    with pytest.raises(ValueError, match="policy_loss"):
        build_config({"model": "tiny-random", "policy_loss": name})
    try:

        @register_policy_loss(name)
        def plain_pg(logprobs, old_logprobs, advantages, mask, settings):
            # the plain policy gradient −A·log π: no ratio, nothing clipped
            mask = mask.bool()
            loss = torch.where(mask, -advantages.unsqueeze(-1) * logprobs, torch.zeros_like(logprobs))
            return loss, torch.zeros_like(mask)

        assert POLICY_LOSSES[name] is plain_pg and name in POLICY_LOSS_NAMES
        assert build_config({"model": "tiny-random", "policy_loss": name}).algorithm.policy_loss == name
        # policy_loss takes the sampled rows' term from the registry: ρ = 1.5 would clip under "clip"
        old = _t([[-1.0, -2.0]])
        logprobs = (old + math.log(1.5)).requires_grad_()
        mask = torch.ones(1, 2, dtype=torch.bool)
        out = policy_loss(logprobs, old, _t([2.0]), mask, LossSettings(policy_loss=name))
        torch.testing.assert_close(out.per_token, -2.0 * logprobs.detach())
        assert out.clipped_tokens.item() == 0
        out.per_token.sum().backward()
        torch.testing.assert_close(logprobs.grad, _t([[-2.0, -2.0]]))
        assert policy_loss(logprobs, old, _t([2.0]), mask, LossSettings()).clipped_tokens.item() == 2
    finally:
        POLICY_LOSSES.pop(name, None)
        POLICY_LOSS_NAMES.discard(name)
    with pytest.raises(ValueError, match="policy_loss"):
        build_config({"model": "tiny-random", "policy_loss": name})
