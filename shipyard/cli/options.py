"""Options that several ``shipyard`` commands share with kubectl's spelling.

``-n/--namespace NS`` (check, deploy, submit, schedule, runs, watch --requalify): checked as a Kubernetes namespace
(a DNS-1123 label) when the command line is read, so a bad value is one usage line naming
``-n/--namespace`` and never reaches an API path, a URL or a manifest. :func:`namespace` is the
argparse type of any other namespace option (``check --kserve-namespace``).
"""

from __future__ import annotations

import argparse

from shipyard.core.errors import ShipyardError
from shipyard.core.k8s_names import check_namespace


def namespace(value: str) -> str:
    """argparse type of ``-n/--namespace``: the value, or a one-line usage error with the fix."""
    try:
        return check_namespace(value, "-n/--namespace", "shipyard")
    except ShipyardError as err:
        raise argparse.ArgumentTypeError(f"{err.problem} (fix: {err.fix})") from None


namespace.__name__ = "namespace"


def add_namespace_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``-n/--namespace NS``, checked by :func:`namespace`; ``help`` says which namespace it is."""
    parser.add_argument("-n", "--namespace", type=namespace, default=None, metavar="NS", help=help)
