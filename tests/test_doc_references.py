"""Everything the code cites lives in the repository: no pointer to design files kept elsewhere,
and every docs/ page named in a comment or docstring exists."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = [p for folder in ("src", "tests", "benchmarks", "experiments") for p in (REPO / folder).rglob("*.py")]
# the spec files this project started from, kept outside the repository
OUTSIDE = re.compile(r"\b(?:USERS|DAGRPO|TAGRPO|CONVENTIONS|STYLE|ENVIRONMENT)\.md\b|\.\./shared\b")
CITED = re.compile(r"\bdocs/[\w./-]+\.md\b")


def test_no_reference_to_files_outside_the_repository():
    hits = [f"{p.relative_to(REPO)}:{i}" for p in SOURCES if p != Path(__file__).resolve()
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, f"cite the page in docs/ instead: {hits}"


def test_every_cited_docs_page_exists():
    cited = {m.group(0) for p in SOURCES for m in CITED.finditer(p.read_text(encoding="utf-8"))}
    assert "docs/design/pitfalls.md" in cited and "docs/algorithms/dagrpo.md" in cited
    missing = sorted(page for page in cited if not (REPO / page).is_file())
    assert not missing, f"cited but not in the repository: {missing}"
