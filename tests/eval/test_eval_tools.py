"""``rlvr eval --tools python``: pass@k of responses that run Python while they answer. A scripted model computes
the answer only through the tool (it writes a cell, and boxes the number the cell printed), so the score is 1 only
when the real sandbox ran the cell and the result reached the next turn; without tools the same model scores 0."""

from __future__ import annotations

import json

import pytest

from rlvr.eval import EvalSettings, evaluate, runner
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout.completion import Completion


class ScriptedModel:
    """First turn: a cell computing the question's sum; next turn: the number the tool printed, boxed."""

    def __init__(self, model, *, pad_token_id, eos_token_ids, max_batch_size):
        self.eos_token_ids = eos_token_ids
        self.supports_row_seeds = True

    def generate(self, prompts, *, max_new_tokens, sampling, generator_seed=None, row_seeds=None):
        out = []
        for prompt in prompts:
            text = TOKENIZER.decode(prompt)
            if "```output\n" in text:
                turn = "So the answer is \\boxed{" + text.split("```output\n")[-1].split("\n")[0] + "}."
            else:
                a, b = text.split("What is ")[-1].split("?")[0].split(" + ")
                turn = f"```python\nprint({a} + {b})\n```"
            ids = TOKENIZER.encode(turn, add_special_tokens=False) + self.eos_token_ids
            out.append(Completion(ids, [-1.0] * len(ids), False))
        return out


MODEL, TOKENIZER = tiny_random_model_and_tokenizer(seed=0)


@pytest.mark.parametrize("tools", [None, "python"])
def test_pass_at_k_with_the_python_tool(tmp_path, monkeypatch, tools):
    monkeypatch.setattr(runner, "DecodeEngine", ScriptedModel)
    data = tmp_path / "sums.jsonl"
    rows = [{"prompt": f"What is {1234 + i} + {5678 * i}?", "answer": str(1234 + i + 5678 * i)} for i in range(3)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    settings = EvalSettings(n=2, ks=[1, 2], temperature=1.0, top_p=1.0, max_completion_length=128,
                            model_name="scripted", tools=tools, max_tool_calling_iterations=2, log_samples=True)
    out = tmp_path / "out.json"
    result = evaluate(MODEL, TOKENIZER, [str(data)], settings, out_path=out, progress=False)
    (summary,) = result["datasets"].values()
    assert summary["pass@k"]["1"] == (1.0 if tools else 0.0)
    assert ("tools" in result["settings"]) == (tools is not None)
    if tools:
        samples = [json.loads(line) for line in (tmp_path / "out.json.samples.jsonl").read_text().splitlines()]
        assert "```output\n1234\n```" in samples[0]["completion"]  # 1234 + 0, printed by the sandboxed cell
