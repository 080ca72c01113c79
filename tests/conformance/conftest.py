"""A TRL GRPOTrainer on a tiny random model, for the TRL conformance tests (test_trl_*.py): TRL 1.16's own code
run beside rlvr's.

Each test module builds one trainer (``make_trl_trainer`` in a module-scoped fixture) and, per case, sets
the attributes TRL's methods read (restored by ``monkeypatch``); nothing here re-implements TRL.
"""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

TEMPERATURE = 0.7  # TRL's `temperature` scales the logits of every log-prob: not 1, so the tests see it
MAX_COMPLETION_LENGTH = 8
GENERATIONS = 4  # num_generations = per_device_train_batch_size: one group per micro-batch


def make_trl_trainer(folder: Path, reward_funcs: list):
    """``trl.GRPOTrainer`` on ``tests.helpers.tiny_model`` saved in ``folder`` (CPU, fp32, no logging)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tests.helpers.tiny_model import save_tiny_model

    model_dir = save_tiny_model(folder / "model")
    args = GRPOConfig(
        output_dir=str(folder / "out"), use_cpu=True, report_to=[], bf16=False,
        per_device_train_batch_size=GENERATIONS, num_generations=GENERATIONS,
        max_completion_length=MAX_COMPLETION_LENGTH, temperature=TEMPERATURE, save_strategy="no",
    )
    dataset = Dataset.from_list([{"prompt": text} for text in ("a", "b")])
    return GRPOTrainer(model=str(model_dir), reward_funcs=reward_funcs, args=args, train_dataset=dataset)
