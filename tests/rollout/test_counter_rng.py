"""The decoding loop's random numbers: u(seed, position) on the device, against a pure-Python reference."""

import math

import torch

from rlvr.rollout import decode_engine  # u(seed, position) lives with the engine's sampler

M32 = 0xFFFFFFFF


def _lowbias32(x: int) -> int:
    """Chris Wellons' lowbias32 on Python integers (no overflow possible): the reference."""
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & M32
    x ^= x >> 15
    x = (x * 0x735A2D97) & M32
    return x ^ (x >> 15)


def _reference_uniform(seed: int, counter: int) -> float:
    high, low = (seed % (1 << 63)) >> 32, seed & M32
    lanes = []
    for lane in range(2):
        h = _lowbias32(high ^ decode_engine._LANES[0][lane])
        h = _lowbias32(h ^ low ^ decode_engine._LANES[1][lane])
        h = _lowbias32(h ^ counter ^ decode_engine._LANES[2][lane])
        lanes.append(_lowbias32(h ^ decode_engine._LANES[3][lane]))
    return (((lanes[0] >> 5) << 26) | (lanes[1] >> 6)) / 2**53


def test_the_device_numbers_are_the_reference_bit_for_bit_including_extreme_words():
    """int64 arithmetic on 32-bit words never overflows (both multipliers < 2^31): extreme seeds and counters
    give exactly the pure-Python values."""
    seeds = [0, 1, 2, M32, M32 + 1, 2**62, 2**63 - 1, 123456789012345678, 7]
    counters = [0, 1, 511, M32]
    lanes = decode_engine.lane_constants("cpu")
    words = decode_engine.split_seeds(seeds, "cpu")
    for counter in counters:
        got = decode_engine.uniform(words, torch.tensor([counter]), lanes).tolist()
        assert got == [_reference_uniform(s, counter) for s in seeds]


def test_a_rows_number_depends_on_its_seed_and_position_only():
    lanes = decode_engine.lane_constants("cpu")
    alone = decode_engine.uniform(decode_engine.split_seeds([42], "cpu"), torch.tensor([5]), lanes)
    batch = decode_engine.uniform(decode_engine.split_seeds([9, 42, 3, 42], "cpu"), torch.tensor([5]), lanes)
    assert batch[1] == batch[3] == alone[0] and batch[0] != batch[1]
    assert decode_engine.uniform(decode_engine.split_seeds([42], "cpu"), torch.tensor([6]), lanes) != alone


def test_numbers_are_uniform_and_neighbours_uncorrelated():
    """65 536 consecutive seeds (the worst case for a weak mix) at positions 0 and 1: a chi-square over 256
    bins, the mean and variance, and the correlation of neighbouring seeds and positions, each within 4
    standard errors (a 1-in-15 000 fluke; the numbers are fixed, so the test is deterministic)."""
    n = 1 << 16
    lanes = decode_engine.lane_constants("cpu")
    words = decode_engine.split_seeds(range(n), "cpu")
    u0 = decode_engine.uniform(words, torch.tensor([0]), lanes)  # [n]
    u1 = decode_engine.uniform(words, torch.tensor([1]), lanes)
    assert float(u0.min()) >= 0 and float(u0.max()) < 1
    assert torch.equal(u0 * 2**53, (u0 * 2**53).round())  # 53-bit multiples
    for u in (u0, u1):
        counts = torch.bincount((u * 256).long(), minlength=256).double()
        chi2 = float(((counts - n / 256) ** 2 / (n / 256)).sum())
        assert abs((chi2 - 255) / math.sqrt(2 * 255)) < 4
        assert abs(float(u.mean()) - 0.5) < 4 * math.sqrt(1 / 12 / n)
        assert abs(float(u.var()) - 1 / 12) < 4 * 0.0745 / math.sqrt(n)  # sd of a U(0,1) sample variance: ~0.0745/sqrt(n)
    bound = 4 / math.sqrt(n)
    assert abs(float(torch.corrcoef(torch.stack([u0, u1]))[0, 1])) < bound  # position t vs t + 1
    assert abs(float(torch.corrcoef(torch.stack([u0[:-1], u0[1:]]))[0, 1])) < bound  # seed s vs s + 1
    high_bits = ((u0 * 2).long() ^ (u1 * 2).long()).double()  # the top bits of two positions agree half the time
    assert abs(float(high_bits.mean()) - 0.5) < 4 * 0.5 / math.sqrt(n)
