"""The local run's console: task start and end lines read from kfp.local's output, and the end
lines kfp.local lost (parallel loop iterations) recovered from the tasks' folders."""

from __future__ import annotations

import io
import json
from pathlib import Path

from shipyard.run.console import RunConsole


def _finished(folder: Path, output: int) -> None:
    folder.mkdir(parents=True)
    (folder / "executor_output.json").write_text(json.dumps({"parameterValues": {"Output": output}}))


def test_an_end_line_kfp_local_lost_comes_from_the_tasks_folder(tmp_path: Path) -> None:
    """Two loop iterations of candidate-gates start; kfp.local prints the end of one only (as it did on
    a loaded machine, 2026-12-02): after the run the other's end comes from its outputs. A task that
    wrote none is said to have no end, not called a success."""
    root, console, log = tmp_path / "root", io.StringIO(), io.StringIO()
    run = root / "optimize-and-deploy-2026-12-02"
    watcher = RunConsole(console, log, root, set(), tmp_path / "steps.jsonl", {"candidate-gates": "gates",
                                                                               "deploy": "deploy"},
                         ["w8a8-int8", "w4a16"])
    for task in ("candidate-gates", "candidate-gates", "deploy"):
        watcher.feed(f"12:00:00.000 - INFO - Executing task '{task}'\n")
    _finished(run / "for-loop-8-iteration-0" / "candidate-gates", 1)
    watcher.feed("12:00:01.000 - INFO - Task 'candidate-gates' finished with status SUCCESS\n")
    _finished(run / "for-loop-8-iteration-1" / "candidate-gates", 2)  # its end line lost
    (run / "deploy").mkdir()  # started, wrote nothing
    before = console.getvalue().splitlines()
    assert [line.split()[1] for line in before] == ["started", "started", "started", "SUCCESS"]
    assert "[w8a8-int8]" in before[-1]
    watcher.settle()
    added = console.getvalue().splitlines()[len(before):]
    assert len(added) == 2, added
    gates = next(line for line in added if "candidate-gates" in line)
    assert gates.split()[1] == "SUCCESS" and "[w4a16]" in gates and gates.rstrip().endswith("2")
    deploy = next(line for line in added if "deploy" in line)
    assert deploy.split()[1:3] == ["NO", "END"] and "kfp.local printed no end for this task" in deploy
    watcher.settle()  # nothing left to settle: no line twice
    assert console.getvalue().splitlines()[len(before):] == added
