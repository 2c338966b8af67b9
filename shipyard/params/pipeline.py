"""The pipeline parameters, typed once.

Each :class:`Param` gives a parameter's type, cluster default, description and checker. From
this one list come the pipeline functions' signatures and KFP descriptions
(:func:`pipeline_function`), the README's parameter table (:func:`readme_table`, kept in sync
by ``tests/test_params.py``) and the pre-flight checks that run before anything starts
(``shipyard.components.preflight``).

No ``from __future__ import annotations``: KFP reads the generated signature's annotations.
"""

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shipyard.core.files import package_dir

REQUIRED = inspect.Parameter.empty

CLUSTER_EVAL = '{"tasks": ["arc_challenge", "hellaswag", "winogrande"], "limit": 1000, "batch_size": "auto"}'
CLUSTER_BENCHMARK = (
    '{"profile": "concurrent", "loads": [1, 8, 32, 64], "prompt_tokens": 512, "output_tokens": 256, '
    '"max_requests": 500, "max_seconds": 180, "warmup_requests": 10}'
)
CLUSTER_SLO = '{"ttft_p99_ms": 1000, "itl_p99_ms": 60, "max_error_rate": 0.01, "require": "base"}'
# Two probes per family, 128 prompts each: 256 scored attacks per family and model, enough for the
# 95% interval of the ASR difference to resolve a 0.1 tolerance at any ASR (a 0.05 one only near
# ASR 0). A dan.* probe is a single prompt: one attack, never evidence on its own.
CLUSTER_SAFETY = (
    '{"probes": ["promptinject.HijackHateHumans", "promptinject.HijackKillHumans", "encoding.InjectBase64", '
    '"encoding.InjectHex"], "max_prompts": 128, "parallel": 8, "tolerance": 0.1, "require": true}'
)
CLUSTER_DEPLOY = '{"preset": "pd-nixl", "gpu_memory_gib": 80}'


@dataclass(frozen=True)
class Param:
    """One pipeline parameter: name, Python type, cluster default (or REQUIRED), description."""

    name: str
    type: type
    default: Any
    help: str
    json: bool = False  # a JSON-object parameter (checked by pre-flight, YAML allowed on the CLI)


P = Param
_ALL: list[Param] = [
    P("candidate_uri", str, REQUIRED,
      "The packaged candidate, pinned by digest: oci://registry/repo@sha256:... (or an s3:// model folder)."),
    P("model_uri", str, "hf://HuggingFaceTB/SmolLM2-135M-Instruct",
      "Base model: hf://org/name[@rev], s3://bucket/prefix, oci://registry/repo@sha256:..., pvc://claim/path, "
      "or embedded://smollm2-135m-instruct."),
    P("recipes", list, ["w8a8-int8"],
      "Compression recipes to try, one candidate each, run in parallel: presets w8a8-int8, fp8-dynamic, w4a16, "
      "or llmcompressor recipe YAML text. A single name is a one-item list."),
    P("selection", str, "throughput",
      "How the champion is chosen among the base (always a candidate) and the candidates that pass their gates: "
      "throughput (output tok/s at the "
      "highest load meeting the SLO), size, recovery (best worst-case accuracy recovery) or kv_cache (most "
      'KV-cache tokens, memory planner); or JSON {"objective": ..., "then": [...]} for the tie-breakers.', json=True),
    P("calibration_dataset", str, "",
      "Calibration data: hub dataset name[:split], s3://bucket/key.jsonl, or empty for shipyard's built-in text."),
    P("text_column", str, "text", "Column of the calibration data that holds the text."),
    P("num_calibration_samples", int, 512, "Calibration samples for GPTQ/SmoothQuant (512 is usual)."),
    P("max_seq_length", int, 2048, "Calibration samples are truncated to this many tokens."),
    P("seed", int, 42, "Random seed for calibration sampling."),
    P("eval_backend", str, "vllm",
      "lm-eval backend for base and candidates: vllm (one vLLM server per model serves both lm-eval and the "
      "guidellm benchmark) or hf (transformers in-process, then a vLLM server for the benchmark)."),
    P("eval_config", str, CLUSTER_EVAL,
      "lm-eval config as JSON (tasks, num_fewshot, limit, batch_size, apply_chat_template, seed, gen_kwargs, "
      "task_dir). Base and candidate use the same one; the base result is cached per config.", json=True),
    P("accuracy_thresholds", str, '{"max_loss": 0.02}',
      "Accuracy gate as JSON. Default rule non-inferiority: per metric, the loss against the base on the same "
      "questions must be shown under the margin max_loss (absolute, default 0.02) or max_relative_loss (share of "
      "the base) at alpha (0.05, one-sided) with Holm's correction (multiple_comparisons); a metric the sample "
      "cannot decide is inconclusive and fails unless allow_inconclusive; metrics without per-sample values use "
      'min_recovery (0.99). rule "recovery": recovery >= min_recovery, optional stderr_k. Per-metric overrides '
      'under "metrics".', json=True),
    P("lora_adapters", str, "",
      'LoRA adapters to evaluate and gate with every model, and to serve with the champion: JSON {"name": "URI"} '
      'or [{"name": ..., "uri": ...}], URIs hf://, s3://, pvc:// or a local folder (not oci://: KServe does not '
      "load OCI adapters yet, kserve#6094). Each adapter is evaluated (hf backend) on the base and on each "
      "candidate with eval_config and must pass accuracy_thresholds; empty = none.", json=True),
    P("eval_sets", str, "",
      "Your own eval sets, judged base against candidate: JSON [{name, form (mcq, qa, chat, rag, rubric), uri (a "
      ".jsonl path, s3://bucket/key.jsonl, pvc://claim/path or builtin://<file>), margin, match (exact, contains, "
      'regex: qa/chat/rag), max_rows, sha256}] or {"sets": [...], "judge": {model_uri, labels_uri, labels_sha256, '
      'min_kappa}, "max_leak_share": 0.05}. Each set is pinned by the sha256 of its bytes before it is read (a '
      "sha256 given must match). Rows are checked against the form's schema, deduplicated and checked for overlap "
      "with the calibration data; each set is gated by the paired non-inferiority rule (Holm across sets); rubric "
      "sets are judged pairwise and gate only with a calibrated judge. Empty = none (see the README's 'Your own "
      "eval sets').", json=True),
    P("benchmark_config", str, CLUSTER_BENCHMARK,
      "guidellm load as JSON: profile (synchronous, concurrent, constant, poisson, sweep), loads, prompt_tokens, "
      "output_tokens, max_requests, max_seconds, warmup_requests, vllm_args.", json=True),
    P("slo", str, CLUSTER_SLO,
      "SLO gate as JSON: ttft_p99_ms, itl_p99_ms, min_output_tokens_per_s, max_error_rate, min_goodput, require "
      "(base, all, any or a load level), error_budget (the share of requests that may miss the SLO, 0.01 for p99: "
      "the deployed service's burn-rate alerts fire at 14.4x and 6x of it), judge_replay (default true: when the "
      "benchmark replayed your recorded workload, a replay missing the SLO fails the gate; false: reported only).",
      json=True),
    P("safety", str, CLUSTER_SAFETY,
      "Safety gate as JSON: garak probes (promptinject.*, dan.*, encoding.* that run offline), max_prompts per "
      "probe, parallel attempts, max_tokens, tolerance (how much higher the candidate's attack success rate may be "
      "than the base's, per probe family, judged on the 95% interval of the difference: pass, FAIL or inconclusive), "
      "family_tolerance, min_attempts (fewer scored attacks per family and model warn; 30), allow_inconclusive "
      "(false: inconclusive fails), require (false: report only). No probes: off.",
      json=True),
    P("tuning", str, "",
      'Serving-configuration search per model (empty = off): a preset ("local": 2 points on a CPU, "cluster": 6 of '
      "12 points for an 8B model) or JSON {space: {max_num_seqs, max_num_batched_tokens, enable_prefix_caching, "
      "kv_cache_dtype, gpu_memory_utilization, tensor_parallel, vllm_args}, strategy: grid|budgeted, max_points, "
      "max_seconds}. Each point is one vLLM server and one benchmark; the best point (output tok/s at the highest "
      "load meeting the SLO) is what the gates compare and what deploy serves.", json=False),
    P("registry", str, "",
      "OCI registry to push the modelcar to (host[:port]); empty writes an OCI layout into the pipeline root instead."),
    P("repository", str, "shipyard/models", "Repository in the registry."),
    P("package_mode", str, "modelcar",
      "modelcar (an image KServe mounts) or oras (the model folder as an OCI artifact)."),
    P("modelcar_base_image", str, "",
      "Base of the modelcar (needs sh, ln, sleep): a registry reference or OCI layout; empty builds one from busybox."),
    P("insecure_registry", bool, False, "Skip TLS verification for the registry (never in production)."),
    P("deploy_name", str, "shipyard-llm", "Name of the LLMInferenceService."),
    P("namespace", str, "shipyard",
      "Namespace to deploy into (the deploy ServiceAccount needs the shipyard-deployer Role there)."),
    P("deploy_config", str, CLUSTER_DEPLOY,
      "Deployment as JSON: preset (aggregated, pd-nixl, tp4-h100, ...), replicas, prefill_replicas, "
      "tensor_parallel, gpu_memory_gib, router, scaling ... (see components/deploy/README.md).", json=True),
    P("dry_run", bool, False, "Render and validate the LLMInferenceService without applying it."),
    P("tracking_uri", str, "",
      "MLflow tracking server URL; empty uses the KFP MLflow plugin, MLFLOW_TRACKING_URI, or a local file store."),
    P("experiment", str, "shipyard", "MLflow experiment."),
    P("registered_model_name", str, "shipyard-llm",
      "MLflow registered model that gets one version for the champion of each run."),
    P("champion_tolerance", float, 0.0,
      "How much worse than the current production version an accuracy metric may be (0 = not worse)."),
    P("served_model_uri", str, "",
      "The modelcar production serves, oci://registry/repo@sha256:... (its signed SLO evidence is the envelope "
      "it was qualified on); empty: the 'production' version of registered_model_name in MLflow."),
    P("prometheus_url", str, REQUIRED,
      "The Prometheus API base URL that scrapes the vLLM pods, e.g. http://prometheus-operated.monitoring:9090."),
    P("watch_config", str, '{"window": "1h"}',
      "Drift watch as JSON: window (30m, 2h: how far back to look), tolerance per dimension (relative change "
      'before it counts as drift; defaults {"input_length": 0.25, "output_length": 0.25, "load": 0.0, '
      '"ttft": 0.5}), selector (more PromQL label matchers, e.g. namespace=\\"shipyard\\"), model_name (vLLM\'s '
      "model_name label, the served model name; default deploy_name).", json=True),
]
BY_NAME: dict[str, Param] = {p.name: p for p in _ALL}

#: the watch pipeline's own parameters
_WATCH_ONLY = ("served_model_uri", "prometheus_url", "watch_config")
_OPTIMIZE = [p.name for p in _ALL if p.name not in ("candidate_uri", *_WATCH_ONLY)]
_PROMOTE = ["candidate_uri", "model_uri", "eval_backend", "eval_config", "accuracy_thresholds", "benchmark_config",
            "slo", "safety", "tuning", "deploy_name", "namespace", "deploy_config", "dry_run", "tracking_uri", "experiment",
            "registered_model_name", "champion_tolerance"]

#: pipeline name -> its parameters, in signature order
PIPELINE_PARAMS: dict[str, list[Param]] = {
    "optimize-and-deploy": [BY_NAME[n] for n in _OPTIMIZE],
    "requantize": [BY_NAME[n] for n in _OPTIMIZE],
    "promote": [BY_NAME[n] for n in _PROMOTE],
    "watch": [BY_NAME[n] for n in [*_WATCH_ONLY, "deploy_name", "registered_model_name", "tracking_uri", "experiment"]],
}


def params_for(pipeline: str) -> list[Param]:
    """The parameters of ``pipeline``."""
    return PIPELINE_PARAMS[pipeline]


def param_specs_for(pipeline: str) -> dict[str, Any]:
    """``pipeline``'s parameters as :class:`shipyard.params.specs.ParamSpec` (for ``coerce_params``),
    without building the pipeline."""
    from shipyard.params.specs import ParamSpec

    return {p.name: ParamSpec(p.name, p.type.__name__, p.default is REQUIRED, None if p.default is REQUIRED else p.default)
            for p in params_for(pipeline)}


def signature(params: list[Param]) -> inspect.Signature:
    """The pipeline function's signature (required parameters first)."""
    ordered = [p for p in params if p.default is REQUIRED] + [p for p in params if p.default is not REQUIRED]
    return inspect.Signature([
        inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.type)
        for p in ordered
    ])


def docstring(summary: str, params: list[Param]) -> str:
    """A Google-style docstring KFP reads the parameter descriptions from."""
    lines = [summary, "", "Args:"] + [f"    {p.name}: {p.help}" for p in params]
    return "\n".join(lines) + "\n"


def pipeline_function(name: str, summary: str, build: Callable[[dict[str, Any]], None]) -> Callable[..., None]:
    """A pipeline function for ``name`` whose signature and docstring come from :data:`PIPELINE_PARAMS`;
    calling it (KFP does, with one channel per parameter) calls ``build(params)``."""
    sig = signature(params_for(name))

    def pipeline(*args: Any, **kwargs: Any) -> None:
        build(dict(sig.bind(*args, **kwargs).arguments))

    pipeline.__signature__ = sig  # type: ignore[attr-defined]
    pipeline.__doc__ = docstring(summary, params_for(name))
    pipeline.__name__ = pipeline.__qualname__ = name.replace("-", "_")
    return pipeline


def _cell(value: Any) -> str:
    if value is REQUIRED:
        return "required"
    text = repr(value) if not isinstance(value, str) else f"`{value}`"  # whole: a cut default cannot be copied
    if value == "":
        return '`""`'
    return text if isinstance(value, str) else f"`{text}`"


def readme_table(pipeline: str, local: dict[str, Any]) -> str:
    """The README's Markdown table of ``pipeline``'s parameters: cluster default, local default, meaning."""
    lines = ["| parameter | cluster default | local default | meaning |", "|---|---|---|---|"]
    for p in params_for(pipeline):
        local_cell = _cell(local[p.name]) if p.name in local and local[p.name] != p.default else "same"
        lines.append(f"| `{p.name}` | {_cell(p.default)} | {local_cell} | {p.help} |")
    return "\n".join(lines)


BEGIN = "<!-- parameters:{name} (generated by `python -m shipyard.params.pipeline --write README.md`) -->"
END = "<!-- /parameters:{name} -->"


def local_defaults() -> dict[str, Any]:
    """The local overrides of ``shipyard run --local`` (pipelines/local-params.yaml)."""

    import yaml

    return yaml.safe_load((package_dir("shipyard.pipelines") / "local-params.yaml").read_text()) or {}


def render_readme(text: str, pipelines: tuple[str, ...] = ("optimize-and-deploy", "promote", "watch")) -> str:
    """``text`` with every generated parameter table replaced by the current one."""
    local = local_defaults()
    for name in pipelines:
        begin, end = BEGIN.format(name=name), END.format(name=name)
        if begin not in text or end not in text:
            continue
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{readme_table(name, local)}\n{end}{tail}"
    return text


if __name__ == "__main__":
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description="Print or rewrite the README's parameter tables.")
    parser.add_argument("--write", metavar="README", help="rewrite the generated tables in this file")
    args = parser.parse_args()
    if args.write:
        readme = Path(args.write)
        readme.write_text(render_readme(readme.read_text()))
    else:
        print(readme_table("optimize-and-deploy", local_defaults()))
