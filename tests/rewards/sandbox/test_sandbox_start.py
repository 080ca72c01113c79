"""Start-up: a refused isolation stops with one line naming it and the option; limits_only runs knowingly."""

from __future__ import annotations

import shutil

import pytest

from rlvr.rewards.sandbox import Job, SandboxPool, SandboxUnavailable
from rlvr.rewards.sandbox import pool as pool_module


def test_a_refused_namespace_stops_at_start_with_the_option_to_accept_less(tmp_path, monkeypatch):
    refusing = tmp_path / "worker.py"  # what worker.py prints when unshare(2) is refused
    refusing.write_text("import sys\nsys.stderr.write('SETUP-FAILED unshare(user, mount, network namespaces): "
                        "Operation not permitted\\n')\nsys.exit(3)\n")
    monkeypatch.setattr(pool_module, "WORKER_FILE", refusing)
    with pytest.raises(SandboxUnavailable) as raised:
        SandboxPool("namespaces", workers=1)
    message = str(raised.value)
    assert "unshare(user, mount, network namespaces): Operation not permitted" in message
    assert "code_sandbox=limits_only" in message and "\n" not in message


def test_limits_only_runs_programs_with_limits_but_without_isolation():
    with SandboxPool("limits_only", workers=1) as pool:
        outcome = pool.run(Job("import os\nprint(len(os.listdir('/proc')) > 5, 'HOME' in os.environ)\n"))
        looping = pool.run(Job("while True:\n    pass\n", limits=pool_module.SandboxLimits(cpu_s=1, wall_s=3)))
    assert outcome.ok and outcome.stdout == "True True\n"  # the host's /proc is visible: no PID namespace
    assert not looping.ok


def test_unknown_mode_and_language_are_refused():
    with pytest.raises(ValueError, match="namespaces"):
        SandboxPool("bubblewrap")
    with pytest.raises(ValueError, match="python, cpp"):
        Job("fn main(){}", language="rust").message()


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_cpp_compiles_and_runs_in_the_sandbox():
    source = "#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a+b<<std::endl;}\n"
    limits = pool_module.SandboxLimits(cpu_s=10, wall_s=30)
    with SandboxPool("namespaces", workers=1) as pool:
        right = pool.run(Job(source, stdin="2 40\n", language="cpp", limits=limits))
        broken = pool.run(Job("int main( {", language="cpp", limits=limits))
        escape = pool.run(Job('#include <cstdio>\nint main(){return std::fopen("/etc/x","w") ? 0 : 3;}\n',
                              language="cpp", limits=limits))
    assert right.ok and right.stdout == "42\n"
    assert broken.exit_code == 1 and "error" in broken.stderr
    assert escape.exit_code == 3  # a compiled program is held by the same read-only file system


def test_a_checkout_under_tmp_starts_its_worker_and_stays_out_of_its_programs_sight(tmp_path, monkeypatch):
    """The sandbox replaces /tmp with a private tmpfs: a worker whose files lie under /tmp (a CI clone there; here
    pytest's tmp_path) still starts (its own files bound back read-only), and its programs see none of them:
    a program's file system holds only its runtime (issue 48)."""
    assert str(tmp_path).startswith("/tmp/"), "pytest's tmp_path is expected under /tmp on this machine"
    copy = tmp_path / "sandbox"
    shutil.copytree(pool_module.WORKER_FILE.parent, copy)
    monkeypatch.setattr(pool_module, "WORKER_FILE", copy / "worker.py")
    program = (f"import os\nprint(os.path.exists({str(copy / 'worker.py')!r}))\n"
               f"try:\n    open({str(copy / 'planted')!r}, 'w')\n    print('written')\n"
               "except OSError:\n    print('read-only')\n")
    with SandboxPool("namespaces", workers=1) as pool:
        outcome = pool.run(Job(program))
    assert outcome.ok and outcome.stdout == "False\nread-only\n", outcome
    assert not (copy / "planted").exists()


def test_a_worker_that_dies_and_cannot_start_again_fails_its_jobs_instead_of_hanging(tmp_path, monkeypatch, caplog):
    """The review found that a replacement worker failing to start lost the worker for good, and once none was
    left ``run`` waited for ever on the idle queue."""
    refusing = tmp_path / "worker.py"
    refusing.write_text("import sys\nsys.stderr.write('SETUP-FAILED unshare(user namespace): refused\\n')\nsys.exit(3)\n")
    with SandboxPool("namespaces", workers=1) as pool:
        assert pool.run(Job("print(1)\n")).ok
        monkeypatch.setattr(pool_module, "WORKER_FILE", refusing)  # from now on, no worker starts
        pool._all[0].process.kill()
        pool._all[0].process.wait()
        failed = pool.run(Job("print(1)\n"))
        assert failed.sandbox_error and not failed.ok  # the program did not run: a sandbox failure, not a fail
        assert "could not be started again" in caplog.text
        with pytest.raises(RuntimeError, match="the code sandbox has no worker left"):
            pool.run(Job("print(1)\n"))
