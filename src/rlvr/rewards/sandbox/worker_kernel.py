"""What the sandbox worker asks of the kernel: namespaces, mounts, capabilities and a seccomp filter.

Standard library only (the worker runs by path with ``python -I``, outside rlvr); the seccomp filter is built
with the system's libseccomp (``libseccomp.so.2``, through ctypes: the library Docker, systemd and bubblewrap's
users build their filters with).

The filter (compiled once by :func:`compile_seccomp`, installed by :func:`install_seccomp`) is installed in
every program's process after it dropped its capabilities. It allows every system call but those a program has no use for and an attacker does: new
namespaces and mounts (a nested user namespace would give a program every capability back), the kernel
keyrings (they carry data from one program to the next), memory no limit counts (``memfd_create``; System V
shared memory, message queues and semaphores, besides the IPC namespace of each program), io_uring,
userfaultfd, BPF, perf, ptrace and reading other processes' memory, kernel modules, kexec, reboot, swap,
clock setting, file handles (``open_by_handle_at`` escapes a mount), and sockets of the families a program
needs none of (netlink, packet, vsock, key, bluetooth, alg). ``clone3`` answers ENOSYS, so the C library
falls back to ``clone``, whose namespace flags the filter can read (Docker's default profile does the same).
Every refusal is EPERM (ENOSYS for clone3), as if the program lacked the privilege.
"""

import ctypes
import ctypes.util
import errno
import os

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
NAMESPACE_FLAGS = (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
_CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)

# System calls refused to every program (module docstring); names libseccomp does not know on this machine's
# architecture are skipped.
DENIED_CALLS = (
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "keyctl", "add_key", "request_key",
    "memfd_create", "memfd_secret", "shmget", "shmat", "msgget", "semget",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "bpf", "perf_event_open",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
    "quotactl", "name_to_handle_at", "open_by_handle_at", "lookup_dcookie", "fanotify_init",
    "vhangup", "iopl", "ioperm", "uselib", "ustat", "sysfs", "move_pages", "migrate_pages",
)
# socket(2) families refused: AF_KEY, AF_NETLINK, AF_PACKET, AF_BLUETOOTH, AF_ALG, AF_VSOCK
DENIED_SOCKET_FAMILIES = (15, 16, 17, 31, 38, 40)


class SetupFailed(Exception):
    """A namespace, mount or filter step the kernel refused (the message says which)."""


def check(result: int, what: str) -> None:
    if result != 0:
        raise SetupFailed(f"{what}: {os.strerror(ctypes.get_errno())}")


def mount(source, target: str, fstype, flags: int, data, what: str) -> None:
    enc = (lambda s: None if s is None else s.encode())
    check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), what)


def unshare(flags: int, what: str) -> None:
    check(libc.unshare(flags), what)


def setns(fd: int, nstype: int, what: str) -> None:
    check(libc.setns(fd, nstype), what)


def last_capability() -> int:
    """The highest capability number this kernel has."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        return int(f.read())


def empty_bounding_set(last: int) -> None:
    """No capability to gain by exec, ever (an empty bounding set, no new privileges), for this process and every
    process it forks; ``last``: :func:`last_capability`. The capabilities it holds stay (its children can still
    mount and unshare): the template does this once, so a program's process does not (41 prctl calls)."""
    for cap in range(last + 1):  # needs CAP_SETPCAP
        check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop the capability bounding set")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")


def drop_capabilities(program_uid: int) -> None:
    """Become ``program_uid`` (when not 0) keeping no capability; with :func:`empty_bounding_set` done in an
    ancestor, it has none to gain either. When rlvr does not run as root, a program runs as root of the user
    namespace: with its capabilities it could unmount the covers over the hidden folders or remount a read-only
    mount writable."""
    if program_uid:
        os.setresgid(program_uid, program_uid, program_uid)
        os.setresuid(program_uid, program_uid, program_uid)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    check(libc.capset(header, (ctypes.c_uint32 * 6)()), "drop capabilities")


# ---- seccomp, through libseccomp -----------------------------------------------------------------------------

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_EQ, _SCMP_CMP_MASKED_EQ = 4, 7
_NR_SCMP_ERROR = -1


class _ArgCompare(ctypes.Structure):  # struct scmp_arg_cmp
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


def _libseccomp():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as error:
        raise SetupFailed(f"libseccomp (the system's libseccomp2) could not be loaded: {error}") from error
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCompare)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


class _FilterProgram(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(program: bytes) -> None:
    """Install the compiled filter ``program`` (:func:`compile_seccomp`) in this process; it holds for every
    process it starts and across exec. Needs no_new_privs (or CAP_SYS_ADMIN) first. A few microseconds:
    compiling the filter (3 ms) is done once, by the worker."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _FilterProgram(len(program) // 8, ctypes.addressof(buffer))  # 8 bytes a BPF instruction
    check(libc.prctl(22, 2, ctypes.byref(fprog), 0, 0), "install the seccomp filter")  # PR_SET_SECCOMP, MODE_FILTER


def compile_seccomp() -> bytes:
    """The filter (module docstring) as the kernel's BPF program for this machine's architecture, built by
    libseccomp (``seccomp_export_bpf``)."""
    lib = _libseccomp()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise SetupFailed("seccomp_init failed")
    deny = _errno_action(errno.EPERM)

    def rule(action: int, name: str, *compares: tuple[int, int, int, int]) -> None:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number == _NR_SCMP_ERROR:
            return  # not a system call on this architecture
        array = (_ArgCompare * max(1, len(compares)))(*[_ArgCompare(*c) for c in compares])
        result = lib.seccomp_rule_add_array(ctx, action, number, len(compares), array)
        if result != 0:
            raise SetupFailed(f"seccomp rule for {name}: {os.strerror(-result)}")

    try:
        for name in DENIED_CALLS:
            rule(deny, name)
        rule(_errno_action(errno.ENOSYS), "clone3")
        for flag in NAMESPACE_FLAGS:  # clone(flags, ...) asking for any new namespace
            rule(deny, "clone", (0, _SCMP_CMP_MASKED_EQ, flag, flag))
        for family in DENIED_SOCKET_FAMILIES:
            rule(deny, "socket", (0, _SCMP_CMP_EQ, family, 0))
            rule(deny, "socketpair", (0, _SCMP_CMP_EQ, family, 0))
        read, write = os.pipe()
        try:
            result = lib.seccomp_export_bpf(ctx, write)
            os.close(write)
            write = None
            if result != 0:
                raise SetupFailed(f"seccomp_export_bpf: {os.strerror(-result)}")
            chunks = []
            while chunk := os.read(read, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(read)
            if write is not None:
                os.close(write)
    finally:
        lib.seccomp_release(ctx)
