"""How often the performance intervals leave out 1 when base and candidate are the same (issue 31).

    PYTHONPATH=. .venvs/base/bin/python benchmarks/interval_calibration.py [--pairs 300 120] [--sizes 12 100]

Draws same-distribution base/candidate pairs (both from one latency distribution: the same
weights measured twice), builds their level dicts as the benchmark writes them (the per-request
``samples`` that :func:`shipyard.gates.noise.level_ratios` reads), computes the candidate / base
rows with :func:`shipyard.gates.noise.level_ratios` (1000 resamples, the module's fixed seed) and
prints, per number of requests a level and per figure, the miss rate (the share of pairs whose 95%
interval leaves out 1; 5% is the target) with its binomial standard error, the pairs that got no
interval, and how often a x1.2 latency budget would fail on noise alone (the point over 1.2, and
the interval's lower end over 1.2).

The latency shape, per request: TTFT lognormal (median 180 ms, sigma 0.25) with 3% slow outliers
(x3, a queue or prefill spike); the request's mean ITL lognormal (median 60 ms, sigma 0.1) with 3%
at x1.8; 16-64 output tokens; request latency = TTFT + ITL x (tokens - 1); concurrency 1.
Run the script against two checkouts (``PYTHONPATH``) to compare methods side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from typing import Any

from shipyard.core.numbers import percentile
from shipyard.gates.noise import FIGURES, level_ratios


def draw_level(rng: random.Random, n: int) -> dict[str, Any]:
    """One level of ``n`` requests from the fixed latency distribution, shaped as the benchmark keeps it."""
    ttft, itl, lat, tok = [], [], [], []
    for _ in range(n):
        t = 180.0 * math.exp(rng.gauss(0, 0.25)) * (3.0 if rng.random() < 0.03 else 1.0)
        i = 60.0 * math.exp(rng.gauss(0, 0.1)) * (1.8 if rng.random() < 0.03 else 1.0)
        k = rng.randint(16, 64)
        ttft.append(t)
        itl.append(i)
        tok.append(k)
        lat.append((t + i * (k - 1)) / 1000)
    return {"name": "concurrent@1", "concurrency_mean": 1.0,
            "samples": {"ttft_ms": ttft, "itl_ms": itl, "latency_s": lat, "output_tokens": tok}}


def figures(level: dict[str, Any]) -> dict[str, float]:
    """The level's summary figures as the reports compute them (p99s; tok/s by Little's law)."""
    s = level["samples"]
    return {"output_tokens_per_s": level["concurrency_mean"] * sum(s["output_tokens"]) / sum(s["latency_s"]),
            "ttft_p99": percentile(sorted(s["ttft_ms"]), 0.99), "itl_p99": percentile(sorted(s["itl_ms"]), 0.99)}


def calibrate(n: int, pairs: int, seed: int) -> dict[str, Any]:
    """Miss rates per figure over ``pairs`` same-distribution pairs of ``n`` requests each."""
    rng = random.Random(seed)
    counts = {key: {"miss": 0, "none": 0, "point_over_1.2": 0, "low_over_1.2": 0, "width": 0.0}
              for key, _, _ in FIGURES}
    notes: set[str] = set()
    for _ in range(pairs):
        base, cand = draw_level(rng, n), draw_level(rng, n)
        fb, fc = figures(base), figures(cand)
        measured = {key: fc[key] / fb[key] for key, _, _ in FIGURES}
        for row in level_ratios(base, cand, measured):
            c = counts[row["figure"]]
            if row["lower_is_better"]:
                c["point_over_1.2"] += row["ratio"] > 1.2
            if row["low"] is None:
                c["none"] += 1
                notes.add(row["note"])
                continue
            c["miss"] += not row["low"] <= 1 <= row["high"]
            c["width"] += row["high"] - row["low"]
            if row["lower_is_better"]:
                c["low_over_1.2"] += row["low"] > 1.2
    out = {}
    for key, c in counts.items():
        k = pairs - c["none"]
        rate = c["miss"] / k if k else None
        out[key] = {**c, "with_interval": k, "miss_rate": rate,
                    "stderr": math.sqrt(rate * (1 - rate) / k) if k and rate is not None else None,
                    "mean_width": c["width"] / k if k else None}
    return {"n": n, "pairs": pairs, "figures": out, "notes": sorted(notes)}


def main() -> None:
    """Print the table (and write JSON with ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[12, 100], help="requests a level")
    ap.add_argument("--pairs", type=int, nargs="+", default=[300, 120], help="pairs per size")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    results = []
    print("| n | pairs | figure | miss rate (+- s.e.) | no interval | mean width | point > 1.2 | low > 1.2 | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, pairs in zip(args.sizes, args.pairs, strict=True):
        start = time.process_time()
        res = calibrate(n, pairs, args.seed + n)
        res["cpu_s"] = round(time.process_time() - start, 1)
        results.append(res)
        for key, label, lower in FIGURES:
            f = res["figures"][key]
            rate = "-" if f["miss_rate"] is None else f"{f['miss_rate']:.1%} +- {f['stderr']:.1%} ({f['miss']}/{f['with_interval']})"
            width = "-" if f["mean_width"] is None else f"{f['mean_width']:.3f}"
            over = (f"{f['point_over_1.2']}", f"{f['low_over_1.2']}") if lower else ("-", "-")
            print(f"| {n} | {pairs} | {label} | {rate} | {f['none']} | {width} | {over[0]} | {over[1]} | {res['cpu_s']} |")
        for note in res["notes"]:
            print(f"  no interval at n = {n}: {note}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
