"""The sampler/trainer importance-sampling correction: hand-computed weights for every mode."""

import math

import pytest
import torch

from rlvr.config.vllm import IS_MODES as CONFIG_IS_MODES
from rlvr.core.importance import IS_MODES, importance_weights
from rlvr.core.names import IS_MODES as LIGHT_IS_MODES

# Two responses, T = 3. d_t = log π_old − log π_sampler:
#   row 0: d = [log 2, log 4, 0], all three tokens valid -> token ratios [2, 4, 1], sequence ratio 2·4·1 = 8
#   row 1: d = [log 0.5, log 8, +inf], only token 0 valid -> token ratio 0.5, sequence ratio 0.5
#          (were the padding counted, the sequence ratio would be 0.5·8 = 4, or inf)
D = torch.tensor([[math.log(2), math.log(4), 0.0], [math.log(0.5), math.log(8), math.inf]])
MASK = torch.tensor([[True, True, True], [True, False, False]])
SAMPLING = torch.tensor([[-1.0, -2.0, -0.5], [-0.25, -3.0, -1.0]])
OLD = SAMPLING + D


def _weights(mode, clip_min=None, clip_max=3.0, **kw):
    return importance_weights(OLD, SAMPLING, MASK, mode=mode, clip_min=clip_min, clip_max=clip_max, **kw)


def _close(got, expected):
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float32), rtol=1e-6, atol=1e-6)


def test_the_modes_are_the_configs():
    assert IS_MODES is LIGHT_IS_MODES is CONFIG_IS_MODES  # the config validates against the same tuple
    assert IS_MODES == ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def test_token_truncate():
    out = _weights("token_truncate")  # clip(2) = 2, clip(4) = 3 (C_max), clip(1) = 1; row 1: 0.5, padding 0
    _close(out.weights, [[2.0, 3.0, 1.0], [0.5, 0.0, 0.0]])
    _close(out.ratio, [[2.0, 4.0, 1.0], [0.5, 0.0, 0.0]])  # raw, before truncation
    assert out.adjusted.tolist() == [[False, True, False], [False, False, False]]


def test_token_mask():
    out = _weights("token_mask")  # 4 > 3: masked to 0; the rest kept as they are
    _close(out.weights, [[2.0, 0.0, 1.0], [0.5, 0.0, 0.0]])
    assert out.adjusted.tolist() == [[False, True, False], [False, False, False]]


def test_sequence_truncate_sums_only_the_valid_tokens():
    out = _weights("sequence_truncate")  # row 0: exp(log 2 + log 4 + 0) = 8 -> 3 on every token; row 1: 0.5
    _close(out.weights, [[3.0, 3.0, 3.0], [0.5, 0.0, 0.0]])
    _close(out.ratio, [[8.0, 8.0, 8.0], [0.5, 0.0, 0.0]])
    _close(out.unit_ratio, [[8.0], [0.5]])
    assert out.adjusted.tolist() == [[True, True, True], [False, False, False]]


def test_sequence_mask():
    out = _weights("sequence_mask")  # 8 > 3: the whole of row 0 is masked; row 1's 0.5 is kept
    _close(out.weights, [[0.0, 0.0, 0.0], [0.5, 0.0, 0.0]])
    assert out.adjusted.tolist() == [[True, True, True], [False, False, False]]


def test_clip_min():
    # C_min = 0.6: row 1's 0.5 is below it -> truncated up to 0.6, or masked to 0
    _close(_weights("token_truncate", clip_min=0.6).weights, [[2.0, 3.0, 1.0], [0.6, 0.0, 0.0]])
    _close(_weights("token_mask", clip_min=0.6).weights, [[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    _close(_weights("sequence_truncate", clip_min=0.6).weights, [[3.0, 3.0, 3.0], [0.6, 0.0, 0.0]])
    _close(_weights("sequence_mask", clip_min=0.6).weights, [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert _weights("token_mask", clip_min=0.6).adjusted.tolist() == [[False, True, False], [True, False, False]]


def test_no_bounds_keep_the_raw_ratio():
    for mode, expected in (("token_truncate", [[2.0, 4.0, 1.0], [0.5, 0.0, 0.0]]),
                           ("token_mask", [[2.0, 4.0, 1.0], [0.5, 0.0, 0.0]]),
                           ("sequence_truncate", [[8.0, 8.0, 8.0], [0.5, 0.0, 0.0]]),
                           ("sequence_mask", [[8.0, 8.0, 8.0], [0.5, 0.0, 0.0]])):
        out = _weights(mode, clip_min=None, clip_max=None)
        _close(out.weights, expected)
        assert not out.adjusted.any()
    # only an upper bound of 5: 8 is above it, 4 is not
    _close(_weights("token_mask", clip_max=5.0).weights, [[2.0, 4.0, 1.0], [0.5, 0.0, 0.0]])
    _close(_weights("sequence_mask", clip_max=5.0).weights, [[0.0, 0.0, 0.0], [0.5, 0.0, 0.0]])


def test_padding_never_matters():
    # whatever the padding holds (inf, NaN, anything), weights and statistics are those of the valid tokens
    noisy_old, noisy_sampling = OLD.clone(), SAMPLING.clone()
    noisy_old[1, 1:] = torch.tensor([math.nan, -math.inf])
    noisy_sampling[1, 1:] = torch.tensor([math.inf, 7.0])
    for mode in IS_MODES:
        clean = _weights(mode)
        noisy = importance_weights(noisy_old, noisy_sampling, MASK, mode=mode, clip_max=3.0)
        torch.testing.assert_close(noisy.weights, clean.weights)
        torch.testing.assert_close(noisy.ratio, clean.ratio)
        assert {k: float(v) for k, v in noisy.stats().items()} == {k: float(v) for k, v in clean.stats().items()}


def test_a_nan_log_prob_counts_as_ratio_one():
    # TRL: a token whose sampling log-prob is NaN (the sampler could not give it) gets d_t = 0
    sampling = SAMPLING.clone()
    sampling[0, 1] = math.nan  # row 0: d = [log 2, 0, 0]
    _close(importance_weights(OLD, sampling, MASK, mode="token_truncate").weights, [[2.0, 1.0, 1.0], [0.5, 0.0, 0.0]])
    _close(importance_weights(OLD, sampling, MASK, mode="sequence_mask").weights, [[2.0, 2.0, 2.0], [0.5, 0.0, 0.0]])


def test_stats_over_tokens_or_sequences():
    st = {k: float(v) for k, v in _weights("token_mask").stats().items()}
    # tokens: raw ratios 2, 4, 1, 0.5 -> sum 7.5 over 4, min 0.5, max 4; one token (the 4) masked: the weights
    # 2, 0, 1, 0.5 -> sum 3.5, min 0, max 2
    assert st == pytest.approx({"ratio_sum": 7.5, "units": 4, "ratio_min": 0.5, "ratio_max": 4.0,
                                "weight_sum": 3.5, "weight_min": 0.0, "weight_max": 2.0,
                                "tokens": 4, "adjusted_tokens": 1})
    st = {k: float(v) for k, v in _weights("sequence_truncate").stats().items()}
    # sequences: 8 and 0.5 -> sum 8.5 over 2; row 0's three tokens truncated: weights 3 (C_max) and 0.5
    assert st == pytest.approx({"ratio_sum": 8.5, "units": 2, "ratio_min": 0.5, "ratio_max": 8.0,
                                "weight_sum": 3.5, "weight_min": 0.5, "weight_max": 3.0,
                                "tokens": 4, "adjusted_tokens": 3})
    # a sequence with no valid token is no unit
    mask = MASK.clone()
    mask[1] = False
    st = importance_weights(OLD, SAMPLING, mask, mode="sequence_mask").stats()
    assert float(st["units"]) == 1 and float(st["ratio_min"]) == pytest.approx(8.0)
    none = importance_weights(OLD, SAMPLING, torch.zeros_like(MASK), mode="token_mask").stats()
    assert float(none["units"]) == 0 and float(none["ratio_min"]) == math.inf and float(none["ratio_max"]) == -math.inf


def test_no_gradient_flows_through_the_weights():
    old = OLD.clone().requires_grad_(True)
    sampling = SAMPLING.clone().requires_grad_(True)
    for mode in IS_MODES:
        out = importance_weights(old, sampling, MASK, mode=mode)
        assert not out.weights.requires_grad and not out.ratio.requires_grad


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="token_clip"):
        importance_weights(OLD, SAMPLING, MASK, mode="token_clip")
