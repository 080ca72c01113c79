"""Training through `rlvr vllm-serve` (vllm_mode=server): SmolLM2 trains 2 steps with the same responses as
the colocated engine and the same seeds, and its generation follows the updates; a server killed
mid-run stops the run with the error that names the fix, and the run resumes once a server is back.

The servers are subprocesses on 127.0.0.1 (tests/rollout/test_vllm_server.py's Server); weights
travel over gloo. Run by ``make test-vllm``.
"""

import pytest
import torch

from rlvr.rollout import GREEDY, HFEngine
from tests.rollout.test_vllm_engine import LOWERCASE_REWARD, tiny_llama_folder
from tests.rollout.test_vllm_server import Server

pytestmark = pytest.mark.vllm


def trainer_for(tmp_path, model, reward, *, out, max_steps, server=None, callbacks=(), **extra):
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    options = {
        "model": str(model), "data": "rg:basic_arithmetic:size=64", "rollout_engine": "vllm",
        "max_steps": max_steps, "prompts_per_step": 2, "num_generations": 4, "max_completion_length": 16,
        "reward_funcs": [reward], "learning_rate": 1e-3, "output_dir": str(tmp_path / out), "progress_bar": False,
        "verifier_workers": 1, **extra,
    }
    if server is not None:
        options |= {"vllm_mode": "server", "vllm_server_port": server.port, "vllm_group_port": server.group_port,
                    "vllm_server_timeout": 60}
    return Trainer(build_config(options), callbacks=callbacks)


def recorded(trainer):
    calls, generate = [], trainer.engine.generate

    def recording(prompts, **kw):
        out = generate(prompts, **kw)
        calls.append(out)
        return out

    trainer.engine.generate = recording
    return calls


@pytest.mark.slow
def test_smollm2_trains_through_the_server_as_through_the_colocated_engine(tmp_path):
    reward_file = tmp_path / "reward.py"
    reward_file.write_text(LOWERCASE_REWARD)
    reward = f"{reward_file}:lowercase_frac"
    colocated = trainer_for(tmp_path, "smollm2-135m", reward, out="colocated", max_steps=2)
    colocated_calls = recorded(colocated)
    colocated_metrics = colocated.train()
    del colocated

    server = Server("smollm2-135m", tmp_path / "server.log")
    try:
        server.wait_healthy()
        trainer = trainer_for(tmp_path, "smollm2-135m", reward, out="served", max_steps=2, server=server)
        tok = trainer.tokenizer
        prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                           tokenize=True, return_dict=True)["input_ids"]
                   for q in ("What is 7 + 5?", "Name a colour.")]
        before = [c.token_ids for c in trainer.engine.generate(prompts, max_new_tokens=16, sampling=GREEDY)]
        calls = recorded(trainer)
        metrics = trainer.train()
        del trainer.engine.generate  # the engine's own method again (not recorded)
        after = [c.token_ids for c in trainer.engine.generate(prompts, max_new_tokens=16, sampling=GREEDY)]
        plain = HFEngine(trainer.policy, pad_token_id=tok.pad_token_id, eos_token_ids=trainer.engine.eos_token_ids)
        reference = [c.token_ids for c in plain.generate(prompts, max_new_tokens=16, sampling=GREEDY)]
    finally:
        server.stop()
    assert [m["train/loss"] is not None for m in metrics] == [True, True]
    # both steps: the served responses are the colocated engine's (same seeds; step 2 after one update)
    assert [[c.token_ids for c in call] for call in calls] == [[c.token_ids for c in call] for call in colocated_calls]
    for served_call, colocated_call in zip(calls, colocated_calls):
        torch.testing.assert_close(torch.tensor([x for c in served_call for x in c.logprobs]),
                                   torch.tensor([x for c in colocated_call for x in c.logprobs]), rtol=1e-4, atol=1e-4)
    for m, c in zip(metrics, colocated_metrics):
        assert m["rollout/logprob_mismatch"] < 1e-3  # the server sampled from the trainer's current weights
        assert m["train/loss"] == pytest.approx(c["train/loss"], rel=1e-3, abs=1e-6)
    assert after == reference and after != before  # the updates reached the server


class KillServerAt:
    def __init__(self, server, step):
        self.server, self.step = server, step

    def on_step_end(self, step, metrics):
        if step == self.step:
            self.server.stop()


def test_a_server_killed_mid_run_stops_it_with_the_fix_and_the_run_resumes(tmp_path):
    model_dir, reward = tiny_llama_folder(tmp_path, seed=3)
    straight_server = Server(model_dir, tmp_path / "straight.log")
    try:
        straight_server.wait_healthy()
        straight = trainer_for(tmp_path, model_dir, reward, out="straight", max_steps=3,
                               server=straight_server).train()
    finally:
        straight_server.stop()

    server = Server(model_dir, tmp_path / "first.log")
    try:
        server.wait_healthy()
        trainer = trainer_for(tmp_path, model_dir, reward, out="run", max_steps=3, server=server, save_steps=1,
                              callbacks=[KillServerAt(server, 1)])
        with pytest.raises(RuntimeError, match=r"vLLM server at http://127\.0\.0\.1:\d+ stopped answering during "
                                               r"generate .* checkpoint is intact.*resume=true"):
            trainer.train()
    finally:
        server.stop()
    assert (tmp_path / "run" / "checkpoint-1").is_dir()

    again = Server(model_dir, tmp_path / "again.log")  # another port: where the server runs may change
    try:
        again.wait_healthy()
        resumed = trainer_for(tmp_path, model_dir, reward, out="run", max_steps=3, server=again, resume=True).train()
    finally:
        again.stop()
    assert [m["step"] for m in resumed] == [2, 3]
    for a, b in zip(straight[1:], resumed):  # the resumed run repeats the uninterrupted one
        for key in ("rollout/reward_mean", "rollout/response_len_mean", "train/loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), (a["step"], key)


def test_two_ddp_processes_sample_from_one_server_as_one_process_does(tmp_path):
    # each rank sends its share of the prompts, rank 0 alone pushes the weights (the version rule keeps
    # rank 1 from sampling before the push): the 2-process run trains what the 1-process run trains
    import json
    import os
    import subprocess
    import sys

    model_dir, reward = tiny_llama_folder(tmp_path, seed=3)
    server = Server(model_dir, tmp_path / "server.log")
    try:
        server.wait_healthy()
        one = trainer_for(tmp_path, model_dir, reward, out="one", max_steps=2, server=server).train()
        options = {"model": model_dir, "data": "rg:basic_arithmetic:size=64", "rollout_engine": "vllm",
                   "max_steps": 2, "prompts_per_step": 2, "num_generations": 4, "max_completion_length": 16,
                   "reward_funcs": f"[{reward}]", "learning_rate": 1e-3, "output_dir": tmp_path / "two",
                   "progress_bar": False, "verifier_workers": 1, "vllm_mode": "server",
                   "vllm_server_port": server.port, "vllm_group_port": server.group_port, "vllm_server_timeout": 60}
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", "nproc=2",
                               *(f"{k}={v}" for k, v in options.items())],
                              check=False, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        server.stop()
    two = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    for a, b in zip(one, two, strict=True):
        for key in ("rollout/reward_mean", "rollout/response_len_mean", "train/loss"):
            # step 2 follows an update whose gradients 2 ranks summed in another order: rounding (~1e-5)
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
        assert b["rollout/logprob_mismatch"] < 1e-4  # both ranks sampled from the pushed weights


CONNECT_AND_DIE = """
import os, sys
sys.path.insert(0, {root!r})
from tests.rollout.test_vllm_engine import EOS, PAD_ID, tiny_llama
from rlvr.rollout.vllm_client import VLLMServerEngine
VLLMServerEngine(tiny_llama(seed=0), pad_token_id=PAD_ID, eos_token_ids=[EOS], base_url={url!r},
                 group_port={group_port}, timeout=30)
print("pushed", flush=True)
os._exit(0)  # a crash: the weight group is never closed
"""


def test_trainers_that_died_without_closing_are_replaced_on_the_same_server(tmp_path):
    # the next trainer's /init_weight_group closes the dead one's group before it joins (else it would
    # reach the old TCPStore on the same port and its stale keys, and time out)
    import subprocess
    import sys
    from pathlib import Path

    from tests.rollout.test_vllm_engine import tiny_llama

    tiny_llama(seed=0).save_pretrained(tmp_path / "tiny")
    server = Server(tmp_path / "tiny", tmp_path / "server.log")
    try:
        server.wait_healthy()
        code = CONNECT_AND_DIE.format(root=str(Path(__file__).resolve().parents[2]), url=server.url,
                                      group_port=server.group_port)
        for _ in range(3):
            proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                                  timeout=120)
            assert proc.returncode == 0 and "pushed" in proc.stdout, proc.stderr[-2000:]
    finally:
        server.stop()
