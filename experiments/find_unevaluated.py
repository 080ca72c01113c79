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
    lines = [f"Rewarded policy responses in samples.jsonl whose answer is an unevaluated expression "
             f"(experiments/find_unevaluated.py; 'late' = the last {LAST_STEPS} steps).", "",
             "| run | steps | logged | rewarded | unevaluated | rewarded, late | unevaluated, late |",
             "|---|---|---|---|---|---|---|"]
    for samples in sorted(folder.glob("*/seed*/samples.jsonl")):
        run = samples.parent
        config = yaml.safe_load((run / "config.yaml").read_text())
        steps = sum(1 for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip())
        c = run_counts(samples, int(config["run"]["max_steps"]))
        lines.append(f"| {run.parent.name}/{run.name} | {steps} | {c['logged']} | {c['rewarded']} | "
                     f"{c['unevaluated']} | {c['rewarded_late']} | {c['unevaluated_late']} |")
    evaluations = sorted(folder.glob("*/eval.json.samples.jsonl")) + sorted(folder.glob("*/seed*/eval.json.samples.jsonl"))
    if evaluations:
        lines += ["", "Evaluation responses (`rlvr eval --log-samples`) the verifier rejected as unevaluated "
                  "expressions, per dataset: rejected / responses.", ""]
        datasets = sorted({json.loads(line)["dataset"] for line in evaluations[0].read_text().splitlines() if line})
        lines += [f"| evaluation | {' | '.join(datasets)} |", "|---|" + "---|" * len(datasets)]
        for samples in evaluations:
            counts = {d: [0, 0] for d in datasets}
            for line in samples.read_text().splitlines():
                if line.strip():
                    record = json.loads(line)
                    counts.setdefault(record["dataset"], [0, 0])[1] += 1
                    counts[record["dataset"]][0] += record.get("error") == UNEVALUATED
            name = samples.parent.relative_to(folder).as_posix()
            lines.append(f"| {name} | " + " | ".join(f"{counts[d][0]} / {counts[d][1]}" for d in datasets) + " |")
    text = "\n".join(lines) + "\n"
    (folder / "unevaluated.md").write_text(text)
    return text


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(main(Path(sys.argv[1])))
