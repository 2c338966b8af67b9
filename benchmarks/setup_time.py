"""The README's setup on a fresh clone, timed: `bash .ci/setup` with nothing cached, phase by phase.

    .venvs/base/bin/python benchmarks/setup_time.py [--keep] [--json setup-time.json]

Clones this repository's HEAD into a temporary folder (a fresh clone with nothing beside it) and runs
``bash .ci/setup`` there as the README's first command does, with an empty pip cache
(``PIP_CACHE_DIR``), an empty uv cache (``UV_CACHE_DIR``: uv installs the locks) and an empty
shipyard cache (``SHIPYARD_CACHE``: the embedded model is downloaded and converted again), so every
wheel comes from PyPI (or the host's configured find-links) as on a new machine. What this cannot make fresh:
the Debian packages (``apt-get`` finds them installed when the machine already has them: that part
is then seconds) and the network between here and PyPI. Each line ``.ci/setup`` prints is stamped
with the seconds since the start, so the phases (the base venv, each runtime venv, the embedded
model, podman, the test tools) can be read off; the total and ``/proc/loadavg`` before and after
(what else ran) are printed at the end. The clone is deleted unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def timed_setup(work: Path) -> dict[str, object]:
    """Clone HEAD into ``work`` and run its ``.ci/setup`` with empty caches; the stamped lines and times."""
    clone = work / "shipyard"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PIP_CACHE_DIR=str(work / "pip-cache"), UV_CACHE_DIR=str(work / "uv-cache"),
               SHIPYARD_CACHE=str(work / "shipyard-cache"),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    before = load()
    started = time.perf_counter()
    stamped: list[str] = []
    proc = subprocess.Popen(["bash", ".ci/setup"], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        stamped.append(f"{time.perf_counter() - started:7.1f} s  {line.rstrip()}")
        print(stamped[-1], flush=True)
    code = proc.wait()
    return {"exit": code, "seconds": round(time.perf_counter() - started, 1), "load_before": before,
            "load_after": load(), "lines": stamped}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone, its venvs and caches")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shipyard-setup-time-"))
    try:
        result = timed_setup(work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n.ci/setup on a fresh clone, empty pip and shipyard caches: exit {result['exit']}, "
          f"{result['seconds']:.0f} s ({float(result['seconds']) / 60:.1f} min); load before {result['load_before']}, "
          f"after {result['load_after']}; CPU: {os.cpu_count()} cores")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return int(result["exit"] != 0)


if __name__ == "__main__":
    raise SystemExit(main())
