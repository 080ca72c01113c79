"""TA-GRPO's question variants: rephrasings attached to rows, and the prompts they become.

Sources, first found wins per row: the row's own ``rephrasings`` column; ``rephrasings_file`` (the
JSONL written by ``rlvr rephrase``, joined by id); else (``rephrase_missing=rules``) offline rule
rephrasings made at load time and cached under ``$RLVR_CACHE_DIR/rephrasings/`` — the run logs
that it did so. Empty or invalid rephrasings were already dropped by the filters, so pools may
differ in size [code: the authors drop rather than pad].
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from rlvr.config.tagrpo import TAGRPOConfig
from rlvr.data.rephrase import RuleRephraser, rephrase_rows
from rlvr.models.cache import rlvr_cache_dir

logger = logging.getLogger(__name__)


def read_rephrasings_file(path: str | Path) -> dict[str, list[str]]:
    """{id: rephrasings} from a ``rlvr rephrase`` output file (a half-written last line is ignored)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"rephrasings_file {str(path)!r} does not exist; make it with "
                         "`rlvr rephrase --data SPEC --n N --via rules --out FILE.jsonl`")
    found: dict[str, list[str]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record.get("rephrasings"), list) or "id" not in record:
            raise ValueError(f"{path}:{number}: expected an object with 'id' and a list 'rephrasings'")
        found[str(record["id"])] = [r for r in record["rephrasings"] if isinstance(r, str) and r.strip()]
    return found


def attach_rephrasings(rows: list[dict], t: TAGRPOConfig, *, data: str, seed: int) -> list[dict]:
    """Rows with up to N rephrasings each (new dicts; rows without any keep an empty list).

    ``data`` (the data spec) and ``seed`` key the cache of rule rephrasings.
    """
    if not t.enabled:
        return rows
    joined = read_rephrasings_file(t.rephrasings_file) if t.rephrasings_file else {}
    out = [dict(row, rephrasings=list(row.get("rephrasings") or joined.get(row["id"], []))) for row in rows]
    missing = [row for row in out if not row["rephrasings"]]
    if missing and t.rephrase_missing == "error":
        raise ValueError(f"{len(missing)} rows have no rephrasings (first: {missing[0]['id']!r}); add a "
                         "'rephrasings' column, pass rephrasings_file=..., or set rephrase_missing=rules")
    if missing:
        made = _rule_rephrasings(missing, n=t.num_rephrasings, data=data, seed=seed)
        for row in missing:
            row["rephrasings"] = made.get(row["id"], [])
    for row in out:
        row["rephrasings"] = row["rephrasings"][: t.num_rephrasings]
    return out


def _rule_rephrasings(rows: list[dict], *, n: int, data: str, seed: int) -> dict[str, list[str]]:
    """Offline rule rephrasings for ``rows``, made once and cached by (data, N, seed)."""
    key = hashlib.sha256(json.dumps([data, n, seed, sorted(r["id"] for r in rows)]).encode()).hexdigest()
    path = rlvr_cache_dir() / "rephrasings" / f"rules-{key[:16]}.jsonl"
    text_rows = [r for r in rows if isinstance(r["prompt"], str)]
    if len(text_rows) < len(rows):
        logger.warning("%d rows have chat-message prompts; rule rephrasing needs plain text, they get none",
                       len(rows) - len(text_rows))
    tally = rephrase_rows(text_rows, RuleRephraser(), n=n, seed=seed, out_path=path, progress=False)
    logger.warning("TA-GRPO: %d questions had no rephrasings; made offline rule rephrasings (n=%d), "
                   "cached at %s\n%s", len(rows), n, path, tally.summary())
    return read_rephrasings_file(path)


def variant_prompt(prompt: str | list[dict], rephrasing: str) -> str | list[dict]:
    """The dataset prompt with its question replaced by a rephrasing (last user message for chats)."""
    if isinstance(prompt, str):
        return rephrasing
    messages = [dict(m) for m in prompt]
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    messages[last_user]["content"] = rephrasing
    return messages
