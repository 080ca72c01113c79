"""Dataset loading (built-in offline sources, local files, Hub ids), row normalization, prompts, sampling, anchors."""

from rlvr.data.anchors import ARITHMETIC_TASKS, anchor_source, anchor_text
from rlvr.data.gsm8k100 import load_gsm8k100
from rlvr.data.prompts import (
    AUTO_INSTRUCTION,
    DEFAULT_INSTRUCTION,
    PromptFormat,
    PromptSampler,
    prompt_messages,
    render_prompt,
)
from rlvr.data.reasoning_gym_source import load_reasoning_gym
from rlvr.data.rows import normalize_row, normalize_rows
from rlvr.data.sources import load_hub_dataset, load_local_file, load_python_rows, load_rows

__all__ = [
    "ARITHMETIC_TASKS",
    "AUTO_INSTRUCTION",
    "DEFAULT_INSTRUCTION",
    "PromptFormat",
    "PromptSampler",
    "anchor_source",
    "anchor_text",
    "load_gsm8k100",
    "load_hub_dataset",
    "load_local_file",
    "load_python_rows",
    "load_reasoning_gym",
    "load_rows",
    "normalize_row",
    "normalize_rows",
    "prompt_messages",
    "render_prompt",
]
