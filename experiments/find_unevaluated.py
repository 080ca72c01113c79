"""How often a study's rewarded training responses were unevaluated expressions (a reward hack).

    python experiments/find_unevaluated.py experiments/results/<study>

Before the fix in rlvr.rewards.verify, a numeric gold accepted an answer such as "84 - 12"
(math-verify evaluates it), so a policy could score by restating the question. This re-reads
every run's samples.jsonl (the responses the trainer logged, `num_completions_to_log` per step),
extracts each rewarded policy response's answer as the reward did (`flexible`), and counts those
that the fixed check (`is_unevaluated`) rejects. Evaluations made with `log_samples` keep every
response with its verdict (`<eval.json>.samples.jsonl`); for those it also counts, per dataset,
the responses the verifier rejected as unevaluated. Writes <study>/unevaluated.md and prints it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from rlvr.rewards import extract_answer
from rlvr.rewards.verify import UNEVALUATED, is_unevaluated

LAST_STEPS = 10


def run_counts(samples: Path, max_steps: int) -> dict[str, int]:
    records = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    rewarded = [r for r in records if (r.get("reward") or 0) > 0 and not r.get("anchor")]
    late = [r for r in rewarded if r["step"] > max_steps - LAST_STEPS]

    def hacked(rows):
        return sum(1 for r in rows if (answer := extract_answer(r["completion"], "flexible")) is not None
                   and is_unevaluated(str(r["answer"]), answer))

    return {"logged": len(records), "rewarded": len(rewarded), "unevaluated": hacked(rewarded),
            "rewarded_late": len(late), "unevaluated_late": hacked(late)}


def main(folder: Path) -> str:
    lines = [(f"Rewarded policy responses in samples.jsonl whose answer is an unevaluated expression "
              f"(experiments/find_unevaluated.py; 'late' = the last {LAST_STEPS} steps)."), "",
             "| run | steps | logged | rewarded | unevaluated | rewarded, late | unevaluated, late |",
             "|---|---|---|---|---|---|---|"]
    for samples in sorted(folder.glob("*/seed*/samples.jsonl")):
        run = samples.parent
        config = yaml.safe_load((run / "config.yaml").read_text())
        steps = sum(1 for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip())
        c = run_counts(samples, int(config["run"]["max_steps"]))
        lines.append(f"| {run.parent.name}/{run.name} | {steps} | {c['logged']} | {c['rewarded']} | "
                     f"{c['unevaluated']} | {c['rewarded_late']} | {c['unevaluated_late']} |")
    evaluations = {samples.parent.relative_to(folder).as_posix(): [json.loads(line) for line in
                   samples.read_text().splitlines() if line.strip()]
                   for samples in [*sorted(folder.glob("*/eval.json.samples.jsonl")),
                                   *sorted(folder.glob("*/seed*/eval.json.samples.jsonl"))]}
    if evaluations:
        datasets = sorted({r["dataset"] for records in evaluations.values() for r in records})
        lines += ["", ("Evaluation responses (`rlvr eval --log-samples`) the verifier rejected as unevaluated "
                       "expressions, per dataset: rejected / responses."), "",
                  f"| evaluation | {' | '.join(datasets)} |", "|---|" + "---|" * len(datasets)]
        for name, records in evaluations.items():
            cells = [f"{sum(r.get('error') == UNEVALUATED for r in records if r['dataset'] == d)} / "
                     f"{sum(r['dataset'] == d for r in records)}" for d in datasets]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    (folder / "unevaluated.md").write_text(text)
    return text


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(main(Path(sys.argv[1])))
