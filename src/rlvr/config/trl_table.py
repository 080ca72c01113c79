"""The table of docs/from_trl.md that says, for every key of the installed TRL's ``GRPOConfig``, what rlvr
does with it: honoured, renamed, translated, accepted as a no-op, or refused past TRL's default.

``python -m rlvr.config.trl_table`` prints it (TRL installed); tests/config/test_trl_table.py keeps the
doc's copy equal. The treatment of a key is read from the tables that decide it (rlvr.config.trl_names),
so the doc cannot say something the parser does not do.
"""

from __future__ import annotations

from typing import Any

from rlvr.config.experiment import FIELD_SECTION
from rlvr.config.training_arguments import any_value
from rlvr.config.trl_names import ACCEPTED, NOT_IMPLEMENTED, RENAMED, RENAMED_NULL_IS_UNSET, TRANSLATED

# what each translated key becomes (the translation itself: rlvr.config.trl_names, rlvr.config.launch_keys)
TRANSLATIONS = {
    "dataset_name": "with `dataset_config` and `dataset_train_split`: one `data` spec",
    "dataset_config": "part of the `data` spec (`:config=`)",
    "dataset_configs": "open-r1's older list: `[all]`, `[default]`, `[]`: the default config; `[NAME]`: `dataset_config`",
    "dataset_train_split": "part of the `data` spec (`:split=`)",
    "dataset_test_split": "the `eval_data` spec with `eval_strategy` or `eval_on_start`",
    "use_peft": "`lora_r` on (TRL's 16 unless given) or 0",
    "use_vllm": "true: `rollout_engine=vllm`",
    "generation_batch_size": "the step's prompts (÷ `num_generations`); as TRL derives it: nothing more",
    "use_liger_kernel": "true: `lm_head_chunk_tokens=1024` (rlvr's chunked LM head, exact)",
    "do_eval": "true needs `eval_strategy` (TRL then evaluates nothing either: refused)",
    "num_generations_eval": "the evaluation's samples per problem: `eval_n` (default `num_generations`, as TRL's); "
                            "rlvr.GRPOTrainer: TRL's evaluation",
    "delta": "`dual_clip` above 1 + `epsilon_high`; inside the clip range refused",
    "disable_tqdm": "`progress_bar` (its opposite; null: the bar shown)",
    "use_cpu": "true: `device=cpu`",
    "num_processes": "`nproc` (torchrun's launch)",
    "mixed_precision": "bf16 / no: `bf16` true / false unless `bf16` is set; fp16, fp8 refused",
    "distributed_type": "NO, MULTI_GPU, MULTI_CPU: DDP; FSDP: `parallelism=fsdp`; others refused",
}
assert set(TRANSLATIONS) == set(TRANSLATED), set(TRANSLATIONS) ^ set(TRANSLATED)


def treatment(key: str) -> str:
    """What rlvr does with TRL's ``key``, in a few words."""
    if key in FIELD_SECTION:
        return "honoured (rlvr's option of the same name)"
    if key in RENAMED:
        return f"renamed → `{RENAMED[key]}`" + (" (null: not given)" if key in RENAMED_NULL_IS_UNSET else "")
    if key in TRANSLATED:
        return f"translated: {TRANSLATIONS[key]}"
    if key in ACCEPTED:
        accepts, why = ACCEPTED[key]
        if accepts is any_value:  # (SAME_IN_TRL: TRL's GRPO gives the same numbers whatever the value)
            return f"accepted, no-op (TRL's GRPO computes the same whatever its value): {why}"
        return f"accepted at values rlvr runs (TRL's default among them); else refused: {why}"
    if key in NOT_IMPLEMENTED:
        default, near = NOT_IMPLEMENTED[key]
        return f"refused unless {default!r}: not in rlvr" + (f" (nearest: `{near}`)" if near else "")
    return "unknown option"


def _cell(value: Any) -> str:
    text = repr(value)
    return "`" + (text if len(text) <= 40 else text[:37] + "...") .replace("|", "\\|") + "`"


def keys_table(defaults: dict[str, Any]) -> str:
    """The markdown table for ``defaults``: TRL's key -> its default (``GRPOConfig.to_dict()``)."""
    lines = ["| TRL 1.16 key | TRL's default | rlvr |", "|---|---|---|"]
    lines += [f"| `{key}` | {_cell(value)} | {treatment(key)} |" for key, value in defaults.items()]
    return "\n".join(lines)


def installed_grpo_config_defaults() -> dict[str, Any]:
    """Every field of the installed TRL's ``GRPOConfig``, in field order, with its ``to_dict()`` value."""
    import dataclasses
    import warnings

    from trl import GRPOConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = GRPOConfig(output_dir="x", use_cpu=True).to_dict()
    return {f.name: values.get(f.name) for f in dataclasses.fields(GRPOConfig)}


if __name__ == "__main__":
    print(keys_table(installed_grpo_config_defaults()))
