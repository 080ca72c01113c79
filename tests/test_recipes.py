"""The user who brings a recipe: open-r1's two GRPO recipes and TRL's own GRPO example (examples/recipes/) run
with `rlvr train --config` as written, with only their model and dataset lines swapped for offline ones (a
tiny model folder, a local JSONL in OpenR1-Math's / a TRL math dataset's shape).

On the command line: ``--push_to_hub false`` (the machine is offline, where push_to_hub=true is refused at
start-up, tested in tests/train/test_hub.py) and ``--use_vllm false`` (vLLM lives in its own environment:
`make test-vllm` runs the Qwen recipe with its vLLM, below); TRL's example trains 3 epochs by default, so
``--max_steps 2`` keeps it to 2 steps. The
open-r1 recipes train one epoch of the 8-row file: 4 prompts x 16 completions per step (TRL's arithmetic:
16 per device x 4 accumulation steps / 16 generations), so 2 steps.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from transformers import TrainerState

from rlvr.cli import main
from tests.helpers.recipes import offline
from tests.helpers.tiny_model import save_tiny_model

OPEN_R1 = ["open_r1_qwen2.5_1.5b_grpo.yaml", "open_r1_deepseek_r1_distill_qwen_1.5b_grpo.yaml"]
SUMS = [(1, 2), (3, 4), (5, 6), (7, 8), (2, 9), (4, 4), (6, 1), (3, 3)]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("model") / "tiny4k", max_positions=4096)


def run(path: Path, output: Path, monkeypatch, caplog, *extra: str) -> list[dict]:
    """`rlvr train --config path` in the recipe's folder; the lines of ``output``'s metrics.jsonl."""
    monkeypatch.chdir(path.parent)  # the recipes' output_dir is relative, as open-r1 writes it
    monkeypatch.setenv("WANDB_MODE", "offline")  # report_to: [wandb], kept as written
    with caplog.at_level(logging.INFO, logger="rlvr"):
        assert main(["train", "--config", str(path), "--push_to_hub", "false", "--use_vllm", "false", *extra]) == 0
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", OPEN_R1)
def test_an_open_r1_recipe_runs_as_written(recipe, tiny_model, tmp_path, monkeypatch, caplog):
    rows = [{"problem": f"What is {a} + {b}?", "solution": f"{a} + {b} = {a + b}, so the answer is "
             f"$\\boxed{{{a + b}}}$.", "answer": str(a + b)} for a, b in SUMS]  # OpenR1-Math-220k's columns
    path = offline(recipe, tmp_path, tiny_model, rows)
    out = tmp_path / yaml.safe_load(path.read_text())["output_dir"]
    lines = run(path, out, monkeypatch, caplog)
    assert [line["step"] for line in lines] == [1, 2]  # one epoch of 8 prompts, 4 a step
    assert "a TRL config" in caplog.text and "TRL 1.16's defaults" in caplog.text
    assert "each step: 4 prompts x 16 completions on 1 process(es), micro-batches of 16, 4 per optimiser step" \
        in caplog.text
    for line in lines:  # TRL's metric names, as open-r1's dashboards read them
        assert {"reward", "reward_std", "rewards/accuracy_reward/mean", "rewards/format_reward/mean",
                "rewards/tag_count_reward/mean", "completions/mean_length", "frac_reward_zero_std", "loss",
                "learning_rate", "epoch", "num_tokens", "entropy", "clip_ratio/region_mean"} <= set(line)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    system = yaml.safe_load(path.read_text())["system_prompt"]
    assert samples[0]["prompt"][0] == {"role": "system", "content": system}  # open-r1's make_conversation
    assert samples[0]["prompt"][1]["role"] == "user" and samples[0]["prompt"][1]["content"].startswith("What is")
    state = TrainerState.load_from_json(str(out / "checkpoint-2" / "trainer_state.json"))  # save_strategy: epoch
    assert state.global_step == 2 and [entry["step"] for entry in state.log_history] == [1, 2]
    assert (out / "model.safetensors").is_file()  # the final model, where open-r1's save_model puts it


@pytest.mark.slow
def test_trls_own_grpo_example_runs_with_trls_defaults(tiny_model, tmp_path, monkeypatch, caplog):
    # a TRL math dataset's shape (trl-lib/DeepMath-103K): a chat prompt and the solution's gold, which TRL's own
    # accuracy_reward reads from chat completions
    rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "solution": f"$\\boxed{{{a + b}}}$"}
            for a, b in SUMS]
    path = offline("trl_grpo_config.yaml", tmp_path, tiny_model, rows)
    lines = run(path, tmp_path / "run", monkeypatch, caplog, "--max_steps", "2", "--output_dir", str(tmp_path / "run"))
    assert [line["step"] for line in lines] == [1, 2]
    # TRL's defaults: 8 completions per device x 1 step per generation = 1 prompt of 8 completions per step
    assert "each step: 1 prompts x 8 completions" in caplog.text
    assert all(line["rollout/kept_groups"] == 1 for line in lines)
    assert "rewards/accuracy_reward/mean" in lines[0]  # TRL's own trl.rewards.accuracy_reward, by its script name
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["run"]["preset"] == "trl" and config["optim"]["learning_rate"] == 1e-6
    assert config["model"]["bf16"] is True and config["rollout"]["max_completion_length"] == 512


@pytest.mark.vllm
def test_an_open_r1_recipe_runs_with_its_vllm(tmp_path, monkeypatch, caplog):
    """`make test-vllm`: the recipe's use_vllm: true as written (TRL 1.16's default vllm_mode, colocate) on a
    tiny model vLLM's CPU attention takes (head size 32); report_to none there (no wandb in .venv-vllm)."""
    from rlvr.models.tiny import tiny_byte_tokenizer
    from tests.rollout.test_vllm_engine import tiny_llama

    model = tiny_llama(seed=3)
    model.config.max_position_embeddings = 4096  # room for the recipe's 1024-token completions (rotary: same weights)
    model.save_pretrained(tmp_path / "tiny-llama")
    tiny_byte_tokenizer().save_pretrained(tmp_path / "tiny-llama")
    rows = [{"problem": f"What is {a} + {b}?", "solution": f"$\\boxed{{{a + b}}}$", "answer": str(a + b)}
            for a, b in SUMS]
    path = offline(OPEN_R1[0], tmp_path, tmp_path / "tiny-llama", rows)
    out = tmp_path / yaml.safe_load(path.read_text())["output_dir"]
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO, logger="rlvr"):
        assert main(["train", "--config", str(path), "--push_to_hub", "false", "--report_to", "none"]) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(line["sampling/importance_sampling_ratio/mean"] is not None for line in lines)  # TRL's correction
    assert yaml.safe_load((out / "config.yaml").read_text())["rollout"]["rollout_engine"] == "vllm"
