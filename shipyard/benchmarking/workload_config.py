"""The ``workload`` config: which recorded traffic a benchmark replays, and how close it must stay.

A JSON object (or dict), every key optional::

    {"trace": "traces/ours.jsonl", "format": "mooncake", "block_size": 16,
     "fingerprint": "ours.fingerprint.json", "sample": false, "requests": 200, "seed": 0,
     "time_scale": 1, "max_model_len": 2048, "slo_class": "interactive", "privacy": "strict",
     "tolerance": {"ks_input": 0.1, "ks_output": 0.1, "w1_relative": 0.05, "rate_ratio": 0.2,
                   "hit_rate_delta": 0.1}}

* ``trace`` + ``format`` (mooncake, azure, burstgpt, chat): a recorded trace, fingerprinted; a
  Mooncake trace is replayed as recorded unless ``sample`` is true. ``fingerprint``: a fingerprint
  file (:mod:`shipyard.benchmarking.workload`); a trace is then sampled from it. ``local``: true
  uses the trace shipped with shipyard (:mod:`shipyard.benchmarking.local_trace`).
* ``requests``: how many requests to send (default: the trace's, or the fingerprint's count);
  ``seed``: the sampler's seed; ``time_scale``: replay at N x the recorded rate (default 1; the
  fingerprint keeps the recorded rates, so the SLO gate's capacity, "N x your recorded peak"
  (:mod:`shipyard.gates.capacity`), divides by the unscaled peak and names the scale).
* ``tolerance``: the workload fidelity check's limits (:data:`DEFAULT_TOLERANCE`): the KS distance
  between the input (``ks_input``) and output (``ks_output``) lengths sent and the fingerprint's
  (0.1: the largest gap between the two cumulative distributions is 10 points), or else their
  Wasserstein-1 distance relative to the fingerprint's mean length (``w1_relative`` 0.05: 5 %; a
  length distribution passes when either holds, since a few tokens of re-tokenization jitter on a
  trace of a few exact lengths moves the KS distance a lot and the mean shift little), the achieved
  arrival rate's relative distance from the recorded rate x ``time_scale`` (``rate_ratio`` 0.2,
  i.e. within 20 %), and ``|delta hit rate|``, the server's prefix-cache hit ratio (vLLM's
  counters) against the fingerprint's theoretical one (``hit_rate_delta`` 0.1, i.e. 10 points).
  ``require``: the checks that must be measured (default all four; a check the fingerprint has no
  figure for, such as the hit rate of an Azure trace, is skipped).
"""

from __future__ import annotations

from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.jsonargs import json_object, validation_error

#: the fidelity check's limits when the workload config sets none
DEFAULT_TOLERANCE: dict[str, Any] = {"ks_input": 0.1, "ks_output": 0.1, "w1_relative": 0.05, "rate_ratio": 0.2,
                                     "hit_rate_delta": 0.1,
                                     "require": ["ks_input", "ks_output", "rate", "hit_rate"]}
CHECKS = ("ks_input", "ks_output", "rate", "hit_rate")
EXAMPLE = '{"local": true, "tolerance": {"hit_rate_delta": 0.1}}'


def parse_workload_config(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """Validate a workload config (JSON text or dict): strict types, the tolerance filled in."""
    from typing import Annotated, Literal

    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    share = Annotated[float | int, Field(ge=0, le=1)]

    class Tolerance(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
        ks_input: share = DEFAULT_TOLERANCE["ks_input"]
        ks_output: share = DEFAULT_TOLERANCE["ks_output"]
        w1_relative: share = DEFAULT_TOLERANCE["w1_relative"]
        rate_ratio: Annotated[float | int, Field(ge=0, le=100)] = DEFAULT_TOLERANCE["rate_ratio"]
        hit_rate_delta: share = DEFAULT_TOLERANCE["hit_rate_delta"]
        require: list[Literal["ks_input", "ks_output", "rate", "hit_rate"]] = list(DEFAULT_TOLERANCE["require"])

    class Workload(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
        local: bool = False
        trace: str | None = None
        format: Literal["mooncake", "azure", "burstgpt", "chat"] = "mooncake"
        fingerprint: str | None = None
        block_size: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
        sample: bool = False
        requests: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
        seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
        time_scale: Annotated[float | int, Field(gt=0, le=1000)] = 1.0
        max_model_len: Annotated[int, Field(ge=1)] | None = None
        slo_class: Literal["interactive", "batch"] = "interactive"
        privacy: Literal["strict", "tokenize"] = "strict"
        tolerance: Tolerance = Tolerance()

    raw = json_object(value, "workload", EXAMPLE)
    try:
        cfg = Workload.model_validate(raw).model_dump()
    except ValidationError as err:
        raise validation_error("workload", err, EXAMPLE) from None
    sources = [k for k in ("local", "trace", "fingerprint") if cfg[k]]
    if len(sources) > 1:
        raise ShipyardError("workload", f"{' and '.join(sources)} are both set", "name one source: local, trace or fingerprint")
    if not sources:
        raise ShipyardError("workload", "names no traffic", f"set local, trace or fingerprint, e.g. {EXAMPLE}")
    for key in ("ks_input", "ks_output", "w1_relative", "rate_ratio", "hit_rate_delta"):
        cfg["tolerance"][key] = float(cfg["tolerance"][key])
    cfg["time_scale"] = float(cfg["time_scale"])
    return cfg
