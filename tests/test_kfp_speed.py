"""Building KFP pipelines without ``inspect.stack()``'s source reads (shipyard.run.kfp_speed), on the
real kfp: the same frames, kfp's own error still names the caller, installed once, a no-op when kfp
no longer has the hook.

No ``from __future__ import annotations``: kfp reads the components' annotations as types."""

import inspect
import time

import pytest
from kfp import dsl
from kfp.dsl import pipeline_task

from shipyard.run.kfp_speed import _FastInspect, install


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """``install()`` for one test; kfp's own ``inspect`` is put back after it."""
    monkeypatch.setattr(pipeline_task, "inspect", inspect)
    install()


def test_install_swaps_kfps_inspect_once(fast: None) -> None:
    swapped = pipeline_task.inspect
    assert isinstance(swapped, _FastInspect) and swapped.getsource is inspect.getsource  # the rest is inspect's
    install()
    assert pipeline_task.inspect is swapped


def test_install_is_a_no_op_when_kfp_no_longer_imports_inspect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pipeline_task, "inspect")
    install()
    assert not hasattr(pipeline_task, "inspect")


def test_the_fast_stack_has_inspects_frames_without_reading_sources(fast: None) -> None:
    def where() -> tuple[list, list]:
        return pipeline_task.inspect.stack(), inspect.stack()

    quick, full = where()
    assert [(f.function, f.filename, f.frame) for f in quick] == [(f.function, f.filename, f.frame) for f in full]
    assert quick[0].function == "where" and quick[1].function == "test_the_fast_stack_has_inspects_frames_without_reading_sources"
    assert all(f.code_context is None for f in quick) and full[0].code_context
    started = time.perf_counter()
    for _ in range(20):
        pipeline_task.inspect.stack()
    fast_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(20):
        inspect.stack()
    assert fast_s < (time.perf_counter() - started) / 3


@dsl.component(base_image="python:3.11")
def _echo(a: int) -> int:
    return a


@dsl.pipeline
def _inner(a: int) -> int:
    return _echo(a=a).output


def test_kfps_error_still_names_the_setter_that_was_called(fast: None) -> None:
    """The one thing kfp reads from the stack: a pipeline used as a component has no container, and
    its resource setters say which setter was misused."""
    with pytest.raises(ValueError, match="^set_cpu_request can only be used on single-step components"):
        @dsl.pipeline
        def outer() -> None:
            _inner(a=1).set_cpu_request("1")
