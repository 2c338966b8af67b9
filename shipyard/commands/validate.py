"""``shipyard validate FILE...``: check manifests against the upstream CRDs and core Kubernetes schemas."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="validate Kubernetes manifests against the upstream CRD schemas",
                       description="Unknown fields are rejected; KServe CEL/webhook rules are checked; core kinds "
                                   "use kubernetes-validate when installed.")
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML manifests (multi-document allowed)")
    p.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    from shipyard.components.deploy.validate import validate_file

    failed = 0
    for path in args.files:
        problems = validate_file(path)
        for problem in problems:
            print(f"INVALID {problem}")
        if problems:
            failed += 1
        else:
            print(f"ok {path}")
    return 1 if failed else 0
