"""The console of ``shipyard run --local``: one line per task as it starts and ends, the rest in a log.

kfp.local prints a lot: its own INFO/WARNING records, every task's full executor input, the
outputs of every task and each step's whole stdout/stderr. While a local run executes,
:func:`quiet_kfp` sends all of that to ``<work dir>/kfp-local.log`` and the console gets
only one line when a task starts and one when it ends::

    11:08:47  started  benchmark base                           benchmark
    11:10:02  SUCCESS  benchmark base                           benchmark                             74.8 s  max out tok/s 102.4
    11:10:38  FAILURE  compress                                 compress [w8a8-int8]                  35.9 s  compress: ... (fix: ...)

The end line has the time, the status, the seconds and one key figure (or, for a failure, the
step's one-line error from the step timing log). A task inside the recipes loop is labelled by
its candidate (``compress [w8a8-int8]``, not KFP's ``for-loop-5-iteration-0/compress``), names
that do not fit are shortened at a word boundary (:func:`fit`), never mid-word, and a gate that
passed only through a tolerance rule says so in its row ("accuracy pass (5 metrics below 0.99
within noise; worst 0.81)").
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

#: the log file in the work dir that takes kfp.local's output and every step's stdout/stderr
KFP_LOG = "kfp-local.log"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_START = re.compile(r"Executing task '([^']+)'")
_END = re.compile(r"Task '([^']+)' finished with status (\w+)")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes."""
    return _ANSI.sub("", text)


def read_executor_output(task_dir: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]]]:
    """(parameter outputs, numeric metrics, artifact name -> metadata) of a finished task folder."""
    try:
        out = json.loads((task_dir / "executor_output.json").read_text())
    except (OSError, ValueError):
        return {}, {}, {}
    metrics: dict[str, Any] = {}
    artifacts: dict[str, dict[str, Any]] = {}
    for name, group in (out.get("artifacts") or {}).items():
        for art in group.get("artifacts", []):
            meta = art.get("metadata") or {}
            artifacts[name] = meta
            if name == "metrics" or name.endswith("_metrics"):
                metrics.update({k: v for k, v in meta.items() if isinstance(v, int | float) and not isinstance(v, bool)})
    return out.get("parameterValues") or {}, metrics, artifacts


_LOOP = re.compile(r"(?:^|/)for-loop-\d+-iteration-(\d+)/")


def fit(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, shortened at a word boundary with "…" (never
    cut mid-word; a single word longer than ``width`` keeps its start and ends with "…")."""
    text = str(text)
    if len(text) <= width:
        return text
    head = text[: width - 1]
    cut = max(head.rfind(sep) for sep in " /-_+,")
    if cut >= width // 3:
        head = head[:cut]
    return head.rstrip(" /-_+,") + "…"


def task_label(task: str, candidates: list[str] | None = None) -> str:
    """A task path as a user reads it: the loop iteration becomes the candidate it works on
    (``for-loop-5-iteration-0/compress`` -> ``compress [w8a8-int8]``), KFP's importer the champion
    model, and KFP's ``-2`` suffixes stay (they tell base from candidate tasks apart)."""
    name = task.rsplit("/", 1)[-1]
    if re.fullmatch(r"importer(-\d+)?", name):
        name = "champion model (import)"
    loops = _LOOP.findall(task)
    if not loops:
        return name
    index = int(loops[-1])
    known = candidates or []
    return f"{name} [{known[index] if index < len(known) else f'candidate {index + 1}'}]"


def component_of(task: str) -> str:
    """The component of a task path without KFP's ``-2`` suffix: ``for-loop-5-iteration-0/benchmark-2`` -> ``benchmark``."""
    return re.sub(r"-\d+$", "", task.rsplit("/", 1)[-1])


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def replay_figure(metrics: dict[str, Any], results: dict[str, Any]) -> str:
    """A benchmark's replay of a recorded workload in a few words (its ``workload.*`` metrics and the
    results artifact's ``workload`` digest: :func:`shipyard.benchmarking.guidellm.workload_metadata`),
    e.g. ``; replay of f231528db18b: fidelity VALID, prefix-cache hit 64.0% on the server (67.9% in
    theory)``; empty without a replay."""
    if "workload.fidelity_valid" not in metrics:
        return ""
    digest = str(results.get("workload") or "")
    text = (f"; replay of {digest.removeprefix('sha256:')[:12] or 'a recorded workload'}: fidelity "
            + ("VALID" if metrics["workload.fidelity_valid"] else "INVALID"))
    hit, theory = metrics.get("workload.prefix_hit_server"), metrics.get("workload.prefix_hit_theoretical")
    if isinstance(hit, int | float):
        text += f", prefix-cache hit {hit:.1%} on the server" + (
            f" ({theory:.1%} in theory)" if isinstance(theory, int | float) else "")
    return text


def key_figure(task: str, params: dict[str, Any], metrics: dict[str, Any], artifacts: dict[str, dict[str, Any]]) -> str:
    """The one figure that says how a task went (a step's headline metric or output)."""
    component = component_of(task)
    yes_no = {True: "pass", False: "FAIL"}  # 1 and 1.0 hash as True, 0 and 0.0 as False
    if component == "compress" and "compression_ratio" in metrics:
        return f"compression x{metrics['compression_ratio']:.3g}"
    if component in ("benchmark", "measure-vllm") and "max_output_tokens_per_s" in metrics:
        cached = " (cached base result)" if metrics.get("cached_result") else ""
        return f"max out tok/s {metrics['max_output_tokens_per_s']:.4g}{cached}" + replay_figure(
            metrics, artifacts.get("results") or {})
    if component == "candidate-gates" and "passed" in metrics:
        caveats = {"accuracy_passed": str((artifacts.get("candidate") or {}).get("accuracy_caveat") or "")}
        # the safety gate's verdict as the step said it ("pass (4 attempts < min_attempts 30)", "FAIL (inconclusive)")
        said = {"safety_passed": str((artifacts.get("candidate") or {}).get("safety_verdict") or "")}
        # the SLO verdict with the capacity in the recorded workload's units ("3.2x your recorded peak")
        caveats["slo_passed"] = str((artifacts.get("candidate") or {}).get("capacity") or "")
        parts = [f"{label} " + (said.get(key) or f"{yes_no.get(metrics[key], metrics[key])}"
                                + (f" ({caveats[key]})" if (metrics[key] or key == "slo_passed") and caveats.get(key)
                                   else ""))
                 for key, label in (("accuracy_passed", "accuracy"), ("slo_passed", "SLO"), ("safety_passed", "safety"))
                 if key in metrics]
        recipe = (artifacts.get("candidate") or {}).get("recipe")
        return (f"{recipe}: " if recipe else "") + ", ".join(parts or [f"gates {yes_no.get(metrics['passed'])}"])
    if component == "select-champion":
        winner = (artifacts.get("decision") or {}).get("winner") or (artifacts.get("decision") or {}).get("champion")
        if "candidates" in metrics:
            text = f"{int(metrics.get('passed', 0))} of {int(metrics['candidates'])} candidates passed"
            kept = " (kept the base)" if metrics.get("kept_base") else ""
            return text + (f", champion {winner}{kept}" if winner else "")
    if component in ("package-champion", "register-champion") and (decision := artifacts.get("decision")):
        passed = decision.get("passed")
        return f"champion gate {yes_no.get(passed, passed)}" + (f", version {decision['version']}" if decision.get("version") else "")
    if component == "watch-production" and (report := artifacts.get("report")) and "verdict" in report:
        return str(report["verdict"]) + (f" ({report['drifted']})" if report.get("drifted") else "")
    if component == "deploy" and "status" in params:
        return f"status {params['status']}"
    if component == "preflight" and params.get("Output"):
        return f"MLflow run {str(params['Output'])[:12]}"
    evals = [k for k in metrics if "/acc" in k or "exact_match" in k]
    if evals:
        return f"{evals[0]} {_num(metrics[evals[0]])}"
    for key, value in metrics.items():
        if not key.endswith(("wall_seconds", "wall_time_s")):
            return f"{key} {_num(value)}"
    for key, value in params.items():
        if key == "Output" and isinstance(value, bool):  # KFP's name for a step's return value
            return "yes" if value else "no"
        text = str(value)
        shown = text if len(text) <= 48 else text[:22] + "..." + text[-23:]
        return shown if key == "Output" else f"{key}={shown}"
    return ""


class RunConsole:
    """Watches kfp.local's output (all of it goes to the log) and prints task start and end lines."""

    def __init__(self, console: TextIO, log: TextIO, root: Path, before: set[str], step_log: Path,
                 display: dict[str, str], candidates: list[str] | None = None) -> None:
        self.console = console
        self.candidates = list(candidates or [])
        self.log = log
        self.root = root
        self.before = before
        self.step_log = step_log
        self.display = display
        self.lock = threading.RLock()
        self.started: dict[str, list[float]] = {}
        self.reported: set[Path] = set()
        self.failures: list[tuple[str, str]] = []

    def feed(self, text: str) -> None:
        """Everything kfp.local writes: to the log; task starts and ends also to the console."""
        with self.lock:
            self.log.write(text)
            if "Executing task" not in text and "finished with status" not in text:
                return
            plain = strip_ansi(text)
            for m in _START.finditer(plain):
                self._start(m.group(1))
            for m in _END.finditer(plain):
                self._end(m.group(1), m.group(2))

    def say(self, line: str) -> None:
        """One console line."""
        self.console.write(line + "\n")
        self.console.flush()

    def _name(self, task: str) -> str:
        return self.display.get(task.rsplit("/", 1)[-1], "") or task

    def _start(self, task: str) -> None:
        self.started.setdefault(task, []).append(time.monotonic())
        self.say(f"{time.strftime('%H:%M:%S')}  started  {fit(self._name(task), 40):<40} {task_label(task, self.candidates)}")

    def _end(self, task: str, status: str, task_dir: Path | None = None, ended_ago: float = 0.0) -> None:
        """The end line of ``task``; ``task_dir``: its folder when already found, ``ended_ago``: seconds
        since it ended (when the line comes after the fact, :meth:`settle`)."""
        starts = self.started.get(task) or []
        seconds = time.monotonic() - starts.pop(0) - ended_ago if starts else None
        run_dir = self._run_dir()
        task_dir = task_dir or self._task_dir(run_dir, task, status == "SUCCESS")
        label = task_dir.relative_to(run_dir).as_posix() if task_dir is not None and run_dir is not None else task
        if status == "SUCCESS":
            figure = key_figure(label, *read_executor_output(task_dir)) if task_dir is not None else ""
        else:
            figure = self._error(task_dir, task) or f"see {getattr(self.log, 'name', KFP_LOG)}"
            self.failures.append((label, figure))
        secs = f"{seconds:6.1f} s" if seconds is not None else "      -"
        shown = fit(task_label(label, self.candidates), 36)
        self.say(f"{time.strftime('%H:%M:%S')}  {status:<8} {fit(self._name(task), 40):<40} {shown:<36} {secs}  {figure}")

    def settle(self) -> None:
        """The end lines kfp.local never printed. Two loop iterations running in parallel threads
        swap kfp.local's output streams under each other, and now and then one task's "finished with
        status" record is lost (the task ran: its outputs are there). After the run, each task still
        started and never ended gets its end line from its folder: SUCCESS with its key figure when
        it wrote its outputs, else ``NO END`` (kfp.local said nothing; the log has the rest)."""
        with self.lock:
            for task, starts in self.started.items():
                while starts:
                    run_dir = self._run_dir()
                    task_dir = self._task_dir(run_dir, task, True)
                    output = task_dir / "executor_output.json" if task_dir is not None else None
                    if output is not None and output.exists():
                        self._end(task, "SUCCESS", task_dir, ended_ago=max(0.0, time.time() - output.stat().st_mtime))
                        continue
                    seconds = time.monotonic() - starts.pop(0)
                    self.say(f"{time.strftime('%H:%M:%S')}  {'NO END':<8} {fit(self._name(task), 40):<40} "
                             f"{fit(task_label(task, self.candidates), 36):<36} {seconds:6.1f} s  kfp.local printed no "
                             f"end for this task: see {getattr(self.log, 'name', KFP_LOG)}")

    def _run_dir(self) -> Path | None:
        try:
            runs = sorted(p for p in self.root.iterdir() if p.is_dir() and p.name not in self.before)
        except OSError:
            return None
        return runs[-1] if runs else None

    def _task_dir(self, run_dir: Path | None, task: str, finished: bool) -> Path | None:
        """The folder of the task that just ended (the newest one of that name not reported yet)."""
        if run_dir is None:
            return None
        name = task.rsplit("/", 1)[-1]
        found = [p for p in run_dir.rglob(name) if p.is_dir() and p not in self.reported]
        if finished:
            found = [p for p in found if (p / "executor_output.json").exists()] or found
        if not found:
            return None

        def mtime(p: Path) -> float:
            target = p / "executor_output.json"
            try:
                return (target if target.exists() else p).stat().st_mtime
            except OSError:
                return 0.0

        chosen = max(found, key=mtime)
        self.reported.add(chosen)
        return chosen

    def _error(self, task_dir: Path | None, task: str) -> str:
        """The step's one-line error from the step timing log (``steps.jsonl``)."""
        try:
            records = [json.loads(line) for line in self.step_log.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        name = task.rsplit("/", 1)[-1]
        for record in reversed(records):
            where = str(record.get("task_dir") or "")
            if record.get("error") and ((task_dir is not None and where == str(task_dir)) or Path(where).name == name):
                return str(record["error"])
        return ""


class _Tap(io.TextIOBase):
    """A text stream that hands every write to a :class:`RunConsole`."""

    def __init__(self, console: RunConsole) -> None:
        self.run_console = console

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.run_console.feed(text)
        return len(text)

    def flush(self) -> None:
        self.run_console.log.flush()

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def quiet_kfp(console: RunConsole) -> Iterator[RunConsole]:
    """Send everything written to ``sys.stdout``/``sys.stderr`` (kfp.local's logging and warnings,
    every step's streamed output) through ``console`` while the block runs."""
    tap = _Tap(console)
    with contextlib.redirect_stdout(tap), contextlib.redirect_stderr(tap):  # type: ignore[type-var]
        yield console

