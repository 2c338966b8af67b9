"""Golden outputs: the answers a candidate's own vLLM server gave to a few evaluation prompts.

The measure step (and the benchmark step of the hf eval branch) records them into the candidate's
benchmark results (``golden.json``) with :func:`record_golden`; after a deploy, the deployed
service answers the same prompts and :func:`compare_golden` reports the exact-match rate and,
for each mismatch, the first divergence (token and character offset, both texts).

The prompts are the first :data:`DEFAULT_PROMPTS` questions of the offline suite's
``capitals_gen`` test split, asked as that task asks them. Decoding is greedy (``temperature``
0, ``seed`` fixed) with a fixed ``max_tokens``; the recorded tokens come from the completion's
``logprobs`` (vLLM returns the sampled token's text per position). Only HTTP: any runtime.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text, package_dir
from shipyard.core.net import http_request, unreachable
from shipyard.core.records import CANDIDATE_FILE

GOLDEN_FILE = "golden.json"
SCHEMA = "shipyard.golden/v1"
DEFAULT_PROMPTS = 8
DEFAULT_MAX_TOKENS = 16
SEED = 1234
PROMPT_TASK = "capitals_gen"


def golden_prompts(n: int = DEFAULT_PROMPTS) -> list[str]:
    """``n`` prompts from the evaluation suite (capitals_gen's test split, as the task asks them)."""
    if n < 1:
        raise ShipyardError("golden prompts", f"{n} prompts asked for", "ask for 1 or more")
    path = package_dir("shipyard.evaluation.suite") / f"{PROMPT_TASK}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    prompts = [f"Question: {r['question']}\nAnswer: The capital is" for r in rows if r.get("split") == "test"]
    return prompts[:n]


def _post(url: str, body: dict[str, Any], timeout: float, field: str, headers: Mapping[str, str] | None = None,
          context: ssl.SSLContext | None = None) -> dict[str, Any]:
    """POST ``body`` as JSON; the answer's JSON, within ``timeout`` seconds in all (connecting to
    the last byte, however slowly the server sends it). ``headers`` (an auth header) and ``context``
    (the TLS context of an https URL) go with the request."""
    try:
        status, answer = http_request(url, deadline_s=timeout, data=json.dumps(body).encode(),
                                      headers={**(headers or {}), "Content-Type": "application/json"},
                                      context=context, field=field)
    except (TimeoutError, urllib.error.URLError) as err:
        raise unreachable(field, url, err, timeout) from None
    except OSError as err:
        raise ShipyardError(field, f"{url} gave no JSON answer ({type(err).__name__}: {err})",
                            "point the URL at an OpenAI-compatible server") from None
    text = answer.decode("utf-8", errors="replace")
    if status in (401, 403):
        raise ShipyardError(field, f"{url} answered HTTP {status} ({'not authenticated' if status == 401 else 'forbidden'})",
                            "give the gateway token through verify.auth_secret_env: the environment variable "
                            "holding it, from a Secret; check that it is the right one")
    if status >= 400:
        detail = text[:300].replace("\n", " ")
        raise ShipyardError(field, f"{url} answered HTTP {status}: {detail}",
                            "check the served model name and that the service serves /v1/completions")
    try:
        return json.loads(text)
    except ValueError as err:
        raise ShipyardError(field, f"{url} gave no JSON answer ({type(err).__name__}: {err})",
                            "point the URL at an OpenAI-compatible server") from None


def complete(base_url: str, model: str, prompt: str, *, max_tokens: int = DEFAULT_MAX_TOKENS,
             timeout: float = 60.0, field: str = "url", headers: Mapping[str, str] | None = None,
             context: ssl.SSLContext | None = None) -> dict[str, Any]:
    """One greedy completion: ``{"text", "tokens"}`` (tokens None when the server gives no logprobs);
    ``headers`` and ``context``: an auth header and the TLS context (a gateway's, the verification)."""
    body = {"model": model, "prompt": prompt, "max_tokens": int(max_tokens), "temperature": 0, "top_p": 1,
            "seed": SEED, "logprobs": 1}
    payload = _post(f"{base_url.rstrip('/')}/completions", body, timeout, field, headers, context)
    try:
        choice = payload["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ShipyardError(field, f"{base_url}/completions answered without choices: {str(payload)[:200]}",
                            "point the URL at an OpenAI-compatible server") from None
    tokens = (choice.get("logprobs") or {}).get("tokens")
    return {"text": str(choice.get("text") or ""), "tokens": list(tokens) if isinstance(tokens, list) else None}


def ask_all(base_url: str, model: str, prompts: list[str], *, max_tokens: int = DEFAULT_MAX_TOKENS,
            timeout: float = 60.0, field: str = "url", headers: Mapping[str, str] | None = None,
            context: ssl.SSLContext | None = None, concurrency: int = 8) -> list[dict[str, Any]]:
    """Greedy answers to ``prompts``, asked concurrently (one batch for vLLM; at most
    ``concurrency`` requests in flight), in prompt order (``headers``, ``context``: as :func:`complete`)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=min(max(1, concurrency), len(prompts)) or 1)
    try:
        futures = [pool.submit(complete, base_url, model, p, max_tokens=max_tokens, timeout=timeout, field=field,
                               headers=headers, context=context)
                   for p in prompts]
        return [f.result() for f in futures]
    finally:
        # an interrupt (Ctrl-C, a cancelled run) must not wait for requests a hung service holds
        pool.shutdown(wait=False, cancel_futures=True)


def record_golden(base_url: str, model: str, out_path: str | None = None, *, n: int = DEFAULT_PROMPTS,
                  max_tokens: int = DEFAULT_MAX_TOKENS, timeout: float = 60.0) -> dict[str, Any]:
    """Ask the server at ``base_url`` (``http://host:port/v1``) the golden prompts, greedily; write
    ``out_path`` (``golden.json``) when given; return the record."""
    started = time.monotonic()
    prompts = golden_prompts(n)
    got = ask_all(base_url, model, prompts, max_tokens=max_tokens, timeout=timeout, field="golden server")
    answers = [{"prompt": prompt, **answer} for prompt, answer in zip(prompts, got, strict=True)]
    record = {"schema": SCHEMA, "served_model_name": model, "max_tokens": int(max_tokens), "temperature": 0,
              "seed": SEED, "task": PROMPT_TASK, "answers": answers,
              "seconds": round(time.monotonic() - started, 2)}
    if out_path:
        atomic_write_text(out_path, json.dumps(record, indent=2))
    return record


def load_golden(path: str | Path) -> dict[str, Any]:
    """A ``golden.json`` (the file, a benchmark results folder holding it, or a ``candidate.json``
    carrying it under ``golden``); one-line errors when it is missing, unreadable or empty."""
    p = Path(path)
    if p.is_dir():
        p = p / GOLDEN_FILE if (p / GOLDEN_FILE).is_file() else p / CANDIDATE_FILE
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as err:
        raise ShipyardError("golden", f"cannot read {p}: {type(err).__name__}",
                            "pass the candidate's benchmark results folder or its golden.json") from None
    if isinstance(data, dict) and data.get("schema") != SCHEMA and isinstance(data.get("golden"), dict):
        data = data["golden"]
    return check_golden(data, str(p))


def check_golden(data: Any, where: str = "golden") -> dict[str, Any]:
    """A golden record, checked: the schema and at least one answer."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ShipyardError("golden", f"{where} is not a shipyard golden-output record",
                            "record one with the measure step (golden.json in its benchmark results)")
    answers = data.get("answers")
    if not isinstance(answers, list) or not answers:
        raise ShipyardError("golden", f"{where} holds no golden answers (empty golden set)",
                            "re-run the measure step so it records golden.json")
    for i, row in enumerate(answers):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not isinstance(row.get("text"), str):
            raise ShipyardError(f"golden.answers[{i}]", "needs a prompt and a text", "re-record golden.json")
    return data


def first_divergence(expected: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """Where two answers first differ: character offset, token offset (None without tokens), both texts."""
    a, b = expected["text"], got["text"]
    char = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    token = None
    ta, tb = expected.get("tokens"), got.get("tokens")
    if isinstance(ta, list) and isinstance(tb, list):
        token = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), min(len(ta), len(tb)))
    return {"char_offset": char, "token_offset": token, "expected": a, "got": b}


def compare_golden(golden: dict[str, Any], answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Exact-match rate of ``answers`` (same order as the golden answers) and each mismatch's first divergence."""
    rows = []
    for i, (want, got) in enumerate(zip(golden["answers"], answers, strict=True)):
        match = want["text"] == got["text"]
        rows.append({"index": i, "prompt": want["prompt"], "match": match,
                     **({} if match else {"divergence": first_divergence(want, got)})})
    matched = sum(r["match"] for r in rows)
    return {"total": len(rows), "matched": matched, "match_rate": matched / len(rows) if rows else 0.0,
            "mismatches": [r for r in rows if not r["match"]]}
