"""``shipyard submit PIPELINE --host URL``: upload (or version) a pipeline and start a run on KFP.

``PIPELINE`` is a compiled file (``shipyard compile --out compiled/ --cluster-config ...``: it
keeps the settings it was compiled with) or a pipeline name, compiled here through the same
compile path as ``shipyard compile``, with the same ``--cluster-config`` and ``--image-registry``
(a name never silently falls back to the default cluster settings when they were meant).
``--params-file`` and ``--param`` give pipeline parameters (``--param`` wins). ``-o json``
prints the run as JSON; ``--wait`` follows the run's state until it ends and exits by it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shipyard.cli.options import add_namespace_option
from shipyard.cli.output import add_output_option, emit
from shipyard.core.errors import EXIT_FAILED, ShipyardError
from shipyard.run.kfp_client import Kfp, PipelinePackage, check_params, load_pipeline, parse_params

#: KFP v2 run states that end a run (``V2beta1RuntimeState``), and the one that is a success
FINAL_STATES = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")


def add_kfp_options(p: argparse.ArgumentParser) -> None:
    """The connection options shared by submit, schedule, runs and watch --requalify."""
    p.add_argument("--host", help="KFP API URL, e.g. http://localhost:8080 (env KF_PIPELINES_ENDPOINT); each call to "
                   "it ends within SHIPYARD_KFP_TIMEOUT_S seconds in all (default 60)")
    p.add_argument("--token", help="bearer token (env KF_PIPELINES_TOKEN)")
    p.add_argument("--cookie", help="session cookie 'name=value', e.g. authservice_session=... (env KF_PIPELINES_COOKIE)")
    add_namespace_option(p, "Kubeflow profile namespace (multi-user KFP)")
    p.add_argument("--insecure", action="store_true", help="do not verify the server's TLS certificate")


def add_pipeline_options(p: argparse.ArgumentParser) -> None:
    """PIPELINE, how it is compiled, its parameters and where its run goes (submit and schedule)."""
    p.add_argument("pipeline", metavar="PIPELINE",
                   help="a compiled YAML file (from `shipyard compile`, keeps its settings) or a pipeline name "
                        "(compiled now with --cluster-config/--image-registry)")
    p.add_argument("--cluster-config", metavar="FILE",
                   help="with a pipeline name: GPU/node/secret settings YAML, as for `shipyard compile` "
                        "(default pipelines/cluster.yaml)")
    p.add_argument("--image-registry", metavar="REGISTRY",
                   help="with a pipeline name: registry of the runtime images, as for `shipyard compile` "
                        "(default ghcr.io/shipyard-llm)")
    p.add_argument("--experiment", default="shipyard", help="KFP experiment (created if missing; default shipyard)")
    p.add_argument("--params-file", metavar="FILE", help="YAML/JSON mapping of pipeline parameters (--param wins)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="pipeline parameter (repeatable); JSON values keep their type")
    p.add_argument("--service-account", default="",
                   help="ServiceAccount the run's pods use (default: KFP's, pipeline-runner); the deploy step "
                        "needs Role shipyard-deployer in the target namespace (docs/cluster-contract.md)")


def connect(args: argparse.Namespace) -> Kfp:
    return Kfp(args.host, args.token, args.cookie, args.namespace, verify_ssl=not args.insecure)


def _is_file(pipeline: str) -> bool:
    path = Path(pipeline)
    return path.suffix in (".yaml", ".yml", ".json") or path.exists()


def compiled_package(args: argparse.Namespace) -> tuple[PipelinePackage, tempfile.TemporaryDirectory[str]]:
    """The pipeline to upload, in a temporary folder the caller keeps alive: a compiled file as it
    is, or a name compiled through ``shipyard compile``'s path with the user's cluster config and
    image registry."""
    from shipyard.cli.commands.compile import compile_all
    from shipyard.pipelines import PIPELINES

    if _is_file(args.pipeline):
        if args.cluster_config or args.image_registry:
            flag = "--cluster-config" if args.cluster_config else "--image-registry"
            raise ShipyardError(flag, f"{args.pipeline} is already compiled: its cluster settings and images are in "
                                      "the file", f"pass the pipeline name with {flag}, or compile with it first")
    elif args.pipeline not in PIPELINES:
        raise ShipyardError("PIPELINE", f"{args.pipeline!r} is neither a pipeline name nor a file",
                            f"use one of: {', '.join(sorted(PIPELINES))}")
    tmp = tempfile.TemporaryDirectory(prefix="shipyard-pipeline-")
    try:
        if _is_file(args.pipeline):
            return load_pipeline(args.pipeline, tmp.name), tmp
        (path,) = compile_all(tmp.name, [args.pipeline], args.cluster_config, args.image_registry)
        return load_pipeline(str(path), tmp.name), tmp
    except BaseException:
        tmp.cleanup()
        raise


def raw_params(args: argparse.Namespace) -> dict[str, Any]:
    """``--params-file`` < ``--param``, read before anything is compiled (their syntax only)."""
    raw: dict[str, Any] = {}
    if args.params_file:
        from shipyard.run.local import load_params_file

        raw.update(load_params_file(args.params_file))
    raw.update(parse_params(args.param))
    return raw


def pipeline_params(raw: dict[str, Any], package: PipelinePackage) -> dict[str, Any]:
    """:func:`raw_params`, checked and typed for the compiled pipeline."""
    return check_params(package, raw)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "submit", help="upload a pipeline (or a new version of it) to KFP and start a run",
        description="Upload a compiled pipeline (or compile one by name with your --cluster-config and "
                    "--image-registry), create or reuse its version (named after its content hash) and start "
                    "a run. --wait follows the run until it ends and exits 0 only when it SUCCEEDED.",
    )
    add_pipeline_options(p)
    add_kfp_options(p)
    p.add_argument("--run-name", default="", help="display name of the run (default: pipeline-version)")
    p.add_argument("--wait", action="store_true",
                   help="follow the run's state until it ends; exit 0 when it SUCCEEDED, 1 otherwise")
    p.add_argument("--poll-s", type=float, default=10.0, metavar="SECONDS", help="with --wait: seconds between polls (default 10)")
    add_output_option(p, default_help="two lines: the pipeline version and the run URL")
    p.set_defaults(func=_submit)


def wait_for_run(kfp: Kfp, run_id: str, poll_s: float, say: Any) -> str:
    """Poll the run until it reaches a final state; ``say`` gets one line per state change."""
    last = ""
    while True:
        state = str(kfp.call("read the run", kfp.client.get_run, run_id).state or "PENDING")
        if state != last:
            say(f"{time.strftime('%H:%M:%S')}  run {run_id} {state}")
            last = state
        if state in FINAL_STATES:
            return state
        time.sleep(max(0.05, poll_s))


def _submit(args: argparse.Namespace) -> int:
    if args.poll_s <= 0:
        raise ShipyardError("--poll-s", f"{args.poll_s:g} is not a positive number of seconds", "e.g. --poll-s 10")
    # Everything local first (compile, parameters), so bad input never reaches the host.
    raw = raw_params(args)
    package, tmp = compiled_package(args)
    with tmp:
        params = pipeline_params(raw, package)
        kfp = connect(args)
        result = kfp.submit(package, args.experiment, params, args.run_name, service_account=args.service_account)
    record = {"pipeline": package.name, "version": package.version_name, "version_created": result["version_created"],
              "pipeline_id": result["pipeline_id"], "version_id": result["version_id"],
              "experiment_id": result["experiment_id"], "run_id": result["run_id"], "url": result["url"]}
    if args.output is None:
        state = "new version" if result["version_created"] else "existing version"
        print(f"pipeline {package.name} ({state} {package.version_name}) run {result['run_id']}")
        print(f"run: {result['url']}", flush=True)
    if args.wait:
        # with -o json the state lines go to stderr, so stdout stays one JSON document
        stream = sys.stderr if args.output else sys.stdout
        record["state"] = wait_for_run(kfp, result["run_id"], args.poll_s,
                                       lambda line: print(line, file=stream, flush=True))
    if args.output:
        emit(record, args.output)
    if args.wait and record["state"] != "SUCCEEDED":
        if args.output is None:
            print(f"run {result['run_id']} ended {record['state']}: {result['url']}", file=sys.stderr)
        return EXIT_FAILED
    return 0
