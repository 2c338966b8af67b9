"""Readers of recorded traffic for the workload fingerprint (:mod:`shipyard.benchmarking.workload`).

Each reader streams its file (a week of Azure traffic is a gigabyte) into
:class:`~shipyard.benchmarking.workload.TraceRequest` records, never keeping text:

* ``mooncake``: JSON lines ``{"timestamp": ms, "input_length": n, "output_length": n,
  "hash_ids": [...], "session_id"?: s, "delay"?: ms}`` (the interchange format; ``hash_ids`` are the
  prefix tree's block ids at a block size the user states: Mooncake's own traces use 512);
* ``azure``: the Azure LLM inference traces (2023/2024), CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``
  with absolute timestamps such as ``2023-11-16 18:15:46.6805900``;
* ``burstgpt``: BurstGPT's CSV ``Timestamp,[Session ID,Elapsed time,]Model,Request tokens,Response
  tokens,Total tokens,Log Type`` (``Timestamp`` in seconds); its failed requests (0 response
  tokens, or 0 request tokens) are skipped and counted;
* ``chat``: raw request logs, JSON lines ``{"messages": [...], "output": "...", "timestamp": ms,
  "session": "..."}``, tokenized with the model's tokenizer and chat template in the ``compress``
  runtime (:mod:`shipyard.benchmarking.workload_chat`); only counts and salted block hashes come back.

Privacy (``privacy``): ``strict`` (default) refuses any text: a trace row carrying a text field
(``text_input``, ``prompt``, ``messages``...) and the ``chat`` format are one line each;
``tokenize`` lets the chat reader tokenize text locally (the text is dropped as it is read).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from shipyard.benchmarking.workload import TraceRequest, WorkloadFingerprint, build_fingerprint, seal
from shipyard.benchmarking.workload_chat import read_chat
from shipyard.core.errors import ShipyardError, file_error
from shipyard.core.files import atomic_write_text

FORMATS = ("mooncake", "azure", "burstgpt", "chat", "prometheus")
PRIVACY = ("strict", "tokenize")
#: fields that carry text in the trace formats shipyard reads (AIPerf's mooncake ``text_input`` too)
TEXT_FIELDS = ("text_input", "text", "prompt", "messages", "output", "completion", "response", "content")


def _open(path: str | Path, field: str) -> Iterator[str]:
    p = Path(path)
    if not p.is_file():
        raise ShipyardError(field, f"{path} is not a file", "pass the trace file's path")
    try:
        with p.open(encoding="utf-8", newline="") as fh:
            yield from fh
    except OSError as err:
        raise file_error(err, field, path, action="read") from None
    except UnicodeDecodeError:
        raise ShipyardError(field, f"{path} is not UTF-8 text", "pass the trace as a UTF-8 text file") from None


def _int(value: Any, row: int, name: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value != int(value):
        raise ShipyardError(field, f"row {row}: {name} must be a whole number, got {str(value)[:40]!r}", "fix the row")
    return int(value)


def _num(value: Any, row: int, name: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ShipyardError(field, f"row {row}: {name} must be a number, got {str(value)[:40]!r}", "fix the row")
    return float(value)


def _no_text(obj: dict[str, Any], row: int, field: str) -> None:
    found = [k for k in TEXT_FIELDS if k in obj]
    if found:
        raise ShipyardError("privacy", f"{field} row {row} carries text ({found[0]}) and the privacy mode is strict",
                            f"strip the {found[0]} field from the trace, or pass --privacy tokenize to tokenize it locally")


def read_mooncake(path: str | Path, *, privacy: str = "strict", field: str = "trace") -> list[TraceRequest]:
    """A Mooncake JSONL trace (``timestamp`` and ``delay`` in ms, read as seconds; not reordered)."""
    out: list[TraceRequest] = []
    for row, line in enumerate(_open(path, field), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise ShipyardError(field, f"row {row} is not JSON", "pass a Mooncake JSON-lines trace") from None
        if not isinstance(obj, dict):
            raise ShipyardError(field, f"row {row} is not a JSON object", "one object per line")
        if privacy == "strict":
            _no_text(obj, row, field)
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise ShipyardError(field, f"row {row} has no {key}", "Mooncake rows need timestamp, input_length, output_length")
        ids = obj.get("hash_ids")
        if ids is not None and (not isinstance(ids, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids)):
            raise ShipyardError(field, f"row {row}: hash_ids must be a list of whole numbers >= 0", "fix the row")
        session = obj.get("session_id")
        out.append(TraceRequest(
            t=_num(obj["timestamp"], row, "timestamp", field) / 1000.0,
            input_len=_int(obj["input_length"], row, "input_length", field),
            output_len=_int(obj["output_length"], row, "output_length", field),
            hash_ids=ids, session=None if session is None else str(session),
            delay=None if obj.get("delay") is None else _num(obj["delay"], row, "delay", field) / 1000.0))
    return out


def _csv_rows(path: str | Path, field: str, need: tuple[str, ...], fmt: str) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(_open(path, field))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in need if c not in header]
    if missing:
        raise ShipyardError(field, f"the {fmt} CSV has no column {missing[0]!r} (header: {','.join(header)[:120]})",
                            f"pass a {fmt} trace (columns {', '.join(need)})")
    reader.fieldnames = header
    yield from enumerate(reader, 2)


def _csv_int(text: str | None, row: int, name: str, field: str) -> int:
    try:
        value = float((text or "").strip())
    except ValueError:
        raise ShipyardError(field, f"row {row}: {name} {str(text)[:40]!r} is not a number", "fix the row") from None
    return _int(value, row, name, field)


def read_azure(path: str | Path, *, privacy: str = "strict", field: str = "trace") -> list[TraceRequest]:
    """An Azure LLM inference trace: seconds since the first row's ``TIMESTAMP``."""
    out: list[TraceRequest] = []
    origin: datetime | None = None
    for row, rec in _csv_rows(path, field, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "Azure"):
        if privacy == "strict":
            _no_text(rec, row, field)
        text = (rec.get("TIMESTAMP") or "").strip()
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise ShipyardError(field, f"row {row}: TIMESTAMP {text[:40]!r} is not a date and time",
                                "Azure traces write e.g. 2023-11-16 18:15:46.6805900") from None
        origin = origin or when
        out.append(TraceRequest(t=(when - origin).total_seconds(),
                                input_len=_csv_int(rec.get("ContextTokens"), row, "ContextTokens", field),
                                output_len=_csv_int(rec.get("GeneratedTokens"), row, "GeneratedTokens", field)))
    return out


def read_burstgpt(path: str | Path, *, privacy: str = "strict", field: str = "trace") -> tuple[list[TraceRequest], int]:
    """A BurstGPT trace (``Timestamp`` seconds) and how many failed rows were skipped."""
    out: list[TraceRequest] = []
    skipped = 0
    for row, rec in _csv_rows(path, field, ("Timestamp", "Request tokens", "Response tokens"), "BurstGPT"):
        if privacy == "strict":
            _no_text(rec, row, field)
        try:
            t = float((rec.get("Timestamp") or "").strip())
        except ValueError:
            raise ShipyardError(field, f"row {row}: Timestamp {str(rec.get('Timestamp'))[:40]!r} is not a number",
                                "BurstGPT timestamps are seconds") from None
        n_in = _csv_int(rec.get("Request tokens"), row, "Request tokens", field)
        n_out = _csv_int(rec.get("Response tokens"), row, "Response tokens", field)
        if n_in == 0 or n_out == 0:  # BurstGPT marks a failed request with 0 response tokens
            skipped += 1
            continue
        session = (rec.get("Session ID") or "").strip() or None
        out.append(TraceRequest(t=t, input_len=n_in, output_len=n_out, session=session))
    return out, skipped


def fingerprint_file(path: str | Path, fmt: str, *, block_size: int | None = None, slo_class: str = "interactive",
                     max_model_len: int | None = None, privacy: str = "strict", model_dir: str | None = None,
                     salt: str | None = None, field: str = "trace") -> WorkloadFingerprint:
    """The fingerprint of a recorded trace or chat log (``fmt`` one of mooncake, azure, burstgpt, chat)."""
    if privacy not in PRIVACY:
        raise ShipyardError("privacy", f"unknown mode {privacy!r}", f"use one of {list(PRIVACY)}")
    if fmt == "mooncake":
        requests = read_mooncake(path, privacy=privacy, field=field)
        return build_fingerprint(requests, source="mooncake", block_size=block_size, slo_class=slo_class,
                                 max_model_len=max_model_len, field_name=field)
    if fmt == "azure":
        return build_fingerprint(read_azure(path, privacy=privacy, field=field), source="azure", slo_class=slo_class,
                                 max_model_len=max_model_len, field_name=field)
    if fmt == "burstgpt":
        requests, skipped = read_burstgpt(path, privacy=privacy, field=field)
        fp = build_fingerprint(requests, source="burstgpt", slo_class=slo_class, max_model_len=max_model_len,
                               field_name=field)
        if skipped:
            data = {k: v for k, v in fp.data.items() if k != "digest"}
            data["source"] = {**data["source"], "skipped_failed": skipped}
            return seal(data)
        return fp
    if fmt == "chat":
        if privacy != "tokenize":
            raise ShipyardError("privacy", "chat logs are text and the privacy mode is strict",
                                "pass --privacy tokenize to tokenize them locally (no text is kept), or give a "
                                "Mooncake trace of counts and hashes")
        if not model_dir:
            raise ShipyardError("model", "chat logs are tokenized with the model's tokenizer and chat template",
                                "pass --model MODEL_DIR (a Hugging Face model folder)")
        if not block_size:
            raise ShipyardError("block_size", "chat logs are hashed in blocks of vLLM's block size",
                                "pass --block-size (16 for vLLM on GPUs)")
        requests = read_chat(path, model_dir=model_dir, block_size=block_size, salt=salt, field=field)
        return build_fingerprint(requests, source="chat", block_size=block_size, slo_class=slo_class,
                                 max_model_len=max_model_len, field_name=field)
    raise ShipyardError("format", f"unknown trace format {fmt!r}", f"use one of {list(FORMATS)}")


def write_mooncake(requests: list[TraceRequest], path: str | Path, *, field: str = "trace") -> None:
    """Requests as a Mooncake JSONL trace (``timestamp`` in ms, integers), atomically."""
    lines = []
    for r in requests:
        row: dict[str, Any] = {"timestamp": int(round(r.t * 1000)), "input_length": r.input_len,
                               "output_length": r.output_len}
        if r.hash_ids is not None:
            row["hash_ids"] = r.hash_ids
        if r.session is not None:
            row["session_id"] = r.session
        lines.append(json.dumps(row, separators=(", ", ": ")))
    atomic_write_text(path, "\n".join(lines) + "\n", field=field)
