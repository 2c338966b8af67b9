"""``shipyard validate FILE...``: check manifests against the upstream CRDs and core Kubernetes schemas.

Prints ``ok FILE`` / ``INVALID ...`` lines, or with ``-o json|yaml`` one object per file
(``file``, ``valid``, ``problems``). Exit status 1 when any file is invalid.
"""

from __future__ import annotations

import argparse
from typing import Any

from shipyard.cli.output import add_output_option, emit


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="validate Kubernetes manifests against the upstream CRD schemas",
                       description="Unknown fields are rejected; KServe CEL/webhook rules are checked; core kinds "
                                   "use kubernetes-validate when installed.")
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML manifests (multi-document allowed; - reads stdin)")
    add_output_option(p, default_help="ok / INVALID lines")
    p.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    from shipyard.serving.kserve.validate import validate_file

    found = [(path, validate_file(path)) for path in args.files]
    results: list[dict[str, Any]] = [
        {"file": path, "valid": not problems,
         "problems": [{"source": p.source, "path": p.path, "message": p.message} for p in problems]}
        for path, problems in found
    ]

    def text() -> str:
        lines = []
        for path, problems in found:
            lines += [f"INVALID {problem}" for problem in problems] if problems else [f"ok {path}"]
        return "\n".join(lines)

    emit(results, args.output, text)
    return 1 if any(not r["valid"] for r in results) else 0
