"""async_generation=true with the colocated vLLM engine: step t's responses come from the weights step
t−1 started from (checked by regenerating them from a snapshot of those weights), and a run resumed
from a checkpoint repeats the uninterrupted one (the round sampled ahead is saved in it).

Run in the vLLM environment (``make test-vllm``); they fail, never skip, without vllm.
"""

import json
import os
import signal

import pytest
import torch

from rlvr.rollout import Sampling
from tests.rollout.test_vllm_engine import tiny_llama_folder

pytestmark = pytest.mark.vllm


def async_trainer(tmp_path, model_dir, reward, *, max_steps, out="run", callbacks=(), **extra):
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    cfg = build_config({
        "model": str(model_dir), "data": "rg:basic_arithmetic:size=64", "rollout_engine": "vllm",
        "async_generation": True, "max_steps": max_steps, "prompts_per_step": 2, "num_generations": 4,
        "max_completion_length": 12, "reward_funcs": [reward], "learning_rate": 1e-2,
        "output_dir": str(tmp_path / out), "progress_bar": False, "verifier_workers": 1, **extra,
    })
    return Trainer(cfg, callbacks=callbacks)


def record_engine(trainer):
    """Every generate call (prompts, seeds, completions, syncs so far) and the weights at every sync."""
    calls, synced = [], [{k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}]
    engine, generate, sync = trainer.engine, trainer.engine.generate, trainer.engine.sync_weights

    def recording_generate(prompts, **kw):
        syncs_before = len(synced) - 1
        out = generate(prompts, **kw)
        calls.append({"prompts": prompts, "kw": kw, "out": out, "syncs": syncs_before})
        return out

    def recording_sync():
        synced.append({k: v.detach().clone() for k, v in trainer.policy.state_dict().items()})
        sync()

    engine.generate, engine.sync_weights = recording_generate, recording_sync
    return calls, synced


def test_step_t_samples_from_the_weights_step_t_minus_1_started_from(tmp_path):
    model_dir, reward = tiny_llama_folder(tmp_path, seed=3)
    trainer = async_trainer(tmp_path, model_dir, reward, max_steps=3)
    calls, synced = record_engine(trainer)
    metrics = trainer.train()
    assert [m["train/loss"] is not None for m in metrics] == [True, True, True]
    # step 1 samples its own round (θ0); step 2's is sampled during step 1's update (θ0 still);
    # step 3's during step 2's update, after step 1's weights were pushed (θ1)
    assert [c["syncs"] for c in calls] == [0, 0, 1] and len(synced) == 1 + 3
    engine = trainer.engine
    for index, weights_index in ((1, 0), (2, 1)):
        call = calls[index]
        trainer.policy.load_state_dict(synced[weights_index])
        engine.sync_weights()
        again = engine.generate(call["prompts"], **call["kw"])
        assert [c.token_ids for c in again] == [c.token_ids for c in call["out"]]
        torch.testing.assert_close(torch.tensor([x for c in again for x in c.logprobs]),
                                   torch.tensor([x for c in call["out"] for x in c.logprobs]), rtol=1e-4, atol=1e-4)
        trainer.policy.load_state_dict(synced[weights_index + 1])  # the weights the step then updated
        engine.sync_weights()
        newer = engine.generate(call["prompts"], **call["kw"])
        assert [x for c in newer for x in c.logprobs] != [x for c in call["out"] for x in c.logprobs]
    # the trainer scores step 2 and 3 with newer weights than sampled them: the mismatch shows the lag
    assert metrics[0]["rollout/logprob_mismatch"] < 1e-4
    assert all(m["rollout/logprob_mismatch"] > 1e-3 for m in metrics[1:])


class InterruptAt:
    """Sends this process SIGINT at the end of a step: the trainer saves and stops, as on Ctrl-C."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, metrics):
        if step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


def test_async_run_interrupted_and_resumed_repeats_the_uninterrupted_one(tmp_path):
    from rlvr.run.stopping import TrainingInterrupted

    model_dir, reward = tiny_llama_folder(tmp_path, seed=3)
    straight = async_trainer(tmp_path, model_dir, reward, max_steps=3, out="straight").train()
    stopped = async_trainer(tmp_path, model_dir, reward, max_steps=3, out="resumed", callbacks=[InterruptAt(1)])
    with pytest.raises(TrainingInterrupted):
        stopped.train()  # checkpoint-1 holds step 2's responses, sampled from θ0 during step 1's update
    state = json.loads((tmp_path / "resumed" / "checkpoint-1" / "rlvr_state.json").read_text())
    assert [entry["step"] for entry in state["rollout_ahead"]] == [2]
    resumed = async_trainer(tmp_path, model_dir, reward, max_steps=3, out="resumed", resume=True).train()
    assert [m["step"] for m in resumed] == [2, 3]
    keys = ("rollout/reward_mean", "rollout/response_len_mean", "train/loss", "train/grad_norm",
            "rollout/logprob_mismatch")
    for a, b in zip(straight[1:], resumed):
        for key in keys:
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), (a["step"], key)


def test_sampling_settings_unchanged_by_the_thread(tmp_path):
    # the round sampled on the rollout thread uses the run's sampling settings (temperature 0.7 here)
    model_dir, reward = tiny_llama_folder(tmp_path, seed=3)
    trainer = async_trainer(tmp_path, model_dir, reward, max_steps=2, temperature=0.7)
    calls, _ = record_engine(trainer)
    trainer.train()
    assert [c["kw"]["sampling"] for c in calls] == [Sampling(temperature=0.7)] * 2
