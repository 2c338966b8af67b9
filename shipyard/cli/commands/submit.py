"""``shipyard submit PIPELINE --host URL``: upload (or version) a pipeline and start a run on KFP."""

from __future__ import annotations

import argparse

from shipyard.run.kfp_client import Kfp, check_params, compile_to_temp, parse_params


def add_kfp_options(p: argparse.ArgumentParser) -> None:
    """The connection options shared by submit, schedule and runs."""
    p.add_argument("--host", help="KFP API URL, e.g. http://localhost:8080 (env KF_PIPELINES_ENDPOINT)")
    p.add_argument("--token", help="bearer token (env KF_PIPELINES_TOKEN)")
    p.add_argument("--cookie", help="session cookie 'name=value', e.g. authservice_session=... (env KF_PIPELINES_COOKIE)")
    p.add_argument("--namespace", help="Kubeflow profile namespace (multi-user KFP)")
    p.add_argument("--insecure", action="store_true", help="do not verify the server's TLS certificate")


def add_pipeline_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("pipeline", metavar="PIPELINE", help="a pipeline name (see `shipyard compile`) or a compiled YAML file")
    p.add_argument("--experiment", default="shipyard", help="KFP experiment (created if missing; default shipyard)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="pipeline parameter (repeatable); JSON values keep their type")
    p.add_argument("--service-account", default="",
                   help="ServiceAccount the run's pods use (default: KFP's, pipeline-runner); the deploy step "
                        "needs Role shipyard-deployer in the target namespace (docs/cluster-contract.md)")


def connect(args: argparse.Namespace) -> Kfp:
    return Kfp(args.host, args.token, args.cookie, args.namespace, verify_ssl=not args.insecure)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="upload a pipeline (or a new version of it) to KFP and start a run")
    add_pipeline_options(p)
    add_kfp_options(p)
    p.add_argument("--run-name", default="", help="display name of the run (default: pipeline-version)")
    p.set_defaults(func=_submit)


def _submit(args: argparse.Namespace) -> int:
    # Everything local first (compile, parameters), so bad input never reaches the host.
    raw = parse_params(args.param)
    package, tmp = compile_to_temp(args.pipeline)
    with tmp:
        params = check_params(package, raw)
        kfp = connect(args)
        result = kfp.submit(package, args.experiment, params, args.run_name, service_account=args.service_account)
    state = "new version" if result["version_created"] else "existing version"
    print(f"pipeline {package.name} ({state} {package.version_name}) run {result['run_id']}")
    print(f"run: {result['url']}")
    return 0
