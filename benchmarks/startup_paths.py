"""Time-to-ready of one packaged model through each loading path, side by side in one sitting.

Time-to-ready = getting the weights onto the node + vLLM process start to ``/health`` + the
first completion (one token). Paths:

* ``pvc``: the model folder as it is (a mounted PVC);
* ``modelcar``: built as a modelcar, pushed to a local registry (Debian docker-registry), then
  pulled and unpacked by shipyard's OCI client (what resolve does for ``oci://``);
* ``s3``: uploaded to a local S3 (moto), then downloaded by shipyard's S3 client;
* ``runai``: the folder served with ``--load-format runai_streamer`` (runai-model-streamer 0.17.0
  in the vllm runtime).

Each vLLM start is broken into engine start / weight load / engine init / server up from
vLLM's own log lines, stamped as they appear (:mod:`shipyard.serving.startup`). Packaging (build,
push, upload) is not counted. Run under the heavy lock; on a shared 2-core machine the
figures move by a few seconds between sittings:

    flock /tmp/shipyard-heavy.lock .venvs/base/bin/python benchmarks/startup_paths.py --model embedded
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from shipyard.serving.startup import phases_from_stamps
from shipyard.serving.vllm_server import VLLMServer

PATHS = ("pvc", "modelcar", "s3", "runai")
COLUMNS = [("fetch_s", "download / pull"), ("engine_start_s", "engine start"), ("weight_load_s", "weight load"),
           ("engine_init_s", "engine init"), ("server_up_s", "server up"), ("first_token_s", "first token"),
           ("time_to_ready_s", "time to ready")]


class Follower(threading.Thread):
    """Stamps each new line of a log file with time.monotonic() as it appears."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.lines, self.stop = path, [], threading.Event()

    def run(self) -> None:
        pos, rest = 0, ""
        while not self.stop.is_set():
            if self.path.exists():
                with open(self.path, encoding="utf-8", errors="replace") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
                    pos = fh.tell()
                now = time.monotonic()
                parts = (rest + chunk).split("\n")
                rest = parts.pop()
                self.lines.extend((now, line) for line in parts)
            time.sleep(0.05)


def first_completion(server: VLLMServer) -> None:
    body = json.dumps({"model": server.served_model_name, "prompt": "The capital of France is", "max_tokens": 1,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"{server.base_url}/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert json.loads(resp.read())["choices"], "no completion"


def serve(model: Path, log: Path, extra: list[str]) -> dict[str, Any]:
    follower = Follower(log)
    follower.start()
    server = VLLMServer(model, served_model_name="model", extra_args=["--max-model-len", "2048", *extra],
                        env={"VLLM_CPU_KVCACHE_SPACE": "1"}, log_path=log, startup_timeout=600)
    started = time.monotonic()
    with server:
        healthy = time.monotonic()
        first_completion(server)
        done = time.monotonic()
    time.sleep(0.2)
    follower.stop.set()
    follower.join()
    return phases_from_stamps(follower.lines, started, healthy, done)


def fetch(path: str, model: Path, work: Path, services: dict[str, Any]) -> tuple[Path, float]:
    """Where the weights come from for ``path``, and the seconds it took to get them there."""
    if path in ("pvc", "runai"):
        return model, 0.0
    dest = work / f"{path}-model"
    started = time.monotonic()
    if path == "modelcar":
        from shipyard.oci.transfer import pull_model

        pull_model(services["oci_uri"], dest)
    else:
        from shipyard.models.resolve import resolve_model

        resolve_model(services["s3_uri"], str(dest))
    return dest, round(time.monotonic() - started, 2)


def package(model: Path, work: Path, paths: list[str], stack: Any) -> dict[str, Any]:
    """Build and push the modelcar, upload to S3 (not timed)."""
    out: dict[str, Any] = {}
    if "modelcar" in paths:
        from shipyard.oci.modelcar import build_modelcar
        from shipyard.oci.transfer import push_layout
        from shipyard.testing.registry import LocalRegistry

        registry = stack.enter_context(LocalRegistry(root=work / "registry"))
        build_modelcar(model, work / "layout", tag="startup")
        out["oci_uri"] = push_layout(work / "layout", registry.address, "bench/startup", "startup")["uri"]
    if "s3" in paths:
        import os

        from shipyard.models.s3 import upload_dir
        from shipyard.testing.services import MotoS3

        s3 = stack.enter_context(MotoS3())
        os.environ.update(s3.env)
        s3.make_bucket("models")
        upload_dir(model, "s3://models/startup")
        out["s3_uri"] = "s3://models/startup"
    return out


def table(rows: dict[str, dict[str, Any]]) -> str:
    head = "| path | " + " | ".join(label for _, label in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for path, row in rows.items():
        cells = [f"{row[k]:.1f}" if isinstance(row.get(k), int | float) else "–" for k, _ in COLUMNS]
        lines.append(f"| {path} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    import contextlib

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="a model folder, or 'embedded' (SmolLM2-135M-Instruct)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if args.model == "embedded":
        from shipyard.models.embedded import materialise_embedded
        from shipyard.runtimes.runtime import run_in_runtime

        model = Path(run_in_runtime("compress", materialise_embedded,
                                    name="smollm2-135m-instruct"))
    else:
        model = Path(args.model)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="shipyard-startup-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        services = package(model, work, paths, stack)
        for path in paths:
            where, fetched = fetch(path, model, work, services)
            extra = ["--load-format", "runai_streamer"] if path == "runai" else []
            row = {"fetch_s": fetched, **serve(where, work / f"{path}.log", extra)}
            row["time_to_ready_s"] = round(fetched + row.get("ready_s", 0) + row.get("first_token_s", 0), 2)
            rows[path] = row
            print(f"{path}: {json.dumps(row)}", flush=True)
    size = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    print(f"\nmodel {model.name} ({size / 2**20:.0f} MiB), seconds:\n")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": str(model), "size_bytes": size, "paths": rows}, indent=2))


if __name__ == "__main__":
    main()
