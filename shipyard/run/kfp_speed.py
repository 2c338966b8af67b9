"""Build KFP pipelines without kfp 2.x's ``inspect.stack()`` on every resource setter.

``PipelineTask._ensure_container_spec_exists`` (called by ``set_cpu_request``,
``set_memory_limit``, ``add_node_selector_constraint``, ...) runs ``inspect.stack()`` only to
name its caller in an error message. ``inspect.stack()`` reads the source of every frame on the
stack, which costs about 0.03-0.3 s per call, and shipyard's pipelines make some 260 such calls
at import: 10 s of CPU before ``shipyard run --local`` or ``submit`` can even check a parameter.
:func:`install` gives that module an ``inspect`` whose ``stack()`` returns the same frames
without reading sources (the only field kfp reads, the caller's name, is the same).
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any


class _FastInspect(types.ModuleType):
    """``inspect`` with a ``stack()`` that does not read source files."""

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        frames = []
        frame = sys._getframe(1)
        while frame is not None:
            frames.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name,
                                            None, None))
            frame = frame.f_back
        return frames


def install() -> None:
    """Make kfp's pipeline building skip the source reads (idempotent; a no-op if kfp changed)."""
    from kfp.dsl import pipeline_task

    if isinstance(getattr(pipeline_task, "inspect", None), types.ModuleType) and \
            not isinstance(pipeline_task.inspect, _FastInspect):
        pipeline_task.inspect = _FastInspect("inspect")
