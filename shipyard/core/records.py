"""The one reader of the JSON records steps leave in their output folders (``summary.json``,
``results.json``, ``candidate.json``, ``selection.json``, ``tuning.json``), and the typed records
the gates, select and deploy steps pass on: :class:`CandidateRecord` (:func:`load_candidate`),
:class:`SloSection` / :class:`SloThresholds` (:func:`slo_of`, :func:`slo_thresholds`; the SLO
parameter's own loader is :func:`shipyard.gates.slo.parse_slo`), :class:`SelectionRecord`
(:func:`load_selection`) and :class:`DecisionRecord` (:func:`load_decision`).

A step's output is a folder; the next step is handed that folder (or the file itself).
:func:`read_record` finds ``<folder>/<name>``, reads it and checks it, and says what is wrong in
one :class:`~shipyard.core.errors.ShipyardError` line naming ``field``: no record there, a file
that cannot be read or is not JSON, or a record of another kind (``check`` says why).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict, cast

from shipyard.core.errors import ShipyardError


def record_path(path: str | os.PathLike[str], name: str) -> Path:
    """``path/name`` when ``path`` is a folder, else ``path`` itself."""
    p = Path(path)
    return p / name if p.is_dir() else p


def read_record(path: str | os.PathLike[str], name: str, *, field: str, what: str, fix: str,
                check: Callable[[dict[str, Any]], str | None] | None = None) -> dict[str, Any]:
    """The JSON object at ``path`` (a step's output folder holding ``name``, or the file).

    ``what`` names the record in the "no ... at PATH" line; ``check(record)`` returns why a record
    is not the kind wanted (the line then reads ``PATH <why>``), or None when it is.
    """
    p = record_path(path, name)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ShipyardError(field, f"no {what} at {p}", fix) from None
    except (OSError, ValueError) as err:
        raise ShipyardError(field, f"cannot read {p}: {type(err).__name__}: {err}", fix) from None
    problem = "is not a JSON object" if not isinstance(data, dict) else (check(data) if check else None)
    if problem:
        raise ShipyardError(field, f"{p} {problem}", fix)
    return data


def read_optional_record(path: str | os.PathLike[str], name: str,
                         check: Callable[[dict[str, Any]], str | None] | None = None) -> dict[str, Any] | None:
    """Like :func:`read_record` for a record a step may or may not leave: None when it is
    missing, unreadable or not of the kind ``check`` wants."""
    try:
        return read_record(path, name, field=name, what=name, fix="", check=check)
    except ShipyardError:
        return None


# --------------------------------------------------------------------------- the typed records
# The shapes of the records the gates, select and deploy steps write, as the JSON holds them (TypedDicts:
# a record is still the dict json.loads returns, so what is written stays byte for byte the same).
# ``total=False``: a key a record of an older run, a base's record or a promoted candidate's lacks.

CANDIDATE_FILE = "candidate.json"
CANDIDATE_SCHEMA = "shipyard.candidate/v1"
DECISION_RECORD = "decision-record.json"
DECISION_SCHEMA = "shipyard.decision/v1"
SELECTION_FILE = "selection.json"


class SloThresholds(TypedDict):
    """The SLO as :func:`shipyard.gates.slo.parse_slo` returns it (every key set; the fields of
    :class:`shipyard.gates.config.SloConfig`), and as a candidate record keeps it under ``slo.thresholds``."""

    ttft_p99_ms: float
    itl_p99_ms: float
    min_output_tokens_per_s: float
    max_error_rate: float
    min_goodput: float | None
    require: str | float
    min_throughput_ratio: float | None
    max_latency_ratio: float | None
    error_budget: float
    judge_replay: bool


class SloSection(TypedDict, total=False):
    """A candidate record's ``slo``: the SLO gate's verdict, its figures and what they were judged against."""

    passed: bool
    reason: str
    #: the gate's flat figures (``highest_load_meeting_slo_rps``, ``capacity_*``, ``replay.*``)
    metrics: dict[str, float]
    thresholds: SloThresholds
    rule: str
    worst_regression: dict[str, Any] | None
    best_gain: dict[str, Any] | None
    #: candidate / base per level with its interval (None for the base's own record)
    comparison: dict[str, Any] | None
    base_source: dict[str, Any] | None
    #: goodput at the SLO as N x the recorded peak (None without a replayed workload)
    capacity: dict[str, Any] | None
    #: the SLO on the replay itself (None without a replay)
    replay: dict[str, Any] | None


class CandidateRecord(TypedDict, total=False):
    """``candidate.json``: one candidate's gates and figures (:func:`shipyard.steps.judge.judge_candidate`;
    the base's, :func:`shipyard.steps.judge.judge_base`, adds ``is_base`` and ``benchmark_source``)."""

    schema: str
    recipe: str
    recipe_text: str
    is_base: bool
    model_uri: str
    passed: bool
    reason: str
    size_bytes: int | None
    base_size_bytes: int | None
    compression_ratio: float | None
    accuracy: dict[str, Any]
    slo: SloSection
    benchmark_source: dict[str, Any]
    adapters: dict[str, dict[str, Any]]
    eval_sets: dict[str, Any]
    safety: dict[str, Any]
    levels: list[dict[str, Any]]
    startup: dict[str, Any] | None
    bench_config: dict[str, Any] | None
    golden: dict[str, Any] | None
    tuning: dict[str, Any] | None
    engine: dict[str, Any] | None
    workload: dict[str, Any] | None
    base_levels: list[dict[str, Any]]
    planner: dict[str, Any]
    base_planner: dict[str, Any]


class ServingChoice(TypedDict):
    """A selection's ``serving``: the champion's vLLM flags and where they come from."""

    vllm_args: list[str]
    #: "tuning search" (the serving-configuration search chose them) or "benchmark defaults"
    source: str


class SelectionRecord(TypedDict, total=False):
    """``selection.json``: the select step's ranking (:func:`shipyard.steps.select.select_champion`;
    :func:`shipyard.gates.selection.select`'s result with ``winner`` as the champion's recipe) and
    every candidate's record, the base's included."""

    objective: str
    order: list[str]
    #: the champion's recipe ("base" when the base is kept; "" when nothing passed)
    winner: str
    reason: str
    headline: str
    ranking: list[str]
    decisions: dict[str, str]
    dominated: dict[str, str]
    kept_base: bool
    base_model: dict[str, str] | None
    candidates: list[CandidateRecord]
    serving: ServingChoice


class DecisionRecord(TypedDict, total=False):
    """``decision-record.json``: the select step's decision (:func:`shipyard.gates.selection.decision_record`),
    and the deploy step's copy with ``verification`` and ``deployment``
    (:func:`shipyard.gates.selection.with_verification`; a promoted candidate's starts with
    ``schema``, ``champion`` and ``why`` only)."""

    schema: str
    objective: str
    champion: str | None
    kept_base: bool
    headline: str
    why: str
    base: dict[str, Any] | None
    base_model: dict[str, str] | None
    dominance: dict[str, Any]
    serving: dict[str, Any] | None
    candidates: list[dict[str, Any]]
    frontier: dict[str, Any]
    statistics: dict[str, str]
    base_measured: dict[str, Any]
    verification: dict[str, Any]
    deployment: dict[str, Any]


def _schema_check(schema: str, what: str) -> Callable[[dict[str, Any]], str | None]:
    return lambda data: None if data.get("schema") == schema else f"is not a {what} ({schema})"


def load_candidate(path: str | os.PathLike[str], field: str = "candidates",
                   fix: str = "pass candidate_gates' candidate outputs") -> CandidateRecord:
    """Read a ``candidate.json`` (the file or its folder); one line naming the file and ``fix`` when
    it is missing, unreadable or not a candidate record."""
    return cast(CandidateRecord, read_record(path, CANDIDATE_FILE, field=field, what="candidate record", fix=fix,
                                             check=_schema_check(CANDIDATE_SCHEMA, "shipyard candidate record")))


def load_selection(path: str | os.PathLike[str], field: str = "selection",
                   fix: str = "pass select_champion's decision") -> SelectionRecord:
    """Read a ``selection.json`` (the file or its folder); one line naming the file and ``fix`` when it
    is missing, unreadable or not a JSON object. (The champion's record with it:
    :func:`shipyard.gates.selection.champion_selection`.)"""
    return cast(SelectionRecord, read_record(path, SELECTION_FILE, field=field, what="champion selection", fix=fix))


def load_decision(path: str | os.PathLike[str], field: str = "decision",
                  fix: str = "pass select_champion's decision folder") -> DecisionRecord:
    """Read a ``decision-record.json`` (the file or its folder); one line naming the file and ``fix``
    when it is missing, unreadable or not a decision record."""
    return cast(DecisionRecord, read_record(path, DECISION_RECORD, field=field, what="decision record", fix=fix,
                                            check=_schema_check(DECISION_SCHEMA, "shipyard decision record")))


def slo_of(record: Mapping[str, Any]) -> SloSection:
    """A candidate record's ``slo`` section; ``{}`` for a record without one (a promoted candidate's
    golden outputs, a hand-made record)."""
    return cast(SloSection, record.get("slo") or {})


def slo_thresholds(record: Mapping[str, Any]) -> SloThresholds | dict[str, Any]:
    """The SLO a candidate record was judged against (``slo.thresholds``); ``{}`` when it keeps none."""
    return slo_of(record).get("thresholds") or {}
