"""``shipyard images build``: build the runtime images, tagged as ``shipyard compile`` names them."""

from __future__ import annotations

import argparse

from shipyard.runtimes import FLAVORS, RUNTIMES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("images", help="build the runtime images (podman) from images/<runtime>/Containerfile")
    actions = p.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    b = actions.add_parser("build", help="build and tag the runtime images; print tags and sizes")
    b.add_argument("--runtime", action="append", choices=sorted(RUNTIMES), help="only these runtimes (repeatable)")
    b.add_argument("--flavor", choices=FLAVORS, default="cpu",
                   help="cpu: for local container runs (default); gpu: the cluster images")
    b.add_argument("--force", action="store_true", help="rebuild even when the tag is already in the local store")
    b.add_argument("--no-cache", action="store_true", help="rebuild every layer (what a fresh machine does)")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    from shipyard.images import build_images, built_json, format_built

    built = build_images(args.runtime, args.flavor, args.force, args.no_cache)
    print(built_json(built) if args.json else format_built(built))
    return 0
