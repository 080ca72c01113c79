"""What made a checkpoint's write fail, in words a user can act on.

The writers report a failed write in three ways: an ``OSError`` with its errno (json, open, shutil),
safetensors' ``SafetensorError`` with "(os error N)" in its text, and ``torch.save``'s ``RuntimeError``
("[enforce fail at inline_container.cc] . unexpected pos 576 vs 534", or "PytorchStreamWriter failed
writing file"), which has lost the errno. For the last the cause is inferred: a full disk (under 1 MiB
free), else a file-size limit (``ulimit -f``: EFBIG, Python ignores SIGXFSZ), else a write error of
unknown cause. Anything else (a bug) is not a write failure and passes through.
"""

from __future__ import annotations

import errno
import re
import resource
import shutil
from pathlib import Path

CAUSES = {
    errno.ENOSPC: ("no space left on device",
                   ("free space, keep fewer checkpoints (save_total_limit={keep}), or put output_dir on a larger "
                   "disk")),
    errno.EDQUOT: ("disk quota exceeded",
                   ("free space within your quota, keep fewer checkpoints (save_total_limit={keep}), or put "
                   "output_dir elsewhere")),
    errno.EFBIG: (("a file grew past the largest file allowed (the file-size limit, `ulimit -f`, or the file "
                  "system's own)"),
                  "raise the limit (`ulimit -f unlimited`) or put output_dir on a file system that takes larger files"),
    errno.EIO: ("input/output error (a failing disk or network file system)",
                "check the disk (`dmesg`) or put output_dir on another one"),
    errno.EROFS: ("the file system became read-only", "remount it writable or put output_dir on a writable disk"),
}
UNKNOWN = ("the write failed", "check the disk of output_dir (free space, quota, `ulimit -f`, errors in `dmesg`)")
_TORCH_WRITE_FAILED = ("unexpected pos", "failed writing file", "PytorchStreamWriter failed")


def write_errno(error: BaseException, folder: Path) -> int | None:
    """The errno of a failed write (0: a write failure of unknown cause; None: not a write failure)."""
    if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit: not the disk
        return None
    seen, cause = set(), error
    while cause is not None and id(cause) not in seen:  # an OSError under a wrapper (raise ... from)
        if isinstance(cause, OSError) and cause.errno:
            return cause.errno
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    text = str(error)
    found = re.search(r"os error (\d+)", text)  # safetensors (Rust's io::Error)
    if found:
        return int(found.group(1))
    if "No space left on device" in text:
        return errno.ENOSPC
    if not any(sign in text for sign in _TORCH_WRITE_FAILED):
        return None
    try:
        if shutil.disk_usage(folder).free < 2**20:
            return errno.ENOSPC
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return errno.EFBIG if soft != resource.RLIM_INFINITY else 0


def write_failure(error: BaseException, *, what: str, folder: Path, removed: str, keep: int | None,
                  earlier: bool) -> OSError | None:
    """The one-line error for a failed write of ``what`` into ``folder`` (None: ``error`` is not one): the
    cause, what was removed, the fix, and how to go on (``earlier``: a checkpoint before this one exists, so
    resume=true continues; else the run starts over, as resume=true would be refused)."""
    code = write_errno(error, folder)
    if code is None:
        return None
    cause, fix = CAUSES.get(code, UNKNOWN)
    detail = "" if code in CAUSES else f" ({' '.join(str(error).split())[:200]})"
    then = ("earlier checkpoints are intact); {fix}; then continue with resume=true" if earlier else
            "no checkpoint was written before it); {fix}; then start over with overwrite_output_dir=true "
            "or a new output_dir")
    message = f"{cause}{detail} while saving {what} in {folder} (the partial {removed} was removed; " + then.format(
        fix=fix.format(keep=keep))
    return OSError(code, message) if code else OSError(message)
