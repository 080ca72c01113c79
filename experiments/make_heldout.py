"""Held-out evaluation problems that never occur in the training data (by prompt text).

    python experiments/make_heldout.py TRAIN_SPEC CANDIDATE_SPEC COUNT OUT.jsonl

Another seed is not a held-out set: reasoning-gym seeds item i with seed + i, so `seed=99` yields
the training list shifted by 99 (all 32 such problems were among the 1000 training problems of
`chain_sum`). Draw candidates with a seed far beyond the training size; this keeps the first COUNT whose
prompt is not a training prompt and writes them as JSONL rows (id, prompt, answer), which
`rlvr eval --data OUT.jsonl` reads. The files under experiments/data/ were made by the commands
in experiments/README.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr.data import load_rows


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        raise SystemExit(__doc__)
    train_spec, candidate_spec, count, out = argv[0], argv[1], int(argv[2]), Path(argv[3])
    seen = {row["prompt"] for row in load_rows(train_spec)}
    kept = [row for row in load_rows(candidate_spec) if row["prompt"] not in seen][:count]
    if len(kept) < count:
        raise SystemExit(f"only {len(kept)} of the candidates are new; draw more candidates")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for row in kept:
            fh.write(json.dumps({"id": row["id"], "prompt": row["prompt"], "answer": row["answer"]}) + "\n")
    print(f"wrote {len(kept)} problems to {out} (none of them among the {len(seen)} distinct training prompts)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
