"""Child processes that never outlive shipyard: own session, parent-death signal, group stop.

vLLM, guidellm and lm-eval start worker processes of their own. Killing only the process shipyard
started leaves those workers running (guidellm's were found alive 17 minutes after an
interrupt). So every long-lived child starts in its own session (its process group id is its
pid, and every worker it forks joins that group) with ``PR_SET_PDEATHSIG`` (SIGKILL when
shipyard itself dies), and :func:`stop_group` stops the whole group: SIGTERM, a grace period,
then SIGKILL for whatever is left, leader gone or not. The parent-death signal reaches only the
leader: vLLM's ``VLLM::EngineCore`` (a spawned child of the API server) was found orphaned, 2.7 GB
each, after the process that owned the server was SIGKILLed. :func:`guard_group` closes that gap: a
small watcher outside both groups that SIGKILLs the group once its owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time


def own_session_with_parent_death() -> None:
    """``preexec_fn`` for Popen: a new session, and SIGKILL if the parent dies (Linux)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid`` (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` exists (a zombie not reaped yet counts)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_running(pgid: int) -> bool:
    """True while any process of group ``pgid`` has not exited: a zombie does not count (only its
    parent can reap it). Without ``/proc``: :func:`group_alive`."""
    if not os.path.isdir("/proc"):
        return group_alive(pgid)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                return True
    return False


#: after the SIGKILL, the longest :func:`stop_group` waits for the group's processes to be gone
KILL_WAIT_S = 10.0
#: how much longer it waits, once they have all exited, for their parents to reap them
REAP_WAIT_S = 1.0


def stop_group(proc: subprocess.Popen[bytes] | None, grace: float = 15.0) -> None:
    """Stop ``proc`` (started with :func:`own_session_with_parent_death`) and every process of
    its group: SIGTERM, up to ``grace`` seconds, then SIGKILL. It returns once the group's
    processes are gone (exited and reaped; ``proc`` by this call), at most :data:`KILL_WAIT_S`
    seconds after the SIGKILL; zombies that their own parent has not reaped within
    :data:`REAP_WAIT_S` of the last exit are left to it (only it can reap them)."""
    if proc is None:
        return
    signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    deadline = time.monotonic() + grace
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    signal_group(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_WAIT_S)
    while group_alive(proc.pid) and time.monotonic() < deadline:
        if not group_running(proc.pid):
            deadline = min(deadline, time.monotonic() + REAP_WAIT_S)
        time.sleep(0.02)


# the watcher of guard_group: reads its stdin until EOF; anything but RELEASED (the owner died
# without stopping the group) means SIGKILL for the whole group
_GUARD_CODE = (
    "import os, signal, sys\n"
    "if sys.stdin.buffer.read() != b'released':\n"
    "    try:\n"
    "        os.killpg(int(sys.argv[1]), signal.SIGKILL)\n"
    "    except OSError:\n"
    "        pass\n"
)


def guard_group(pgid: int) -> subprocess.Popen[bytes]:
    """Start a watcher that SIGKILLs process group ``pgid`` when this process dies (even by
    SIGKILL) before :func:`release_guard`. It reads a pipe only this process writes to, in a session
    of its own, so killing this process or its group does not take the watcher along."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _GUARD_CODE, str(pgid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def release_guard(guard: subprocess.Popen[bytes] | None) -> None:
    """Let a :func:`guard_group` watcher exit without killing anything (its group is stopped)."""
    if guard is None:
        return
    if guard.stdin is not None:
        with contextlib.suppress(OSError):
            guard.stdin.write(b"released")
        with contextlib.suppress(OSError):
            guard.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        guard.wait(timeout=10)


def _children_of(pid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                out.append(int(entry.name))
    return out


def interrupt_children(grace: float = 60.0) -> None:
    """SIGINT every direct child of this process and wait up to ``grace`` seconds for them to
    end, so that each unwinds as on Ctrl-C (its servers stopped, its partial folders removed)
    even when only this process got the signal (a SIGTERM). Stragglers get SIGKILL."""
    children = _children_of(os.getpid()) if os.path.isdir("/proc") else []
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    while children and time.monotonic() < deadline:
        children = [pid for pid in children if not _ended(pid)]
        time.sleep(0.2)
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _ended(pid: int) -> bool:
    """True once ``pid`` has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
