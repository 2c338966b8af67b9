"""From a ``workload`` config to what the benchmark replays: the fingerprint and the trace file.

:func:`prepare_workload` is the one call a benchmark makes before guidellm runs (all bad input is
refused here, before any server starts):

* ``{"local": true}``: the trace shipped with shipyard (:mod:`shipyard.benchmarking.local_trace`),
  replayed as recorded, with its fingerprint;
* ``{"trace": ..., "format": "mooncake"}``: the trace fingerprinted and replayed as recorded (its
  hash ids renumbered densely, as guidellm reads them as 32-bit numbers), or sampled from its
  fingerprint when ``sample`` is true or ``requests`` asks for another count;
* ``{"trace": ..., "format": "chat"}``: the chat log tokenized (``privacy: tokenize``), its counts
  and salted hashes replayed as a Mooncake trace (no text is written);
* ``{"trace": ..., "format": "azure" | "burstgpt"}`` and ``{"fingerprint": ...}``: a trace sampled
  from the fingerprint (seeded).

Writes ``workload/trace.jsonl`` and ``workload/fingerprint.json`` under ``out_dir`` and returns
``{"fingerprint", "digest", "trace", "requests", "block_size", "time_scale", "tolerance", "replayed"}``
(``replayed``: ``recorded`` or ``sampled``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shipyard.benchmarking import local_trace
from shipyard.benchmarking.workload import TraceRequest, load_fingerprint
from shipyard.benchmarking.workload_chat import read_chat
from shipyard.benchmarking.workload_config import parse_workload_config
from shipyard.benchmarking.workload_render import sample_trace, write_trace
from shipyard.benchmarking.workload_sources import fingerprint_file, read_mooncake
from shipyard.core.errors import ShipyardError


def dense_ids(requests: list[TraceRequest]) -> list[TraceRequest]:
    """The requests with their hash ids renumbered 0, 1, 2... in order of first use (same tree)."""
    table: dict[int, int] = {}
    return [TraceRequest(r.t, r.input_len, r.output_len,
                         None if r.hash_ids is None else [table.setdefault(h, len(table)) for h in r.hash_ids],
                         r.session, r.delay) for r in requests]


def prepare_workload(value: str | dict[str, Any] | None, out_dir: str, *, model_dir: str | None = None,
                     max_model_len: int | None = None) -> dict[str, Any]:
    """The fingerprint and the trace to replay for a ``workload`` config (see module doc)."""
    cfg = parse_workload_config(value)
    limit = cfg["max_model_len"] or max_model_len
    folder = Path(out_dir) / "workload"
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "trace.jsonl"
    recorded: list[TraceRequest] | None = None
    if cfg["local"]:  # the same digest as the shipped fingerprint; a context too short for it is one line
        fp = fingerprint_file(local_trace.trace_path(), "mooncake", block_size=local_trace.BLOCK_SIZE,
                              max_model_len=limit, field="workload.local")
        recorded = read_mooncake(local_trace.trace_path(), field="workload.local")
    elif cfg["fingerprint"]:
        fp = load_fingerprint(cfg["fingerprint"], "workload.fingerprint")
    else:
        fp = fingerprint_file(cfg["trace"], cfg["format"], block_size=cfg["block_size"], slo_class=cfg["slo_class"],
                              max_model_len=limit, privacy=cfg["privacy"], model_dir=model_dir, field="workload.trace")
        if cfg["format"] == "mooncake":
            recorded = read_mooncake(cfg["trace"], privacy=cfg["privacy"], field="workload.trace")
        elif cfg["format"] == "chat":
            recorded = read_chat(cfg["trace"], model_dir=str(model_dir), block_size=int(cfg["block_size"]),
                                 field="workload.trace")
    block = int(fp.block_size or cfg["block_size"] or 16)
    wanted = cfg["requests"]
    if recorded is not None and not cfg["sample"] and (wanted is None or wanted == len(recorded)):
        if recorded and not recorded[0].hash_ids:
            raise ShipyardError("workload.trace", "the trace has no hash_ids to rebuild its prompts from",
                                "add hash_ids, or set sample: true to draw requests from its fingerprint")
        origin = recorded[0].t
        rows = [TraceRequest(r.t - origin, r.input_len, r.output_len, r.hash_ids) for r in dense_ids(recorded)]
        replayed = "recorded"
    else:
        rows = sample_trace(fp, requests=wanted, seed=cfg["seed"], block_size=block, max_model_len=limit)
        replayed = "sampled"
    write_trace(rows, trace, field="workload")
    fp.save(folder / "fingerprint.json", "workload")
    return {"fingerprint": fp.data, "digest": fp.digest, "trace": str(trace), "requests": len(rows),
            "block_size": block, "time_scale": cfg["time_scale"], "tolerance": cfg["tolerance"],
            "replayed": replayed}
