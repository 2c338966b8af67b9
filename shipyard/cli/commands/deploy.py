"""``shipyard deploy``: render a KServe LLMInferenceService; apply, wait and roll back unless --dry-run.

Like ``kubectl apply`` / ``helm install``, a deploy without ``--dry-run`` applies to the cluster of
the kubeconfig, waits for Ready and prints the result (status, namespace/name, URL) as one line,
or ``-o json|yaml``; the wait's progress lines go to stdout, or to stderr under ``-o`` so that
stdout stays one document. ``--out-file PATH`` also keeps the applied manifest (atomically, mode
0644; put back as it was when the deploy fails). With ``--dry-run`` the rendered manifest goes to
stdout as YAML (default) or ``-o json``, or with ``--out-file PATH`` to that file and the result
line to stdout (see :mod:`shipyard.cli.output`). ``--dry-run=server`` also sends each object to
the API server with ``dryRun=All`` (schema, admission webhooks, RBAC; nothing stored) and prints
what the server answered.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from shipyard.cli.options import add_namespace_option
from shipyard.cli.output import add_out_file_option, add_output_option, emit, render
from shipyard.core.errors import FileError, ShipyardError
from shipyard.core.files import ensure_writable_dir
from shipyard.core.numbers import number, positive_float, positive_int
from shipyard.core.redact import redact


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("deploy", help="render (and apply) a KServe LLMInferenceService with llm-d P/D",
                       description="Render a validated LLMInferenceService, server-side apply it to the kubeconfig's "
                                   "cluster, wait for Ready and roll back on failure (like kubectl apply). --dry-run "
                                   "only renders and prints the manifest; --out-file keeps it in a file.")
    p.add_argument("--name", help="LLMInferenceService name (with --template: default, the template's name)")
    p.add_argument("--model-uri", required=True, help="oci://...@sha256:..., hf://, s3:// or pvc://")
    add_namespace_option(p, "target namespace (default: deploy params, else 'default')")
    p.add_argument("--prefill-replicas", type=number(int, minimum=0, example="2"),
                   help="prefill pods (> 0 selects prefill/decode disaggregation)")
    p.add_argument("--decode-replicas", type=number(int, minimum=0, example="1"), dest="replicas",
                   help="decode (or aggregated) pods")
    p.add_argument("--tensor-parallel", type=positive_int("2"), help="tensor-parallel size (GPUs per model copy)")
    p.add_argument("--gpus", type=positive_int("2"), help="GPUs per pod (default: tensor-parallel x data-local)")
    p.add_argument("--preset", help="a deploy preset from shipyard/serving/kserve/presets (e.g. pd-nixl)")
    p.add_argument("--params-file", help="YAML/JSON file of deploy parameters (the deploy_config object)")
    p.add_argument("--template", help="your own LLMInferenceService (YAML file, or s3://BUCKET/KEY.yaml): shipyard "
                                      "keeps every field and sets the model URI, lineage and missing vLLM sizing")
    p.add_argument("--model-dir", help="model folder whose config.json sizes vLLM through the memory planner")
    p.add_argument("--gpu-memory-gib", type=positive_float("80"), help="memory of one GPU in GiB (for the planner)")
    p.add_argument("--allow-mutable-tag", action="store_true", default=None, help="accept an oci:// tag instead of a digest")
    add_output_option(p, default_help="a one-line result; with --dry-run and no --out-file, the manifest as YAML")
    add_out_file_option(p, "the manifest (YAML; when applying, the applied one)")
    p.add_argument("--dry-run", nargs="?", const="client", choices=("client", "server"), default=None,
                   metavar="client|server", help="client (the default of a bare --dry-run): only render and validate, "
                   "no cluster needed; server: also send each object to the API server with dryRun=All (its schema, "
                   "admission webhooks and RBAC decide; nothing is stored) and print what it answered")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--wait-timeout", type=positive_float("1200"), help="seconds to wait for Ready (default 1200)")
    p.set_defaults(func=_deploy)


def _params(path: str | None) -> dict:
    if not path:
        return {}
    file = Path(path)
    if not file.is_file():
        raise ShipyardError("--params-file", f"{path} does not exist", "give a YAML or JSON file of deploy parameters")
    from shipyard.core.jsonargs import load_mapping_file

    return load_mapping_file(file, "--params-file")  # strict: a key twice, a binary file: one line


def _template(path: str) -> Any:
    """``--template``: an s3:// URI is passed on (read by the deploy step); a file is read here."""
    if path.startswith("s3://"):
        return path
    file = Path(path)
    if not file.is_file():
        raise ShipyardError("--template", f"{path} is not a file", "give your LLMInferenceService YAML file")
    from shipyard.core.jsonargs import read_text

    try:
        return read_text(file, "--template")
    except OSError as err:
        raise ShipyardError("--template", f"cannot read {path}: {err.strerror}", "give a readable YAML file") from None


@contextlib.contextmanager
def _out_file_errors() -> Iterator[None]:
    """The deploy step writes the manifest; a write that fails (disk full) names ``--out-file``."""
    try:
        yield
    except FileError as err:
        raise FileError("--out-file", err.problem, err.fix, err_no=err.errno, filename=err.filename) from None


@contextlib.contextmanager
def _keep_out_file_on_success(out_file: str | None) -> Iterator[None]:
    """``--out-file`` keeps the manifest that was applied: when the deploy fails or is interrupted
    (nothing applied, or rolled back), the file is put back as it was (removed if it was new)."""
    path = Path(out_file) if out_file else None
    before = path.read_bytes() if path is not None and path.is_file() else None
    try:
        yield
    except BaseException:
        if path is not None:
            with contextlib.suppress(OSError):
                if before is None:
                    path.unlink(missing_ok=True)
                elif path.read_bytes() != before:
                    from shipyard.core.files import atomic_write_text

                    atomic_write_text(path, before.decode("utf-8"), field="--out-file")
        raise


def _as_objects(manifest: str) -> Any:
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    return docs[0] if len(docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": docs}


def _server_dry_run(args: argparse.Namespace, params: dict[str, Any]) -> int:
    """``--dry-run=server``: rendered and validated here, then each object server-side applied with
    ``dryRun=All``; the server's answer is the output (YAML, ``-o json|yaml``, or ``--out-file``)."""
    from shipyard.serving.kserve.apply import Kube, api_client, server_dry_run
    from shipyard.steps.deploy import run_deploy

    with tempfile.TemporaryDirectory(prefix="shipyard-deploy-") as scratch:
        manifest = Path(scratch) / "manifest.yaml"
        with contextlib.redirect_stdout(sys.stderr):  # render warnings: stdout carries the answer alone
            result = run_deploy(
                deploy_config=params, manifest_path=str(manifest), dry_run=True, model_dir=args.model_dir,
                name=args.name, model_uri=args.model_uri, namespace=args.namespace,
                prefill_replicas=args.prefill_replicas, replicas=args.replicas, tensor_parallel=args.tensor_parallel,
                gpus=args.gpus, gpu_memory_gib=args.gpu_memory_gib, allow_mutable_tag=args.allow_mutable_tag)
        docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    from shipyard.serving.kserve.config import apply_options

    api_timeout_s = apply_options(params.get("apply"))["api_timeout_s"]  # each API call's read timeout
    kube = Kube(api_client(args.kubeconfig, args.context, timeout_s=api_timeout_s), timeout_s=api_timeout_s,
                setting="apply.api_timeout_s in --params-file")
    try:
        answered = server_dry_run(docs, kube)
    finally:
        kube.close()
    text = render(answered, "yaml")
    if args.out_file:
        from shipyard.cli.output import write_out_file

        write_out_file(args.out_file, text)
        emit({**result, "status": "DryRun (server)", "manifest": args.out_file}, args.output, lambda: (
            f"accepted by the API server (dry run, nothing stored): {', '.join(d['kind'] for d in answered)} "
            f"{result['namespace']}/{result['name']} -> {args.out_file}"))
        return 0
    print(render(_as_objects(text), args.output) if args.output else text, end="")
    return 0


def _deploy(args: argparse.Namespace) -> int:
    from shipyard.models.resolve import refuse_credentials
    from shipyard.steps.deploy import run_deploy

    refuse_credentials(args.model_uri, "--model-uri")
    params = _params(args.params_file)
    if args.template:
        params["template"] = _template(args.template)
    if not args.name and not (params.get("name") or params.get("template")):
        raise ShipyardError("--name", "is required", "give --name NAME (or --template FILE with a metadata.name)")
    if args.preset:
        params["preset"] = args.preset
    apply = params.get("apply")
    if args.wait_timeout is not None and (apply is None or isinstance(apply, dict)):  # else the parser says why
        params["apply"] = {**(apply or {}), "wait_timeout_s": args.wait_timeout}
    to_stdout = args.out_file == "-"  # --out-file - : the manifest goes to stdout
    if to_stdout:
        args.out_file = None
    if args.out_file:
        ensure_writable_dir(Path(args.out_file).absolute().parent, "--out-file")
    if args.dry_run == "server":
        return _server_dry_run(args, params)
    deploy_args = {
        "deploy_config": params, "dry_run": bool(args.dry_run), "model_dir": args.model_dir, "kubeconfig": args.kubeconfig,
        "context": args.context, "name": args.name, "model_uri": args.model_uri, "namespace": args.namespace,
        "prefill_replicas": args.prefill_replicas, "replicas": args.replicas, "tensor_parallel": args.tensor_parallel,
        "gpus": args.gpus, "gpu_memory_gib": args.gpu_memory_gib, "allow_mutable_tag": args.allow_mutable_tag,
    }
    if not args.out_file and (args.dry_run or to_stdout):  # the manifest itself is the output
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout), _out_file_errors():
            run_deploy(manifest_path="-", **deploy_args)
        manifest = stdout.getvalue()
        # the manifest holds no credential (deploy_config refuses them), and what is printed is redacted anyway
        print(redact(render(_as_objects(manifest), args.output) if args.output else manifest), end="")
        return 0
    # applied (or rendered into --out-file): the result is the output; progress goes to stderr under -o
    with tempfile.TemporaryDirectory(prefix="shipyard-deploy-") as scratch:
        with contextlib.redirect_stdout(sys.stderr) if args.output else contextlib.nullcontext(), \
                _out_file_errors(), _keep_out_file_on_success(args.out_file):
            result = run_deploy(manifest_path=args.out_file or str(Path(scratch) / "manifest.yaml"), **deploy_args)
    if not args.out_file:
        result["manifest"] = ""  # nothing kept: a scratch file
    emit(result, args.output, lambda: (
        f"{result['status']}: {', '.join(result['kinds'])} {result['namespace']}/{result['name']} "
        f"({result['mode']})" + (f" -> {args.out_file}" if args.out_file else "")
        + (f" {result['url']}" if result.get("url") else "")))
    return 0
