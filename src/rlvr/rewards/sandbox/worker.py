"""The sandbox worker: a Python process, run by its path with ``python -I``, that isolates itself once and
then runs programs, each in a process forked from it (standard library only: it runs outside rlvr).

    python -I worker.py MODE HIDE_PATHS_JSON KEEP_PATHS_JSON      MODE: namespaces | limits_only

Set-up in ``namespaces`` mode (the steps of bubblewrap, done with ``unshare(2)`` and ``mount(2)``):

1. a user, mount and network namespace (``unshare``); the uid map is ``0 -> own uid`` and, when the
   host uid is root, also ``1 -> 65534`` (nobody), written by a helper still outside, since root's
   processes are exempt from ``RLIMIT_NPROC``: programs run as that uid;
2. every mount remounted read-only; empty read-only tmpfs over the hidden folders (HOME, /root,
   /home, /run, /dev/shm, /var/tmp), with the interpreter's own folders bound back read-only; a
   fresh tmpfs of ``TMPFS_MB`` at /tmp, the only writable place (each program gets a folder in it; the
   interpreter's own folders under /tmp, e.g. a checkout there, bound back read-only);
3. a PID namespace whose first process (PID 1, the "zygote") serves the jobs; it mounts a fresh
   /proc (the host's processes are not visible) and, after every job, kills every other process of
   its namespace (``kill(-1, SIGKILL)``), so nothing a program started, in any session, survives it;
4. each program's process drops every capability, empties its bounding set and sets no_new_privs
   before it runs: where rlvr is not root the program is root of the user namespace, and would
   otherwise be able to unmount a cover or remount a mount writable.

A step that the kernel refuses ends the worker with ``SETUP-FAILED <what>`` on stderr. In
``limits_only`` mode there are no namespaces: the resource limits, the new session and the minimal
environment remain, and the job's process group is killed (a program that leaves the group survives).

Protocol on stdin/stdout: 4-byte big-endian length + JSON. First the worker sends ``{"ready": ...}``;
then per job ``{"source", "stdin", "limits", "kind", ...}`` -> ``{"exit_code", "signal", "stdout",
"stderr", "timed_out", "output_truncated", "completed", "result", "wall_s"}``.
"""

import contextlib
import ctypes
import json
import os
import resource
import secrets
import select
import shutil
import signal
import struct
import sys
import time
import traceback  # imported here, once: a program's process is forked with it loaded

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
_CAPABILITY_VERSION_3 = 0x20080522
NOBODY = 65534
TMPFS_MB = 256
WORK_ROOT = "/tmp"
# the mount options a user namespace may not clear on remount ("locked"): kept as they are
_LOCKED_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                 "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}

_libc = ctypes.CDLL(None, use_errno=True)


class SetupFailed(Exception):
    """A namespace or mount step the kernel refused (the message says which)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        raise SetupFailed(f"{what}: {os.strerror(ctypes.get_errno())}")


def _mount(source, target: str, fstype, flags: int, data, what: str) -> None:
    enc = (lambda s: None if s is None else s.encode())
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), what)


# ---- set-up: namespaces and mounts -------------------------------------------------------------------

def _enter_namespaces() -> int:
    """unshare user+mount+net; write the uid/gid maps; the in-namespace uid programs run as."""
    host_uid, host_gid = os.getuid(), os.getgid()
    ready_r, ready_w = os.pipe()
    helper = os.fork() if host_uid == 0 else None
    if helper == 0:  # still outside: root may map a second uid (nobody) for the programs
        os.close(ready_w)
        os.read(ready_r, 1)
        parent = os.getppid()
        try:
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{parent}/{name}", "w") as f:
                    f.write(f"0 0 1\n1 {NOBODY} 1\n")
        finally:
            os._exit(0)
    try:
        _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET), "unshare(user, mount, network namespaces)")
    finally:
        os.write(ready_w, b"x")
    if helper:
        os.waitpid(helper, 0)
        program_uid = 1
    else:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {host_uid} 1\n"), ("gid_map", f"0 {host_gid} 1\n")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        program_uid = 0
    if os.getuid() != 0:
        raise SetupFailed("user namespace: the uid map was not written (the process is not root inside)")
    return program_uid


def _mount_points() -> list[tuple[str, int]]:
    """(mount point, its locked flags) of every mount, parents first."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # \040 for spaces
            flags = sum(bit for name, bit in _LOCKED_FLAGS.items() if name in fields[5].split(","))
            points.append((point, flags))
    return points


def _remount_read_only(point: str, flags: int) -> None:
    _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None, f"remount {point} read-only")


def _hide(folder: str, keep: list[str]) -> None:
    """An empty read-only tmpfs over ``folder``, with the ``keep`` paths inside it bound back read-only."""
    handles = _handles_inside(folder, keep)
    _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755", f"tmpfs over {folder}")
    _bind_back(handles)
    _remount_read_only(folder, MS_NOSUID | MS_NODEV)


def _handles_inside(folder: str, keep: list[str]) -> list[tuple[str, int]]:
    """(path, O_PATH descriptor) of the outermost ``keep`` paths inside ``folder``, opened before a mount hides them."""
    inside = [path for path in keep if path == folder or path.startswith(folder.rstrip("/") + "/")]
    outermost = [p for p in inside if not any(q != p and p.startswith(q.rstrip("/") + "/") for q in inside)]
    return [(path, os.open(path, os.O_PATH)) for path in sorted(set(outermost)) if os.path.exists(path)]


def _bind_back(handles: list[tuple[str, int]]) -> None:
    """Each kept path bound back, read-only, where a new mount covered it."""
    for path, fd in handles:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None, f"bind {path} back")
        _remount_read_only(path, MS_NOSUID | MS_NODEV)
        os.close(fd)


def _isolate_files(hide: list[str], keep: list[str]) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None, "make mounts private")
    for point, flags in _mount_points():
        try:
            _remount_read_only(point, flags)
        except SetupFailed:
            if os.path.realpath(point) == "/" or not point.startswith(("/proc", "/sys")):
                raise
    for folder in sorted(set(hide), key=len):
        if os.path.isdir(folder) and os.path.realpath(folder) == folder and folder != WORK_ROOT:
            _hide(folder, keep)
    handles = _handles_inside(WORK_ROOT, keep)  # an interpreter or a checkout under /tmp (a CI clone): bound back
    _mount("tmpfs", WORK_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMPFS_MB}m,mode=0755", "tmpfs at /tmp")
    _bind_back(handles)  # read-only inside the writable /tmp
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".sandbox-write-probe")
    try:
        open(probe, "w").close()
    except OSError:
        return
    os.unlink(probe)
    raise SetupFailed(f"the file system stayed writable ({probe})")


def _start_pid_namespace() -> None:
    """unshare(PID), fork: the child is PID 1 of the new namespace and returns; this process waits and exits."""
    _check(_libc.unshare(CLONE_NEWPID), "unshare(PID namespace)")
    child = os.fork()
    if child == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "mount /proc of the PID namespace")
        return
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    _, status = os.waitpid(child, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


# ---- the job: one program in a forked process ------------------------------------------------------------

def _set_limits(limits: dict) -> None:
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    mb = 1024 * 1024
    for which, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, limits["memory_mb"] * mb),
                         (resource.RLIMIT_FSIZE, limits["file_mb"] * mb), (resource.RLIMIT_NPROC, limits["processes"]),
                         (resource.RLIMIT_NOFILE, limits["open_files"]), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, value if isinstance(value, tuple) else (value, value))


def _drop_capabilities(program_uid: int) -> None:
    """Become ``program_uid`` (when not 0) keeping no capability, with none to gain (an empty bounding set, no
    new privileges). When rlvr does not run as root, a program runs as root of the user namespace: with its
    capabilities it could unmount the covers over the hidden folders or remount a read-only mount writable."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):  # needs CAP_SETPCAP: before the uid changes
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop the capability bounding set")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    if program_uid:
        os.setresgid(program_uid, program_uid, program_uid)
        os.setresuid(program_uid, program_uid, program_uid)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    _check(_libc.capset(header, (ctypes.c_uint32 * 6)()), "drop capabilities")


def _check_capabilities_drop(program_uid: int) -> None:
    """At set-up: a forked process can drop its capabilities (else every program would fail, not the set-up)."""
    pid = os.fork()
    if pid == 0:
        try:
            _drop_capabilities(program_uid)
        except (SetupFailed, OSError) as failure:
            sys.stderr.write(f"SETUP-FAILED {failure}\n")
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SetupFailed("a program's capabilities could not be dropped")


def _child(job: dict, folder: str, fds: tuple[int, int, int, int], program_uid: int, nonce: str,
           namespaced: bool) -> None:
    """In the forked process: the job's limits, folder, identity and environment, then the program."""
    stdin_r, out_w, err_w, result_w = fds
    os.setsid()
    os.dup2(stdin_r, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.dup2(result_w, 3)
    os.closerange(4, 65536)
    os.chdir(folder)
    if namespaced:
        _drop_capabilities(program_uid)
    _set_limits(job["limits"])
    os.environ.clear()
    os.environ.update(MINIMAL_ENV, HOME=folder, TMPDIR=folder, PWD=folder)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        setattr(sys, name, open(fd, mode, closefd=False, encoding="utf-8", errors="replace"))  # noqa: SIM115  (the program's streams)
        setattr(sys, f"__{name}__", getattr(sys, name))
    sys.argv = ["<program>"]
    sys.path[:0] = [folder]
    code = _RUNNERS["cpp" if job.get("language") == "cpp" else job["kind"]](job, nonce)
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a program may close or replace its streams
            stream.flush()


def _exec_main(source: str) -> tuple[int, bool]:
    """Run ``source`` as ``python -c`` would: its exit code (1 and a traceback on an uncaught exception), and
    whether it ran to its end (not stopped by SystemExit or an exception)."""
    try:
        exec(compile(source, "<program>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102  (the point, in the sandbox)
    except SystemExit as stop:
        code = stop.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        _flush()
        return code or 0, False
    except BaseException as error:  # noqa: BLE001  (the program's own exceptions: its exit status)
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)  # from the program's frame
        _flush()
        return 1, False
    _flush()
    return 0, True


def _run_script(job: dict, nonce: str) -> int:
    return _exec_main(job["source"])[0]


def _run_checked(job: dict, nonce: str) -> int:
    """The program, then its tests; the nonce goes out on fd 3 only if the tests ran to their end."""
    write = os.write  # as it was before the program could replace it
    code, finished = _exec_main(job["source"] + "\n\n" + job["test"] + "\n")
    if finished:
        write(3, nonce.encode())
    return code


def _run_verl_apps(job: dict, nonce: str) -> int:
    """verl's ``prime_code`` test runner (``run_test``, loaded from its file) on the program; results on fd 3."""
    import importlib.util

    write, leave = os.write, os._exit  # verl's reliability_guard sets many os functions to None
    spec = importlib.util.spec_from_file_location("_verl_testing_util", job["runner_path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    devnull = open(os.devnull, "w")  # noqa: SIM115  (the process's streams until it exits)
    sys.stdout = sys.stderr = devnull  # as verl's _temp_run does
    try:
        results, _ = module.run_test(in_outs=job["in_outs"], test=job["source"], debug=False, timeout=job["timeout"])
        results = [r if isinstance(r, bool) else int(r) if isinstance(r, int) else str(r) for r in results]
    except Exception:  # noqa: BLE001  (verl's _temp_run: every case failed)
        results = [-1] * len(job["in_outs"]["inputs"])
    write(3, (nonce + json.dumps(results)).encode())
    leave(0)


def _run_cpp(job: dict, nonce: str) -> int:
    """Compile the program with g++ in its folder (the same limits, its own processes), then become the binary."""
    import subprocess

    with open("main.cpp", "w") as source:
        source.write(job["source"])
    compiler = shutil.which("g++")
    if compiler is None:
        print("g++ is not installed", file=sys.stderr)
        return 127
    compiled = subprocess.run([compiler, "-O2", "-std=c++17", "-o", "main", "main.cpp"], stdin=subprocess.DEVNULL,
                              capture_output=True, check=False)
    if compiled.returncode != 0:
        sys.stderr.write(compiled.stderr.decode("utf-8", "replace")[-4000:])
        _flush()
        return 1
    os.execv("./main", ["./main"])  # stdin, stdout and stderr are the job's already


_RUNNERS = {"script": _run_script, "checked": _run_checked, "verl_apps": _run_verl_apps, "cpp": _run_cpp}


def _read_into(fd: int, name: str, chunks: dict, sizes: dict, cap: int) -> bool:
    """One read from ``fd`` into ``chunks[name]`` (kept up to ``cap`` bytes); False at end of file."""
    data = os.read(fd, 65536)
    if not data:
        return False
    chunks[name].append(data[:max(cap - sizes[name], 0)])
    sizes[name] += len(data)
    return True


def _exit_watch(pid: int) -> int | None:
    """A pidfd that turns readable when ``pid`` exits (Linux >= 5.3), or None (then the loop polls)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _collect(pid: int, fds: dict, job: dict) -> dict:
    """Read the job's outputs (capped) until it exits, its output passes the cap or its wall time is up."""
    limits = job["limits"]
    cap = limits["output_bytes"]
    deadline = time.monotonic() + limits["wall_s"]
    chunks, sizes = {name: [] for name in fds}, dict.fromkeys(fds, 0)
    open_fds = {fd: name for name, fd in fds.items()}
    exited = _exit_watch(pid)
    status, timed_out, truncated = None, False, False
    while status is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        watched = list(open_fds) + ([exited] if exited is not None else [])
        wait = remaining if exited is not None else min(remaining, 0.002 if not open_fds else 0.05)
        ready = select.select(watched, [], [], wait)[0]
        for fd in ready:
            if fd != exited and not _read_into(fd, open_fds[fd], chunks, sizes, cap):
                del open_fds[fd]
        if sizes["stdout"] > cap or sizes["stderr"] > cap:
            truncated = True
            break
        if exited is None or exited in ready:
            done, raw = os.waitpid(pid, os.WNOHANG)
            status = raw if done == pid else None
    if exited is not None:
        os.close(exited)
    for fd, name in open_fds.items():  # what the program wrote just before it exited
        while status is not None and select.select([fd], [], [], 0)[0] and _read_into(fd, name, chunks, sizes, cap):
            pass
    return {"status": status, "timed_out": timed_out, "output_truncated": truncated,
            **{name: b"".join(parts) for name, parts in chunks.items()}}


def _kill_rest(pid: int, namespaced: bool) -> int | None:
    """Kill the job and everything it started; its wait status if it had not been reaped."""
    try:
        if namespaced:
            os.kill(-1, signal.SIGKILL)  # PID 1 of the namespace: every other process in it
        else:
            os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # nothing left to kill
        pass
    status = None
    while True:
        try:
            reaped, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            return status
        if reaped == pid:
            status = raw


def run_job(job: dict, state: dict) -> dict:
    """One program in a fresh forked process with its own folder; the outcome (module docstring)."""
    started = time.monotonic()
    state["count"] += 1
    folder = os.path.join(state["work_root"], f"job{state['count']}")
    os.mkdir(folder, 0o700)
    if state["namespaced"]:
        os.chown(folder, state["program_uid"], state["program_uid"])
    pipes = {name: os.pipe() for name in ("stdin", "stdout", "stderr", "result")}
    nonce = secrets.token_hex(16)
    pid = os.fork()
    if pid == 0:
        try:
            _child(job, folder, (pipes["stdin"][0], pipes["stdout"][1], pipes["stderr"][1], pipes["result"][1]),
                   state["program_uid"], nonce, state["namespaced"])
        finally:
            os._exit(125)
    for name in ("stdout", "stderr", "result"):
        os.close(pipes[name][1])
    os.close(pipes["stdin"][0])
    _feed_stdin(pipes["stdin"][1], job.get("stdin") or "")
    outputs = _collect(pid, {name: pipes[name][0] for name in ("stdout", "stderr", "result")}, job)
    status = _kill_rest(pid, state["namespaced"])
    status = outputs["status"] if outputs["status"] is not None else status
    for name in ("stdout", "stderr", "result"):
        os.close(pipes[name][0])
    shutil.rmtree(folder, ignore_errors=True)
    return _outcome(outputs, status, nonce, time.monotonic() - started)


def _feed_stdin(fd: int, text: str) -> None:
    """Write the job's input in a thread (a program may never read it) and close the pipe."""
    import threading

    data = text.encode()

    def write():
        try:
            os.write(fd, data)
        except OSError:
            pass
        finally:
            os.close(fd)

    if len(data) < 60000:  # fits the pipe's buffer (64 KiB): no thread
        write()
    else:
        threading.Thread(target=write, daemon=True).start()


def _outcome(outputs: dict, status, nonce: str, wall_s: float) -> dict:
    exit_code = signal_number = None
    if status is not None and os.WIFEXITED(status):
        exit_code = os.WEXITSTATUS(status)
    elif status is not None and os.WIFSIGNALED(status):
        signal_number = os.WTERMSIG(status)
    result = outputs["result"].decode("utf-8", "replace")
    completed = result.startswith(nonce)
    return {"exit_code": exit_code, "signal": signal_number, "timed_out": outputs["timed_out"],
            "output_truncated": outputs["output_truncated"], "completed": completed,
            "result": result[len(nonce):] if completed else None, "wall_s": wall_s,
            "stdout": outputs["stdout"].decode("utf-8", "replace"),
            "stderr": outputs["stderr"].decode("utf-8", "replace")}


# ---- the serving loop ------------------------------------------------------------------------------------

def _read_message(stream):
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack(">I", header)
    return json.loads(stream.read(size))


def _send(stream, message: dict) -> None:
    data = json.dumps(message).encode()
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


def serve(state: dict) -> None:
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    _send(sink, {"ready": True, "namespaced": state["namespaced"], "pid": os.getpid()})
    preloaded = set()
    while (job := _read_message(source)) is not None:
        for module in job.get("preload", ()):  # e.g. numpy for verl's runner, imported once, not per job
            if module not in preloaded:
                __import__(module)
                preloaded.add(module)
        _send(sink, run_job(job, state))


def main(argv: list[str]) -> None:
    mode, hide, keep = argv[1], json.loads(argv[2]), json.loads(argv[3])
    state = {"count": 0, "program_uid": 0, "namespaced": mode == "namespaces", "work_root": WORK_ROOT}
    if state["namespaced"]:
        try:
            state["program_uid"] = _enter_namespaces()
            _isolate_files(hide, keep)
            _start_pid_namespace()
            _check_capabilities_drop(state["program_uid"])
        except (SetupFailed, OSError) as failure:
            sys.stderr.write(f"SETUP-FAILED {failure}\n")
            sys.stderr.flush()
            os._exit(3)
        serve(state)
        return
    import tempfile

    state["work_root"] = tempfile.mkdtemp(prefix="rlvr-sandbox-")
    try:
        serve(state)
    finally:
        shutil.rmtree(state["work_root"], ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv)
