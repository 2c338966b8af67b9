"""shipyard pipelines (KFP v2). ``get_pipeline(name)`` returns one by name."""

from __future__ import annotations

import importlib
from typing import Any

from shipyard.core.errors import ShipyardError

#: pipeline name -> "module:function"
PIPELINES: dict[str, str] = {
    "optimize-and-deploy": "shipyard.pipelines.optimize_deploy:optimize_and_deploy",
    "requantize": "shipyard.pipelines.optimize_deploy:requantize",
    "promote": "shipyard.pipelines.promote:promote",
    "watch": "shipyard.pipelines.watch:watch",
}
DEFAULT_PIPELINE = "optimize-and-deploy"


def get_pipeline(name: str) -> Any:
    """The pipeline function registered as ``name``."""
    try:
        target = PIPELINES[name]
    except KeyError:
        raise ShipyardError("pipeline", f"unknown pipeline {name!r}", f"use one of {sorted(PIPELINES)}") from None
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)
