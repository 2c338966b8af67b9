"""``shipyard images build``: build the runtime images, tagged as ``shipyard compile`` names them."""

from __future__ import annotations

import argparse

from shipyard.cli.output import add_output_option
from shipyard.runtimes.runtime import FLAVORS, RUNTIMES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("images", help="build the runtime images (podman) from images/<runtime>/Containerfile",
                       description="Build the runtime images (base, compress, vllm) with podman from their "
                                   "Containerfiles and hashed locks; tags hash the lock, Containerfile and code.")
    actions = p.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    b = actions.add_parser("build", help="build and tag the runtime images; print tags and sizes")
    b.add_argument("--runtime", action="append", choices=sorted(RUNTIMES), help="only these runtimes (repeatable)")
    b.add_argument("--flavor", choices=FLAVORS, default="cpu",
                   help="cpu: for local container runs (default); gpu: the cluster images")
    b.add_argument("--image-registry", help="registry of the image names, as for `shipyard compile` "
                   "(default $SHIPYARD_IMAGE_REGISTRY or ghcr.io/shipyard-llm)")
    b.add_argument("--force", action="store_true", help="rebuild even when the tag is already in the local store")
    b.add_argument("--no-cache", action="store_true", help="rebuild every layer (what a fresh machine does)")
    add_output_option(b, default_help="a table of tags, sizes and build seconds")
    b.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    import os

    from shipyard.cli.output import emit
    from shipyard.runtimes.images import build_images, format_built

    if args.image_registry:
        os.environ["SHIPYARD_IMAGE_REGISTRY"] = args.image_registry

    built = build_images(args.runtime, args.flavor, args.force, args.no_cache)
    emit([img.__dict__ for img in built], args.output, lambda: format_built(built))
    return 0
