"""Start a program that is non-dumpable from its first instruction, though it cannot say so itself.

A process that holds a credential makes itself non-dumpable (memfs/secret_env.py): then a process
of the same uid without CAP_SYS_PTRACE can read neither /proc/<pid>/environ nor /proc/<pid>/mem.
Node has no prctl, and the flag cannot be handed down: execve() makes every non-setuid program
dumpable again. So the parent does the prctl *for* the child, between its execve and its first
instruction: the child asks to be traced (PTRACE_TRACEME) before it execs; the kernel stops it
right after the exec, at the dynamic loader's entry; the parent points the instruction pointer at
a `syscall` instruction (the bytes 0f 05 wherever they are in the loader's code: the processor
decodes from where it is told to), with the registers of prctl(PR_SET_DUMPABLE, 0), single-steps
it, puts the registers back and detaches. Nothing is written to the child's memory (a tracer
without CAP_SYS_PTRACE could not undo that once the child is non-dumpable). The child has run
none of its own code then, and has no child of its own that could have read it meanwhile.

x86_64 only (the instruction and register layout are the architecture's); elsewhere, or where
ptrace is refused (a seccomp profile, Yama's ptrace_scope 3), NotMadeNonDumpable says why.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import subprocess

PTRACE_TRACEME = 0
PTRACE_SINGLESTEP = 9
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_DETACH = 17
SYS_PRCTL_X86_64 = 157
PR_SET_DUMPABLE = 4
SYSCALL_BYTES = b"\x0f\x05"  # x86_64's `syscall`


class NotMadeNonDumpable(Exception):
    """The child could not be made non-dumpable (it was killed: nothing of it ran)."""


class _Regs(ctypes.Structure):  # struct user_regs_struct (x86_64), in the kernel's order
    _fields_ = [
        (name, ctypes.c_ulonglong)
        for name in (
            "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax "
            "rip cs eflags rsp ss fs_base gs_base ds es fs gs"
        ).split()
    ]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return libc


def supported() -> str | None:
    """Why this machine cannot do it, or None."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return f"not supported on {platform.system()} {platform.machine()} (only Linux x86_64)"
    return None


def _traceme() -> None:  # in the child, between fork and exec
    if _libc().ptrace(PTRACE_TRACEME, 0, None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace(PTRACE_TRACEME) refused")


def spawn(
    argv: list[str], *, env: dict[str, str], pass_fds: tuple[int, ...] = ()
) -> tuple[subprocess.Popen, str]:
    """subprocess.Popen(argv) whose process is non-dumpable before it runs an instruction of its
    own, and the executable it was made non-dumpable as (/proc/<pid>/exe then: an exec after that,
    a script's interpreter or a wrapper's, makes it dumpable again, and the program can tell by
    comparing its own). NotMadeNonDumpable when that cannot be done (the child is then killed
    and reaped)."""
    why = supported()
    if why:
        raise NotMadeNonDumpable(why)
    try:
        proc = subprocess.Popen(argv, env=env, pass_fds=pass_fds, preexec_fn=_traceme)
    except subprocess.SubprocessError as exc:  # the preexec's OSError: ptrace refused
        raise NotMadeNonDumpable(f"ptrace is refused here ({exc})") from exc
    try:
        exe = _set_non_dumpable(proc.pid)
    except BaseException:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    return proc, exe


def _wait_stop(pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    if not os.WIFSTOPPED(status):
        raise NotMadeNonDumpable(f"the program ended before it could be made non-dumpable (status {status})")


def _syscall_instruction(pid: int, rip: int) -> int:
    """The address of the bytes 0f 05 in the executable mapping the stopped child is at."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps.read().splitlines():
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= rip < hi and "x" in perms:
                with open(f"/proc/{pid}/mem", "rb", 0) as mem:
                    mem.seek(lo)
                    code = mem.read(hi - lo)
                at = code.find(SYSCALL_BYTES)
                if at >= 0:
                    return lo + at
    raise NotMadeNonDumpable("no syscall instruction found in the program's loader")


def _set_non_dumpable(pid: int) -> str:
    libc = _libc()

    def call(request: int, data: object = None) -> None:
        if libc.ptrace(request, pid, None, data) != 0:
            raise NotMadeNonDumpable(f"ptrace request {request} failed: {os.strerror(ctypes.get_errno())}")

    _wait_stop(pid)  # the SIGTRAP a traced process gets once its exec succeeded
    try:
        exe = os.readlink(f"/proc/{pid}/exe")  # readable now, not once it is non-dumpable
    except OSError as exc:
        raise NotMadeNonDumpable(f"cannot read the program's executable: {exc}") from exc
    saved = _Regs()
    call(PTRACE_GETREGS, ctypes.byref(saved))
    try:
        syscall_at = _syscall_instruction(pid, saved.rip)
    except OSError as exc:
        raise NotMadeNonDumpable(f"cannot read the program's loader: {exc}") from exc
    regs = _Regs.from_buffer_copy(saved)
    regs.rip = syscall_at
    regs.rax, regs.orig_rax = SYS_PRCTL_X86_64, 0xFFFFFFFFFFFFFFFF  # no syscall to restart
    regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8 = PR_SET_DUMPABLE, 0, 0, 0, 0
    call(PTRACE_SETREGS, ctypes.byref(regs))
    call(PTRACE_SINGLESTEP)
    _wait_stop(pid)
    after = _Regs()
    call(PTRACE_GETREGS, ctypes.byref(after))
    call(PTRACE_SETREGS, ctypes.byref(saved))
    if after.rax != 0 or after.rip != syscall_at + 2:
        raise NotMadeNonDumpable(
            f"prctl(PR_SET_DUMPABLE, 0) in the program answered {ctypes.c_long(after.rax).value}"
        )
    call(PTRACE_DETACH)
    return exe
