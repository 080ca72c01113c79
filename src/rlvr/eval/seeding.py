"""Per-row seeded sampling, so an evaluation sample depends on its problem, not on its batch.

HFEngine seeds torch's global RNG once per ``generate`` call, so the tokens sampled for a problem
would change with the other problems in the batch (and therefore with ``batch_size`` and with
resuming). Here every row r has its own ``torch.Generator`` seeded with
``row_seed(seed, dataset, problem id, sample index)``, and the token of row r at each step is

    x_r ~ softmax(top_p(logits_r / T))          drawn with row r's generator only

which is the distribution HF's sampler draws from (same temperature and nucleus warpers). The
draw is made inside a LogitsProcessor that returns a one-hot mask (0 at x_r, −inf elsewhere); HF's
own sampler then picks x_r with probability 1, whatever the global RNG holds. Log-probs reported by
HFEngine are unaffected: it reads the raw logits (``output_logits``), not the processed scores.

``SeededPolicy`` wraps the model so an unmodified HFEngine passes the processor to ``generate``.
Residual dependence on the batch: left-padding to a different width can change logits in the last
float bits, which flips a draw only when it falls on a CDF boundary (not seen in the tests).
"""

from __future__ import annotations

import hashlib

import torch
from transformers import LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper


def row_seed(seed: int, dataset: str, problem_id: str, sample: int) -> int:
    """A 63-bit seed from (seed, dataset, problem id, sample index) alone (SHA-256, stable across runs)."""
    key = "\x1f".join((str(seed), dataset, problem_id, str(sample))).encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1


class RowSeededSampler(LogitsProcessor):
    """Draw each row's next token with that row's own generator; return a one-hot mask of it."""

    def __init__(self, row_seeds: list[int], *, temperature: float, top_p: float):
        self.row_seeds = list(row_seeds)
        warpers = [TemperatureLogitsWarper(temperature)]
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
        self.warpers = LogitsProcessorList(warpers)
        self.generators: list[torch.Generator] | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = scores.shape[0]
        assert rows == len(self.row_seeds), f"{rows} rows but {len(self.row_seeds)} row seeds"
        if self.generators is None:
            self.generators = [torch.Generator(device=scores.device).manual_seed(s) for s in self.row_seeds]
        probs = torch.softmax(self.warpers(input_ids, scores).float(), dim=-1)  # [B, V]
        chosen = torch.cat([torch.multinomial(probs[r], 1, generator=g) for r, g in enumerate(self.generators)])  # [B]
        one_hot = torch.full_like(scores, float("-inf"))  # [B, V]
        one_hot.scatter_(1, chosen[:, None], 0.0)
        return one_hot


class SeededPolicy(torch.nn.Module):
    """``model`` whose sampling ``generate`` draws row r with ``row_seeds[r]`` (set before each call).

    Greedy calls (``do_sample=False``) pass through unchanged. The caller must give at most one
    HFEngine chunk per call (engine ``max_batch_size`` ≥ rows), so the seeds line up with the rows.
    """

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.train(model.training)  # HFEngine restores this flag on the wrapper, and so on the model
        self.row_seeds: list[int] = []

    def generate(self, **kwargs):
        config = kwargs["generation_config"]
        if config.do_sample:
            sampler = RowSeededSampler(self.row_seeds, temperature=config.temperature, top_p=config.top_p)
            kwargs["logits_processor"] = LogitsProcessorList([sampler])
        return self.model.generate(**kwargs)
