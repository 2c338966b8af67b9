"""MLflow's server as its image is built: what a process of ``ghcr.io/mlflow/mlflow:vX`` can import.

mlflow's ``docker/Dockerfile`` builds the plain image with ``pip install mlflow==<version>`` and no
extras, so it carries no ``boto3``/``botocore`` (mlflow's ``[extras]`` and the ``-full`` image do).
To the server process "the image does not contain boto3" means one thing: ``import boto3`` (and
``botocore``) raises ``ModuleNotFoundError``. The server starts, ``/health`` answers, and an
``s3://`` artifact store fails at its first upload, inside the request.

The dev venv has boto3 (moto needs it), so the rehearsal's stand-in for the plain image runs the
venv's ``mlflow server`` with those two names made unimportable in every one of its Python
processes (the CLI and the uvicorn server it starts as a child): :func:`image_site` writes a
``sitecustomize.py`` that installs :class:`AbsentModules` (a meta-path finder that answers the two
names as missing), and the server gets that folder first on ``PYTHONPATH`` and the names in
:data:`ENV_ABSENT`. Python imports ``sitecustomize`` at every interpreter start, before any other
module, so the launcher is the interpreter itself: nothing else of the venv changes.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the environment variable naming the modules a server's processes may not import (comma-separated)
ENV_ABSENT = "SHIPYARD_ABSENT_MODULES"
#: what the plain image (``pip install mlflow``, no extras) lacks that an ``s3://`` artifact store needs
PLAIN_IMAGE_LACKS = ("boto3", "botocore")


def lacks(image: str) -> tuple[str, ...]:
    """The modules ``image`` (the MLflow Deployment's) lacks: boto3 and botocore for the plain
    ``ghcr.io/mlflow/mlflow:vX`` (by tag), nothing for its ``-full`` variant or another image (the
    rule of ``shipyard check``'s ``mlflow image`` row, :func:`shipyard.serving.cluster_check.mlflow_image_lacks_boto3`)."""
    from shipyard.serving.cluster_check import mlflow_image_lacks_boto3

    return PLAIN_IMAGE_LACKS if mlflow_image_lacks_boto3(image) else ()


class AbsentModules(importlib.abc.MetaPathFinder):
    """Answers ``names`` (and their submodules) as not installed, as in an image without them."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        top = fullname.partition(".")[0]
        if top in self.names:
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)


def block_imports(names: Sequence[str] | None = None) -> None:
    """Make ``names`` (default: :data:`ENV_ABSENT`'s) unimportable in this process, first on the meta path."""
    chosen = [n for n in (names if names is not None else os.environ.get(ENV_ABSENT, "").split(",")) if n]
    if chosen and not any(isinstance(f, AbsentModules) for f in sys.meta_path):
        sys.meta_path.insert(0, AbsentModules(chosen))


SITECUSTOMIZE = '''"""Written by shipyard.testing.mlflow_image: this process runs as the plain MLflow image, without
the modules SHIPYARD_ABSENT_MODULES names."""
from shipyard.testing.mlflow_image import block_imports

block_imports()
'''


def image_site(root: Path, names: Sequence[str]) -> dict[str, str]:
    """The environment that runs a server's Python processes without ``names``: a folder under
    ``root`` holding the ``sitecustomize.py`` that blocks them, first on ``PYTHONPATH``."""
    site = Path(root) / "image-site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, ENV_ABSENT: ",".join(names)}
