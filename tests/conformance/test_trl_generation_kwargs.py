"""TRL 1.16's ``generation_kwargs`` beside rlvr's: TRL's own trainer builds its GenerationConfig from them (over its
sampling options) and keeps ``temperature`` for its log-probs; rlvr's plan gives its engines the same sampling
settings and its update the same temperature. Keys rlvr's engines have no counterpart for are refused."""

from __future__ import annotations

import pytest

from rlvr.config import build_config
from rlvr.train.plan import compile_plan

from .conftest import GENERATIONS, MAX_COMPLETION_LENGTH

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

OPTIONS = dict(temperature=0.9, top_p=0.8, repetition_penalty=1.1)
KWARGS = {"top_k": 7, "temperature": 0.6, "min_p": 0.05}


def test_the_engines_sample_as_trls_generation_config(tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tests.helpers.tiny_model import save_tiny_model

    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], bf16=False,
                      per_device_train_batch_size=GENERATIONS, num_generations=GENERATIONS,
                      max_completion_length=MAX_COMPLETION_LENGTH, save_strategy="no", generation_kwargs=KWARGS,
                      **OPTIONS)
    trainer = GRPOTrainer(model=str(save_tiny_model(tmp_path / "m")), args=args,
                          reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          train_dataset=Dataset.from_list([{"prompt": "a"}]))
    theirs = trainer.generation_config
    plan = compile_plan(build_config({"generation_kwargs": KWARGS, **OPTIONS}))
    ours = plan.rollout.sampling
    assert (ours.temperature, ours.top_p, ours.top_k, ours.min_p, ours.repetition_penalty) == (
        theirs.temperature, theirs.top_p, theirs.top_k, theirs.min_p, theirs.repetition_penalty)
    assert ours.temperature == 0.6 and ours.top_k == 7  # the kwargs won over the options
    assert plan.update.temperature == trainer.temperature == 0.9  # the log-probs keep `temperature`


def test_a_key_rlvr_cannot_honour_is_refused():
    with pytest.raises(ValueError, match="rlvr's engines take temperature, top_p, top_k, min_p, repetition_penalty "
                                         "here, not num_beams"):
        build_config({"generation_kwargs": {"num_beams": 4}})
