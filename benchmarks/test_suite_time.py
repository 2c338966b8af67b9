"""Time the README's test command, ``bash .ci/test``: wall time and each pytest process's own time.

``bash .ci/test`` runs with the given arguments.

    .venvs/base/bin/python benchmarks/test_suite_time.py [--json suite-time.json] [-- ARGS for .ci/test]

``.ci/test`` runs three pytest processes side by side (the pipelines' slow tests, the other slow
tests, the quick ones) and prints their reports one after another; this script keeps its output in
a log (``--log``, default a temporary file, whose path is printed), then prints the wall time, the
time and outcome line of each group (``2317 passed, 58 deselected in 1413.21s``, read from pytest's
last summary line in that group's part of the output), ``.ci/test``'s own "all three" seconds, the
CPU (model, cores, AMX) and ``/proc/loadavg`` before and after (what else ran). Run it on an idle
machine for the README's figure; it starts every server the slow tests start (vLLM, garak,
podman, MLflow), so nothing else heavy should run beside it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shipyard.serving.vllm_server import cpu_info

REPO = Path(__file__).resolve().parents[1]
#: the headers .ci/test prints before the servers' and the quick process's reports; what comes
#: before the first is the pipelines' process (printed as it runs)
GROUP_HEADERS = (("servers", "==== slow tests, servers"), ("quick", "==== the quick half"),
                 ("pipelines, repeated", "==== slow tests, pipelines: durations and outcome"))
_SUMMARY = re.compile(r"^=*\s*(?P<outcome>\d[^=\n]*?) in (?P<seconds>[\d.]+)s\b.*$", re.M)
_ALL_THREE = re.compile(r"all three: (\d+) s ====")


def group_times(output: str) -> dict[str, Any]:
    """Each group's pytest summary (``outcome``, ``seconds``) from ``.ci/test``'s output, and its
    ``all_three_s``; a group whose summary is missing (it crashed, or was cut off) is ``None``."""
    parts: dict[str, str] = {}
    rest, name = output, "pipelines"
    for next_name, header in GROUP_HEADERS:
        head, found, tail = rest.partition(header)
        parts[name] = head
        if not found:
            rest = ""
            break
        rest, name = tail, next_name
    if rest:
        parts[name] = rest
    groups: dict[str, Any] = {}
    for group in ("pipelines", "servers", "quick"):
        found = list(_SUMMARY.finditer(parts.get(group, "")))
        groups[group] = ({"outcome": found[-1]["outcome"].strip(), "seconds": float(found[-1]["seconds"])}
                         if found else None)
    total = _ALL_THREE.search(output)
    return {"groups": groups, "all_three_s": int(total.group(1)) if total else None}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--log", type=Path, help=".ci/test's whole output (default: a temporary file)")
    parser.add_argument("ci_args", nargs=argparse.REMAINDER, help="arguments for .ci/test (after --)")
    args = parser.parse_args(argv)
    ci_args = args.ci_args[1:] if args.ci_args[:1] == ["--"] else args.ci_args
    log = args.log or Path(tempfile.mkstemp(prefix="shipyard-test-suite-", suffix=".log")[1])
    load_before, started = loadavg(), time.monotonic()
    with log.open("w") as out:
        code = subprocess.call(["bash", ".ci/test", *ci_args], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    result = {"command": " ".join(["bash .ci/test", *ci_args]), "exit": code, "wall_s": round(seconds, 1),
              **group_times(log.read_text(errors="replace")), "cpu": cpu_info(), "load_before": load_before,
              "load_after": loadavg(), "log": str(log)}
    cpu = result["cpu"]
    print(f"{result['command']}: exit {code}, {seconds:.0f} s ({seconds / 60:.1f} min) wall; .ci/test's own "
          f"'all three': {result['all_three_s']} s; log {log}")
    for group, figures in result["groups"].items():
        print(f"  {group}: " + (f"{figures['outcome']} in {figures['seconds']:.0f} s" if figures else "no summary line"))
    print(f"  CPU: {cpu['model']}, {cpu['cores']} cores, AMX {'yes' if cpu['amx'] else 'no'}; "
          f"load before {load_before}, after {result['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
