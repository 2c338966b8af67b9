"""Run ``shipyard`` command lines as forked children of one process that imported the CLI once.

The bad-input table runs hundreds of command lines; each ``python -m shipyard.cli.main`` spends
most of its 1.5-3 s importing. Here one server process imports the CLI and the libraries its
commands load, then forks one child per command line: the child is still its own process (its
own working folder, file descriptors, exit status, signals and environment, what the command
writes on its stdout and stderr), and runs ``shipyard.cli.main.main`` exactly as ``python -m``
does, only without paying for the imports again. ``tests/reliability/test_cli_bad_input.py``
checks, on a sample of rows, that a real ``python -m shipyard.cli.main`` prints the same.

Protocol: one JSON request per line on stdin (``argv``, ``cwd``, ``stdout``/``stderr`` file paths,
``timeout``), one JSON answer per line on stdout (``code``, ``seconds``).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
import traceback

#: what the commands import lazily (their first call pays for it otherwise); missing ones are skipped
PRELOAD = (
    "shipyard.cli.main",
    "shipyard.params.checks",
    "shipyard.params.deploy",
    "shipyard.params.pipeline",
    "shipyard.run.local",
    "shipyard.run.compile",
    "shipyard.run.check",
    "shipyard.serving.kserve.render",
    "shipyard.serving.kserve.validate",
    "shipyard.steps.deploy",
    "shipyard.steps.verify",
    "shipyard.run.kfp_client",
    "shipyard.pipelines.optimize_deploy",
    "shipyard.pipelines.promote",
    "pydantic",
    "kfp.dsl",
    "kfp.compiler",
    "yaml",
)


def _child(request: dict) -> None:
    """In the forked child: become the command (never returns)."""
    code = 1
    try:
        os.setpgid(0, 0)  # its own process group, so that a timeout can stop what it started
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own standard streams
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        from shipyard.cli import main as cli

        sys.argv = [cli.__file__, *request["argv"]]  # what ``python -m shipyard.cli.main`` sets
        try:
            code = cli.main()
        except SystemExit as done:  # as the interpreter treats ``sys.exit(...)``
            if done.code is None:
                code = 0
            elif isinstance(done.code, int):
                code = done.code
            else:
                print(done.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - as the interpreter: the traceback, exit 1
            traceback.print_exc()
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed pipe: nothing more to say
                pass
        os._exit(code if isinstance(code, int) else 1)


def _wait(pid: int, timeout: float) -> int:
    """The child's exit status as ``subprocess`` reports it (negative: killed by that signal)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.005)


def serve() -> None:
    """Answer requests until stdin closes."""
    from pathlib import Path

    import shipyard.cli.commands as commands

    modules = [f"shipyard.cli.commands.{p.stem}" for p in Path(commands.__file__).parent.glob("[a-z]*.py")]
    for name in (*PRELOAD, *modules):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(request)
        code = _wait(pid, float(request.get("timeout", 120)))
        answers.write(json.dumps({"code": code, "seconds": time.monotonic() - started}) + "\n")


if __name__ == "__main__":
    serve()
