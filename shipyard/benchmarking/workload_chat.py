"""Raw chat logs into counts and salted block hashes (no text kept), for the workload fingerprint.

A chat log is JSON lines ``{"messages": [{"role": ..., "content": ...}, ...], "output": "...",
"timestamp": ms, "session": "..."}``. :func:`tokenize_chat` runs in the ``compress`` runtime (it
needs transformers): each request's prompt is the model's chat template applied to ``messages``
with the generation prompt, its output the tokens of ``output``; the prompt's tokens are cut into
blocks of ``block_size`` and each block gets a chained hash ``sha256(salt | parent | tokens)``, as
vLLM's prefix cache chains its block hashes. Only the counts, the hashes, the time and an opaque
session number come back: the text is dropped line by line. The salt is random per call unless
given, so hashes from two logs (or two calls) cannot be matched with each other, nor with a
dictionary of known prompts.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from pathlib import Path
from typing import Any

from shipyard.benchmarking.workload import TraceRequest
from shipyard.core.errors import ShipyardError
from shipyard.runtimes.runtime import run_in_runtime


def block_hashes(tokens: list[int], block_size: int, salt: str) -> list[int]:
    """Chained, salted hashes of ``tokens``' blocks (the last one may be partial) as 63-bit ids."""
    out: list[int] = []
    parent = salt.encode()
    for start in range(0, len(tokens), block_size):
        block = tokens[start:start + block_size]
        digest = hashlib.sha256(parent + b"|" + ",".join(map(str, block)).encode()).digest()
        out.append(int.from_bytes(digest[:8], "big") >> 1)
        parent = digest
    return out


def tokenize_chat(path: str, model_dir: str, block_size: int, salt: str, field: str = "trace") -> list[dict[str, Any]]:
    """Each chat-log line as ``{t, input_len, output_len, hash_ids, session}`` (``t`` in seconds).
    Runs in the ``compress`` runtime (transformers); the model folder's tokenizer is read offline."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ShipyardError("model", f"no tokenizer in {model_dir}: {str(err).splitlines()[0][:200]}",
                            "pass a Hugging Face model folder with its tokenizer files") from None
    if not getattr(tok, "chat_template", None):
        raise ShipyardError("model", f"the tokenizer in {model_dir} has no chat template",
                            "pass the chat model the logs were served by (its tokenizer_config.json has chat_template)")
    sessions: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as fh:
        for row, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise ShipyardError(field, f"row {row} is not JSON", "pass a chat log of JSON lines") from None
            messages, output, ts = (obj.get("messages"), obj.get("output"), obj.get("timestamp")) if isinstance(obj, dict) else (None, None, None)
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and isinstance(m.get("content"), str) and isinstance(m.get("role"), str)
                    for m in messages):
                raise ShipyardError(field, f"row {row}: messages must be a list of {{role, content}} objects",
                                    'e.g. {"messages": [{"role": "user", "content": "..."}], "output": "...", "timestamp": 0}')
            if not isinstance(output, str):
                raise ShipyardError(field, f"row {row}: output must be the answer's text", "add the output field")
            if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
                raise ShipyardError(field, f"row {row}: timestamp must be a number (ms)", "add the timestamp field")
            prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if not isinstance(prompt, list):  # a BatchEncoding (transformers 5)
                prompt = prompt["input_ids"]
            tokens = [int(t) for t in prompt]
            n_out = len(tok.encode(output, add_special_tokens=False))
            session = obj.get("session")
            sid = None if session is None else str(sessions.setdefault(str(session), len(sessions)))
            out.append({"t": ts / 1000.0, "input_len": len(tokens), "output_len": n_out,
                        "hash_ids": block_hashes(tokens, block_size, salt), "session": sid})
            del prompt, tokens, messages, output, obj
    return out


def read_chat(path: str | Path, *, model_dir: str, block_size: int, salt: str | None = None,
              field: str = "trace") -> list[TraceRequest]:
    """A chat log as trace requests, tokenized in the ``compress`` runtime (see module doc)."""
    if not Path(path).is_file():
        raise ShipyardError(field, f"{path} is not a file", "pass the chat log's path")
    if not (Path(model_dir) / "config.json").is_file():
        raise ShipyardError("model", f"{model_dir} has no config.json", "pass a Hugging Face model folder")
    rows = run_in_runtime("compress", tokenize_chat, path=str(Path(path).resolve()), model_dir=str(model_dir),
                          block_size=int(block_size), salt=salt or secrets.token_hex(16), field=field)
    return [TraceRequest(t=r["t"], input_len=r["input_len"], output_len=r["output_len"], hash_ids=r["hash_ids"],
                         session=r["session"]) for r in rows]
