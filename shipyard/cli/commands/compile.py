"""``shipyard compile --out DIR``: one KFP IR YAML per pipeline.

``--out`` is a folder (``--out-file`` is for commands that write one file). It is checked before
anything is compiled; each YAML appears whole (compiled beside it, then renamed, mode 0644),
and a folder this command created is removed again when compiling fails. It compiles through the
one compile path, :mod:`shipyard.run.compile` (as ``submit``, ``schedule`` and the container
rehearsal do).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from shipyard.pipelines import PIPELINES
from shipyard.run.compile import compile_pipelines


def compile_all(
    out_dir: str, names: list[str] | None = None, cluster_config: str | None = None, image_registry: str | None = None
) -> list[Path]:
    """Compile the named pipelines (default: all) to ``out_dir/<name>.yaml`` (the one compile path,
    :func:`shipyard.run.compile.compile_pipelines`)."""
    return compile_pipelines(out_dir, names, cluster_config=cluster_config, image_registry=image_registry)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile pipelines to KFP IR YAML for upload to Kubeflow",
                       description="Compile the pipelines to KFP IR YAML (one file per pipeline) with your cluster "
                                   "settings and image registry; submit or schedule the files, or upload them in "
                                   "the Kubeflow UI.")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--pipeline", action="append", choices=sorted(PIPELINES), help="only these pipelines (repeatable)")
    p.add_argument("--cluster-config", help="GPU/node/secret settings YAML (default pipelines/cluster.yaml)")
    p.add_argument("--image-registry", help="registry of the runtime images (default ghcr.io/shipyard-llm)")
    p.set_defaults(func=_compile)


def _compile(args: argparse.Namespace) -> int:
    for path in compile_all(args.out, args.pipeline, args.cluster_config, args.image_registry):
        print(path)
    return 0
