"""The same command gives the same numbers: two runs of `rlvr train` on one machine, with the same thread
count, write byte-identical metrics (timing keys excepted), samples and final weights.

The two runs go side by side, each on 2 threads of this 2-core machine, so each is the other's load: the
summation orders that depend on timing (the one that made runs part: plain indexing's backward,
index_put(accumulate=True), in response_logprobs; found with tools/first_difference.py) show up here.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from rlvr.models.smollm2 import smollm2_path

TIMING = ("time/", "perf/", "step_time")  # wall-clock seconds, tokens per second, the process's memory


def _default_shape(folder: Path) -> str:
    """The default model's tokenizer and layer shape (SmolLM2-135M: hidden 576, 9/3 heads, vocab 49 152) at 2
    layers, random weights. Its vocabulary matters: the [n, 1, V] first-token gradient is large enough for
    torch's parallel accumulate (the order that used to vary), and sampled ids decode to text."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    config = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                         max_position_embeddings=2048, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _comparable(run: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if not k.startswith(TIMING)} for line in lines]


def _weights_sha(run: Path) -> str:
    return hashlib.sha256((run / "model.safetensors").read_bytes()).hexdigest()


@pytest.mark.parametrize("model", ["tiny-random", "default shape"])
def test_two_runs_of_the_same_command_are_bit_identical(tmp_path, lowercase_reward, model):
    """The default job (its data, batch, sampling, optimiser) with a reward random weights can vary (the
    lowercase fraction; accuracy would be 0 for every response, and nothing would train)."""
    model = _default_shape(tmp_path / "model") if model == "default shape" else model
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
    runs = [tmp_path / "a", tmp_path / "b"]
    # the default job's options but the batch: 3 prompts x 4 responses, so a group straddles the two threads'
    # halves of the first-token gradient (the accumulate that raced)
    options = [f"model={model}", "max_steps=5", f"reward_funcs=[{lowercase_reward}]", "save_steps=0",
               "max_completion_length=48", "prompts_per_step=3", "num_generations=4", "progress_bar=false"]
    procs = [subprocess.Popen([sys.executable, "-m", "rlvr.cli", "train", *options, f"output_dir={run}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for run in runs]
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
    a, b = (_comparable(run) for run in runs)
    assert len(a) == 5 and a == b
    assert (runs[0] / "samples.jsonl").read_bytes() == (runs[1] / "samples.jsonl").read_bytes()
    assert _weights_sha(runs[0]) == _weights_sha(runs[1])
    assert any(line["train/grad_norm"] > 0 for line in a) and a[0] != a[-1]  # they trained: something to compare
