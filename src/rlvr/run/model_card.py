"""The model card, ``<output_dir>/README.md``, written where TRL's ``GRPOTrainer`` writes its own: at each checkpoint
save (``GRPOTrainer._save_checkpoint`` calls ``create_model_card`` before saving). A LoRA run's model folders also
get PEFT's card from ``save_pretrained``, as in TRL.

The card's metadata is TRL's (``trl.trainer.utils.generate_model_card``): ``base_model`` (the Hub id the run
started from; none for a local folder), ``library_name: transformers``, ``model_name`` (``hub_model_id``'s name,
else output_dir's), ``tags`` (``generated_from_trainer`` and the trainer's: here ``rlvr`` and the algorithm). The
text says what trained the model and how to load it; no wandb or trackio links.
"""

from __future__ import annotations

from pathlib import Path

CARD = "README.md"

_TEXT = """
# Model Card for {model_name}

{origin}
It has been trained with rlvr ({algo}: reinforcement learning from verifiable rewards).

## Quick start

```python
from transformers import pipeline

generator = pipeline("text-generation", model="{load_from}")
print(generator([{{"role": "user", "content": "What is 2 + 3?"}}], max_new_tokens=64, return_full_text=False))
```

## Framework versions

- Transformers: {transformers_version}
- Pytorch: {torch_version}
"""


def write_model_card(output_dir: Path, *, base_model: str | None, algo: str, hub_model_id: str | None) -> Path:
    """Write (replace) ``output_dir/README.md``; ``base_model``: the policy's ``name_or_path``."""
    import torch
    import transformers
    from huggingface_hub import ModelCardData

    hub_id = base_model if base_model and not Path(base_model).expanduser().is_dir() else None  # TRL: a Hub id only
    model_name = hub_model_id.split("/")[-1] if hub_model_id else Path(output_dir).name
    data = ModelCardData(base_model=hub_id, library_name="transformers", model_name=model_name,
                         tags=["generated_from_trainer", "rlvr", algo])
    origin = (f"This model is a fine-tuned version of [{hub_id}](https://huggingface.co/{hub_id})." if hub_id
              else "This model is a fine-tuned version of a local model.")
    text = _TEXT.format(model_name=model_name, origin=origin, algo=algo, load_from=hub_model_id or output_dir,
                        transformers_version=transformers.__version__, torch_version=torch.__version__)
    path = Path(output_dir) / CARD
    path.write_text(f"---\n{data.to_yaml()}\n---\n{text}", encoding="utf-8")
    return path
