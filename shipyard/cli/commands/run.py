"""``shipyard run --local [PIPELINE]``: run a pipeline on this machine with kfp.local."""

from __future__ import annotations

import argparse

from shipyard.core.errors import ShipyardError
from shipyard.core.redact import redact
from shipyard.pipelines import DEFAULT_PIPELINE, PIPELINES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run a pipeline locally (kfp.local) and print its summary",
        description="Run a pipeline on this machine: --local runs each step in the local venvs (kfp.local); "
                    "--local --runner container runs the compiled pipeline's steps in their images (podman), as a "
                    "cluster would. On Kubeflow, compile and submit instead: shipyard compile --out compiled/ && "
                    "shipyard submit compiled/optimize-and-deploy.yaml --host URL.",
    )
    p.add_argument("pipeline", nargs="?", default=DEFAULT_PIPELINE, help=f"one of {', '.join(sorted(PIPELINES))}")
    p.add_argument("--local", action="store_true", help="run on this machine with kfp.local (required: use `shipyard submit` for a cluster)")
    p.add_argument("--work-dir", default="shipyard-run", help="where artifacts and run-summary.json go (default ./shipyard-run)")
    p.add_argument("--param", action="append", default=[], metavar="K=V", help="a pipeline parameter (value read as YAML); repeatable")
    p.add_argument("--params-file", help="YAML/JSON mapping of pipeline parameters")
    p.add_argument("--runner", choices=("subprocess", "container"), default="subprocess",
                   help="subprocess: steps in the local venvs (default); container: the compiled pipeline's steps in "
                        "their cpu-flavor images (podman) against a registry, MLflow server, S3 and the API double")
    p.add_argument("--no-build", action="store_true", help="with --runner container: fail instead of building missing images")
    p.add_argument("--layout", default="", help="with --runner container: the namespace layout of the cluster config to "
                   "rehearse, kfp-standalone or kubeflow-multi-user (default: the config's `layout`, kfp-standalone): "
                   "its overlay's RBAC enforced for its pipeline identity, its namespaces, MLflow by its name there")
    p.set_defaults(func=_run)


#: top-level folders a run never fills (``--work-dir /usr``)
_SYSTEM_DIRS = frozenset({"bin", "boot", "dev", "etc", "home", "lib", "lib64", "opt", "proc", "root", "run", "sbin",
                          "srv", "sys", "tmp", "usr", "var", "mnt", "media", "work"})


def _run(args: argparse.Namespace) -> int:
    if not args.local:
        raise ShipyardError("--local", "`shipyard run` runs on this machine only and needs --local",
                            "run here with `shipyard run --local` (steps in local venvs) or `shipyard run --local "
                            "--runner container` (steps in their images); on Kubeflow: `shipyard compile --out "
                            "compiled/` then `shipyard submit compiled/optimize-and-deploy.yaml --host URL`")
    from pathlib import Path

    from shipyard.core.files import ensure_writable_dir

    work = Path(args.work_dir).expanduser().resolve()
    if work == Path(work.anchor) or work == Path.home().resolve() or (
            work.parent == Path(work.anchor) and work.name in _SYSTEM_DIRS):
        raise ShipyardError("--work-dir", f"{work} is a system or home folder; a run fills its work dir with "
                            "pipeline-root/, logs and run-summary.json", "give a folder of its own, e.g. ./shipyard-run")
    ensure_writable_dir(args.work_dir, "--work-dir")  # a read-only or bad work dir fails before any work
    if args.layout and args.runner != "container":
        raise ShipyardError("--layout", "only the container rehearsal runs in a namespace layout",
                            "add --runner container, or leave --layout out")
    if args.runner == "container":
        from shipyard.run.container import format_rehearsal, run_container

        summary = run_container(args.pipeline, args.work_dir, args.params_file, args.param, build=not args.no_build,
                                layout=args.layout)
        print(redact(format_rehearsal(summary, args.work_dir)))
        return 0 if summary.status == "SUCCESS" else 1
    from shipyard.run.local import format_summary, run_local

    summary = run_local(args.pipeline, args.work_dir, args.params_file, args.param)
    print(redact(format_summary(summary, args.work_dir)))
    return 0 if summary.status == "SUCCESS" else 1
