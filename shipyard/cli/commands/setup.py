"""``shipyard setup``: build the local runtime venvs from the image locks."""

from __future__ import annotations

import argparse

from shipyard.runtimes.runtime import RUNTIMES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup", help="build the local runtime environments (.venvs/<runtime>) from images/*/requirements.lock",
                       description="Build the local runtime venvs (.venvs/<runtime>) from the same hashed locks "
                                   "as the images, for `shipyard run --local`.")
    p.add_argument("--runtime", action="append", choices=sorted(RUNTIMES), help="only these runtimes (repeatable)")
    p.add_argument("--relock", action="store_true", help="re-resolve requirements.in and rewrite the locks")
    p.add_argument("--no-debian", action="store_true", help="skip apt-get of docker-registry, skopeo, umoci, busybox-static")
    p.add_argument("--no-model", action="store_true", help="skip the embedded SmolLM2 model")
    p.set_defaults(func=_setup)


def _setup(args: argparse.Namespace) -> int:
    from shipyard.run.setup import setup

    setup(args.runtime, relock=args.relock, debian=not args.no_debian, model=not args.no_model)
    return 0
