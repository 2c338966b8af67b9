"""Child processes that never outlive shipyard (shipyard.core.processes), on real processes: their
own session, death with the parent, the whole group stopped, children interrupted as on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import default_sigint

from shipyard.core.processes import (
    group_alive,
    guard_group,
    own_session_with_parent_death,
    release_guard,
    signal_group,
    stop_group,
)

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")


def _gone(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` no longer runs (gone, or a zombie nobody reaped) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _group(script: str) -> subprocess.Popen[bytes]:
    """``sh -c script`` in a session of its own, as shipyard starts vLLM and guidellm; waits until
    the script's workers have started (they share its process group)."""
    proc = subprocess.Popen(["sh", "-c", script], preexec_fn=own_session_with_parent_death)
    deadline = time.monotonic() + 5
    while len(_members(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_members(proc.pid)) >= 3, "the workers did not start"
    return proc


def _members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def test_a_child_gets_its_own_session_and_process_group() -> None:
    proc = subprocess.Popen(["sleep", "30"], preexec_fn=own_session_with_parent_death)
    try:
        assert os.getpgid(proc.pid) == proc.pid and os.getsid(proc.pid) == proc.pid
        assert os.getpgid(proc.pid) != os.getpgid(0)
    finally:
        stop_group(proc, grace=1)


def test_a_child_dies_with_its_parent() -> None:
    """The parent (here an interpreter that exits at once) is gone: the kernel SIGKILLs the child."""
    parent = textwrap.dedent("""
        import subprocess
        from shipyard.core.processes import own_session_with_parent_death
        child = subprocess.Popen(["sleep", "30"], preexec_fn=own_session_with_parent_death)
        print(child.pid, flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=90, check=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    child = int(out.stdout.strip())
    try:
        assert _gone(child), "the child outlived its parent"
    finally:
        signal_group(child, signal.SIGKILL)


@pytest.mark.parametrize("guarded", [False, True])
def test_a_guard_kills_the_workers_when_their_owner_is_sigkilled(guarded: bool) -> None:
    """vLLM's EngineCore outlived a SIGKILLed owner: the parent-death signal killed only the API
    server (the group leader). Unguarded, the workers live on (the gap); guarded, they die too."""
    owner = textwrap.dedent(f"""
        import subprocess, time
        from shipyard.core.processes import guard_group, own_session_with_parent_death
        server = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"],
                                  preexec_fn=own_session_with_parent_death)
        if {guarded}:
            guard = guard_group(server.pid)  # kept: its pipe closes when the owner dies
        print(server.pid, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stdout is not None
    pgid = int(proc.stdout.readline())
    try:
        deadline = time.monotonic() + 5
        while len(_members(pgid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = [pid for pid in _members(pgid) if pid != pgid]
        assert len(workers) == 2, "the workers did not start"
        time.sleep(0.3)
        assert len(_members(pgid)) == 3, "the guard fired while its owner lived"
        proc.kill()
        proc.wait(timeout=10)
        assert _gone(pgid), "the parent-death signal did not reach the leader"
        if guarded:
            assert all(_gone(pid) for pid in workers), "a worker outlived its guarded owner"
        else:
            time.sleep(0.5)
            assert _members(pgid), "unguarded workers die anyway: the guard test proves nothing"
    finally:
        signal_group(pgid, signal.SIGKILL)


def test_a_released_guard_exits_and_leaves_the_group_alone() -> None:
    proc = _group("sleep 30 & sleep 30 & wait")
    try:
        guard = guard_group(proc.pid)
        release_guard(guard)
        assert guard.returncode == 0
        time.sleep(0.2)
        assert len(_members(proc.pid)) == 3
    finally:
        stop_group(proc, grace=1)


def test_stop_group_stops_the_leader_and_its_workers() -> None:
    proc = _group("sleep 30 & sleep 30 & wait")
    workers = _members(proc.pid)
    started = time.monotonic()
    stop_group(proc, grace=5)
    assert time.monotonic() - started < 3  # SIGTERM was enough: no wait for the grace period
    assert proc.returncode is not None and not group_alive(proc.pid)
    assert all(_gone(pid, within=0.5) for pid in workers)


def test_stop_group_kills_a_worker_that_ignores_sigterm_after_the_leader_left() -> None:
    """guidellm's workers outlived an interrupt: the leader ends on SIGTERM, a worker ignores it."""
    proc = _group("(trap '' TERM; sleep 30) & (trap '' TERM; sleep 30) & exec sleep 30")
    workers = _members(proc.pid)
    started = time.monotonic()
    stop_group(proc, grace=0.5)
    assert 0.4 < time.monotonic() - started < 4
    assert _running(workers) == [] and not _members(proc.pid)  # SIGKILLed, and waited for


def _running(pids: list[int]) -> list[int]:
    """Those of ``pids`` that have not exited (one read of /proc each: no waiting)."""
    out = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(pid)
        except (OSError, IndexError):
            continue
    return out


def test_stop_group_returns_once_the_killed_workers_have_exited() -> None:
    """A caller that checks right after :func:`stop_group` finds no worker still running: it waits
    for the SIGKILLed processes to exit, not only for the leader. Each round's ten workers ignore
    SIGTERM; without the wait, about half the rounds found some still running (the kernel had
    not yet run their exits), so eight rounds all but always caught it."""
    for _ in range(8):
        proc = _group(" ".join(["(trap '' TERM; exec sleep 30) &"] * 10) + " exec sleep 30")
        deadline = time.monotonic() + 5
        while len(_members(proc.pid)) < 11 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = _members(proc.pid)
        assert len(workers) == 11, "the workers did not start"
        stop_group(proc, grace=0.1)
        assert _running(workers) == [], "stop_group returned while SIGKILLed workers still ran"


def test_signalling_a_group_that_is_gone_is_nothing() -> None:
    proc = subprocess.Popen(["true"], preexec_fn=own_session_with_parent_death)
    proc.wait()
    assert not group_alive(proc.pid)
    signal_group(proc.pid, signal.SIGTERM)
    stop_group(None)
    stop_group(proc, grace=0.1)


def test_interrupt_children_unwinds_each_child_and_kills_stragglers(tmp_path: Path) -> None:
    """A process that got SIGTERM passes Ctrl-C on to its children: one that handles SIGINT unwinds
    (writes its marker), one that ignores it is killed after the grace period."""
    polite = ("import pathlib, time\npathlib.Path('polite.ready').touch()\ntry:\n    time.sleep(30)\n"
              "except KeyboardInterrupt:\n    pathlib.Path('unwound').write_text('yes')\n")
    deaf = ("import pathlib, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "pathlib.Path('deaf.ready').touch()\ntime.sleep(30)\n")
    # a grace a loaded 2-core machine meets (at 1 s the polite child was once killed before it unwound)
    elapsed, polite_rc, deaf_rc = _interrupt(tmp_path, {"polite": polite, "deaf": deaf}, grace=5.0)
    assert (tmp_path / "unwound").read_text() == "yes" and polite_rc == "0"
    assert deaf_rc == str(-signal.SIGKILL) and 4.9 < float(elapsed) < 15
    # children that all unwind end the wait early (an unreaped child counts as ended)
    (tmp_path / "unwound").unlink()
    elapsed, polite_rc = _interrupt(tmp_path, {"polite": polite}, grace=30.0)
    assert (tmp_path / "unwound").read_text() == "yes" and polite_rc == "0" and float(elapsed) < 15


def _interrupt(cwd: Path, children: dict[str, str], grace: float) -> list[str]:
    """Run, in ``cwd``, a process that starts ``children`` (name: Python source that touches
    ``<name>.ready`` once up), then calls ``interrupt_children(grace)``: the seconds it took, then
    each child's exit status."""
    script = textwrap.dedent(f"""
        import pathlib, subprocess, sys, time
        from shipyard.core.processes import interrupt_children
        procs = [subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.DEVNULL) for src in {list(children.values())!r}]
        while not all(pathlib.Path(name + ".ready").exists() for name in {list(children)!r}):
            time.sleep(0.05)
        started = time.monotonic()
        interrupt_children(grace={grace})
        print(round(time.monotonic() - started, 2), *[p.wait(timeout=5) for p in procs])
    """)
    for name in children:
        (cwd / f"{name}.ready").unlink(missing_ok=True)
    # Ctrl-C's default action for the chain, even when pytest runs with SIGINT ignored (a background job of
    # `.ci/test`), which every child would inherit and Python would leave ignored
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90, check=True,
                         cwd=cwd, env=dict(os.environ, PYTHONPATH=str(REPO)), preexec_fn=default_sigint)
    return out.stdout.split()
