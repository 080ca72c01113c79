"""The sandbox worker: a Python process, run by its path with ``python -I``, that isolates itself once and
then runs programs, each in a process that starts from memory no job was ever in (standard library only: it
runs outside rlvr).

    python -I worker.py MODE HIDE_PATHS_JSON KEEP_PATHS_JSON PROGRAM_PATHS_JSON    MODE: namespaces | limits_only

PROGRAM_PATHS_JSON: ``{"bind": [...], "cover": [...]}``, what a program's file system holds (``worker_program``).

Set-up in ``namespaces`` mode (the steps of bubblewrap, done with ``unshare(2)`` and ``mount(2)``):

1. a user, mount, network and IPC namespace (``unshare``); the uid map is ``0 -> own uid`` and, when the
   host uid is root, also ``1 -> 65534`` (nobody), written by a helper still outside, since root's
   processes are exempt from ``RLIMIT_NPROC``: programs run as that uid;
2. every mount remounted read-only; empty read-only tmpfs over the hidden folders (HOME, /root,
   /home, /run, /dev/shm, /var/tmp), with the interpreter's own folders bound back read-only; a
   fresh tmpfs at /tmp (the interpreter's own folders under /tmp, e.g. a checkout there, bound back
   read-only);
3. a PID namespace whose first process (PID 1) serves the jobs, with a fresh /proc; as PID 1 it receives
   no signal from a process of its namespace (it keeps no handler: SIGINT is ignored);
4. the template (``worker_program.py``), forked before any job, and a check that a forked process can drop
   its capabilities and install the seccomp filter (``worker_kernel.py``).

Each job then runs in its own PID, mount and IPC namespaces, forked from the template (``worker_program.py``
has the process tree): a fresh read-only root with only its runtime's files, its own /proc and a private
/tmp, every capability dropped, its limits, the seccomp filter. The worker itself only writes the job's text to a pipe, feeds stdin, collects stdout, stderr and the
result (capped), and kills the job's init at the wall limit or the output cap (the kernel then kills every
process of the job's namespace).

A step that the kernel refuses ends the worker with ``SETUP-FAILED <what>`` on stderr. In ``limits_only``
mode there are no namespaces: the resource limits, the new session, the minimal environment and (where
libseccomp loads) the seccomp filter remain, and the job's process group is killed (a program that leaves
the group survives).

Protocol on stdin/stdout: 4-byte big-endian length + JSON. First the worker sends ``{"ready": ...}``;
then per job ``{"source", "stdin", "limits", "kind", ...}`` -> ``{"exit_code", "signal", "stdout",
"stderr", "timed_out", "output_truncated", "completed", "result", "wall_s"}``.
"""

import contextlib
import json
import os
import secrets
import select
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling modules (-I leaves the folder out)
import worker_kernel as kernel
import worker_program

del sys.path[0]  # (a program's imports do not see the worker's folder)

NOBODY = 65534
TMPFS_MB = 256
WORK_ROOT = worker_program.WORK_ROOT
# the mount options a user namespace may not clear on remount ("locked"): kept as they are
_LOCKED_FLAGS = {"nosuid": kernel.MS_NOSUID, "nodev": kernel.MS_NODEV, "noexec": kernel.MS_NOEXEC,
                 "noatime": kernel.MS_NOATIME, "nodiratime": kernel.MS_NODIRATIME, "relatime": kernel.MS_RELATIME,
                 "strictatime": kernel.MS_STRICTATIME}


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
        kernel.unshare(kernel.CLONE_NEWUSER | kernel.CLONE_NEWNS | kernel.CLONE_NEWNET | kernel.CLONE_NEWIPC,
                       "unshare(user, mount, network, IPC namespaces)")
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
        raise kernel.SetupFailed("user namespace: the uid map was not written (the process is not root inside)")
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
    kernel.mount(None, point, None, kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | flags, None, f"remount {point} read-only")


def _hide(folder: str, keep: list[str]) -> None:
    """An empty read-only tmpfs over ``folder``, with the ``keep`` paths inside it bound back read-only."""
    handles = _handles_inside(folder, keep)
    kernel.mount("tmpfs", folder, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "size=1m,mode=0755", f"tmpfs over {folder}")
    _bind_back(handles)
    _remount_read_only(folder, kernel.MS_NOSUID | kernel.MS_NODEV)


def _handles_inside(folder: str, keep: list[str]) -> list[tuple[str, int]]:
    """(path, O_PATH descriptor) of the outermost ``keep`` paths inside ``folder``, opened before a mount hides them."""
    inside = [path for path in keep if path == folder or path.startswith(folder.rstrip("/") + "/")]
    outermost = [p for p in inside if not any(q != p and p.startswith(q.rstrip("/") + "/") for q in inside)]
    return [(path, os.open(path, os.O_PATH)) for path in sorted(set(outermost)) if os.path.exists(path)]


def _bind_back(handles: list[tuple[str, int]]) -> None:
    """Each kept path bound back, read-only, where a new mount covered it."""
    for path, fd in handles:
        os.makedirs(path, exist_ok=True)
        kernel.mount(f"/proc/self/fd/{fd}", path, None, kernel.MS_BIND | kernel.MS_REC, None, f"bind {path} back")
        _remount_read_only(path, kernel.MS_NOSUID | kernel.MS_NODEV)
        os.close(fd)


def _isolate_files(hide: list[str], keep: list[str]) -> None:
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE, None, "make mounts private")
    for point, flags in _mount_points():
        try:
            _remount_read_only(point, flags)
        except kernel.SetupFailed:
            if os.path.realpath(point) == "/" or not point.startswith(("/proc", "/sys")):
                raise
    for folder in sorted(set(hide), key=len):
        if os.path.isdir(folder) and os.path.realpath(folder) == folder and folder != WORK_ROOT:
            _hide(folder, keep)
    handles = _handles_inside(WORK_ROOT, keep)  # an interpreter or a checkout under /tmp (a CI clone): bound back
    kernel.mount("tmpfs", WORK_ROOT, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, f"size={TMPFS_MB}m,mode=0755", "tmpfs at /tmp")
    _bind_back(handles)  # read-only inside the writable /tmp
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".sandbox-write-probe")
    try:
        open(probe, "w").close()
    except OSError:
        return
    os.unlink(probe)
    raise kernel.SetupFailed(f"the file system stayed writable ({probe})")


def _start_pid_namespace() -> None:
    """unshare(PID), fork: the child is PID 1 of the new namespace and returns; this process waits and exits."""
    kernel.unshare(kernel.CLONE_NEWPID, "unshare(PID namespace)")
    child = os.fork()
    if child == 0:
        kernel.libc.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        kernel.mount("proc", "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC, None, "mount /proc of the PID namespace")
        return
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    _, status = os.waitpid(child, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _check_program_setup(settings: dict) -> None:
    """At set-up: a forked process can drop its capabilities and install the seccomp filter (else every program
    would fail, not the set-up)."""
    pid = os.fork()
    if pid == 0:
        try:
            if settings["namespaced"]:
                kernel.empty_bounding_set(settings["last_capability"])  # (the template's step)
                kernel.drop_capabilities(settings["program_uid"])
            else:
                kernel.check(kernel.libc.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
            if settings["seccomp"] is not None:
                kernel.install_seccomp(settings["seccomp"])
        except (kernel.SetupFailed, OSError) as failure:
            sys.stderr.write(f"SETUP-FAILED {failure}\n")
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise kernel.SetupFailed("a program's process could not drop its capabilities or install its seccomp filter")


# ---- a job: its process tree comes from the template; the worker feeds and collects ------------------------

def run_job(job: dict, state: dict) -> dict:
    """One program, started by the template (module docstring); the outcome."""
    started = time.monotonic()
    pipes = {name: os.pipe() for name in ("job", "stdin", "stdout", "stderr", "result", "status")}
    theirs = {"job": 0, "stdin": 0, "stdout": 1, "stderr": 1, "result": 1, "status": 1}  # the end the job gets
    nonce = secrets.token_hex(16)
    try:
        socket.send_fds(state["template"], [b"run"], [pipes[name][theirs[name]] for name in worker_program.FDS])
    except OSError as error:
        return _sandbox_failure(f"the template is gone ({error})", started)
    finally:
        for name in worker_program.FDS:
            os.close(pipes[name][theirs[name]])
    _feed(pipes["job"][1], json.dumps({**job, "nonce": nonce}).encode())
    _feed(pipes["stdin"][1], (job.get("stdin") or "").encode())
    status_fd = pipes["status"][0]
    head = _read_exactly(status_fd, 8)
    if head is None:
        for name in ("stdout", "stderr", "result", "status"):
            os.close(pipes[name][0])
        state["template"].recv(16)
        return _sandbox_failure("the template could not start the job", started)
    (init_pid,) = struct.unpack(">q", head)
    outputs = _collect(init_pid, {name: pipes[name][0] for name in ("stdout", "stderr", "result")}, job)
    if outputs["status"] is None or not state["namespaced"]:  # past its limits: the init, and with it the
        _kill(init_pid, state["namespaced"])  # namespace; limits_only: the program's process group, always
    tail = _read_exactly(status_fd, 4)
    status = struct.unpack(">i", tail)[0] if tail is not None else None
    for name in ("stdout", "stderr", "result", "status"):
        os.close(pipes[name][0])
    state["template"].recv(16)  # "done": the init reaped, nothing of the job left (b"": the template died)
    if status is None and not (outputs["timed_out"] or outputs["output_truncated"]):  # its set-up failed, not it
        why = outputs["stderr"].decode("utf-8", "replace").strip().splitlines()
        return _sandbox_failure(f"the program's process could not be set up: {why[-1] if why else 'no message'}",
                                started)
    return _outcome(outputs, status, nonce, time.monotonic() - started)


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _kill(pid: int, namespaced: bool) -> None:
    """The job's init (namespaces: the kernel then kills its whole PID namespace) or its process group."""
    with contextlib.suppress(ProcessLookupError):
        if namespaced:
            os.kill(pid, signal.SIGKILL)
        else:
            os.killpg(pid, signal.SIGKILL)


def _sandbox_failure(why: str, started: float) -> dict:
    return {"exit_code": None, "signal": None, "timed_out": False, "output_truncated": False, "completed": False,
            "result": None, "wall_s": time.monotonic() - started, "stdout": "", "stderr": "", "sandbox_error": why}


def _read_into(fd: int, name: str, chunks: dict, sizes: dict, cap: int) -> bool:
    """One read from ``fd`` into ``chunks[name]`` (kept up to ``cap`` bytes); False at end of file."""
    data = os.read(fd, 65536)
    if not data:
        return False
    chunks[name].append(data[:max(cap - sizes[name], 0)])
    sizes[name] += len(data)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _exit_watch(pid: int) -> int | None:
    """A pidfd that turns readable when ``pid`` exits (Linux >= 5.3), or None (then the loop polls)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _collect(pid: int, fds: dict, job: dict) -> dict:
    """Read the job's outputs (capped) until it exits, its output passes the cap or its wall time is up."""
    limits = job["limits"]  # (``pid``: the job's init, not a child of this process: its exit is watched)
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
        if exited in ready or (exited is None and not _alive(pid)):
            status = "exited"
    if exited is not None:
        os.close(exited)
    for fd, name in open_fds.items():  # what the program wrote just before it exited
        while status is not None and select.select([fd], [], [], 0)[0] and _read_into(fd, name, chunks, sizes, cap):
            pass
    return {"status": status if status is None else "exited", "timed_out": timed_out, "output_truncated": truncated,
            **{name: b"".join(parts) for name, parts in chunks.items()}}


def _feed(fd: int, data: bytes) -> None:
    """Write ``data`` to the pipe in a thread (a program may never read its input) and close the pipe."""
    import threading


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
    exit_code = signal_number = None  # ``status``: the program's wait status (None: killed, or never reported)
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
        for module in job.get("preload", ()):  # e.g. numpy for verl's runner: imported by the template, once
            if module not in preloaded:
                state["template"].send(f"preload {module}".encode())
                preloaded.add(module)
        _send(sink, run_job(job, state))
        if _template_ended(state):  # it cannot be forked again from this (used) memory: the pool starts a new worker
            return


def _template_ended(state: dict) -> bool:
    done, _ = os.waitpid(state["template_pid"], os.WNOHANG)
    return done == state["template_pid"]


def main(argv: list[str]) -> None:
    mode, hide, keep, paths = argv[1], json.loads(argv[2]), json.loads(argv[3]), json.loads(argv[4])
    state = {"program_uid": 0, "namespaced": mode == "namespaces", "paths": paths, "seccomp": None,
             "last_capability": kernel.last_capability()}
    try:
        state["seccomp"] = kernel.compile_seccomp()
        if state["namespaced"]:
            state["program_uid"] = _enter_namespaces()
            _isolate_files(hide, keep)
            worker_program.build_program_root(paths)
            _start_pid_namespace()
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # PID 1 keeps no handler a program could reach
        _check_program_setup(state)
    except (kernel.SetupFailed, OSError) as failure:
        if state["namespaced"]:
            sys.stderr.write(f"SETUP-FAILED {failure}\n")
            sys.stderr.flush()
            os._exit(3)
        state["seccomp"] = None  # limits_only: the filter where libseccomp loads, knowingly less without it
    settings = {k: state[k] for k in ("program_uid", "namespaced", "paths", "seccomp", "last_capability")}
    state["template_pid"], state["template"] = worker_program.start_template(settings)
    serve(state)


if __name__ == "__main__":
    main(sys.argv)
