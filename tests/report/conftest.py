"""Synthetic run directories with known numbers, and a hand-written eval result file."""

import json
from pathlib import Path

import pytest
import yaml

PNG_HEADER = b"\x89PNG\r\n\x1a\n"


def base_config(algo: str, output_dir: Path, **changes) -> dict:
    config = {
        "model": {"model": "tiny-random", "dtype": "float32"},
        "data": {"data": "rg:basic_arithmetic"},
        "rollout": {"prompts_per_step": 4, "num_generations": 8, "temperature": 1.0},
        "algorithm": {"algo": algo, "beta": 0.0, "loss_type": "token_mean"},
        "dagrpo": {"pair_masking": False},
        "tagrpo": {"num_rephrasings": 0},
        "optim": {"learning_rate": 3e-5},
        "run": {"output_dir": str(output_dir), "max_steps": 4},
    }
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        config[section][key] = value
    return config


def write_run(root: Path, name: str, records: list[dict], config: dict | None, evals: dict | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if config is not None:
        (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for file, result in (evals or {}).items():
        (run / "eval").mkdir(exist_ok=True)
        (run / "eval" / file).write_text(json.dumps(result))
    return run


# GRPO: 4 steps. Step 3's grad norm is a spike; reward_std is null at step 2 (no band point there);
# the trainer's eval ran at steps 2 and 4.
GRPO_RECORDS = [
    {"step": 1, "rollout/reward_mean": 0.10, "rollout/reward_std": 0.30, "rollout/frac_uniform_groups": 0.75,
     "rollout/response_len_mean": 30.0, "train/loss": 0.5, "train/grad_norm": 0.8, "train/grad_norm_spike": 0,
     "train/grad_norm_spikes": 0, "train/kl": None, "train/entropy": 5.5, "time/rollout_s": 2.0,
     "time/reward_s": 0.5, "time/update_s": 1.0, "time/step_s": 3.6, "eval/gsm8k-100/pass@1": None},
    {"step": 2, "rollout/reward_mean": 0.20, "rollout/reward_std": None, "rollout/frac_uniform_groups": 0.5,
     "rollout/response_len_mean": 28.0, "train/loss": 0.4, "train/grad_norm": 0.9, "train/grad_norm_spike": 0,
     "train/grad_norm_spikes": 0, "train/kl": None, "train/entropy": 5.4, "time/rollout_s": 4.0,
     "time/reward_s": 0.5, "time/update_s": 1.0, "time/step_s": 5.6, "eval/gsm8k-100/pass@1": 0.25},
    {"step": 3, "rollout/reward_mean": 0.40, "rollout/reward_std": 0.45, "rollout/frac_uniform_groups": 0.5,
     "rollout/response_len_mean": 25.0, "train/loss": 0.3, "train/grad_norm": 7.5, "train/grad_norm_spike": 1,
     "train/grad_norm_spikes": 1, "train/kl": None, "train/entropy": 5.1, "time/rollout_s": 3.0,
     "time/reward_s": 0.5, "time/update_s": 1.0, "time/step_s": 4.6},
    {"step": 4, "rollout/reward_mean": 0.50, "rollout/reward_std": 0.5, "rollout/frac_uniform_groups": 0.25,
     "rollout/response_len_mean": 21.0, "train/loss": 0.2, "train/grad_norm": 1.1, "train/grad_norm_spike": 0,
     "train/grad_norm_spikes": 1, "train/kl": None, "train/entropy": 4.9, "time/rollout_s": 3.0,
     "time/reward_s": 0.5, "time/update_s": 1.0, "time/step_s": 4.6, "eval/gsm8k-100/pass@1": 0.375},
]


def dagrpo_records() -> list[dict]:
    """Written out of step order, with KL logged (beta > 0) and DaGRPO rates."""
    rows = []
    for step, reward, kl, masked, anchor in [(2, 0.3, 0.02, 0.4, 0.5), (1, 0.2, 0.01, 0.5, 1.0),
                                             (3, 0.35, None, 0.3, 0.25)]:
        rows.append({"step": step, "rollout/reward_mean": reward, "rollout/reward_std": 0.4,
                     "rollout/frac_uniform_groups": 0.5, "train/grad_norm": 0.5, "train/grad_norm_spike": 0,
                     "train/kl": kl, "dagrpo/masked_pair_frac": masked, "dagrpo/anchor_rate": anchor,
                     "time/rollout_s": 1.0, "time/score_s": 2.0, "time/update_s": 1.0, "time/step_s": 4.0})
    return rows


def tagrpo_records() -> list[dict]:
    return [{"step": s, "rollout/reward_mean": 0.1 * s, "rollout/frac_uniform_groups": pooled,
             "tagrpo/frac_uniform_variant_groups": variant, "tagrpo/frac_uniform_pools": pooled,
             "train/grad_norm": 0.3, "time/step_s": 2.0}
            for s, variant, pooled in [(1, 0.8, 0.5), (2, 0.6, 0.25)]]


def eval_result(model: str, passk: dict[str, float], spec: str = "gsm8k-100") -> dict:
    return {"model": model,
            "settings": {"n": 16, "k": [int(k) for k in passk], "temperature": 1.0, "top_p": 1.0,
                         "max_completion_length": 256},
            "datasets": {spec: {"num_problems": 100, "pass@k": passk, "greedy_accuracy": 0.25,
                                "frac_uniform": 0.4, "frac_all_wrong": 0.3, "diversity": None, "timeouts": 0}}}


GRPO_EVAL = eval_result("runs/grpo/checkpoints/final", {"1": 0.3, "2": 0.42, "4": 0.55, "8": 0.61, "16": 0.7})
BASE_EVAL = eval_result("HuggingFaceTB/SmolLM2-135M-Instruct", {"1": 0.2, "4": 0.4, "16": 0.6}, spec="math500")


def make_runs(root: Path) -> dict[str, Path]:
    """Three synthetic runs: grpo (with an eval file in eval/), dagrpo (beta>0), tagrpo (4 rephrasings)."""
    return {
        "grpo": write_run(root, "grpo", GRPO_RECORDS, base_config("grpo", root / "grpo"),
                          evals={"final.json": GRPO_EVAL}),
        "dagrpo": write_run(root, "dagrpo", dagrpo_records(),
                            base_config("dagrpo", root / "dagrpo", **{"algorithm.beta": 0.04,
                                                                      "dagrpo.pair_masking": True})),
        "tagrpo": write_run(root, "tagrpo", tagrpo_records(),
                            base_config("tagrpo", root / "tagrpo", **{"tagrpo.num_rephrasings": 4})),
    }


def write_base_eval(folder: Path) -> Path:
    path = folder / "base.json"
    path.write_text(json.dumps(BASE_EVAL))
    return path


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    return make_runs(tmp_path / "runs")


@pytest.fixture
def base_eval(tmp_path: Path) -> Path:
    return write_base_eval(tmp_path)
