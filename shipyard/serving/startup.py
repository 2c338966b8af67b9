"""vLLM start-up, phase by phase, from vLLM's own log lines.

Time-to-ready of a served model = getting the weights to the node (download from S3, pull and
unpack a modelcar, nothing for a mounted PVC) + the vLLM process start until ``/health``
answers + the first completion. vLLM 0.32 logs the middle part's phases itself:

* ``Starting to load model <path>...`` (cpu/gpu model runner): the engine process is up
  (imports, config, tokenizer, worker spawned): **engine start**;
* ``Loading weights took X seconds`` (default loader; ``model_executor/model_loader``) and
  ``Model loading took Y GiB memory and X seconds`` (GPU runner): **weight load**;
* ``init engine (profile, create kv cache, warmup model) took X s`` (``v1/engine/core.py``):
  **engine init** (memory profile, KV cache, warm-up/compile);
* ``Starting vLLM server on ...``: the API server binds; ``/health`` follows.

:func:`phases_from_log` reads the figures vLLM prints (``*_seconds``) and, where the log has
vLLM's timestamps (``INFO 12-01 12:55:10``, one-second resolution), the wall-clock offsets of
each line from the first. :func:`phases_from_stamps` does the same from lines stamped as they
appear (``benchmarks/startup_paths.py`` follows the log live: sub-second resolution).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
#: marker name -> vLLM 0.32 log line
MARKERS: dict[str, re.Pattern[str]] = {
    "load_start": re.compile(r"Starting to load model "),
    "weights_loaded": re.compile(rf"Loading weights took {_NUM} seconds"),
    "model_loaded": re.compile(rf"Model loading took {_NUM} GiB memory and {_NUM} seconds"),
    "engine_init": re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} s"),
    "server_bind": re.compile(r"Starting vLLM (?:API )?server on "),
}
_STAMP = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d)")


def _figures(lines: Iterable[str]) -> dict[str, float]:
    """vLLM's own durations: ``weights_load_seconds`` and ``engine_init_seconds``."""
    out: dict[str, float] = {}
    for line in lines:
        if (m := MARKERS["weights_loaded"].search(line)) and "weights_load_seconds" not in out:
            out["weights_load_seconds"] = float(m.group(1))
        elif (m := MARKERS["model_loaded"].search(line)) and "weights_load_seconds" not in out:
            out["weights_load_seconds"] = float(m.group(2))
        elif (m := MARKERS["engine_init"].search(line)) and "engine_init_seconds" not in out:
            out["engine_init_seconds"] = float(m.group(1))
    return out


def phases_from_stamps(stamped: list[tuple[float, str]], started: float, healthy: float | None,
                       first_token: float | None = None) -> dict[str, Any]:
    """Phases from ``(monotonic time, line)`` pairs, the process start, ``/health`` OK and the
    first completion's end (all ``time.monotonic()``): ``engine_start_s`` (process start to
    "Starting to load model"), ``weight_load_s`` (to the end of loading: the engine-init line
    less its own duration, else vLLM's weights figure), ``engine_init_s`` (vLLM's figure),
    ``server_up_s`` (engine ready to ``/health``), ``ready_s`` (process start to ``/health``),
    ``first_token_s`` (``/health`` to the first completion). Missing lines leave keys out."""
    at: dict[str, float] = {}
    for t, line in stamped:
        for name, pattern in MARKERS.items():
            if name not in at and pattern.search(line):
                at[name] = t
    figures = _figures(line for _, line in stamped)
    out: dict[str, Any] = dict(figures)
    if "load_start" in at:
        out["engine_start_s"] = round(at["load_start"] - started, 2)
    if "engine_init" in at and "engine_init_seconds" in figures:
        out["engine_init_s"] = figures["engine_init_seconds"]
        init_began = at["engine_init"] - figures["engine_init_seconds"]
        if "load_start" in at:
            out["weight_load_s"] = round(max(init_began - at["load_start"], 0.0), 2)
        if healthy is not None:
            out["server_up_s"] = round(healthy - at["engine_init"], 2)
    elif "weights_load_seconds" in figures:
        out["weight_load_s"] = figures["weights_load_seconds"]
    if healthy is not None:
        out["ready_s"] = round(healthy - started, 2)
        if first_token is not None:
            out["first_token_s"] = round(first_token - healthy, 2)
    return out


def phases_from_log(text: str) -> dict[str, Any]:
    """What a finished ``vllm.log`` tells: vLLM's own figures (``weights_load_seconds``,
    ``engine_init_seconds``) and, from vLLM's timestamps, ``load_start_at_s``,
    ``engine_ready_at_s`` and ``server_bind_at_s``: seconds after the first timestamped line."""
    lines = text.splitlines()
    out: dict[str, Any] = dict(_figures(lines))
    first: datetime | None = None
    for line in lines:
        m = _STAMP.search(line)
        if not m:
            continue
        when = datetime.strptime(m.group(1), "%m-%d %H:%M:%S")
        first = first or when
        for name, key in (("load_start", "load_start_at_s"), ("engine_init", "engine_ready_at_s"),
                          ("server_bind", "server_bind_at_s")):
            if key not in out and MARKERS[name].search(line):
                out[key] = (when - first).total_seconds()
    return out
