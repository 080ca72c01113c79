"""A step that cannot fit in memory is refused in one line before any work (rlvr.train.memory_bound).

``num_generations=1000000000`` was accepted by ``--dry-run`` ("4 prompts x 1000000000 completions") and
ended, a minute into the run, in a MemoryError traceback at 7.2 GB (issue 41).
"""

import pytest

from rlvr.cli import main
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.train import memory_bound
from rlvr.train.memory_bound import ROLLOUT_BYTES_PER_TOKEN, check_rollout_memory, check_update_memory
from tests.helpers.cli_output import one_error_line

from .conftest import tiny_overrides

HUGE = ["num_generations=1000000000", "prompts_per_step=4", "max_completion_length=40"]


def test_the_dry_run_refuses_a_billion_completions_with_the_numbers(capsys):
    assert main(["train", "--dry-run", "model=tiny-random", "data=rg:chain_sum:size=4", *HUGE]) == 2
    message = one_error_line(capsys)
    assert "4000000000 completions per process" in message and "max_completion_length=40" in message
    assert "lower num_generations or prompts_per_step" in message


def test_the_run_refuses_it_before_the_model_loads(tmp_path, capsys, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded: the memory bound did not run first")

    monkeypatch.setattr("rlvr.train.trainer.build_models", no_model)
    options = tiny_overrides(tmp_path / "run", max_steps=1)
    pairs = [f"{key}={value}" for key, value in options.items() if key not in ("num_generations", "prompts_per_step")]
    assert main(["train", *pairs, *HUGE]) == 2
    assert "a step's rollout cannot fit in this machine's memory" in one_error_line(capsys)


def test_the_rollout_bound_is_completions_times_tokens_times_its_bytes():
    need = 8 * 100 * ROLLOUT_BYTES_PER_TOKEN
    check_rollout_memory(completions_per_process=8, max_completion_length=100, available=need)  # exactly fits
    with pytest.raises(ValueError, match="lower num_generations"):
        check_rollout_memory(completions_per_process=8, max_completion_length=100, available=need - 1)


def test_a_usual_step_fits_this_machine():
    check_rollout_memory(completions_per_process=512, max_completion_length=4096)  # open-r1's shape: 32 MiB
    assert memory_bound.ram_bytes() > 2**28


def test_the_update_bound_counts_weights_reference_and_three_copies_of_the_trainable_ones():
    import copy

    import torch

    model, _ = tiny_random_model_and_tokenizer(0)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    cpu = torch.device("cpu")
    check_update_memory(model, None, device=cpu, available=4 * weights)  # weights + gradients + 2 moments
    with pytest.raises(ValueError, match=r"use LoRA \(lora_r=16\), beta=0"):
        check_update_memory(model, copy.deepcopy(model), device=cpu, available=4 * weights)  # + the reference
    check_update_memory(model, copy.deepcopy(model), device=cpu, shards=2, available=4 * weights)  # FSDP2: split
    for p in model.parameters():
        p.requires_grad_(False)
    check_update_memory(model, None, device=cpu, available=weights)  # nothing trains: only the weights
