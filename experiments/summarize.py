"""Per-arm summaries of a study from its committed run files: mean and spread over seeds.

    python experiments/summarize.py experiments/results/<study>      (also run by the study scripts)

Reads only <arm>/seed<k>/metrics.jsonl, config.yaml and eval.json, writes summary.json and summary.md next to
them. Spread = (min, max) over seeds (with 2 seeds the honest statistic; no standard error).
Training quantities: reward over the first and last 5 steps, the fraction of uniform-reward
groups over training (and, for TA-GRPO pools, per variant vs pooled), grad-norm spikes, response
length first vs last, compute (sum of time/step_s). Evaluation: pass@k per dataset, diversity.

The training reward is the policy's own, over all its samples. Runs logged before the fix of
`rollout/` metrics under anchors (docs/training.md, issue 15) left out the response an anchor
replaced; ``policy_reward`` puts it back: exactly when that response is known to be wrong
(anchors only into all-wrong groups, accuracy the only reward), else as the range between it
being wrong and being right (``reward_last_upper``). The logged value stays as ``reward_last_logged``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import yaml

WINDOW = 5  # steps averaged at the start and the end of training
DIGITS = {"steps": 0, "grad_norm_spikes": 1, "grad_norm_max": 2, "response_len_first": 1, "response_len_last": 1,
          "steps_contrast_masked": 1, "train_minutes": 1}


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _count_positive(values: list[float]) -> int | None:
    values = [v for v in values if v is not None]
    return sum(v > 0 for v in values) if values else None


def _flat_config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    nested = yaml.safe_load(path.read_text()) if path.exists() else {}
    return {k: v for section in nested.values() for k, v in section.items()}


def policy_reward(step: dict, cfg: dict) -> tuple[float | None, float | None]:
    """(reward, upper): the policy's mean training reward at one step over all its samples.

    ``upper`` is None when ``reward`` is exact. Before the fix a step logged the mean over the
    N − k samples left after k anchors replaced one response each (N = groups · G); the replaced
    ones had reward 0 when anchors went only into all-wrong groups with accuracy as the only
    reward, and at most 1 each otherwise, and only in groups whose other responses were all right
    (an anchor replaces the lowest-rewarded response).
    """
    logged = step.get("rollout/reward_mean")
    rate = step.get("dagrpo/anchor_rate") or 0.0
    fixed = "dagrpo/anchor_reward_mean" in step  # logged by the fixed code: already over all samples
    if (logged is None or fixed or not rate or "prompts_per_step" not in cfg  # no config.yaml: as logged
            or cfg.get("anchor_placement", "replace_worst") != "replace_worst"):
        return logged, None
    groups = step.get("rollout/num_gen_batches", 1) * cfg["prompts_per_step"]
    n, k = groups * cfg["num_generations"], round(rate * groups)
    low = logged * (n - k) / n
    known_wrong = (cfg.get("anchors") == "failed" and cfg.get("anchor_max_correct") == 0
                   and cfg.get("reward_funcs") == ["accuracy"])
    if known_wrong:
        return low, None
    all_right = round((step.get("rollout/frac_all_correct") or 0.0) * groups)
    return low, low + min(k, all_right) / n


def run_summary(run_dir: Path) -> dict:
    """Numbers of one run (one arm, one seed)."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []  # the base model: eval only
    metrics = [json.loads(line) for line in lines if line.strip()]
    col = lambda key: [m.get(key) for m in metrics]
    cfg = _flat_config(run_dir) if metrics else {}
    rewards = [policy_reward(m, cfg) for m in metrics]
    corrected = any(r != (m.get("rollout/reward_mean"), None) for r, m in zip(rewards, metrics))
    out = {} if not metrics else {
        "steps": len(metrics),
        "reward_first": _mean([r for r, _ in rewards[:WINDOW]]),
        "reward_last": _mean([r for r, _ in rewards[-WINDOW:]]),
        "reward_last_upper": (_mean([r if u is None else u for r, u in rewards[-WINDOW:]])
                              if any(u is not None for _, u in rewards) else None),
        "reward_last_logged": _mean(col("rollout/reward_mean")[-WINDOW:]) if corrected else None,
        "frac_uniform_groups": _mean(col("rollout/frac_uniform_groups")),
        "frac_uniform_variant_groups": _mean(col("tagrpo/frac_uniform_variant_groups")),
        "frac_uniform_pools": _mean(col("tagrpo/frac_uniform_pools")),
        "grad_norm_spikes": (col("train/grad_norm_spikes") or [None])[-1],
        "grad_norm_max": max((v for v in col("train/grad_norm_max") if v is not None), default=None),
        "response_len_first": _mean(col("rollout/response_len_mean")[:WINDOW]),
        "response_len_last": _mean(col("rollout/response_len_mean")[-WINDOW:]),
        "anchor_rate": _mean(col("dagrpo/anchor_rate")),
        "masked_pair_frac": _mean(col("dagrpo/masked_pair_frac")),
        # pairs with different rewards that the mask removed: only these change the advantage
        "masked_contrast_frac": _mean(col("dagrpo/masked_contrast_frac")),
        "steps_contrast_masked": _count_positive(col("dagrpo/masked_contrast_frac")),
        "train_minutes": sum(v or 0.0 for v in col("time/step_s")) / 60,
    }
    evaluation = run_dir / "eval.json"
    if evaluation.exists():
        data = json.loads(evaluation.read_text())
        for name, result in data["datasets"].items():
            for k, value in result["pass@k"].items():
                out[f"eval/{name}/pass@{k}"] = value
            if result.get("diversity") is not None:
                out[f"eval/{name}/diversity"] = result["diversity"]
    return out


def summarize_study(folder: Path, study: dict | None = None) -> dict:
    """Aggregate every <arm>/seed<k> under ``folder``; write summary.json and summary.md."""
    arms: dict[str, dict[str, dict]] = {}
    if (folder / "base" / "eval.json").exists():
        arms["base"] = {"untrained": run_summary(folder / "base")}
    max_steps = int(study["common"]["max_steps"]) if study is not None else None
    unfinished = []
    for run_dir in sorted(folder.glob("*/seed*")):
        if (run_dir / "metrics.jsonl").exists():
            numbers = run_summary(run_dir)
            steps = numbers.get("steps", 0)  # a run that has just started has no step yet
            if max_steps is not None and (steps < max_steps or not (run_dir / "eval.json").exists()):
                unfinished.append(f"{run_dir.parent.name}/{run_dir.name} ({steps} steps)")
                continue  # a half-trained run is not averaged with finished ones
            arms.setdefault(run_dir.parent.name, {})[run_dir.name] = numbers
    if study is not None:  # the study's arm order
        arms = {a: arms[a] for a in ["base", *study["arms"]] if a in arms}
    summary = {}
    for arm, seeds in arms.items():
        keys = sorted({k for s in seeds.values() for k in s})
        summary[arm] = {"seeds": sorted(seeds), "per_seed": seeds, "mean": {}, "min": {}, "max": {}}
        for key in keys:
            values = [s[key] for s in seeds.values() if s.get(key) is not None]
            if values:
                summary[arm]["mean"][key] = statistics.fmean(values)
                summary[arm]["min"][key], summary[arm]["max"][key] = min(values), max(values)
    (folder / "summary.json").write_text(json.dumps({"arms": summary, "unfinished": unfinished}, indent=1))
    text = markdown(summary)
    if unfinished:
        text += "\nNot yet finished (left out above): " + ", ".join(unfinished) + "\n"
    text += compute_line(folder)
    (folder / "summary.md").write_text(text)
    return summary


def compute_line(folder: Path) -> str:
    """The compute used: the trainings and evaluations in commands.log and the sum of their wall times."""
    log = folder / "commands.log"
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    work = [e for e in entries if e.get("returncode") == 0 and e["command"].split()[3:4] in (["train"], ["eval"])]
    if not work:
        return ""
    trainings = sum(e["command"].split()[3] == "train" for e in work)
    minutes = sum(e["seconds"] for e in work) / 60
    return (f"\nCompute: {trainings} trainings and {len(work) - trainings} evaluations, {minutes:.1f} min "
            "(the sum of their wall times in commands.log; reports not counted).\n")


def _cell(entry: dict, key: str, digits: int = 3) -> str:
    if key not in entry["mean"]:
        return "–"
    mean, low, high = entry["mean"][key], entry["min"][key], entry["max"][key]
    if len(entry["seeds"]) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _seed_order(summary: dict) -> list[str]:
    """The trained runs' seed folders, in numeric order (seed2 before seed10)."""
    seeds = {s for arm, e in summary.items() if arm != "base" for s in e["seeds"]}
    return sorted(seeds, key=lambda s: int(s.removeprefix("seed")) if s.removeprefix("seed").isdigit() else -1)


def _per_seed_cell(entry: dict, key: str, seeds: list[str]) -> str:
    values = [entry["per_seed"].get(s, {}).get(key) for s in seeds]
    if len(entry["seeds"]) < 2 or all(v is None for v in values):  # base: one untrained model
        return "–"
    return ", ".join("–" if v is None else f"{v:.3f}" for v in values)


def markdown(summary: dict) -> str:
    """Tables: training, then one evaluation table per dataset (mean [min, max] over seeds)."""
    train_keys = ["steps", "reward_first", "reward_last", "reward_last_upper", "reward_last_logged",
                  "frac_uniform_groups", "frac_uniform_variant_groups",
                  "frac_uniform_pools", "grad_norm_spikes", "grad_norm_max", "response_len_first",
                  "response_len_last", "anchor_rate", "masked_pair_frac", "masked_contrast_frac",
                  "steps_contrast_masked", "train_minutes"]
    train_keys = [k for k in train_keys if any(k in e["mean"] for e in summary.values())]
    lines = ["Mean over seeds [min, max]. Generated by experiments/summarize.py from the run files.", "",
             "| arm | seeds | " + " | ".join(train_keys) + " |", "|---" * (len(train_keys) + 2) + "|"]
    for arm, entry in summary.items():
        if arm == "base":  # evaluation only
            continue
        lines.append(f"| {arm} | {len(entry['seeds'])} | "
                     + " | ".join(_cell(entry, k, DIGITS.get(k, 3)) for k in train_keys) + " |")
    eval_keys = sorted({k for e in summary.values() for k in e["mean"] if k.startswith("eval/")})
    dataset_of = lambda key: key[len("eval/"):].rsplit("/", 1)[0]
    for dataset in sorted({dataset_of(k) for k in eval_keys}):
        keys = sorted((k for k in eval_keys if dataset_of(k) == dataset and "/pass@" in k),
                      key=lambda k: int(k.rsplit("@", 1)[1]))
        keys += [k for k in eval_keys if k == f"eval/{dataset}/diversity"]
        shown = [k.rsplit("/", 1)[1] for k in keys]
        seeds = _seed_order(summary)
        by_seed = f"pass@1 of seeds {', '.join(s.removeprefix('seed') for s in seeds)}"
        lines += ["", f"**{dataset}**", "", "| arm | " + " | ".join([*shown, by_seed]) + " |",
                  "|---" * (len(keys) + 2) + "|"]
        for arm, entry in summary.items():
            per_seed = _per_seed_cell(entry, f"eval/{dataset}/pass@1", seeds)
            lines.append(f"| {arm} | " + " | ".join([*(_cell(entry, k) for k in keys), per_seed]) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python experiments/summarize.py experiments/results/<study>")
    target = Path(sys.argv[1])
    study_file = Path(__file__).parent / f"{target.name.split('-')[0]}.yaml"
    study = yaml.safe_load(study_file.read_text()) if study_file.exists() else None
    summarize_study(target, study)
    print((target / "summary.md").read_text())
