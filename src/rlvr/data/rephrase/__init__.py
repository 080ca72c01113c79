"""TA-GRPO question rephrasing: rule-based or LLM candidates, filters, and a resumable writer.

    rows = load_rows("gsm8k-100")
    tally = rephrase_rows(rows, RuleRephraser(), n=4, seed=0, out_path="rephrasings.jsonl")

- rules.py: offline transforms (wording, reorder, list_format, notation) and RuleRephraser.
- llm.py: REPHRASE_PROMPT and LLMRephraser over a ``complete(prompts)`` back end.
- filters.py: the keep/reject checks and their reasons.
- pipeline.py: rephrase_rows (seeded, resumable JSONL output) and its Tally.
"""

from rlvr.data.rephrase.filters import (
    REASONS,
    Selection,
    answers_equal,
    candidate_reason,
    ngram_jaccard,
    numbers,
    same_quantities,
    select_candidates,
)
from rlvr.data.rephrase.llm import REPHRASE_PROMPT, REPHRASE_STYLES, LLMRephraser, build_rephrase_prompt, clean_reply
from rlvr.data.rephrase.pipeline import GenerationFailed, Rephraser, Tally, candidate_rng, read_done_ids, rephrase_rows
from rlvr.data.rephrase.rules import TRANSFORMS, RuleRephraser, list_format, notation, reorder, wording

__all__ = [
    "REASONS",
    "REPHRASE_PROMPT",
    "REPHRASE_STYLES",
    "TRANSFORMS",
    "GenerationFailed",
    "LLMRephraser",
    "Rephraser",
    "RuleRephraser",
    "Selection",
    "Tally",
    "answers_equal",
    "build_rephrase_prompt",
    "candidate_reason",
    "candidate_rng",
    "clean_reply",
    "list_format",
    "ngram_jaccard",
    "notation",
    "numbers",
    "read_done_ids",
    "reorder",
    "rephrase_rows",
    "same_quantities",
    "select_candidates",
    "wording",
]
