"""sft.py: which rows SFT can train on, and one supervised step on the tiny model: its loss is the hand-computed
token-mean NLL of the solutions (each ending in EOS) under the weights before the step, and the step lowers it."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.config import build_config
from rlvr.data import load_rows
from rlvr.data.rows import normalize_row
from rlvr.train.sft import check_sft_rows
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides

WITH = [{"question": "1 + 1?", "answer": "2", "solution": "One and one make two.\n#### 2"},
        {"question": "3 + 3?", "answer": "6", "solution": "Three and three make six.\n#### 6"}]
WITHOUT = [{"question": "2 + 2?", "answer": "4"}, {"question": "4 + 4?", "answer": "8"}]


def test_check_sft_rows_counts_the_rows_with_a_solution():
    """Rows with an expert solution are counted; data with none is refused naming the data, its size and the fix."""
    rows = [normalize_row(row, i, "toy") for i, row in enumerate([WITH[0], *WITHOUT])]
    assert check_sft_rows(rows, "toy") == 1
    assert check_sft_rows(load_rows("rg:chain_sum:size=3"), "rg") == 3  # worked solutions generated for arithmetic
    with pytest.raises(ValueError, match=r"data=toy: none of its 2 rows has a solution .* use `rlvr train` for RL"):
        check_sft_rows(rows[1:], "toy")


def _trainer(tmp_path, rows, **extra):
    cfg = build_config(tiny_overrides(tmp_path / "sft", algo="sft", data=rows, prompts_per_step=2, max_steps=2,
                                      max_completion_length=64, learning_rate=1e-3, shuffle=False, **extra))
    return Trainer(cfg)


def _nll(model, prompts: list[list[int]], responses: list[list[int]], temperature: float) -> float:
    """Token-mean negative log-likelihood of the responses given their prompts, one sequence at a time."""
    total, count = 0.0, 0
    with torch.no_grad():
        for prompt, response in zip(prompts, responses):
            logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
            logp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, torch.tensor(response).unsqueeze(-1))
            total -= float(logp.sum())
            count += len(response)
    return total / count


def test_a_step_minimises_the_nll_of_the_solutions(tmp_path):
    """Rows taken in order: step 1's two rows have no solution, so no update (anchor_rate 0, weights unchanged);
    step 2 trains on both solutions with advantage 1: train/loss equals their token-mean NLL under the weights
    before the step, each response ends with EOS, and after the step the NLL is lower."""
    trainer = _trainer(tmp_path, [*WITHOUT, *WITH])
    try:
        seen = []
        update = trainer.update

        def spy(experience, advantages):
            seen.append((experience, advantages))
            return update(experience, advantages)

        trainer.update = spy
        before = {name: value.clone() for name, value in trainer.policy.state_dict().items()}
        idle = trainer.training_step(1)
        assert seen == [] and idle.update is None and idle.samples == []
        assert idle.metrics["sft/rows"] == 2 and idle.metrics["sft/anchor_rate"] == 0.0
        assert "train/loss" not in idle.metrics and idle.metrics["train/grad_norm_spike"] == 0
        assert all(torch.equal(before[name], value) for name, value in trainer.policy.state_dict().items())

        frozen = copy.deepcopy(trainer.policy)
        result = trainer.training_step(2)
        ((experience, advantages),) = seen
        assert advantages.tolist() == [1.0, 1.0] and experience.is_anchor.tolist() == [True, True]
        eos = trainer.tokenizer.eos_token_id
        assert all(response[-1] == eos for response in experience.response_ids)
        decoded = [trainer.tokenizer.decode(response[:-1]) for response in experience.response_ids]
        assert decoded == [sample["completion"] for sample in result.samples]
        assert decoded[0] == "One and one make two.\nThe answer is \\boxed{2}."
        temperature = trainer.plan.update.temperature
        expected = _nll(frozen, experience.prompt_ids, experience.response_ids, temperature)
        assert result.metrics["train/loss"] == pytest.approx(expected, rel=1e-4)
        assert result.metrics["sft/anchor_rate"] == 1.0
        assert result.metrics["sft/tokens"] == sum(len(response) for response in experience.response_ids)
        assert _nll(trainer.policy, experience.prompt_ids, experience.response_ids, temperature) < expected
    finally:
        trainer.rewarder.close()
        trainer.lock.release()


def test_a_step_trains_on_the_rows_that_have_a_solution(tmp_path):
    """Of a step's two rows only the one with a solution becomes a response: anchor_rate 1/2, one sample, one
    response's tokens."""
    trainer = _trainer(tmp_path, [WITH[0], WITHOUT[0], WITH[1], WITHOUT[1]])
    try:
        result = trainer.training_step(1)
    finally:
        trainer.rewarder.close()
        trainer.lock.release()
    m = result.metrics
    assert (m["sft/rows"], m["sft/anchor_rate"]) == (2, 0.5) and result.update is not None
    (sample,) = result.samples
    assert sample["completion"] == "One and one make two.\nThe answer is \\boxed{2}."
    eos_token = 1  # the response is the completion's bytes (byte tokenizer) and EOS
    assert m["sft/tokens"] == len(sample["completion"].encode("utf-8")) + eos_token


def _unscorable(completions, **kwargs):
    return [None] * len(completions)


def test_a_reward_function_that_cannot_score_a_solution_does_not_drop_it(tmp_path):
    """SFT uses no reward: the run's reward functions are not asked about the anchors, so one that returns
    None for every text (a format reward the solutions do not meet, say) leaves every row trainable."""
    trainer = _trainer(tmp_path, WITH, reward_funcs=[_unscorable])
    try:
        result = trainer.training_step(1)
        assert result.metrics["sft/anchor_rate"] == 1.0 and "train/loss" in result.metrics
        assert trainer.dagrpo.anchors.counts["unscored"] == 0
    finally:
        trainer.rewarder.close()
        trainer.lock.release()
