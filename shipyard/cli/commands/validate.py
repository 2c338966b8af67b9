"""``shipyard validate FILE...`` / ``-f FILE|DIR``: check manifests against the upstream CRDs and core
Kubernetes schemas.

Like ``kubectl apply -f``, a folder stands for every ``*.yaml``, ``*.yml`` and ``*.json`` file in
it (sorted; ``-R`` goes into subfolders too); ``-`` reads stdin. Prints ``ok FILE`` / ``INVALID
...`` lines, or with ``-o json|yaml`` one object per file (``file``, ``valid``, ``problems``).
Exit status 1 when any file is invalid.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from shipyard.cli.output import add_output_option, emit
from shipyard.core.errors import ShipyardError

#: what a folder given to validate stands for (kubectl's -f DIR)
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="validate Kubernetes manifests against the upstream CRD schemas",
                       description="Unknown fields are rejected; KServe CEL/webhook rules are checked; core kinds "
                                   "use kubernetes-validate when installed. A folder (as with kubectl -f DIR) "
                                   "stands for its *.yaml, *.yml and *.json files.")
    p.add_argument("files", nargs="*", metavar="FILE", help="YAML manifests or folders of them (multi-document "
                   "allowed; - reads stdin)")
    p.add_argument("-f", "--filename", action="append", default=[], metavar="FILE|DIR", dest="filenames",
                   help="a manifest, or a folder of *.yaml/*.yml/*.json manifests (repeatable, as for kubectl)")
    p.add_argument("-R", "--recursive", action="store_true", help="with a folder: its subfolders too")
    add_output_option(p, default_help="ok / INVALID lines")
    p.set_defaults(func=_validate)


def manifest_paths(given: list[str], recursive: bool = False) -> list[str]:
    """Each given path, a folder replaced by its manifest files (sorted; subfolders with
    ``recursive``); a folder with none is a one-line error naming it."""
    paths: list[str] = []
    for entry in given:
        folder = Path(entry)
        if entry == "-" or not folder.is_dir():
            paths.append(entry)  # a file; a missing one is named by the validator
            continue
        found = sorted(p for p in (folder.rglob("*") if recursive else folder.iterdir())
                       if p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES)
        if not found:
            deeper = "" if recursive else " (add -R for its subfolders)"
            raise ShipyardError(entry, f"is a folder with no {', '.join('*' + s for s in MANIFEST_SUFFIXES)} file"
                                f"{deeper}", "give a manifest file or a folder of them")
        paths += [str(p) for p in found]
    return paths


def _validate(args: argparse.Namespace) -> int:
    from shipyard.serving.kserve.validate import validate_file

    given = [*args.files, *args.filenames]
    if not given:
        raise ShipyardError("FILE", "no manifest given", "give FILE or -f FILE|DIR (- reads stdin)")
    found = [(path, validate_file(path)) for path in manifest_paths(given, args.recursive)]
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
