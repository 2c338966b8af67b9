"""``shipyard compile --out DIR``: one KFP IR YAML per pipeline.

``--out`` is a folder (``--out-file`` is for commands that write one file). It is checked before
anything is compiled; each YAML appears whole (compiled beside it, then renamed, mode 0644),
and a folder this command created is removed again when compiling fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from shipyard.core.errors import FileError, file_error
from shipyard.core.files import atomic_write_text, ensure_writable_dir
from shipyard.pipelines import PIPELINES, get_pipeline
from shipyard.runtimes.runtime import DEFAULT_IMAGE_REGISTRY


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def retarget_images(path: Path, registry: str) -> None:
    """Point every shipyard runtime image of a compiled pipeline at ``registry``."""
    docs = list(yaml.safe_load_all(path.read_text()))
    current = os.environ.get("SHIPYARD_IMAGE_REGISTRY", DEFAULT_IMAGE_REGISTRY).rstrip("/") + "/shipyard-"
    for executor in docs[0].get("deploymentSpec", {}).get("executors", {}).values():
        container = executor.get("container", {})
        if container.get("image", "").startswith(current):
            container["image"] = registry.rstrip("/") + "/shipyard-" + container["image"][len(current):]
    header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    atomic_write_text(path, header + yaml.safe_dump_all(docs, sort_keys=False))


def _rebuild(pipeline: Any) -> Any:
    """Re-run a pipeline's body so platform settings read the cluster config in force now
    (``@dsl.pipeline`` builds the graph once, at import)."""
    from kfp import dsl

    return dsl.pipeline(name=pipeline.name, description=pipeline.description)(pipeline.pipeline_func)


def compile_all(
    out_dir: str, names: list[str] | None = None, cluster_config: str | None = None, image_registry: str | None = None
) -> list[Path]:
    """Compile the named pipelines (default: all) to ``out_dir/<name>.yaml``."""
    import tempfile

    from kfp import compiler

    out = ensure_writable_dir(out_dir, "--out")
    created = not out.exists()
    written: list[Path] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        with _env("SHIPYARD_CLUSTER_CONFIG", cluster_config), \
                tempfile.TemporaryDirectory(prefix=".shipyard-compile-", dir=out) as stage:
            for name in names or sorted(PIPELINES):
                staged = Path(stage) / f"{name}.yaml"
                compiler.Compiler().compile(_rebuild(get_pipeline(name)), str(staged))
                if image_registry:
                    retarget_images(staged, image_registry)
                path = out / f"{name}.yaml"
                atomic_write_text(path, staged.read_text(), field="--out")
                written.append(path)
    except OSError as err:
        if created:
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        if isinstance(err, FileError):
            raise
        raise file_error(err, "--out", out) from None
    except BaseException:
        if created:
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        raise
    return written


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile pipelines to KFP IR YAML for upload to Kubeflow")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--pipeline", action="append", choices=sorted(PIPELINES), help="only these pipelines (repeatable)")
    p.add_argument("--cluster-config", help="GPU/node/secret settings YAML (default pipelines/cluster.yaml)")
    p.add_argument("--image-registry", help="registry of the runtime images (default ghcr.io/shipyard-llm)")
    p.set_defaults(func=_compile)


def _compile(args: argparse.Namespace) -> int:
    for path in compile_all(args.out, args.pipeline, args.cluster_config, args.image_registry):
        print(path)
    return 0
