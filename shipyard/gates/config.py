"""Typed configs of the gates and the selection, with one-line errors.

Each JSON parameter a gate reads is one pydantic model here. :func:`parse` turns the parameter
(a JSON string, a mapping or empty) into that model, and any validation error into one
:class:`~shipyard.core.errors.ShipyardError` line that names the parameter and the key, e.g.
``slo.ttft_p99_ms: must be > 0, got -5 (fix: set a positive threshold)``. The same functions
run in the pre-flight task, in ``shipyard run --local`` / ``submit`` / ``schedule`` before
anything starts, and in the gates themselves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from shipyard.core.errors import ShipyardError
from shipyard.core.jsonargs import json_object
from shipyard.serving.alerts import DEFAULT_ERROR_BUDGET, check_error_budget

M = TypeVar("M", bound=BaseModel)

DEFAULT_MIN_RECOVERY = 0.99
#: the accuracy gate's default non-inferiority margin: a loss of at most 2 points (0.02 on a 0-1
#: accuracy) is "no worse"; absolute, in the metric's units (``max_relative_loss`` for a share of the base)
DEFAULT_MAX_LOSS = 0.02
#: the one-sided significance level of the non-inferiority test (the interval shown is 1 - 2 x alpha)
DEFAULT_ALPHA = 0.05
#: the power the minimum detectable loss is computed for
DEFAULT_POWER = 0.8


def number(value: Any, *, low: float | None = None, high: float | None = None, positive: bool = False,
           example: str = "0.99") -> float:
    """A finite JSON number (not a bool, not a string) within bounds, else a ValueError with one line."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"must be a number, got {value!r}|use e.g. {example}")
    if positive and value <= 0:
        raise ValueError(f"must be > 0, got {value!r}|set a positive threshold")
    if (low is not None and value < low) or (high is not None and value > high):
        bound = f"between {low} and {high}" if low is not None and high is not None else (
            f">= {low}" if low is not None else f"<= {high}")
        raise ValueError(f"must be {bound}, got {value!r}|use e.g. {example}")
    return float(value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _replaced(old: str, new: str) -> Any:
    """A validator for a removed key: any value is one line naming the key that replaced it."""
    def check(cls: type, v: Any) -> Any:
        raise ValueError(f"{old} is now {new} (the accuracy gate's non-inferiority margin, absolute in the metric's "
                         f"units; default {DEFAULT_MAX_LOSS})|rename {old} to {new}"
                         if new == "max_loss" else
                         f"{old} is now {new} (the one-sided alpha of the non-inferiority test; the reported "
                         f"interval is two-sided at 1 - 2 x alpha)|replace it with {new}, e.g. 0.05 for 95 %")
    return field_validator(old, mode="before")(classmethod(check))


def _margin(v: Any, name: str) -> float | None:
    return None if v is None else number(v, low=0.0, high=1e6, example=f"0.02 for {name}")


class MetricRule(_Strict):
    """A per-metric override of the accuracy gate: any of the gate-wide margin and recovery keys,
    and ``gate`` (false: reported, never blocks)."""

    min_recovery: float | None = None
    stderr_k: float | None = None
    max_loss: float | None = None
    max_relative_loss: float | None = None
    gate: StrictBool = True
    #: removed keys: a one-line error naming the replacement
    paired_max_loss: Any = Field(default=None, exclude=True, repr=False)

    _paired_max_loss = _replaced("paired_max_loss", "max_loss")

    @field_validator("min_recovery", mode="before")
    @classmethod
    def _min_recovery(cls, v: Any) -> float | None:
        return None if v is None else number(v, low=0.0, high=10.0, example="0.99 for min_recovery")

    @field_validator("max_loss", mode="before")
    @classmethod
    def _max_loss(cls, v: Any) -> float | None:
        return _margin(v, "max_loss")

    @field_validator("max_relative_loss", mode="before")
    @classmethod
    def _max_relative_loss(cls, v: Any) -> float | None:
        return None if v is None else number(v, low=0.0, high=1.0, example="0.02 for max_relative_loss (2 %)")

    @field_validator("stderr_k", mode="before")
    @classmethod
    def _stderr_k(cls, v: Any) -> float | None:
        return None if v is None else number(v, low=0.0, example="2 for stderr_k")


class AccuracyConfig(_Strict):
    """``accuracy_thresholds``: how a candidate's accuracy is judged against the base's.

    ``rule`` ``non-inferiority`` (the default): per metric with per-sample logs, a one-sided test
    that the loss (base - candidate, question by question) is under the margin ``max_loss``
    (absolute, in the metric's units; default :data:`DEFAULT_MAX_LOSS`) or ``max_relative_loss`` x
    |base|, at ``alpha`` with Holm's correction across the gated metrics; a metric the test cannot
    decide is "inconclusive" and fails unless ``allow_inconclusive``. Metrics without per-sample
    values (perplexity, bits per byte) fall back to the recovery rule. ``rule`` ``recovery``:
    recovery >= ``min_recovery`` on every metric, with the opt-in small-eval-set rule ``stderr_k``
    (a drop within k standard errors passes). ``metrics``: per-metric overrides.
    """

    rule: Literal["non-inferiority", "recovery"] = "non-inferiority"
    max_loss: float = DEFAULT_MAX_LOSS
    max_relative_loss: float | None = None
    alpha: float = DEFAULT_ALPHA
    power: float = DEFAULT_POWER
    allow_inconclusive: StrictBool = False
    multiple_comparisons: Literal["holm", "none"] = "holm"
    min_recovery: float = DEFAULT_MIN_RECOVERY
    stderr_k: float | None = None
    metrics: dict[str, MetricRule] = {}
    #: removed keys: a one-line error naming the replacement
    paired_max_loss: Any = Field(default=None, exclude=True, repr=False)
    paired_confidence: Any = Field(default=None, exclude=True, repr=False)

    _paired_max_loss = _replaced("paired_max_loss", "max_loss")
    _paired_confidence = _replaced("paired_confidence", "alpha")

    @field_validator("max_loss", mode="before")
    @classmethod
    def _max_loss(cls, v: Any) -> float:
        return number(v, low=0.0, high=1e6, example="0.02 for max_loss")

    @field_validator("max_relative_loss", mode="before")
    @classmethod
    def _max_relative_loss(cls, v: Any) -> float | None:
        return None if v is None else number(v, low=0.0, high=1.0, example="0.02 for max_relative_loss (2 %)")

    @field_validator("alpha", mode="before")
    @classmethod
    def _alpha(cls, v: Any) -> float:
        value = number(v, example="0.05 for alpha")
        if not 0 < value <= 0.25:
            raise ValueError(f"must be in (0, 0.25], got {v!r}|use e.g. 0.05 (one-sided)")
        return value

    @field_validator("power", mode="before")
    @classmethod
    def _power(cls, v: Any) -> float:
        value = number(v, example="0.8 for power")
        if not 0.5 <= value < 1:
            raise ValueError(f"must be in [0.5, 1), got {v!r}|use e.g. 0.8")
        return value

    @field_validator("min_recovery", mode="before")
    @classmethod
    def _min_recovery(cls, v: Any) -> float:
        return number(v, low=0.0, high=10.0, example="0.99 for min_recovery")

    @field_validator("stderr_k", mode="before")
    @classmethod
    def _stderr_k(cls, v: Any) -> float | None:
        return None if v is None else number(v, low=0.0, example="2 for stderr_k")

    @field_validator("metrics", mode="before")
    @classmethod
    def _metrics(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            raise ValueError(f"must be an object, got {v!r}|e.g. {{\"acc\": 0.95}}")
        # a bare number is a min_recovery override
        return {k: ({"min_recovery": r} if isinstance(r, int | float) and not isinstance(r, bool) else r)
                for k, r in v.items()}


class SloConfig(_Strict):
    """``slo``: latency and throughput bounds per load level, and which levels must meet them."""

    ttft_p99_ms: float = 10000.0
    itl_p99_ms: float = 1000.0
    min_output_tokens_per_s: float = 1.0
    max_error_rate: float = 0.0
    min_goodput: float | None = None
    require: Literal["base", "all", "any"] | float = "base"
    min_throughput_ratio: float | None = None
    max_latency_ratio: float | None = None
    #: the share of requests allowed to miss the SLO (TTFT, ITL, or errored) over the alerting window:
    #: the deployed service's burn-rate alerts are multiples of it (:mod:`shipyard.serving.alerts`)
    error_budget: float = DEFAULT_ERROR_BUDGET
    #: when the benchmark replayed a recorded workload, its replay must meet the SLO too (TTFT p99, ITL
    #: p99, error rate, goodput); false: the replay's figures are reported, not gating
    judge_replay: bool = True

    @field_validator("judge_replay", mode="before")
    @classmethod
    def _judge_replay(cls, v: Any) -> bool:
        if isinstance(v, bool):
            return v
        raise ValueError(f"must be true or false, got {v!r}|true (the replay of your traffic gates) or false")

    @field_validator("error_budget", mode="before")
    @classmethod
    def _error_budget(cls, v: Any) -> float:
        return check_error_budget(v, lambda problem, fix: ValueError(f"{problem}|{fix}"))

    @field_validator("ttft_p99_ms", "itl_p99_ms", "min_output_tokens_per_s", mode="before")
    @classmethod
    def _positive(cls, v: Any) -> float:
        return number(v, positive=True, example="500")

    @field_validator("max_error_rate", mode="before")
    @classmethod
    def _error_rate(cls, v: Any) -> float:
        return number(v, low=0.0, high=1.0, example="0.01")

    @field_validator("min_goodput", mode="before")
    @classmethod
    def _goodput(cls, v: Any) -> float | None:
        if v is None:
            return None
        value = number(v, example="0.9")
        if not 0 < value <= 1:
            raise ValueError(f"must be in (0, 1], got {v!r}|e.g. 0.9")
        return value

    @field_validator("min_throughput_ratio", "max_latency_ratio", mode="before")
    @classmethod
    def _ratio(cls, v: Any) -> float | None:
        return None if v is None else number(v, positive=True, example="0.9 / 1.2, or null")

    @field_validator("require", mode="before")
    @classmethod
    def _require(cls, v: Any) -> Any:
        if v in ("base", "all", "any"):
            return v
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            return float(v)
        raise ValueError(f"must be base, all, any or a load > 0, got {v!r}|use \"base\"")


class ChampionConfig(_Strict):
    """The champion/challenger gate: each accuracy metric of the challenger may be at most
    ``tolerance`` (absolute) worse than the current ``production`` version's."""

    tolerance: float = 0.0
    metrics: list[str] = []

    @field_validator("tolerance", mode="before")
    @classmethod
    def _tolerance(cls, v: Any) -> float:
        return number(v, low=0.0, example="0.0 (not worse) or 0.01")


OBJECTIVES = ("throughput", "size", "recovery", "kv_cache")


class SelectionConfig(_Strict):
    """``selection``: how the champion is chosen among the base and the candidates that passed their gates.

    ``throughput``: the most output tokens/s at the highest load level that meets the SLO;
    ``size``: the smallest model; ``recovery``: the best worst-case accuracy recovery;
    ``kv_cache``: the most KV-cache tokens on the GPU (memory planner). Ties go to the next
    objective in ``then``, then to the recipe listed first.
    """

    objective: Literal["throughput", "size", "recovery", "kv_cache"] = "throughput"
    then: list[Literal["throughput", "size", "recovery", "kv_cache"]] = ["recovery", "size"]

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, v: Any) -> Any:
        return {"objective": v} if isinstance(v, str) else v


def _loc(prefix: str, loc: tuple[Any, ...]) -> str:
    return ".".join([prefix, *(str(p) for p in loc)])


def to_shipyard_error(field: str, err: ValidationError, example: str) -> ShipyardError:
    """The first validation error as one ShipyardError line (unknown keys are listed together)."""
    errors = err.errors()
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra:
        parent = extra[0]["loc"][:-1]
        names = sorted(str(e["loc"][-1]) for e in extra if e["loc"][:-1] == parent)
        return ShipyardError(_loc(field, parent), f"unknown key(s) {names}", f"see the parameter's description; e.g. {example}")
    first = errors[0]
    where = _loc(field, tuple(p for p in first["loc"] if p != "function-before"))
    msg = str(first.get("msg", "is invalid")).removeprefix("Value error, ")
    problem, _, fix = msg.partition("|")
    if first["type"] == "bool_type":
        return ShipyardError(where, f"must be true or false, got {first.get('input')!r}", "use a JSON boolean")
    if first["type"] == "literal_error":
        return ShipyardError(where, f"must be {first['ctx']['expected']}, got {first.get('input')!r}", "pick one of those")
    if first["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return ShipyardError(where, f"must be an object, got {first.get('input')!r}", f"e.g. {example}")
    return ShipyardError(where, problem, fix or f"e.g. {example}")


def parse(model: type[M], value: str | Mapping[str, Any] | None, field: str, example: str) -> M:
    """``value`` (JSON text, a mapping, or empty for the defaults) as ``model``; one-line errors."""
    if isinstance(value, str) and model is SelectionConfig and value.strip() and not value.strip().startswith("{"):
        data: Any = value.strip()
    else:
        data = json_object(value, field, example)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise to_shipyard_error(field, err, example) from None


def accuracy_config(value: str | Mapping[str, Any] | None, field: str = "accuracy_thresholds") -> AccuracyConfig:
    """The accuracy gate's config (empty: paired non-inferiority, margin 0.02, alpha 0.05, Holm)."""
    return parse(AccuracyConfig, value, field, '{"max_loss": 0.02}')


def slo_config(value: str | Mapping[str, Any] | None, field: str = "slo") -> SloConfig:
    """The SLO gate's config (empty: generous figures a CPU run of a small model meets)."""
    return parse(SloConfig, value, field, '{"ttft_p99_ms": 500}')


def selection_config(value: str | Mapping[str, Any] | None, field: str = "selection") -> SelectionConfig:
    """The selection objective: a bare name (``throughput``) or ``{"objective": ..., "then": [...]}``."""
    return parse(SelectionConfig, value, field, '"throughput" or {"objective": "size"}')
