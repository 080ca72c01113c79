"""Assert that a secret (an API key) appears nowhere under a directory: no file content, no name."""

from pathlib import Path


def assert_no_secret_in_dir(path, secret: str) -> None:
    """Fail naming every file under ``path`` whose bytes or name contain ``secret``.

    Every file is read as bytes (binary ones too: checkpoints, pickles, tokenizer files) and
    searched for the secret in UTF-8 and in UTF-16 (little- and big-endian, as some Windows tools
    and Python's ``str.encode("utf-16")`` write). Symlinks are not followed. Also fails when
    ``path`` holds no file at all, since a scan of nothing proves nothing.
    """
    root = Path(path)
    if not isinstance(secret, str) or len(secret) < 8:
        raise ValueError(f"give the secret as a string of at least 8 characters, got {secret!r}; "
                         "a short one would match by chance")
    needles = [secret.encode(encoding) for encoding in ("utf-8", "utf-16-le", "utf-16-be")]
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]
    assert files, f"{root} holds no files: nothing was scanned for the secret"
    leaks = [str(p) for p in files if any(needle in p.read_bytes() for needle in needles)]
    leaks += [str(p) for p in root.rglob("*") if secret in p.name]
    assert not leaks, f"the secret was written under {root}: {leaks}"
