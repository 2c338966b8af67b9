"""The outbox: tracking payloads kept while MLflow was down (``<work dir>/tracking-pending/``).

Steps and the promotion write here (:func:`keep`); :mod:`shipyard.tracking.pending` replays them.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from shipyard.core.files import atomic_write_text
from shipyard.tracking.tracker import local_work_dir

PENDING_DIR = "tracking-pending"


def replay_command(work_dir: str | Path) -> str:
    """The exact command that applies ``work_dir``'s pending payloads."""
    return f"shipyard track replay {Path(work_dir).resolve()}"


def replay_hint(kept: Path | None) -> str:
    """``replay with: shipyard track replay WORK`` for a kept payload file."""
    return f"replay with: {replay_command(kept.parent.parent)}" if kept else ""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "-"


def keep(payload: dict[str, Any], work_dir: str | Path | None = None, *, overwrite: bool = True) -> Path | None:
    """Write ``payload`` to ``<work dir>/tracking-pending/`` (a local run only); returns the file.

    ``overwrite=False`` keeps a file already there (the step's own copy beats one handed on
    through KFP metadata, whose numbers all came back as floats).
    """
    work = Path(work_dir) if work_dir else local_work_dir()
    if work is None:
        return None
    kind = payload.get("kind", "step")
    what = payload.get("step") or payload.get("model_name") or "pipeline"
    run = hashlib.sha256(str(payload.get("kfp_run_id", "")).encode()).hexdigest()[:8]  # one file per run and step
    name = "-".join(_slug(x) for x in (kind, what, payload.get("candidate") or "", run) if x)
    path = work / PENDING_DIR / f"{name}.json"
    if not overwrite and path.exists():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({**payload, "kind": kind}, indent=1, sort_keys=True, default=str))
    except OSError as err:
        print(f"shipyard: warning: cannot keep the tracking payload in {path}: {err}", file=sys.stderr, flush=True)
        return None
    return path


def load(work_dir: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """The pending payloads of ``work_dir``, oldest first."""
    folder = Path(work_dir) / PENDING_DIR
    out = []
    for path in sorted(folder.glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name)):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append((path, data))
    return out


def corrupt(work_dir: str | Path) -> list[tuple[Path, str]]:
    """Pending files :func:`load` cannot use (truncated, not JSON, not an object), with the reason:
    a replay reports them and keeps them, never "nothing pending"."""
    folder = Path(work_dir) / PENDING_DIR
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, ValueError) as err:
            out.append((path, f"not readable JSON ({type(err).__name__})"))
            continue
        if not isinstance(data, dict):
            out.append((path, f"not a JSON object ({type(data).__name__})"))
    return out


def describe(payload: dict[str, Any]) -> str:
    """A few words naming a payload (``step evaluate [w8a8-int8]``, ``registration of m``)."""
    kind = payload.get("kind", "step")
    if kind == "register":
        return f"registration of {payload.get('model_name')} ({payload.get('source_uri')})"
    if kind == "close":
        return f"closing the pipeline run ({payload.get('state')})"
    if kind == "promote":
        return f"'production' for {payload.get('model_name')} version {payload.get('version')}"
    cand = payload.get("candidate") or ""
    return f"step {payload.get('step')}" + (f" [{cand}]" if cand else "")
