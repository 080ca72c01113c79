"""``tools=python`` through the whole trainer: the real tool loop, the real sandbox, the real update; the model's
turns come from a scripted engine (a random model never writes a python block), so what the run logs is checked
against what the scripted model wrote and what Python printed. GRPO, DaGRPO and TA-GRPO alike."""

from __future__ import annotations

import itertools
import json

import pytest

from rlvr.config import build_config
from rlvr.rollout.completion import Completion
from rlvr.train.trainer import Trainer
from tests.train.conftest import tiny_overrides

CALL = "Let me compute.\n```python\nx = 6 * 7\nprint(x)\n```"
SECOND = "```python\nx + 1\n```"
ANSWER = "The answer is \\boxed{43}."


class ScriptedModel:
    """Stands in for the policy's engine: even rows call the tool twice (the second call reads the first's ``x``),
    then answer; odd rows answer at once. Log-probs are the trainer's concern: -1.0 each."""

    def __init__(self, engine, tokenizer):
        self.inner, self.tokenizer = engine, tokenizer
        self.requests = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, *, max_new_tokens, sampling, generator_seed=None, row_seeds=None):
        self.requests.append(len(prompts))
        eos = self.tokenizer.eos_token_id
        out = []
        for row, prompt in enumerate(prompts):
            text = self.tokenizer.decode(prompt)
            shown = text.count("```output\n")  # (the system prompt names "```output block" too)
            if len(self.requests) == 1:  # the first turn of every row
                turn = CALL + "\nI think it is 41" if row % 2 == 0 else ANSWER
            else:
                turn = SECOND if shown == 1 else ANSWER
            ids = self.tokenizer.encode(turn, add_special_tokens=False)[: max_new_tokens - 1] + [eos]
            out.append(Completion(ids, [-1.0] * len(ids), truncated=False))
        return out


@pytest.mark.parametrize("algo", [{}, {"algo": "dagrpo", "scorer": "steps", "score_alpha": 0.5},
                                  {"algo": "tagrpo", "num_rephrasings": 1, "pooled": True},
                                  {"tool_scheduling": "rows"}],
                         ids=["grpo", "dagrpo", "tagrpo", "grpo-rows"])
def test_a_run_with_the_python_tool_logs_its_turns_calls_and_trains_on_the_models_tokens(tmp_path, algo):
    cfg = build_config(tiny_overrides(tmp_path / "run", tools="python", max_steps=1, prompts_per_step=2,
                                      num_generations=4, max_completion_length=256,
                                      num_completions_to_log=None, **algo))
    trainer = Trainer(cfg)
    scripted = ScriptedModel(trainer.engine.engine, trainer.tokenizer)
    trainer.engine.engine = scripted  # the tool loop stays the run's own; only the model's words are scripted
    (metrics,) = trainer.train()
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    sampled = [s for s in samples if not s["anchor"]]  # (DaGRPO's anchors are not the model's)
    called = [s for s in sampled if s["tool_calls"]]
    # every other request called the tool (DaGRPO's anchors take some of the places)
    assert len(called) == len(sampled) // 2 if "dagrpo" not in algo.values() else 0 < len(called) < len(sampled)
    for sample in called:
        roles = [turn["role"] for turn in sample["turns"]]
        assert roles == ["assistant", "tool", "assistant", "tool", "assistant"], sample["turns"]
        assert sample["turns"][0]["text"] == CALL  # the model's "I think it is 41" after its call: dropped
        assert sample["turns"][1]["text"].strip() == "```output\n42\n```"  # Python ran it, in the sandbox
        assert sample["turns"][3]["text"].strip() == "```output\n43\n```"  # the second cell saw the first's x
        assert sample["turns"][4]["text"] == ANSWER
        assert sample["tool_failures"] == 0 and sample["tool_calls"] == 2
    for sample in sampled:
        if not sample["tool_calls"]:
            assert sample["turns"] == [{"role": "assistant", "text": ANSWER}]
    assert metrics["tools/call_frequency"] == 1.0  # two calls in every other response the model wrote
    assert metrics["tools/failure_frequency"] == 0.0
    # lengths count the model's tokens: a called response's two results are not in it (its turns were cut after
    # each call, the last one ends with EOS)
    model_tokens = sum(len(trainer.tokenizer.encode(t, add_special_tokens=False)) for t in (CALL, SECOND, ANSWER)) + 1
    assert metrics["rollout/response_len_max"] == model_tokens


@pytest.mark.slow
def test_smollm2_trains_two_steps_with_the_python_tool_from_the_command_line(tmp_path):
    """The real model, offline on CPU, from the CLI: the run ends, every step logs the tool metrics, and every logged
    response shows its turns (whether this seed's SmolLM2 calls the tool is the model's business: when it does, its
    turns alternate and each result is an ```output block)."""
    from rlvr.cli import main

    run = tmp_path / "run"
    assert main(["train", "model=smollm2-135m", "data=rg:basic_arithmetic:size=16", "max_steps=2",
                 "prompts_per_step=2", "num_generations=4", "max_completion_length=96", "progress_bar=false",
                 "tools=python", "max_tool_calling_iterations=2", "num_completions_to_log=8",
                 f"output_dir={run}"]) == 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2
    for m in metrics:
        assert {"tools/call_frequency", "tools/failure_frequency", "tools/seconds_mean"} <= set(m)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 16
    for sample in samples:
        roles = [turn["role"] for turn in sample["turns"]]
        assert roles[0] == "assistant" and roles.count("tool") <= sample["tool_calls"] <= 2
        assert all(a != b for a, b in itertools.pairwise(roles))  # turns alternate
        assert all(turn["text"].strip().startswith("```output") for turn in sample["turns"] if turn["role"] == "tool")
