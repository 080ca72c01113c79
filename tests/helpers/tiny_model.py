"""A tiny random model saved as a Hugging Face folder, for runs that load a model by path (TRL's trainer
takes a path; recipes name one) or need more positions than the in-process ``tiny-random`` alias's 1024."""

from __future__ import annotations

from pathlib import Path

from rlvr.models import tiny_random_model_and_tokenizer


def save_tiny_model(folder: Path, *, max_positions: int = 4096, seed: int = 0) -> Path:
    """``tiny-random``'s weights and tokenizer in ``folder`` (created), taking ``max_positions`` positions."""
    model, tokenizer = tiny_random_model_and_tokenizer(seed, max_positions=max_positions)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
