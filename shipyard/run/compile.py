"""The one compile path: pipeline names -> KFP IR YAML, with the cluster config and the runtime
images in force at call time.

``shipyard compile``, ``shipyard submit``/``schedule`` (a pipeline name compiled on the fly,
:mod:`shipyard.run.kfp_client`) and the container rehearsal (:mod:`shipyard.run.container`, CPU
image flavor) all compile through :func:`compile_pipelines`:

* ``cluster_config``: a cluster settings YAML (default ``SHIPYARD_CLUSTER_CONFIG`` or
  ``pipelines/cluster.yaml``); the pipeline's body is re-run so the settings read now apply
  (``@dsl.pipeline`` builds its graph once, at import);
* ``image_registry``: the registry of the runtime images (default ``SHIPYARD_IMAGE_REGISTRY`` or
  ``ghcr.io/shipyard-llm``);
* ``image_flavor``: ``gpu`` (the cluster's) or ``cpu`` (local container runs); by default the
  flavor in force (``SHIPYARD_IMAGE_FLAVOR``).

Each YAML appears whole (compiled beside it, then renamed, mode 0644), and a folder this call
created is removed again when compiling fails.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from shipyard.core.contract import ENV_IMAGE
from shipyard.core.env import environ_set
from shipyard.core.errors import FileError, ShipyardError, file_error
from shipyard.core.files import atomic_write_text, ensure_writable_dir
from shipyard.core.yamldocs import documents, dump_documents
from shipyard.pipelines import PIPELINES, get_pipeline
from shipyard.runtimes.runtime import DEFAULT_IMAGE_REGISTRY, code_digest, runtime_image


def retarget_images(path: Path, registry: str | None = None, flavor: str | None = None) -> None:
    """Point every shipyard runtime image of a compiled pipeline at ``registry`` and/or the image
    ``flavor``'s tag (the tag the images of this checkout have now)."""
    docs = documents(path.read_text())
    current = os.environ.get("SHIPYARD_IMAGE_REGISTRY", DEFAULT_IMAGE_REGISTRY).rstrip("/") + "/shipyard-"
    if flavor:
        code_digest.cache_clear()  # tags hash the checkout: read it as it is now
    for executor in docs[0].get("deploymentSpec", {}).get("executors", {}).values():
        container = executor.get("container", {})
        image = container.get("image", "")
        if not image.startswith(current):
            continue
        if flavor:
            image = runtime_image(image[len(current):].split(":", 1)[0].split("@", 1)[0], flavor)
        if registry:
            image = registry.rstrip("/") + "/shipyard-" + image[len(current):]
        container["image"] = image
        for env in container.get("env") or []:  # the step's own image (SHIPYARD_IMAGE) follows it
            if env.get("name") == ENV_IMAGE:
                env["value"] = image
    header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    atomic_write_text(path, header + dump_documents(docs))


def _rebuild(pipeline: Any) -> Any:
    """Re-run a pipeline's body so platform settings read the cluster config in force now
    (``@dsl.pipeline`` builds the graph once, at import)."""
    from kfp import dsl

    return dsl.pipeline(name=pipeline.name, description=pipeline.description)(pipeline.pipeline_func)


_IMAGE_REGISTRY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*\Z")


def check_image_registry(value: str | None, field: str = "--image-registry") -> None:
    """``host[:port][/path]`` as image names start (``quay.io/org``): no scheme (``https://``), no
    credentials, no tag, lowercase path; else image names would be written that cannot be pulled."""
    if value is None:
        return
    text = value.rstrip("/")  # as retarget_images writes it: unstripped
    if "://" in text:
        raise ShipyardError(field, f"{value!r} has a URL scheme; image names have none"[:200],
                            f"write it as image names start, e.g. {text.split('://', 1)[1] or 'quay.io/org'}")
    if "@" in text or not _IMAGE_REGISTRY.match(text):
        raise ShipyardError(field, f"{value!r} is not a registry prefix of image names"[:200],
                            "write host[:port][/path] in lowercase, e.g. quay.io/org or 127.0.0.1:5000/team")


def compile_pipelines(out_dir: str | os.PathLike[str], names: list[str] | None = None, *,
                      cluster_config: str | None = None, image_registry: str | None = None,
                      image_flavor: str | None = None, field: str = "--out") -> list[Path]:
    """Compile the named pipelines (default: all) to ``out_dir/<name>.yaml``; ``field`` names
    ``out_dir`` in errors."""
    from kfp import compiler

    check_image_registry(image_registry)
    out = ensure_writable_dir(str(out_dir), field)
    created = not out.exists()
    written: list[Path] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        with environ_set({"SHIPYARD_CLUSTER_CONFIG": cluster_config}), \
                tempfile.TemporaryDirectory(prefix=".shipyard-compile-", dir=out) as stage:
            for name in names or sorted(PIPELINES):
                staged = Path(stage) / f"{name}.yaml"
                compiler.Compiler().compile(_rebuild(get_pipeline(name)), str(staged))
                if image_registry or image_flavor:
                    retarget_images(staged, image_registry, image_flavor)
                path = out / f"{name}.yaml"
                atomic_write_text(path, staged.read_text(), field=field)
                written.append(path)
    except OSError as err:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        if isinstance(err, FileError):
            raise
        raise file_error(err, field, out) from None
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    return written


def compile_pipeline(name: str, out_dir: str | os.PathLike[str], *, cluster_config: str | None = None,
                     image_registry: str | None = None, image_flavor: str | None = None) -> Path:
    """Compile one pipeline to ``out_dir/<name>.yaml`` (:func:`compile_pipelines`)."""
    (path,) = compile_pipelines(out_dir, [name], cluster_config=cluster_config, image_registry=image_registry,
                                image_flavor=image_flavor)
    return path
