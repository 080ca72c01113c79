"""TRL 1.16's ``cast_lm_head_to_fp32`` beside rlvr's (rlvr.core.lm_head.cast_lm_head_to_fp32): on a bfloat16 model,
TRL's own trainer (its cast, made in ``GRPOTrainer.__init__``) and rlvr's cast give the same log-probs and
entropies, from plain logits and from rlvr's chunked head; without the cast the bf16 head's log-probs differ
(so the comparison is not vacuous)."""

from __future__ import annotations

import pytest
import torch

from rlvr.core.lm_head import Fp32Head, cast_lm_head_to_fp32
from rlvr.models import load_policy
from rlvr.train.batching import collate, response_logprobs

from .conftest import GENERATIONS, MAX_COMPLETION_LENGTH, TEMPERATURE

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

# no padding: in bfloat16 a padded row's backbone rounds differently in TRL's forward (no position ids) and rlvr's;
# the head is what is compared here
PROMPTS = [[10, 11, 12], [20, 21, 22]]
RESPONSES = [[30, 31, 32, 33, 34, 35], [40, 41, 42, 43, 44, 45]]


@pytest.fixture(scope="module")
def trl_model(tmp_path_factory):
    """TRL's policy after its own __init__ with cast_lm_head_to_fp32=True, loaded in bfloat16."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tests.helpers.tiny_model import save_tiny_model

    folder = tmp_path_factory.mktemp("fp32_head")
    model_dir = save_tiny_model(folder / "model")
    args = GRPOConfig(output_dir=str(folder / "out"), use_cpu=True, report_to=[], bf16=False,
                      per_device_train_batch_size=GENERATIONS, num_generations=GENERATIONS,
                      max_completion_length=MAX_COMPLETION_LENGTH, temperature=TEMPERATURE, save_strategy="no",
                      cast_lm_head_to_fp32=True, model_init_kwargs={"dtype": torch.bfloat16})
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          args=args, train_dataset=Dataset.from_list([{"prompt": "a"}]))
    return trainer, model_dir


def _rlvr_model(model_dir, *, cast: bool):
    model, _ = load_policy(str(model_dir), dtype="bfloat16", seed=0)
    if cast:
        cast_lm_head_to_fp32(model)
    return model.eval()


@pytest.mark.parametrize("head_chunk", [0, 4])
def test_the_float32_head_gives_trls_log_probs(trl_model, head_chunk):
    trainer, model_dir = trl_model
    batch = collate(PROMPTS, RESPONSES, pad_token_id=trainer.processing_class.pad_token_id)
    with torch.no_grad():
        theirs, their_entropy, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, *batch.concatenated()[:2], batch.response_width, compute_entropy=True)
        model = _rlvr_model(model_dir, cast=True)
        assert isinstance(model.get_output_embeddings(), Fp32Head)
        assert model.get_output_embeddings().weight.dtype == torch.float32
        ours, entropy = response_logprobs(model, batch, temperature=TEMPERATURE, with_entropy=True,
                                          head_chunk=head_chunk)
        plain, _ = response_logprobs(_rlvr_model(model_dir, cast=False), batch, temperature=TEMPERATURE)
    mask = batch.response_mask
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy[mask], their_entropy[mask], rtol=1e-5, atol=1e-5)
    assert float((plain[mask] - theirs[mask]).abs().max()) > 1e-3  # the bf16 head is not the float32 one


def test_a_lora_adapter_on_the_head_is_refused(tmp_path):
    from rlvr.models import apply_lora
    from tests.helpers.tiny_model import save_tiny_model

    model, _ = load_policy(str(save_tiny_model(tmp_path / "m")), dtype="float32", seed=0)
    model = apply_lora(model, r=2, alpha=4, dropout=0.0, target_modules=["lm_head"])
    with pytest.raises(ValueError, match="cast_lm_head_to_fp32=true needs a plain nn.Linear LM head"):
        cast_lm_head_to_fp32(model)
