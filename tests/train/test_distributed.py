"""Several processes (torchrun, gloo on CPU) train exactly what one process trains.

The 2-process runs go through the real launcher (`rlvr train nproc=2`), so rank placement, the
all-gather of groups, the sharded update with zero-loss fill-in micro-batches, DDP's gradient
all-reduce and rank-0-only writes are all exercised.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import build_config
from rlvr.parallel.runtime import DistContext
from rlvr.train.batching import rank_share
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides

# GRPO with KL, two mini-batches (old log-probs; the micro-batch size follows the processes, as TRL's
# steps_per_generation) and DAPO's dynamic sampling on a reward that is uniform for about half the prompts
# (the kept set is decided after the gather, over several rounds); DaGRPO with anchors and pair masks, its
# micro-batches cut by a token budget (ranks run different numbers of them); TA-GRPO with pools of 3 variants.
CONFIGS = {
    "grpo": dict(beta=0.04, steps_per_generation=2, dynamic_sampling=True, reward_funcs=["GATED"]),
    "dagrpo": dict(algo="dagrpo", data="rg:chain_sum:size=32", reward_funcs=["accuracy", "LOWERCASE"],
                   max_tokens_per_micro_batch=30),
    "tagrpo": dict(algo="tagrpo", data="rg:chain_sum:size=16", num_rephrasings=2),
    "lora": dict(lora_r=4, beta=0.04),  # the reference is the (sharded) policy with adapters off
    "sft": dict(algo="sft", data="rg:chain_sum:size=32"),
    # the sampler/trainer IS correction forced on, with TA-GRPO's rephrased responses scored once more on
    # the prompt they were sampled from (their IS numerator); its min/max are max-reduced over the ranks
    "is_correction": dict(algo="tagrpo", data="rg:chain_sum:size=16", num_rephrasings=2, steps_per_generation=2,
                          vllm_importance_sampling_correction=True, vllm_importance_sampling_mode="token_truncate"),
    # the memory options: checkpointed layers (recomputed inside FSDP2's hooks), the chunked LM head and
    # micro-batches cut by a token budget (so the ranks run different numbers of them)
    "memory": dict(beta=0.04, steps_per_generation=2, gradient_checkpointing=True, lm_head_chunk_tokens=5,
                   max_tokens_per_micro_batch=20),
    # TRL's top_entropy_quantile: the threshold is the quantile over every process's sampled tokens of the
    # micro-batch (gathered), so 2 processes keep the tokens 1 process keeps (no entropy bonus: TRL takes its mean
    # per process, so it depends on how the micro-batch is shared out; docs/training.md)
    "entropy_mask": dict(top_entropy_quantile=0.5, steps_per_generation=2),
}

GATED_REWARD = '''
import zlib

def gated(prompts, completions, **kw):
    """0 for every response to about half of the prompts (uniform groups), else the lowercase fraction."""
    return [0.0 if zlib.crc32(str(p).encode()) % 2 else sum(ch.islower() for ch in c) / max(1, len(c))
            for p, c in zip(prompts, completions)]
'''


def _options(name: str, out: Path, reward: str) -> dict:
    extra = dict(CONFIGS[name])
    gated = out.parent / "gated_reward.py"
    gated.write_text(GATED_REWARD)
    names = {"LOWERCASE": reward, "GATED": f"{gated}:gated"}
    extra["reward_funcs"] = [names.get(f, f) for f in extra.pop("reward_funcs", ["LOWERCASE"])]
    return tiny_overrides(out, max_steps=2, learning_rate=1e-4, save_steps=1, save_total_limit=None, **extra)


def _cli_args(options: dict) -> list[str]:
    def value(v):
        if v is None:
            return "null"
        return "[" + ",".join(map(str, v)) + "]" if isinstance(v, list) else str(v)

    return [f"{k}={value(v)}" for k, v in options.items()]


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(next((run / f"checkpoint-{step}").glob("*.safetensors")))  # LoRA: adapter_model.safetensors


def _losses(run: Path) -> list[float]:
    return [json.loads(line)["train/loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _launch(options: dict, *extra: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", *_cli_args(options), *extra],
                          check=False, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize(("name", "parallelism"), [("grpo", "ddp"), ("dagrpo", "ddp"), ("tagrpo", "ddp"),
                                                   ("grpo", "fsdp"), ("lora", "fsdp"), ("sft", "ddp"),
                                                   ("is_correction", "ddp"),
                                                   ("memory", "fsdp"), ("memory", "ddp"), ("entropy_mask", "ddp")])
def test_two_processes_equal_one(tmp_path, lowercase_reward, name, parallelism):
    one, two = tmp_path / "one", tmp_path / "two"
    Trainer(build_config(_options(name, one, lowercase_reward))).train()
    _launch(_options(name, two, lowercase_reward), "nproc=2", f"parallelism={parallelism}")
    # one metrics line per step (rank 0 writes alone), the same losses
    assert len(_losses(two)) == 2
    assert _losses(two) == pytest.approx(_losses(one), rel=1e-5, abs=1e-6)
    for step in (1, 2):
        a, b = _weights(one, step), _weights(two, step)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.allclose(a[key], b[key], rtol=0, atol=1e-5), (step, key, (a[key] - b[key]).abs().max())
    if name == "lora":  # the base the adapter names, written from the state gathered over the ranks
        a, b = (load_file(run / "base_model" / "model.safetensors") for run in (one, two))
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    first, last = _weights(one, 1), _weights(one, 2)
    assert max(float((last[k] - first[k]).abs().max()) for k in first) > 5e-5  # the weights do move
    samples_one = [json.loads(x)["completion"] for x in (one / "samples.jsonl").read_text().splitlines()]
    samples_two = [json.loads(x)["completion"] for x in (two / "samples.jsonl").read_text().splitlines()]
    assert samples_two == samples_one  # same tokens sampled on 2 ranks as on 1
    if name == "is_correction":  # the IS statistics of 2 ranks are those of 1
        lines = [[json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()] for run in (one, two)]
        for m1, m2 in zip(*lines):
            for key in ("rollout/is_ratio_mean", "rollout/is_ratio_min", "rollout/is_ratio_max"):
                assert m2[key] == pytest.approx(m1[key], abs=1e-5) and abs(m1[key] - 1) < 1e-4, key
            assert m1["rollout/is_clipped_frac"] == m2["rollout/is_clipped_frac"] == 0.0
    if name == "grpo":  # dynamic sampling needed more than one round somewhere
        rounds = [json.loads(x)["rollout/num_gen_batches"] for x in (one / "metrics.jsonl").read_text().splitlines()]
        assert max(rounds) > 1


def test_fsdp_checkpoint_resumes_in_one_process(tmp_path, lowercase_reward):
    """FSDP2 checkpoints hold full weights and name-keyed optimiser states: any world size resumes them."""
    one, split = tmp_path / "one", tmp_path / "split"
    Trainer(build_config(_options("grpo", one, lowercase_reward))).train()
    _launch({**_options("grpo", split, lowercase_reward), "max_steps": 1}, "nproc=2", "parallelism=fsdp")
    assert json.loads((split / "checkpoint-1" / "rlvr_state.json").read_text())["optimizer_format"] == "fqn"
    Trainer(build_config({**_options("grpo", split, lowercase_reward), "resume": True})).train()
    a, b = _weights(one, 2), _weights(split, 2)
    for key in a:
        assert torch.allclose(a[key], b[key], rtol=0, atol=1e-5), (key, (a[key] - b[key]).abs().max())
    assert _losses(split) == pytest.approx(_losses(one), rel=1e-5, abs=1e-6)


def test_rank_share_keeps_pools_whole_and_covers_the_minibatch():
    pool_ids = torch.tensor([7, 7, 7, 3, 3, 9, 9, 9, 9, 4])
    mini = list(range(10))
    for world in (1, 2, 3, 4, 5):
        shares = [rank_share(pool_ids, mini, DistContext(rank=r, world_size=world), r) for r in range(world)]
        assert sorted(i for s in shares for i in s) == mini
        for share in shares:  # a pool is never split between ranks
            for pool in {int(pool_ids[i]) for i in share}:
                assert {i for i in mini if int(pool_ids[i]) == pool} <= set(share)
    # 4 pools on 3 ranks: 1, 1 and 2 pools, in order
    assert [rank_share(pool_ids, mini, DistContext(rank=r, world_size=3), r) for r in range(3)] == [
        [0, 1, 2], [3, 4], [5, 6, 7, 8, 9]]


def test_nproc_must_match_the_launched_processes(tmp_path, monkeypatch):
    from rlvr.train.trainer import Trainer

    cfg = build_config(tiny_overrides(tmp_path / "r", nproc=2))
    with pytest.raises(ValueError, match="nproc=2 but this job has 1 process"):
        Trainer(cfg)


def test_too_few_prompts_for_the_processes(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", "nproc=2",
                           *_cli_args(tiny_overrides(tmp_path / "r", max_steps=1, prompts_per_step=1))],
                          check=False, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode != 0
    assert "the 1 prompts of a step must share out evenly over the 2 processes" in proc.stderr



def test_bf16_mixed_on_two_fsdp_processes_trains_what_one_trains_to_bf16_precision(tmp_path, lowercase_reward):
    """bf16=true under FSDP2: MixedPrecisionPolicy (bf16 all-gathers, fp32 gradient reduction) over fp32
    shards, autocast on top; one process computes under autocast over fp32 weights.

    Not bit-equal like the fp32 runs: the residual stream is bf16 under FSDP's policy and fp32 under
    autocast alone. Measured: losses 0.2 % apart, the second step's update (w2 - w1) at cosine
    0.99994 between the two (0.982 to the fp32 run's) with 99.8 % of its signs equal.

    The updates compare only when both runs drew the same responses. The two numerics' logits differ by up
    to ~3e-3 here, which moves ~0.75 % of draws that fall near a CDF boundary (any sampler: measured the same
    with torch.rand numbers as with rlvr's hashed ones), i.e. 0-5 of the 16 responses depending on the seed
    (seeds 0-11, 2026-12-05). The test uses seed 10, whose responses agree, and checks that first, so a
    moved draw is reported as what it is, not as an update mismatch."""
    one, two, fp32 = tmp_path / "one", tmp_path / "two", tmp_path / "fp32"
    seeded = {"seed": 10}
    Trainer(build_config({**_options("memory", one, lowercase_reward), "bf16": True, **seeded})).train()
    _launch({**_options("memory", two, lowercase_reward), "bf16": True, **seeded}, "nproc=2", "parallelism=fsdp")
    Trainer(build_config({**_options("memory", fp32, lowercase_reward), **seeded})).train()
    responses = [[json.loads(line)["completion"] for line in (run / "samples.jsonl").read_text().splitlines()]
                 for run in (one, two)]
    assert responses[0] == responses[1], "a draw moved between the two numerics (see the docstring): not an FSDP bug"
    assert _losses(two) == pytest.approx(_losses(one), rel=1e-2, abs=1e-4)
    assert _losses(one) != pytest.approx(_losses(fp32), rel=1e-6, abs=0)  # bf16 compute did happen

    def update(run):  # the second optimiser step, all parameters as one vector
        w1, w2 = _weights(run, 1), _weights(run, 2)
        assert all(w.dtype == torch.float32 for w in w2.values())  # fp32 master weights in the checkpoint
        return torch.cat([(w2[k] - w1[k]).flatten() for k in sorted(w1)])

    a, b, c = update(one), update(two), update(fp32)
    cosine = torch.nn.functional.cosine_similarity
    assert float(cosine(a, b, dim=0)) > 0.999
    assert float(((a > 0) == (b > 0)).float().mean()) > 0.99
    assert float(cosine(a, c, dim=0)) < 0.999  # the fp32 run is further away: the check can tell


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch_two_nodes(options: dict, *extra: str) -> None:
    """The command of docs/scaling.md "Several nodes", on this machine: two torchrun agents ("nodes") of one
    process each, joined by c10d's rendezvous on localhost, writing to one output folder."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{_free_port()}", "--rdzv-id", "rlvr-test",
               "-m", "rlvr.cli", "train", *_cli_args(options), *extra]
    nodes = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [node.communicate(timeout=600) for node in nodes]
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err[-3000:]


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_two_nodes_equal_one_process(tmp_path, lowercase_reward, parallelism):
    """Two torchrun "nodes" (--nnodes 2 --nproc-per-node 1, c10d on localhost, gloo) train what one process
    trains: the same losses, samples and weights at every checkpoint, rank 0 alone writing the shared folder."""
    one, two = tmp_path / "one", tmp_path / "two"
    Trainer(build_config(_options("grpo", one, lowercase_reward))).train()
    _launch_two_nodes(_options("grpo", two, lowercase_reward), f"parallelism={parallelism}")
    assert len(_losses(two)) == 2 and _losses(two) == pytest.approx(_losses(one), rel=1e-5, abs=1e-6)
    for step in (1, 2):
        a, b = _weights(one, step), _weights(two, step)
        assert a.keys() == b.keys()
        assert all(torch.allclose(a[key], b[key], rtol=0, atol=1e-5) for key in a), step
    samples = [[json.loads(x)["completion"] for x in (run / "samples.jsonl").read_text().splitlines()]
               for run in (one, two)]
    assert samples[1] == samples[0]
