"""The importance-sampling correction end to end with the vLLM engine: the sampler's log-probs of some
responses are lowered on purpose by log 4 per token, and the step's rollout/is_* metrics equal the
formula (rlvr.core.importance; the hand-computed vectors are in tests/core/test_importance.py).

vLLM's own log-probs equal the trainer's to ~1e-5 here (tests/rollout/test_vllm_engine.py), so the
unperturbed tokens have ratio ≈ 1 and the perturbed ones ≈ 4. Run by ``make test-vllm``.
"""

import math

import pytest

from rlvr.rollout import Completion
from tests.rollout.test_vllm_engine import tiny_llama_folder

pytestmark = pytest.mark.vllm
OFFSET = math.log(4.0)


def one_step(tmp_path, mode, **extra):
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    model_dir, reward = tiny_llama_folder(tmp_path, seed=3)
    cfg = build_config({
        "model": str(model_dir), "data": "rg:basic_arithmetic:size=64", "rollout_engine": "vllm", "max_steps": 1,
        "prompts_per_step": 2, "num_generations": 4, "max_completion_length": 12, "reward_funcs": [reward],
        "output_dir": str(tmp_path / mode), "progress_bar": False, "verifier_workers": 1,
        "vllm_importance_sampling_mode": mode, **extra,
    })
    trainer = Trainer(cfg)
    generate, lengths = trainer.engine.generate, []

    def perturbed(prompts, **kw):  # every other response: the sampler "saw" each token 4x less likely
        out = []
        for i, c in enumerate(generate(prompts, **kw)):
            shift = OFFSET if i % 2 == 0 else 0.0
            out.append(Completion(c.token_ids, [x - shift for x in c.logprobs], c.truncated))
            lengths.append((len(c.token_ids), i % 2 == 0))
        return out

    trainer.engine.generate = perturbed
    (metrics,) = trainer.train()
    return metrics, lengths


def test_token_truncate_clips_the_perturbed_tokens_at_the_cap(tmp_path):
    m, lengths = one_step(tmp_path, "token_truncate")  # cap 3 (TRL's default): the ≈4 ratios are cut
    tokens = sum(n for n, _ in lengths)
    moved = sum(n for n, p in lengths if p)
    assert m["rollout/is_clipped_frac"] == pytest.approx(moved / tokens, abs=1e-12)
    assert m["rollout/is_ratio_max"] == pytest.approx(4.0, rel=1e-3)
    assert m["rollout/is_ratio_min"] == pytest.approx(1.0, abs=1e-3)
    assert m["rollout/is_ratio_mean"] == pytest.approx((4 * moved + (tokens - moved)) / tokens, rel=1e-3)


def test_sequence_mask_masks_the_perturbed_sequences(tmp_path):
    m, lengths = one_step(tmp_path, "sequence_mask")  # 4^len > 3: every perturbed response is masked
    tokens = sum(n for n, _ in lengths)
    moved = sum(n for n, p in lengths if p)
    assert m["rollout/is_clipped_frac"] == pytest.approx(moved / tokens, abs=1e-12)
    assert m["rollout/is_ratio_max"] == pytest.approx(max(4.0 ** n for n, p in lengths if p), rel=1e-2)
    expected_mean = sum(4.0 ** n if p else 1.0 for n, p in lengths) / len(lengths)
    assert m["rollout/is_ratio_mean"] == pytest.approx(expected_mean, rel=1e-2)


def test_off_for_the_vllm_engine_when_asked(tmp_path):
    m, _ = one_step(tmp_path, "token_mask", vllm_importance_sampling_correction=False)
    assert m["rollout/is_ratio_mean"] is None and m["rollout/is_clipped_frac"] is None
