"""Names a dataset could carry that would escape a folder if they were ever used as a path."""

from pathlib import Path


def hostile_names(tmp_path: Path) -> list[str]:
    """Traversal, absolute (inside ``tmp_path``, so a leak there is seen), NUL, dot and overlong names."""
    return ["../../etc/passwd", "..", ".", "a\x00b", "x" * 200, "a/b\\c", ".hidden", "~/home",
            str(tmp_path / "absolute" / "escape")]


def files_under(root: Path) -> set[str]:
    """Every file below ``root``, as POSIX paths relative to it."""
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}
