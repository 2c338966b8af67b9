"""The pipeline parameters, typed once.

Each :class:`Param` gives a parameter's type, cluster default, description and checker. From
this one list come the pipeline functions' signatures and KFP descriptions
(:func:`pipeline_function`), the README's parameter table (:func:`readme_table`, kept in sync
by ``tests/test_params.py``) and the pre-flight checks that run before anything starts
(``shipyard.components.preflight``).

No ``from __future__ import annotations``: KFP reads the generated signature's annotations.
"""

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shipyard.core.errors import ShipyardError, refuse_credentials
from shipyard.core.files import package_dir
from shipyard.core.k8s_names import DNS_1123_LABEL, check_namespace

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


#: a parameter's check: ``(name, value, params)``, raising the first problem as one ShipyardError line
Checker = Callable[[str, Any, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Param:
    """One pipeline parameter: name, Python type, cluster default (or REQUIRED), description, and
    its value check (``check``: run by the pre-flight on the typed value, :mod:`shipyard.params.checks`;
    none: the value is only typed).

    ``credential_fix``: for a URI-like parameter, where credentials go instead of the value; the
    pre-flight refuses a value carrying them before its check, never echoing them (a parameter is
    shown in the KFP UI, the MLflow run and every log that prints it). Empty: not looked for."""

    name: str
    type: type
    default: Any
    help: str
    json: bool = False  # a JSON-object parameter (checked by pre-flight, YAML allowed on the CLI)
    check: Checker | None = None
    credential_fix: str = ""


# --------------------------------------------------------------------------- each parameter's check
# In the order of the declarations below; each declaration names its check (``check=``). Libraries
# are imported inside a check: the pipelines import this module to build their signatures.

#: the model URI the deploy config is checked with before there is a model (the pre-flight, ``shipyard check``)
PLACEHOLDER_OCI = "oci://preflight.invalid/model@sha256:" + "0" * 64
#: upper bounds of the counts (far above any real run, far below what overflows a step)
_MAX_INT = {"num_calibration_samples": 10_000_000, "max_seq_length": 1_048_576, "seed": 2**32 - 1}
_OCI_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*\Z")


def _name(name: str, value: str, rule: re.Pattern[str] | None, what: str, example: str) -> None:
    """A name that must not be empty (or only spaces) and, with ``rule``, must match it."""
    if not value.strip():
        raise ShipyardError(name, "is empty", f"give {what}, e.g. {name}={example}")
    if rule is not None and not rule.match(value):
        raise ShipyardError(name, f"{value!r} is not {what}", f"write e.g. {name}={example}")


def _check_recipes(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """Recipes: at least one, each loadable, none named twice."""
    from shipyard.compression.recipes import load_recipe

    if not value:
        raise ShipyardError("recipes", "is empty", "name at least one recipe, e.g. [w8a8-int8]")
    for i, recipe in enumerate(value):
        load_recipe(str(recipe), f"recipes[{i}]")
    if len(set(map(str, value))) != len(value):
        raise ShipyardError("recipes", "names the same recipe twice", "list each recipe once")


def _check_selection(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The champion selection config."""
    from shipyard.gates.config import selection_config

    selection_config(value)


def _check_plain_name(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """A free-form name (the MLflow experiment, the dataset's text column): not empty, no surrounding
    spaces, no control characters."""
    _name(name, value, None, "a name", BY_NAME[name].default or "text")
    if value != value.strip() or any(c in value for c in "\n\r\t"):
        raise ShipyardError(name, f"{value!r} has surrounding spaces or control characters", "write the name alone")


def _check_bounded(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """Counts and seeds: positive (a seed may be 0) and at most :data:`_MAX_INT`."""
    low = 0 if name == "seed" else 1
    if not low <= value <= _MAX_INT[name]:
        raise ShipyardError(name, f"must be between {low} and {_MAX_INT[name]}, got {value}",
                            f"write e.g. {name}={BY_NAME[name].default}")


#: ``eval_backend`` -> the lm-eval backend the step that evaluates runs (vllm: the measure step's server)
_LM_EVAL_BACKEND = {"vllm": "openai", "hf": "hf"}


def _check_eval_backend(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The evaluation backend: vllm or hf."""
    if value not in _LM_EVAL_BACKEND:
        raise ShipyardError(name, f"unknown backend {value!r}", "use vllm or hf")


def _check_eval_config(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The eval config, with the backend ``eval_backend`` implies (given, or its declared default:
    the CLI checks only the parameters given)."""
    from shipyard.evaluation.config import parse_eval_config

    eval_backend = params.get("eval_backend", BY_NAME["eval_backend"].default)
    _check_eval_backend("eval_backend", eval_backend, params)
    parse_eval_config(value).with_backend(_LM_EVAL_BACKEND[eval_backend])


def _check_accuracy_thresholds(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The accuracy gate's thresholds."""
    from shipyard.gates.config import accuracy_config

    accuracy_config(value, name)


def _check_lora_adapters(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The LoRA adapters: parseable, and none a local folder unless the run is a dry run."""
    from shipyard.models.adapters import parse_adapters

    for adapter in parse_adapters(value):
        if "://" not in adapter.uri and params.get("dry_run", BY_NAME["dry_run"].default) is False:
            raise ShipyardError(f"lora_adapters.{adapter.name}", f"{adapter.uri} is a local folder: the gated "
                                "champion is deployed with its adapters and KServe cannot load a local folder",
                                "publish the adapter to hf://, s3:// or a pvc://, or set dry_run=true")


def _check_eval_sets(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The user's eval sets: valid, a rubric set only with a server, no leak into the calibration data."""
    from shipyard.evaluation.eval_sets import check_eval_sets
    from shipyard.evaluation.leakage import leak_check

    config, readable = check_eval_sets(value)
    rubric = [s.name for s in config.sets if s.form == "rubric"]
    if rubric and params.get("eval_backend", BY_NAME["eval_backend"].default) == "hf":
        raise ShipyardError(f"eval_sets.{rubric[0]}", "is a rubric set, whose answers come from the served model, "
                            "but eval_backend is hf (no server)", "set eval_backend=vllm, or drop the rubric set")
    if readable:  # a leak over max_leak_share is refused here; s3 calibration data is checked by the step
        leak_check(readable, str(params.get("calibration_dataset") or ""),
                   text_column=str(params.get("text_column") or "text"), max_leak_share=config.max_leak_share,
                   remote=False)


def _check_benchmark_config(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The benchmark config."""
    from shipyard.benchmarking.guidellm import parse_benchmark_config

    parse_benchmark_config(value)


def _check_slo(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The SLO config."""
    from shipyard.gates.config import slo_config

    slo_config(value, name)


def _check_safety(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The safety scan's config."""
    from shipyard.evaluation.garak_scan import safety_config

    safety_config(value, name)


def _check_tuning(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The serving-configuration search."""
    from shipyard.benchmarking.tuning import parse_tuning

    parse_tuning(value)


def _check_repository(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The modelcar's registry repository name."""
    _name(name, value, _OCI_REPOSITORY, "a registry repository name (lowercase letters, digits, '.', '_', '-', "
          "'/')", "team/model")


def _check_package_mode(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The package mode: modelcar or oras."""
    if value not in ("modelcar", "oras"):
        raise ShipyardError(name, f"unknown mode {value!r}", "use modelcar or oras")


def _check_deploy_name(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The deployed service's name: a Kubernetes object name."""
    _name(name, value, DNS_1123_LABEL, "a Kubernetes object name (lowercase letters, digits and '-', at most "
          "63, starting with a letter or digit)", "shipyard-llm")


def _check_namespace(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The Kubernetes namespace (:func:`~shipyard.core.k8s_names.check_namespace`)."""
    check_namespace(value)


def _check_deploy_config(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The deploy config, by the deploy step's own parser: render parameters, apply, verify and rollout."""
    from shipyard.params.deploy import parse_deploy_config

    parse_deploy_config(value, name=params.get("deploy_name") or "shipyard-llm", model_uri=PLACEHOLDER_OCI)


def _check_tracking_uri(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The MLflow tracking URI (empty: none): http(s), file or an absolute path."""
    if value and not re.match(r"^(https?|file)://", value) and not value.startswith("/"):
        raise ShipyardError(name, f"{value!r} is not an MLflow tracking URI", "use http(s)://host:port or leave empty")


def _check_registered_model_name(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The registered model's name: short, no '/', no surrounding spaces."""
    if not value.strip() or "/" in value or len(value) > 256 or value != value.strip():
        raise ShipyardError(name, f"{value!r} is not a registered model name", "use a short name like 'llama-3-8b-w4a16'")


def _check_champion_tolerance(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The champion tolerance: not negative."""
    if value < 0:
        raise ShipyardError(name, f"must not be negative, got {value}", "use 0.0 (not worse) or e.g. 0.01")


def _check_served_model_uri(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The served modelcar (empty: MLflow's production version): a pinned ``oci://`` URI, no credentials."""
    if value:
        from shipyard.oci.reference import require_pinned

        refuse_credentials(value, name, "drop them; registry credentials go in the Secret shipyard-registry")
        if not value.startswith("oci://"):
            raise ShipyardError(name, f"{value[:100]!r} is not a modelcar", "give the package step's "
                                "oci://registry/repo@sha256:... URI, or leave it empty for MLflow's production version")
        require_pinned(value, name, how_to_allow="give the digest the package step printed")


def _check_prometheus_url(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The Prometheus URL: http(s) with a host, no credentials in it."""
    from shipyard.serving.prometheus import PrometheusAPI

    PrometheusAPI(value, field=name)


def _check_watch_config(name: str, value: Any, params: Mapping[str, Any]) -> None:
    """The watch config, for the service ``deploy_name`` names."""
    from shipyard.serving.watch import parse_watch_config

    parse_watch_config(value, str(params.get("deploy_name") or BY_NAME["deploy_name"].default))


P = Param
_ALL: list[Param] = [
    P("candidate_uri", str, REQUIRED,
      "The packaged candidate, pinned by digest: oci://registry/repo@sha256:... (or an s3:// model folder)."),
    P("model_uri", str, "hf://HuggingFaceTB/SmolLM2-135M-Instruct",
      "Base model: hf://org/name[@rev], s3://bucket/prefix, oci://registry/repo@sha256:..., pvc://claim/path, "
      "or embedded://smollm2-135m-instruct."),
    P("recipes", list, ["w8a8-int8"],
      "Compression recipes to try, one candidate each, run in parallel: presets w8a8-int8, fp8-dynamic, w4a16, "
      "or llmcompressor recipe YAML text. A single name is a one-item list.", check=_check_recipes),
    P("selection", str, "throughput",
      "How the champion is chosen among the base (always a candidate) and the candidates that pass their gates: "
      "throughput (output tok/s at the "
      "highest load meeting the SLO), size, recovery (best worst-case accuracy recovery) or kv_cache (most "
      'KV-cache tokens, memory planner); or JSON {"objective": ..., "then": [...]} for the tie-breakers.', json=True,
      check=_check_selection),
    P("calibration_dataset", str, "",
      "Calibration data: hub dataset name[:split] (loaded within `SHIPYARD_HF_TIMEOUT_S`), "
      "s3://bucket/key.jsonl, or empty for shipyard's built-in text.",
      credential_fix="drop them; S3 credentials go in the Secret shipyard-s3 (AWS_ACCESS_KEY_ID, "
                     "AWS_SECRET_ACCESS_KEY), the Hub's in HF_TOKEN"),
    P("text_column", str, "text", "Column of the calibration data that holds the text.",
      check=_check_plain_name),
    P("num_calibration_samples", int, 512, "Calibration samples for GPTQ/SmoothQuant (512 is usual).",
      check=_check_bounded),
    P("max_seq_length", int, 2048, "Calibration samples are truncated to this many tokens.",
      check=_check_bounded),
    P("seed", int, 42, "Random seed for calibration sampling.", check=_check_bounded),
    P("eval_backend", str, "vllm",
      "lm-eval backend for base and candidates: vllm (one vLLM server per model serves both lm-eval and the "
      "guidellm benchmark) or hf (transformers in-process, then a vLLM server for the benchmark).",
      check=_check_eval_backend),
    P("eval_config", str, CLUSTER_EVAL,
      "lm-eval config as JSON (tasks, num_fewshot, limit, batch_size, apply_chat_template, seed, gen_kwargs, "
      "task_dir). Base and candidate use the same one; the base result is cached per config.", json=True,
      check=_check_eval_config),
    P("accuracy_thresholds", str, '{"max_loss": 0.02}',
      "Accuracy gate as JSON. Default rule non-inferiority: per metric, the loss against the base on the same "
      "questions must be shown under the margin max_loss (absolute, default 0.02) or max_relative_loss (share of "
      "the base) at alpha (0.05, one-sided) with Holm's correction (multiple_comparisons); a metric the sample "
      "cannot decide is inconclusive and fails unless allow_inconclusive; metrics without per-sample values use "
      'min_recovery (0.99). rule "recovery": recovery >= min_recovery, optional stderr_k. Per-metric overrides '
      'under "metrics".', json=True, check=_check_accuracy_thresholds),
    P("lora_adapters", str, "",
      'LoRA adapters to evaluate and gate with every model, and to serve with the champion: JSON {"name": "URI"} '
      'or [{"name": ..., "uri": ...}], URIs hf://, s3://, pvc:// or a local folder (not oci://: KServe does not '
      "load OCI adapters yet, kserve#6094). Each adapter is evaluated (hf backend) on the base and on each "
      "candidate with eval_config and must pass accuracy_thresholds; empty = none.", json=True,
      check=_check_lora_adapters),
    P("eval_sets", str, "",
      "Your own eval sets, judged base against candidate: JSON [{name, form (mcq, qa, chat, rag, rubric), uri (a "
      ".jsonl path, s3://bucket/key.jsonl, pvc://claim/path or builtin://<file>), margin, match (exact, contains, "
      'regex: qa/chat/rag), max_rows, sha256}] or {"sets": [...], "judge": {model_uri, labels_uri, labels_sha256, '
      'min_kappa, and the caps on its calls: max_tokens (per verdict, 16), ragas_max_tokens (per Ragas call, 512), '
      'concurrency (requests in flight, 4), max_rows (rows judged per set; default all)}, "max_leak_share": 0.05}. Each set is pinned by the sha256 of its bytes before it is read (a '
      "sha256 given must match). Rows are checked against the form's schema, deduplicated and checked for overlap "
      "with the calibration data; each set is gated by the paired non-inferiority rule (Holm across sets); rubric "
      "sets are judged pairwise, and with a judge rag sets are also scored by Ragas (faithfulness, answer "
      "correctness); both gate only with a calibrated judge. Empty = none (see the README's 'Your own eval "
      "sets').", json=True, check=_check_eval_sets,
      credential_fix="drop them; S3 credentials go in the Secret shipyard-s3 (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"),
    P("benchmark_config", str, CLUSTER_BENCHMARK,
      "guidellm load as JSON: profile (synchronous, concurrent, constant, poisson, sweep), loads, prompt_tokens, "
      "output_tokens, max_requests, max_seconds, warmup_requests, vllm_args, workload (your recorded traffic, "
      "replayed after the load levels with its fidelity checked: a trace, a fingerprint, or {\"local\": true}, "
      "the trace shipped with shipyard; time_scale: N x its rate; see the README's 'Your traffic').", json=True,
      check=_check_benchmark_config),
    P("slo", str, CLUSTER_SLO,
      "SLO gate as JSON: ttft_p99_ms, itl_p99_ms, min_output_tokens_per_s, max_error_rate, min_goodput, require "
      "(base, all, any or a load level), error_budget (the share of requests that may miss the SLO, 0.01 for p99: "
      "the deployed service's burn-rate alerts fire at 14.4x and 6x of it), judge_replay (default true: when the "
      "benchmark replayed your recorded workload, a replay missing the SLO fails the gate; false: reported only).",
      json=True, check=_check_slo),
    P("safety", str, CLUSTER_SAFETY,
      "Safety gate as JSON: garak probes (promptinject.*, dan.*, encoding.* that run offline), max_prompts per "
      "probe, parallel attempts, max_tokens, tolerance (how much higher the candidate's attack success rate may be "
      "than the base's, per probe family, judged on the 95% interval of the difference: pass, FAIL or inconclusive), "
      "family_tolerance, min_attempts (fewer scored attacks per family and model warn; 30), allow_inconclusive "
      "(false: inconclusive fails), require (false: report only). No probes: off.",
      json=True, check=_check_safety),
    P("tuning", str, "",
      'Serving-configuration search per model (empty = off): a preset ("local": 2 points on a CPU, "cluster": 6 of '
      "12 points for an 8B model) or JSON {space: {max_num_seqs, max_num_batched_tokens, enable_prefix_caching, "
      "kv_cache_dtype, gpu_memory_utilization, tensor_parallel, vllm_args}, strategy: grid|budgeted, max_points, "
      "max_seconds}. Each point is one vLLM server and one benchmark; the best point (output tok/s at the highest "
      "load meeting the SLO) is what the gates compare and what deploy serves.", json=False,
      check=_check_tuning),
    P("registry", str, "",
      "OCI registry to push the modelcar to (host[:port]); empty writes an OCI layout into the pipeline root instead."),
    P("repository", str, "shipyard/models", "Repository in the registry.", check=_check_repository),
    P("package_mode", str, "modelcar",
      "modelcar (an image KServe mounts) or oras (the model folder as an OCI artifact).",
      check=_check_package_mode),
    P("modelcar_base_image", str, "",
      "Base of the modelcar (needs sh, ln, sleep): a registry reference or OCI layout; empty builds one from busybox.",
      credential_fix="drop them; registry credentials go in the Secret shipyard-registry (locally "
                     "REGISTRY_AUTH_FILE or ~/.docker/config.json)"),
    P("insecure_registry", bool, False, "Skip TLS verification for the registry (never in production)."),
    P("deploy_name", str, "shipyard-llm", "Name of the LLMInferenceService.", check=_check_deploy_name),
    P("namespace", str, "shipyard",
      "Namespace to deploy into (the deploy ServiceAccount needs the shipyard-deployer Role there).",
      check=_check_namespace),
    P("deploy_config", str, CLUSTER_DEPLOY,
      "Deployment as JSON: preset (aggregated, pd-nixl, tp4-h100, ...), replicas, prefill_replicas, "
      "tensor_parallel, gpu_memory_gib, router, scaling ... (see components/deploy/README.md).", json=True,
      check=_check_deploy_config),
    P("dry_run", bool, False, "Render and validate the LLMInferenceService without applying it."),
    P("tracking_uri", str, "",
      "MLflow tracking server URL; empty uses the KFP MLflow plugin, MLFLOW_TRACKING_URI, or a local file store.",
      check=_check_tracking_uri,
      credential_fix="drop them; MLflow's credentials go in the Secret shipyard-mlflow (MLFLOW_TRACKING_TOKEN)"),
    P("experiment", str, "shipyard", "MLflow experiment.", check=_check_plain_name),
    P("registered_model_name", str, "shipyard-llm",
      "MLflow registered model that gets one version for the champion of each run.",
      check=_check_registered_model_name),
    P("champion_tolerance", float, 0.0,
      "How much worse than the current production version an accuracy metric may be (0 = not worse).",
      check=_check_champion_tolerance),
    P("served_model_uri", str, "",
      "The modelcar production serves, oci://registry/repo@sha256:... (its signed SLO evidence is the envelope "
      "it was qualified on); empty: the 'production' version of registered_model_name in MLflow.",
      check=_check_served_model_uri),
    P("prometheus_url", str, REQUIRED,
      "The Prometheus API base URL that scrapes the vLLM pods, e.g. http://prometheus-operated.monitoring:9090.",
      check=_check_prometheus_url),
    P("watch_config", str, '{"window": "1h"}',
      "Drift watch as JSON: window (30m, 2h: how far back to look), tolerance per dimension (relative change "
      'before it counts as drift; defaults {"input_length": 0.25, "output_length": 0.25, "load": 0.0, '
      '"ttft": 0.5, "capacity": 0.0}; prefix_cache: a drop in points of hit rate below the replay\'s, default 0.1; '
      "input_distribution, output_distribution: the widest gap in the share of requests above an edge of vLLM's "
      "length histograms, default 0.1), "
      'selector (more PromQL label matchers, e.g. namespace=\\"shipyard\\"), model_name (vLLM\'s '
      "model_name label, the served model name; default deploy_name).", json=True, check=_check_watch_config),
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
