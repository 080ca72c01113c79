"""policy_loss (rlvr.core.losses): clipped surrogate, truncated IS, GSPO, anchors and the KL term, by hand values."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import build_config
from rlvr.core.logprobs import entropy_from_logits, token_logprobs
from rlvr.core.losses import LossSettings, aggregate, entropy_bonus, policy_loss
from rlvr.train.plan import compile_plan

F64 = torch.float64
NAN, INF = math.nan, math.inf


def _t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def _mask(lengths, width):
    return torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # [N, T] bool


def _with_ratios(old, ratios):
    """logprobs = old + log ρ token by token (ratios [N][T]; None keeps old, e.g. at padding)."""
    return _t([[o + (0.0 if r is None else math.log(r)) for o, r in zip(orow, rrow, strict=True)]
               for orow, rrow in zip(old, ratios, strict=True)])


# ---------------------------------------------------------------------------------------------
# On-policy pass
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("importance_level", ["token", "sequence"])
def test_on_policy_loss_is_minus_advantage(importance_level):
    # old = logp.detach(): ρ = 1 everywhere, inside every clip range, so ℓ_t = −min(1·A, 1·A) = −A.
    # Row 1's padding holds junk (7.0) that the mask must drop.
    mask = _mask([3, 2], 3)
    logprobs = _t([[-0.5, -1.2, -0.3], [-2.0, -0.1, 7.0]]).requires_grad_()
    out = policy_loss(logprobs, logprobs.detach(), _t([1.5, -0.5]), mask,
                      LossSettings(epsilon_high=0.28, dual_clip=3.0, importance_level=importance_level))
    torch.testing.assert_close(out.per_token, _t([[-1.5, -1.5, -1.5], [0.5, 0.5, 0.0]]), rtol=0, atol=0)
    assert out.clipped_tokens.item() == 0
    assert out.kl_sum is None


# ---------------------------------------------------------------------------------------------
# Clipping
# ---------------------------------------------------------------------------------------------


def test_clip_both_sides_symmetric():
    # ε = 0.2 → clip range [0.8, 1.2]; ℓ = max(−ρA, −clip(ρ)A).
    # Row 0, A = +2: ρ=1.5 → max(−3.0, −1.2·2 = −2.4) = −2.4 clipped; ρ=1.1 → −2.2 inside;
    #                ρ=0.5 → max(−1.0, −0.8·2 = −1.6) = −1.0 (low side never clips for A > 0).
    # Row 1, A = −1: ρ=0.5 → max(0.5, 0.8) = 0.8 clipped; ρ=0.9 → 0.9 inside;
    #                ρ=1.5 → max(1.5, 1.2) = 1.5 (high side never clips for A < 0).
    old = [[-1.0, -0.7, -2.0], [-0.3, -1.1, -0.9]]
    ratios = [[1.5, 1.1, 0.5], [0.5, 0.9, 1.5]]
    out = policy_loss(_with_ratios(old, ratios), _t(old), _t([2.0, -1.0]), _mask([3, 3], 3),
                      LossSettings(epsilon=0.2))
    expected = [
        [-(1 + 0.2) * 2.0, -1.1 * 2.0, -0.5 * 2.0],
        [(1 - 0.2) * 1.0, 0.9 * 1.0, 1.5 * 1.0],
    ]
    torch.testing.assert_close(out.per_token, _t(expected))
    assert out.clipped_tokens.item() == 2  # (0, 0) high side and (1, 0) low side


def test_clip_epsilon_high_asymmetric():
    # ε_low 0.2, ε_high 0.28 → [0.8, 1.28].
    # Row 0, A = +1: ρ=1.25 → −1.25 inside (ε_high = ε would clip it to −1.2); ρ=1.5 → −1.28 clipped.
    # Row 1, A = −1: ρ=0.75 → max(0.75, 0.8) = 0.8 clipped; ρ=1.25 → 1.25 unclipped.
    old = [[-1.0, -1.0], [-0.5, -0.5]]
    ratios = [[1.25, 1.5], [0.75, 1.25]]
    out = policy_loss(_with_ratios(old, ratios), _t(old), _t([1.0, -1.0]), _mask([2, 2], 2),
                      LossSettings(epsilon=0.2, epsilon_high=0.28))
    torch.testing.assert_close(out.per_token, _t([[-1.25, -(1 + 0.28)], [1 - 0.2, 1.25]]))
    assert out.clipped_tokens.item() == 2

    # Symmetric for comparison: ρ = 1.25, A = +1 is now clipped at 1.2.
    sym = policy_loss(_with_ratios(old, ratios), _t(old), _t([1.0, -1.0]), _mask([2, 2], 2),
                      LossSettings(epsilon=0.2))
    torch.testing.assert_close(sym.per_token, _t([[-1.2, -1.2], [0.8, 1.25]]))
    assert sym.clipped_tokens.item() == 3


def test_dual_clip_caps_negative_advantage():
    # Dual clip c = 3: for A < 0, ℓ = min(max(−ρA, −clip(ρ)A), −c·A = c·|A|).
    # Row 0, A = −2: ρ=4 → max(8, 2.4) = 8 → min(8, 3·2 = 6) = 6, counted;
    #                ρ=2 → max(4, 2.4) = 4 < 6, unchanged, not counted.
    # Row 1, A = +1: ρ=4 → ordinary clip −1.2 (counted); dual clip does not apply to A > 0.
    old = [[-1.0, -1.0], [-2.0, -2.0]]
    ratios = [[4.0, 2.0], [4.0, None]]
    mask = _mask([2, 1], 2)
    out = policy_loss(_with_ratios(old, ratios), _t(old), _t([-2.0, 1.0]), mask,
                      LossSettings(epsilon=0.2, dual_clip=3.0))
    torch.testing.assert_close(out.per_token, _t([[3.0 * 2.0, 2.0 * 2.0], [-1.2 * 1.0, 0.0]]))
    assert out.clipped_tokens.item() == 2

    no_dual = policy_loss(_with_ratios(old, ratios), _t(old), _t([-2.0, 1.0]), mask, LossSettings(epsilon=0.2))
    torch.testing.assert_close(no_dual.per_token, _t([[4.0 * 2.0, 2.0 * 2.0], [-1.2, 0.0]]))
    assert no_dual.clipped_tokens.item() == 1


# ---------------------------------------------------------------------------------------------
# Truncated IS (ratio_cap)
# ---------------------------------------------------------------------------------------------


def test_ratio_cap_truncates_before_clipping():
    # Cap C = 2, ε = 0.2. ρ' = min(ρ, C), then ℓ = max(−ρ'A, −clip(ρ')A).
    # Row 0, A = −1: ρ=5 → ρ'=2 → max(2, 1.2) = 2 (uncapped: 5); ρ=1.5 → 1.5 (below the cap).
    # Row 1, A = +1: ρ=5 → ρ'=2 → max(−2, −1.2) = −1.2, clipped as without the cap.
    old = [[-1.0, -1.0], [-0.5, -0.5]]
    ratios = [[5.0, 1.5], [5.0, None]]
    mask = _mask([2, 1], 2)
    logprobs = _with_ratios(old, ratios).requires_grad_()
    out = policy_loss(logprobs, _t(old), _t([-1.0, 1.0]), mask, LossSettings(epsilon=0.2, ratio_cap=2.0))
    torch.testing.assert_close(out.per_token, _t([[2.0, 1.5], [-1.2, 0.0]]))
    assert out.clipped_tokens.item() == 1  # only (1, 0); the truncation itself is not counted as a clip
    # The truncated token passes no gradient (the cap is a clamp); ρ=1.5 passes −ρA = 1.5.
    out.per_token.sum().backward()
    torch.testing.assert_close(logprobs.grad, _t([[0.0, 1.5], [0.0, 0.0]]))

    uncapped = policy_loss(_with_ratios(old, ratios), _t(old), _t([-1.0, 1.0]), mask, LossSettings(epsilon=0.2))
    torch.testing.assert_close(uncapped.per_token, _t([[5.0, 1.5], [-1.2, 0.0]]))


def test_ratio_cap_below_clip_range_removes_the_clip():
    # Cap C = 1.1 < 1 + ε: A = +1, ρ = 1.5 → ρ' = 1.1, inside [0.8, 1.2] → ℓ = −1.1, not clipped.
    # Clipping first and truncating after would have given −1.2 (clipped); truncation comes first.
    old = [[-1.0]]
    out = policy_loss(_with_ratios(old, [[1.5]]), _t(old), _t([1.0]), _mask([1], 1),
                      LossSettings(epsilon=0.2, ratio_cap=1.1))
    torch.testing.assert_close(out.per_token, _t([[-1.1]]))
    assert out.clipped_tokens.item() == 0


# ---------------------------------------------------------------------------------------------
# GSPO (sequence-level importance ratio)
# ---------------------------------------------------------------------------------------------


def test_sequence_level_ratio_is_exp_of_mean_log_ratio():
    # Per-token log-ratios; the padding (junk 5.0) is not in the mean.
    #   row 0: [0.3, 0.2 | pad] → mean 0.25, ρ = e^0.25 = 1.2840 > 1.2; A = −1 → max(1.284, 1.2) = 1.284
    #   row 1: [−0.3, 0.1, −0.4] → mean −0.2, ρ = e^−0.2 = 0.8187 inside; A = +2 → −2·0.8187 on all 3
    #   row 2: [0.5 | pad, pad] → ρ = e^0.5 = 1.6487; A = +1 → −1.2, clipped
    old = _t([[-1.0, -1.0, -1.0], [-2.0, -0.5, -1.5], [-0.2, -0.2, -0.2]])
    diffs = _t([[0.3, 0.2, 5.0], [-0.3, 0.1, -0.4], [0.5, 5.0, 5.0]])
    mask = _mask([2, 3, 1], 3)
    out = policy_loss(old + diffs, old, _t([-1.0, 2.0, 1.0]), mask,
                      LossSettings(epsilon=0.2, importance_level="sequence"))
    rho0 = math.exp((0.3 + 0.2) / 2)
    rho1 = math.exp((-0.3 + 0.1 - 0.4) / 3)
    expected = [[rho0, rho0, 0.0], [-2.0 * rho1, -2.0 * rho1, -2.0 * rho1], [-1.2, 0.0, 0.0]]
    torch.testing.assert_close(out.per_token, _t(expected))
    assert out.clipped_tokens.item() == 1

    # Token level differs: row 1's tokens have their own ratios e^−0.3 = 0.741, e^0.1, e^−0.4 = 0.670, all
    # unclipped for A > 0 (the low side never clips), so ℓ_t = −2·ρ_t.
    tok = policy_loss(old + diffs, old, _t([-1.0, 2.0, 1.0]), mask, LossSettings(epsilon=0.2))
    torch.testing.assert_close(tok.per_token[1], _t([-2.0 * math.exp(d) for d in (-0.3, 0.1, -0.4)]))


# ---------------------------------------------------------------------------------------------
# Anchor rows
# ---------------------------------------------------------------------------------------------

# Row 0 is sampled (ρ = [1.5, 1.0], A = +1); rows 1 and 2 are anchors whose "old" log-probs are 10
# below the current ones: ρ = e^10 would clip every anchor token with A > 0 if anchors had a ratio.
ANCHOR_LOGP = [[-1.0, -0.4, 0.0], [-0.5, -2.0, 0.0], [-0.1, -1.0, -3.0]]
ANCHOR_OLD = [[-1.0 - math.log(1.5), -0.4, 0.0], [-10.5, -12.0, 0.0], [-10.1, -11.0, -13.0]]
ANCHOR_ADV = [1.0, 2.0, 0.5]
ANCHOR_MASK = _mask([2, 2, 3], 3)
IS_ANCHOR = torch.tensor([False, True, True])


def _luffy(lp, gamma):
    p = math.exp(lp)
    return p / (p + gamma)


@pytest.mark.parametrize(
    ("psi", "gamma", "shape"),
    [
        ("log", 0.1, lambda lp, g: lp),  # ψ(p) = log p
        ("luffy", 0.1, _luffy),  # ψ(p) = p / (p + γ), LUFFY's γ = 0.1
        ("luffy", 0.5, _luffy),
    ],
)
def test_anchor_rows_use_psi_and_are_never_clipped(psi, gamma, shape):
    out = policy_loss(_t(ANCHOR_LOGP), _t(ANCHOR_OLD), _t(ANCHOR_ADV), ANCHOR_MASK,
                      LossSettings(epsilon=0.2, anchor_psi=psi, anchor_gamma=gamma), is_anchor=IS_ANCHOR)
    expected = [
        [-1.2 * 1.0, -1.0 * 1.0, 0.0],  # sampled row: ρ=1.5 clipped to 1.2, ρ=1 → −A
        [-2.0 * shape(-0.5, gamma), -2.0 * shape(-2.0, gamma), 0.0],  # ℓ = −A·ψ(p)
        [-0.5 * shape(-0.1, gamma), -0.5 * shape(-1.0, gamma), -0.5 * shape(-3.0, gamma)],
    ]
    torch.testing.assert_close(out.per_token, _t(expected))
    assert out.clipped_tokens.item() == 1  # the sampled row's ρ=1.5 token; no anchor token


def test_anchor_log_psi_hand_values():
    # ψ = log: row 1 (A=2): −2·(−0.5) = 1.0, −2·(−2.0) = 4.0; row 2 (A=0.5): 0.05, 0.5, 1.5.
    out = policy_loss(_t(ANCHOR_LOGP), _t(ANCHOR_OLD), _t(ANCHOR_ADV), ANCHOR_MASK, LossSettings(),
                      is_anchor=IS_ANCHOR)
    torch.testing.assert_close(out.per_token[1:], _t([[1.0, 4.0, 0.0], [0.05, 0.5, 1.5]]))


def test_without_anchor_rows_the_same_rows_would_clip():
    # The same tensors with is_anchor None: ρ = e^10 with A > 0 → −1.2·A, clipped on all 5 anchor tokens.
    out = policy_loss(_t(ANCHOR_LOGP), _t(ANCHOR_OLD), _t(ANCHOR_ADV), ANCHOR_MASK, LossSettings(epsilon=0.2))
    torch.testing.assert_close(out.per_token[1:], _t([[-2.4, -2.4, 0.0], [-0.6, -0.6, -0.6]]))
    assert out.clipped_tokens.item() == 1 + 5


def test_all_false_is_anchor_equals_none():
    kwargs = dict(epsilon=0.2, epsilon_high=0.28, dual_clip=3.0)
    none = policy_loss(_t(ANCHOR_LOGP), _t(ANCHOR_OLD), _t([1.0, -2.0, 0.5]), ANCHOR_MASK, LossSettings(**kwargs))
    false = policy_loss(_t(ANCHOR_LOGP), _t(ANCHOR_OLD), _t([1.0, -2.0, 0.5]), ANCHOR_MASK, LossSettings(**kwargs),
                        is_anchor=torch.zeros(3, dtype=torch.bool))
    assert torch.equal(none.per_token, false.per_token)
    assert torch.equal(none.clipped_tokens, false.clipped_tokens)


def test_anchor_log_gradient_is_minus_advantage():
    # ψ = log: ℓ = −A·logp, so ∂ℓ/∂logp_t = −A at response tokens and 0 at padding.
    # The sampled row 0: ρ=1.5 clipped → 0; ρ=1 → ∂(−ρA)/∂logp = −ρA = −1.
    logprobs = _t(ANCHOR_LOGP).requires_grad_()
    out = policy_loss(logprobs, _t(ANCHOR_OLD), _t(ANCHOR_ADV), ANCHOR_MASK, LossSettings(), is_anchor=IS_ANCHOR)
    out.per_token.sum().backward()
    torch.testing.assert_close(logprobs.grad, _t([[0.0, -1.0, 0.0], [-2.0, -2.0, 0.0], [-0.5, -0.5, -0.5]]))


def test_anchor_luffy_gradient():
    # ψ(p) = p/(p+γ): ∂ψ/∂logp = p · γ/(p+γ)², so ∂ℓ/∂logp = −A·γ·p/(p+γ)².
    gamma = 0.1
    logprobs = _t(ANCHOR_LOGP).requires_grad_()
    out = policy_loss(logprobs, _t(ANCHOR_OLD), _t(ANCHOR_ADV), ANCHOR_MASK,
                      LossSettings(anchor_psi="luffy", anchor_gamma=gamma), is_anchor=IS_ANCHOR)
    out.per_token.sum().backward()

    def g(a, lp):
        p = math.exp(lp)
        return -a * gamma * p / (p + gamma) ** 2

    expected = [[0.0, -1.0, 0.0], [g(2.0, -0.5), g(2.0, -2.0), 0.0], [g(0.5, -0.1), g(0.5, -1.0), g(0.5, -3.0)]]
    torch.testing.assert_close(logprobs.grad, _t(expected))


def test_unknown_anchor_psi_is_refused():
    # option values are validated once, by the config (rlvr.core.losses.ANCHOR_PSI holds log and luffy)
    with pytest.raises(ValueError, match="anchor_psi"):
        build_config({"model": "tiny-random", "algo": "dagrpo", "anchor_psi": "sqrt"})


# ---------------------------------------------------------------------------------------------
# KL penalty
# ---------------------------------------------------------------------------------------------


def _k3(ref, lp):
    d = ref - lp  # δ = log π_ref − log π_θ
    return math.exp(d) - d - 1.0


def test_kl_term_is_added_per_token_and_summed():
    # On-policy (ρ = 1): ℓ_t = −A + β·(e^δ − δ − 1), δ = ref − logp; row 2 is an anchor (ψ = log) and gets
    # the KL too. Padding holds junk in ref (inf) that must not reach the loss or kl_sum.
    beta = 0.1
    logp = [[-1.0, -0.5], [-2.0, -0.3], [-0.7, -1.5]]
    ref = [[-1.2, -0.2], [-1.5, INF], [-0.7, -1.0]]
    mask = _mask([2, 1, 2], 2)
    adv = [1.0, -0.5, 2.0]
    out = policy_loss(_t(logp), _t(logp), _t(adv), mask, LossSettings(beta=beta),
                      is_anchor=torch.tensor([False, False, True]), ref_logprobs=_t(ref))
    kl = [[_k3(-1.2, -1.0), _k3(-0.2, -0.5)], [_k3(-1.5, -2.0), 0.0], [_k3(-0.7, -0.7), _k3(-1.0, -1.5)]]
    expected = [
        [-1.0 + beta * kl[0][0], -1.0 + beta * kl[0][1]],
        [0.5 + beta * kl[1][0], 0.0],
        [-2.0 * -0.7 + beta * kl[2][0], -2.0 * -1.5 + beta * kl[2][1]],  # anchor: −A·logp + β·KL
    ]
    torch.testing.assert_close(out.per_token, _t(expected))
    # kl_sum = Σ over the 5 response tokens; δ = 0 at (2, 0) gives KL 0.
    kl_sum = kl[0][0] + kl[0][1] + kl[1][0] + kl[2][0] + kl[2][1]
    torch.testing.assert_close(out.kl_sum, _t(kl_sum))
    assert kl[2][0] == 0.0 and kl_sum > 0


def test_beta_needs_ref_logprobs():
    # policy_loss trusts its caller: the plan computes reference log-probs exactly when beta > 0
    for beta in (0.0, 0.04):
        update = compile_plan(build_config({"model": "tiny-random", "beta": beta})).update
        assert update.needs_reference == (beta > 0) and update.loss.beta == beta


# ---------------------------------------------------------------------------------------------
# Entropy bonus
# ---------------------------------------------------------------------------------------------


def test_entropy_bonus_is_the_mean_over_sampled_tokens_times_the_share():
    # TRL's bonus: c · (Σ m·H / Σ m) · share, whatever the loss's aggregation. Row 1 is an anchor (not
    # sampled: left out); padding (row 0, t = 2) holds junk entropy (inf) that must not reach it.
    # sampled tokens: row 0, t = 0, 1 → H = 1.2, 0.4 → mean 0.8; c = 0.5, share 1/4 → 0.5 · 0.8 · 0.25 = 0.1
    entropy = _t([[1.2, 0.4, INF], [2.0, 3.0, 1.0]])
    bonus = entropy_bonus(entropy, _mask([2, 3], 3), coef=0.5, share=0.25, is_anchor=torch.tensor([False, True]))
    torch.testing.assert_close(bonus, _t(0.1))


def test_the_policy_loss_holds_no_entropy_term():
    # the bonus is a term of its own (entropy_bonus): policy_loss takes no entropy at all, and the settings'
    # entropy_coef (read by the update, for entropy_bonus) leaves its per-token loss unchanged
    logp = _t([[-1.0, -0.5]])
    with pytest.raises(TypeError, match="entropy"):
        policy_loss(logp, logp, _t([1.0]), _mask([2], 2), LossSettings(entropy_coef=0.1), entropy=_t([[1.0, 1.0]]))
    with_coef = policy_loss(logp, logp, _t([1.0]), _mask([2], 2), LossSettings(entropy_coef=0.1))
    assert torch.equal(with_coef.per_token, policy_loss(logp, logp, _t([1.0]), _mask([2], 2), LossSettings()).per_token)


def test_entropy_bonus_gradient_equals_the_formula_by_autograd():
    # Two positions of a 3-token vocabulary, logits z with grad. The loss of a one-micro-batch step, by hand:
    #   L = (1/2) Σ_t [−A·ρ_t] − c · (1/2) Σ_t H(softmax(z_t)),  H(p) = −Σ_v p_v log p_v
    # policy_loss + aggregate − entropy_bonus must give the same value and the same dL/dz as this formula.
    f32 = torch.float32  # the trainer's log-prob dtype
    z = _t([[[1.0, 0.2, -0.5], [0.3, 0.3, 2.0]]], f32).requires_grad_()  # [1, 2, 3]
    tokens = torch.tensor([[0, 2]])
    c, a = 0.3, 1.5
    logp = token_logprobs(z, tokens)  # [1, 2]
    entropy = entropy_from_logits(z)  # [1, 2], with grad
    mask = _mask([2], 2)
    out = policy_loss(logp, logp.detach(), _t([a], f32), mask, LossSettings())
    loss = aggregate(out.per_token, mask, "token_mean") - entropy_bonus(entropy, mask, coef=c, share=1.0)
    (grad,) = torch.autograd.grad(loss, z, retain_graph=True)

    z_ref = z.detach().clone().requires_grad_()
    p = torch.softmax(z_ref, dim=-1)  # [1, 2, 3]
    ratio = torch.exp(torch.log(p.gather(-1, tokens[..., None]).squeeze(-1)) - logp.detach())  # = 1, grad of log p
    by_hand = (-a * ratio - c * -(p * p.log()).sum(-1)).sum() / 2
    (grad_ref,) = torch.autograd.grad(by_hand, z_ref)
    torch.testing.assert_close(loss.detach(), by_hand.detach())
    torch.testing.assert_close(grad, grad_ref)
    # and the bonus is in it: without it the gradient differs
    off = policy_loss(logp, logp.detach(), _t([a], f32), mask, LossSettings())
    (grad_off,) = torch.autograd.grad(aggregate(off.per_token, mask, "token_mean"), z)
    assert (grad - grad_off).abs().max() > 1e-3


def test_kl_ratio_weighting_is_value_neutral_on_policy_but_adds_the_ratio_gradient():
    # TRL's use_bias_correction_kl: β·KL·ρ. On-policy ρ = 1 (value unchanged), but dρ/dlogp = ρ adds β·KL·∇logp:
    # per token d(β·kl·ρ)/dlogp = β·(dkl/dlogp + kl), with kl = e^{ref−logp} − (ref−logp) − 1 and
    # dkl/dlogp = 1 − e^{ref−logp}. logp = −1, ref = −0.5: kl = e^{0.5} − 0.5 − 1 = 0.148721, dkl = 1 − e^{0.5}
    logp = _t([[-1.0]]).requires_grad_()
    ref = _t([[-0.5]])
    beta = 0.1
    plain = policy_loss(logp, logp.detach(), _t([0.0]), _mask([1], 1), LossSettings(beta=beta), ref_logprobs=ref)
    weighted = policy_loss(logp, logp.detach(), _t([0.0]), _mask([1], 1),
                           LossSettings(beta=beta, kl_ratio_weighted=True), ref_logprobs=ref)
    torch.testing.assert_close(weighted.per_token, plain.per_token)
    (g_plain,) = torch.autograd.grad(plain.per_token.sum(), logp)
    (g_weighted,) = torch.autograd.grad(weighted.per_token.sum(), logp)
    kl = math.exp(0.5) - 0.5 - 1
    torch.testing.assert_close(g_plain, _t([[beta * (1 - math.exp(0.5))]]))
    torch.testing.assert_close(g_weighted, _t([[beta * (1 - math.exp(0.5) + kl)]]))


# ---------------------------------------------------------------------------------------------
# Masked positions (losses.py "Safety": masked before exp, clamped)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("importance_level", ["token", "sequence"])
@pytest.mark.parametrize("psi", ["log", "luffy"])
def test_masked_junk_gives_exact_zero_and_no_nan(importance_level, psi):
    mask = _mask([2, 1, 2], 3)
    logprobs = _t([[-0.5, -1.0, INF], [-0.2, -INF, NAN], [-0.3, -0.9, -INF]]).requires_grad_()
    old = _t([[-0.6, -0.8, -INF], [-0.3, INF, 1e30], [-5.0, -6.0, NAN]])
    ref = _t([[-0.4, -0.9, NAN], [-0.1, INF, -INF], [-0.2, -1.1, INF]])
    settings = LossSettings(beta=0.1, epsilon_high=0.28, dual_clip=3.0, importance_level=importance_level,
                            anchor_psi=psi)
    out = policy_loss(logprobs, old, _t([1.0, -1.0, 0.5]), mask, settings,
                      is_anchor=torch.tensor([False, False, True]), ref_logprobs=ref)
    assert torch.isfinite(out.per_token).all()
    assert (out.per_token[~mask] == 0).all()
    assert torch.isfinite(out.kl_sum) and torch.isfinite(out.clipped_tokens)
    out.per_token.sum().backward()
    assert torch.isfinite(logprobs.grad).all()
    assert (logprobs.grad[~mask] == 0).all()
    assert (logprobs.grad[mask] != 0).any()

    # And the same numbers as with clean padding (-1.0 everywhere masked).
    clean = torch.where(mask, logprobs.detach(), -1.0).requires_grad_()
    out_c = policy_loss(clean, torch.where(mask, old, -1.0), _t([1.0, -1.0, 0.5]), mask, settings,
                        is_anchor=torch.tensor([False, False, True]), ref_logprobs=torch.where(mask, ref, -1.0))
    out_c.per_token.sum().backward()
    torch.testing.assert_close(out.per_token, out_c.per_token)
    torch.testing.assert_close(out.kl_sum, out_c.kl_sum)
    assert torch.equal(out.clipped_tokens, out_c.clipped_tokens)
    torch.testing.assert_close(logprobs.grad, clean.grad)
