"""``shipyard compile --out DIR``: one KFP IR YAML per pipeline."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from shipyard.pipelines import PIPELINES, get_pipeline


def compile_all(out_dir: str, names: list[str] | None = None) -> list[Path]:
    """Compile the named pipelines (default: all) to ``out_dir/<name>.yaml``."""
    from kfp import compiler

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or sorted(PIPELINES):
        path = out / f"{name}.yaml"
        compiler.Compiler().compile(get_pipeline(name), str(path))
        written.append(path)
    return written


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile pipelines to KFP IR YAML for upload to Kubeflow")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--pipeline", action="append", choices=sorted(PIPELINES), help="only these pipelines (repeatable)")
    p.add_argument("--cluster-config", help="GPU/node/secret settings YAML (default pipelines/cluster.yaml)")
    p.add_argument("--image-registry", help="registry of the runtime images (default ghcr.io/shipyard-llm)")
    p.set_defaults(func=_compile)


def _compile(args: argparse.Namespace) -> int:
    if args.cluster_config:
        os.environ["SHIPYARD_CLUSTER_CONFIG"] = args.cluster_config
    if args.image_registry:
        os.environ["SHIPYARD_IMAGE_REGISTRY"] = args.image_registry
    for path in compile_all(args.out, args.pipeline):
        print(path)
    return 0
