"""The sandbox worker's side that programs come from: a template that never sees a job, and each program's
process (standard library only; loaded by ``worker.py``).

Process tree of one worker (``namespaces`` mode; the worker's set-up is in ``worker.py``):

    worker (PID 1 of the worker's PID namespace: reads jobs, collects outputs, holds every job's text)
     └ template (forked right after set-up, before any job: its memory never held a job or a reply)
        └ init (one per job: PID 1 of a new PID namespace; new mount and IPC namespaces, a /proc of its own
           │    and a private /tmp, then it waits)
           └ program (drops every capability, its limits, the seccomp filter; then the program runs)

So a program starts from memory no other job was ever in (the template's), in a PID namespace of its own
(it sees and can signal only its own processes; the worker, the template and the other jobs are not
there), with a /tmp of its own (a tmpfs of ``tmp_mb``, gone with the namespace), System V IPC of its own,
and no kernel keyring, new namespace or uncounted memory to reach (``worker_kernel.install_seccomp``).
When its init exits, the kernel kills every process of the namespace: nothing the program started
survives it, in any session. The job's text reaches the program's process by a pipe, read there.

The template makes each init PID 1 of a new namespace by ``unshare(CLONE_NEWPID)`` before the fork and
``setns`` back to its own after it (no launcher process between them: one fork of a Python process less per
program). In ``limits_only`` mode no namespace is made and the init is the program's process itself (a new
session, its process group killed after it, as before).

The template gets each job's descriptors (job text, stdin, stdout, stderr, result, status) from the worker
over a Unix socket (``SCM_RIGHTS``) with no job content; the template writes the init's pid on the status
pipe, the init (or, in ``limits_only``, the template) the program's wait status.
"""

import gc
import json
import os
import resource
import shutil
import signal
import socket
import struct
import sys

import worker_kernel as kernel
import worker_languages  # the runners, one per language and kind of job (and traceback, loaded once)

MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
WORK_ROOT = "/tmp"
FDS = ("job", "stdin", "stdout", "stderr", "result", "status")  # the descriptors of a job, in this order


# ---- the template -------------------------------------------------------------------------------------------

def start_template(settings: dict) -> tuple[int, socket.socket]:
    """Fork the template now (before any job); (its pid, the worker's end of its socket)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            _template(theirs, settings)
        finally:
            os._exit(0)
    theirs.close()
    return pid, ours


def _template(sock: socket.socket, settings: dict) -> None:
    kernel.libc.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _program_state()
    gc.freeze()  # the template's objects are never collected again: forks do not copy their pages to scan them
    own_pid_namespace = None
    if settings["namespaced"]:
        kernel.empty_bounding_set(settings["last_capability"])  # once, for every program it will start
        own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY)  # to come back to after each job's
    while True:
        message, fds, _, _ = socket.recv_fds(sock, 4096, len(FDS))
        if not message:
            return  # the worker is gone
        if message.startswith(b"preload "):  # a module the runners import (e.g. numpy), once, not per job
            __import__(message[len(b"preload "):].decode())
            sys.stdout.flush()  # (what an import printed goes to the worker's streams now, never into a program's)
            sys.stderr.flush()
            gc.freeze()
            continue
        _start_job(dict(zip(FDS, fds)), settings, own_pid_namespace)
        sock.send(b"done")  # every process of the job is gone (the worker replies only then)


def _program_state() -> None:
    """What every program starts with, made once in the template (each program's process would spend ~0.7 ms on
    it): the minimal environment (clearing os.environ key by key is slow), SIGINT's default action, and the
    standard streams on descriptors 0, 1 and 2 (a program's process makes its job's pipes those descriptors
    before the program runs; the template never reads or writes them)."""
    os.environ.clear()
    os.environ.update(MINIMAL_ENV)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        setattr(sys, name, open(fd, mode, closefd=False, encoding="utf-8", errors="replace"))  # noqa: SIM115  (the program's streams)
        setattr(sys, f"__{name}__", getattr(sys, name))


def _start_job(fds: dict, settings: dict, own_pid_namespace: int | None) -> None:
    """Fork the job's init (namespaces mode: PID 1 of a new PID namespace, which then makes its own mount and IPC
    namespaces; limits_only: the program's process), write its pid on the status pipe, and wait for it."""
    go_read, go = os.pipe()  # the child waits for its pid to be on the status pipe before it writes there
    try:
        if settings["namespaced"]:  # the next child is PID 1 of a new namespace
            kernel.unshare(kernel.CLONE_NEWPID, "unshare(PID namespace) for a program")
        child = os.fork()
        if child == 0:
            for fd in (go, *([own_pid_namespace] if own_pid_namespace is not None else [])):
                os.close(fd)  # (the template's namespace: nothing of the job holds it)
            if os.read(go_read, 1) != b"1":  # the template ended before it wrote the pid: nothing to run for
                os._exit(1)
            os.close(go_read)
            _init(fds, settings)
    except kernel.SetupFailed as failure:  # the worker reads no pid: the job is a sandbox failure
        os.write(fds["stderr"], f"SANDBOX-SETUP-FAILED {failure}\n".encode())
        for fd in (*fds.values(), go_read, go):
            os.close(fd)
        return
    if settings["namespaced"]:  # this process's later children: in its own namespace again (if it cannot, the
        # template ends: its next children would not be PID 1 of a namespace; the pool replaces the worker)
        kernel.setns(own_pid_namespace, kernel.CLONE_NEWPID, "return to the template's PID namespace")
    os.close(go_read)
    for name in FDS[:-1]:  # the template only reports
        os.close(fds[name])
    os.write(fds["status"], struct.pack(">q", child))
    os.write(go, b"1")
    os.close(go)
    _, status = os.waitpid(child, 0)
    if not settings["namespaced"]:  # the child was the program itself
        os.write(fds["status"], struct.pack(">i", status))
    os.close(fds["status"])


# ---- a job's init and program --------------------------------------------------------------------------------

def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _init(fds: dict, settings: dict) -> None:
    """PID 1 of the job's namespace (namespaces mode): mount and IPC namespaces of its own, its /proc and /tmp,
    then the program, waited for. In limits_only mode: the program's process itself."""
    try:
        if settings["namespaced"]:
            kernel.unshare(kernel.CLONE_NEWNS | kernel.CLONE_NEWIPC, "unshare(mount, IPC namespaces) for a program")
        job = json.loads(_read_all(fds["job"]))
        os.close(fds["job"])
        folder = _private_folders(job, settings) if settings["namespaced"] else _plain_folder()
        if not settings["namespaced"]:
            _program(job, fds, folder, settings)  # becomes the program: never returns
        for name in ("INT", "TERM", "HUP", "QUIT", "USR1", "USR2"):  # PID 1: signals from inside are dropped
            signal.signal(getattr(signal, f"SIG{name}"), signal.SIG_DFL)
        program = os.fork()
        if program == 0:
            _program(job, fds, folder, settings)
    except BaseException as failure:  # noqa: BLE001  (no status is written: the worker reports a sandbox failure)
        os.write(fds["stderr"], f"SANDBOX-SETUP-FAILED {type(failure).__name__}: {failure}\n".encode())
        os._exit(1)
    for name in ("stdin", "stdout", "stderr", "result"):
        os.close(fds[name])
    while True:  # as PID 1: reap every orphan, until the program itself has ended
        pid, status = os.wait()
        if pid == program:
            os.write(fds["status"], struct.pack(">i", status))
            os._exit(0)  # the kernel now kills whatever the program left in the namespace


PROGRAM_ROOT = "/tmp/.program-root"  # in the worker's own /tmp: the programs' root, built once


def build_program_root(paths: dict) -> None:
    """At the worker's set-up (namespaces mode): the file system every program gets, at :data:`PROGRAM_ROOT`, a
    read-only tmpfs holding only what a runtime needs, bound read-only (``paths["bind"]``: the system's /usr,
    /lib*, /bin, /sbin, /etc, the interpreter and its standard library), every package folder in them left
    empty (``paths["cover"]``: site-packages, dist-packages), a /dev of null, zero, full, random and urandom,
    and the mount points of a program's /proc and /tmp. Nothing else of the machine is there: no checkout, run
    folder, dataset, HOME or installed package."""
    root = PROGRAM_ROOT
    os.makedirs(root)
    kernel.mount("tmpfs", root, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "size=1m,mode=0755", "the programs' root")
    for path in _outermost([p for p in paths["bind"] if os.path.lexists(p)]):
        if os.path.islink(path):  # e.g. /bin -> usr/bin on a merged /usr: kept as the link
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            os.symlink(os.readlink(path), root + path)
        else:
            _bind_read_only(os.open(path, os.O_PATH), root + path, os.path.isdir(path))
    for path in paths["cover"]:
        if os.path.isdir(root + path):
            kernel.mount("tmpfs", root + path, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_RDONLY,
                         "size=4k", f"cover {path}")
    for name in ("null", "zero", "full", "random", "urandom"):
        _bind_read_only(os.open(f"/dev/{name}", os.O_PATH), f"{root}/dev/{name}", False, writable=True)
    os.makedirs(root + "/proc")
    os.makedirs(root + "/tmp")
    _remount_read_only(root)


def _private_folders(job: dict, settings: dict) -> str:
    """In the program's mount namespace: a /proc of its PID namespace and an empty /tmp of ``tmp_mb`` (its folder
    in it) inside the programs' root (:func:`build_program_root`), a job's own read-only paths (verl's runner
    and numpy) bound in, then that root made the program's (``chroot``: the program keeps no capability and no
    descriptor outside it, and seccomp refuses chroot, mount and pivot_root)."""
    root = PROGRAM_ROOT
    kernel.mount("proc", root + "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC, None,
                 "mount /proc of the program's PID namespace")
    size = int(job["limits"].get("tmp_mb", 64))
    kernel.mount("tmpfs", root + "/tmp", "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, f"size={size}m,mode=0755",
                 "a private tmpfs at /tmp")
    extra = [p for p in dict.fromkeys(job.get("read_only", ())) if os.path.lexists(p)]
    if extra:  # (this namespace's copy of the root, writable a moment: the shared one is not touched)
        kernel.mount(None, root, None, kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_NOSUID | kernel.MS_NODEV, None,
                     "make the program's root writable for its own paths")
        covers = [p for p in settings["paths"]["cover"] if any(e.startswith(p + "/") for e in extra)]
        for path in covers:  # a package folder a job's paths lie in: a writable cover of this namespace's own
            os.makedirs(root + path, exist_ok=True)
            kernel.mount("tmpfs", root + path, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "size=64k", f"cover {path}")
        for path in extra:
            _bind_read_only(os.open(path, os.O_PATH), root + path, os.path.isdir(path))
        for path in [*covers, root]:
            _remount_read_only(path if path == root else root + path)
    folder = "/tmp/work"
    os.mkdir(root + folder, 0o700)
    os.chown(root + folder, settings["program_uid"], settings["program_uid"])
    os.chroot(root)
    os.chdir("/")
    return folder


def _outermost(paths: list[str]) -> list[str]:
    """``paths`` less those inside another of them (a bound folder holds them already), shallowest first."""
    folders = [p for p in paths if os.path.isdir(p) and not os.path.islink(p)]
    kept = [p for p in dict.fromkeys(paths) if not any(p.startswith(f.rstrip("/") + "/") for f in folders)]
    return sorted(kept, key=lambda p: p.count("/"))


def _remount_read_only(target: str) -> None:
    try:  # (the worker's mounts are read-only already; a remount that a locked flag refuses changes nothing)
        kernel.mount(None, target, None, kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | kernel.MS_NOSUID
                     | kernel.MS_NODEV, None, f"remount {target} read-only")
    except kernel.SetupFailed:
        if not os.statvfs(target).f_flag & os.ST_RDONLY:
            raise


def _bind_read_only(handle: int, target: str, is_dir: bool, *, writable: bool = False) -> None:
    """Bind the opened path ``handle`` at ``target`` (made first), read-only unless ``writable`` (devices: the
    worker's /dev mount as it is)."""
    os.makedirs(target if is_dir else os.path.dirname(target), exist_ok=True)
    if not is_dir:
        open(target, "a").close()
    kernel.mount(f"/proc/self/fd/{handle}", target, None, kernel.MS_BIND | kernel.MS_REC, None, f"bind {target}")
    os.close(handle)
    if not writable:
        _remount_read_only(target)


def _plain_folder() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="rlvr-sandbox-job-")


def _set_limits(limits: dict) -> None:
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    mb = 1024 * 1024
    for which, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, limits["memory_mb"] * mb),
                         (resource.RLIMIT_FSIZE, limits["file_mb"] * mb), (resource.RLIMIT_NPROC, limits["processes"]),
                         (resource.RLIMIT_NOFILE, limits["open_files"]), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, value if isinstance(value, tuple) else (value, value))


def _program(job: dict, fds: dict, folder: str, settings: dict) -> None:
    """The program's process: its streams, folder, identity, limits, environment and filter, then the program."""
    try:
        os.setsid()
        for target, name in enumerate(("stdin", "stdout", "stderr", "result")):
            os.dup2(fds[name], target)
        os.closerange(4, 65536)
        os.chdir(folder)
        if settings["namespaced"]:
            kernel.drop_capabilities(settings["program_uid"])  # (the template emptied the bounding set)
        else:
            kernel.check(kernel.libc.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
        _set_limits(job["limits"])
        if settings["seccomp"] is not None:
            kernel.install_seccomp(settings["seccomp"])
    except BaseException as failure:  # noqa: BLE001  (the program never ran: say why, exit as a failure)
        os.write(2, f"SANDBOX-SETUP-FAILED {failure}\n".encode())
        os._exit(125)
    os.environ.update(HOME=folder, TMPDIR=folder, PWD=folder)  # (the template's environment: MINIMAL_ENV)
    sys.argv = ["<program>"]
    sys.path[:0] = [folder]
    nonce = job.pop("nonce")
    try:
        code = worker_languages.LANGUAGES[job["language"]].runners[job["kind"]](job, nonce)
    finally:
        if not settings["namespaced"]:
            shutil.rmtree(folder, ignore_errors=True)
    os._exit(code)
