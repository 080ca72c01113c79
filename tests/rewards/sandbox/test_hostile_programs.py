"""Hostile programs, each contained: scored as a failure, nothing left running (``no_leftovers``), nothing
written outside its folder, and the pool runs the next program. Limits are small so each takes seconds."""

from __future__ import annotations

import errno
import os
import socket
import textwrap
import threading

import pytest

from rlvr.rewards.sandbox import Job, SandboxLimits, SandboxPool

FAST = SandboxLimits(cpu_s=1, wall_s=3, memory_mb=512, processes=16, output_bytes=1 << 16)


def run(pool, source: str, **fields):
    return pool.run(Job(textwrap.dedent(source), limits=FAST, **fields))


def test_fork_bomb_is_capped_and_killed(pool, no_leftovers):
    outcome = run(pool, """
        import os
        forks = 0
        while True:
            try:
                os.fork()
                forks += 1
            except OSError:
                pass
        """)
    assert not outcome.ok and (outcome.timed_out or outcome.signal is not None)


def test_infinite_loop_is_stopped_by_the_cpu_limit(pool, no_leftovers):
    outcome = run(pool, "while True:\n    pass\n")
    assert not outcome.ok and outcome.wall_s < FAST.wall_s + 1


def test_sleeping_program_is_stopped_by_the_wall_limit(pool, no_leftovers):
    outcome = run(pool, "import time\ntime.sleep(60)\n")
    assert outcome.timed_out and not outcome.ok and outcome.wall_s < FAST.wall_s + 1


def test_memory_bomb_fails_inside_its_address_space(pool, no_leftovers):
    # bytes(n) is calloc'ed: pages are not touched, so only the address-space limit can stop it (fast)
    outcome = run(pool, """
        chunks = []
        while True:
            chunks.append(bytes(64 << 20))
        """)
    assert not outcome.ok and "MemoryError" in outcome.stderr, outcome


def test_a_gigabyte_print_is_cut_and_killed(pool, no_leftovers):
    outcome = run(pool, """
        import sys
        line = "x" * 65535 + "\\n"
        for _ in range(16384):   # 1 GiB
            sys.stdout.write(line)
        """)
    assert outcome.output_truncated and not outcome.ok
    assert len(outcome.stdout) <= FAST.output_bytes


def test_writes_outside_its_folder_fail(pool, no_leftovers, tmp_path):
    targets = [tmp_path / "escaped.txt", os.path.abspath(__file__) + ".escaped", "/etc/rlvr-escaped",
               os.path.expanduser("~/rlvr-escaped")]
    outcome = run(pool, f"""
        import os
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as f:
                    f.write("escaped")
                print("WROTE", path)
            except OSError as error:
                print("refused", path, error.errno)
        open("inside.txt", "w").write("fine")   # its own folder is writable
        print("INSIDE", os.path.exists("inside.txt"))
        """)
    assert "WROTE" not in outcome.stdout and "INSIDE True" in outcome.stdout
    assert not any(os.path.exists(t) for t in targets)


def test_secrets_of_the_parent_are_out_of_reach(monkeypatch, tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("FAKE-PRIVATE-KEY")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RLVR_FAKE_SECRET", "s3cr3t-token")
    with SandboxPool("namespaces", workers=1) as pool:  # started with the secret in its parent's environment
        outcome = run(pool, f"""
            import os
            print(dict(os.environ))
            for path in ["{home}/.ssh/id_rsa", "/proc/1/environ", "/proc/self/environ", "/proc/{os.getpid()}/environ",
                         "/root/.bash_history"]:
                try:
                    print(path, open(path, "rb").read())
                except OSError as error:
                    print(path, "refused", error.errno)
            print(sorted(os.listdir("/proc")))
            """)
    assert outcome.ok, outcome.stderr
    assert "s3cr3t-token" not in outcome.stdout and "FAKE-PRIVATE-KEY" not in outcome.stdout
    assert "RLVR_FAKE_SECRET" not in outcome.stdout
    assert str(os.getpid()) + "'" not in outcome.stdout.splitlines()[-1]  # the host's processes are not listed


def test_no_network_even_to_a_local_listener(pool, no_leftovers):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(2)
    port = server.getsockname()[1]
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(_accept(server)))
    thread.start()
    outcome = run(pool, f"""
        import socket
        socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"leak")
        print("CONNECTED")
        """)
    thread.join()
    server.close()
    assert "CONNECTED" not in outcome.stdout and not outcome.ok
    assert accepted == [None]


def _accept(server):
    try:
        connection, _ = server.accept()
    except OSError:  # timed out: nobody came
        return None
    connection.close()
    return "connected"


def test_escaping_the_group_with_setsid_and_a_double_fork_leaves_nothing_running(pool, no_leftovers):
    outcome = run(pool, """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(30)
            os._exit(0)
        print("parent done")
        """)
    assert outcome.ok and "parent done" in outcome.stdout  # it exits at once; its grandchild is killed


def test_killing_its_parent_and_everything_it_can_signal_fails(pool, no_leftovers):
    outcome = run(pool, """
        import os, signal
        for target in (os.getppid(), 1, -1):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError as error:
                print("refused", target, error.errno)
        print("still here")
        """)
    assert "still here" in outcome.stdout  # its kills were refused or hit nothing that matters
    assert pool.run(Job("print(6 * 7)")).stdout == "42\n"  # the worker survived


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)",
                                       "import atexit, os; atexit.register(os._exit, 0); raise SystemExit(0)"])
def test_exiting_before_the_tests_is_not_a_pass(pool, no_leftovers, exit_call):
    outcome = run(pool, f"def add(a, b):\n    return a - b\n{exit_call}\n", kind="checked",
                  test="assert add(2, 2) == 4\n")
    assert not outcome.completed


def test_forging_the_completion_marker_is_not_a_pass(pool, no_leftovers):
    outcome = run(pool, """
        import os, builtins
        os.write(3, b"0" * 32)            # a guess at the nonce, on the result pipe
        builtins.AssertionError = type("Quiet", (Exception,), {})
        def add(a, b):
            return a - b
        """, kind="checked", test="assert add(2, 2) == 4\n")
    assert not outcome.completed and not outcome.ok


def test_signals_to_itself_and_ignoring_termination(pool, no_leftovers):
    crashed = run(pool, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert crashed.signal == 11 and not crashed.ok
    stubborn = run(pool, """
        import signal
        for sig in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            pass
        """)
    assert not stubborn.ok and stubborn.wall_s < FAST.wall_s + 1


def test_a_program_waiting_on_stdin_gets_end_of_file(pool, no_leftovers):
    outcome = run(pool, "import sys\ndata = sys.stdin.read()\nprint(len(data))\nprint(input())\n")
    assert outcome.stdout == "0\n" and not outcome.ok and "EOFError" in outcome.stderr


def test_a_program_that_never_reads_a_large_stdin_is_still_stopped_at_its_wall_limit(pool, no_leftovers):
    """25 000 characters of 3 bytes (75 kB, more than a pipe holds): the stdin size was measured in characters,
    so the worker wrote it in one blocking call before the wall limit began to count."""
    outcome = run(pool, "import time\ntime.sleep(30)\n", stdin="\u20ac" * 25_000)
    assert outcome.timed_out and outcome.wall_s < FAST.wall_s + 1


def test_a_correct_program_still_passes(pool, no_leftovers):
    outcome = run(pool, "a, b = map(int, input().split())\nprint(a + b)\n", stdin="2 3\n")
    assert outcome.ok and outcome.stdout == "5\n"


UNMOUNTER = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("uid", os.getuid())
print("umount", libc.umount2(b"/home", 2), ctypes.get_errno())  # MNT_DETACH: the cover over /home
print("remount", libc.mount(None, b"/", None, 32 | 4096, None), ctypes.get_errno())  # MS_REMOUNT|MS_BIND: writable
print([line.split()[1] for line in open("/proc/self/status") if line.startswith(("CapEff", "CapBnd"))])
"""

AS_A_USER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from rlvr.rewards.sandbox import Job, SandboxLimits, SandboxPool
pool = SandboxPool("namespaces", workers=1)
outcome = pool.run(Job(sys.argv[2], limits=SandboxLimits(cpu_s=2, wall_s=5)))
pool.close()
print(outcome.stdout, end="")
print("exit", outcome.exit_code, outcome.sandbox_error)
"""


def test_run_by_a_user_that_is_not_root_a_program_cannot_unmount_or_remount(tmp_path):
    """Where rlvr is not root, a program is root of the worker's user namespace: with its capabilities it
    unmounted the cover over /home and remounted / writable (review, 2026-12-04). It now has none."""
    import shutil
    import subprocess
    import sys

    import rlvr

    src = os.path.dirname(os.path.dirname(rlvr.__file__))
    command = [sys.executable, "-I", "-c", AS_A_USER, src, UNMOUNTER]
    if os.getuid() == 0:  # as a user: nobody, with an interpreter nobody may run (not one under /root)
        python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
        if shutil.which("setpriv") is None or python is None:
            pytest.skip("needs setpriv and a system python3 to run the sandbox as a user that is not root")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, *command[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/", check=False)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[-1] == "exit 0 None", done.stdout + done.stderr[-2000:]
    assert lines[0] == "uid 0"  # root of the user namespace: the case at issue
    assert lines[1] == f"umount -1 {errno.EPERM}" and lines[2] == f"remount -1 {errno.EPERM}"
    assert lines[3] == "['0000000000000000', '0000000000000000']"  # no capability left, none to gain
