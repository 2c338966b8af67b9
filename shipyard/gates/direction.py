"""One rule for which way a metric is better, used by every gate.

lm-eval declares ``higher_is_better`` per metric; that declaration wins whenever it is known
(the evaluate step keeps it in ``summary.json``). Figures without one (benchmark latencies,
sizes, figures recorded on a model version) follow their name: perplexity, loss, error rates,
bits per byte, latencies (``ttft``, ``itl``, ``tpot``, ``latency``, ``*_ms``, ``*_s``) and sizes
are lower-is-better; everything else (accuracy, throughput such as ``*_per_s``, recovery) is
higher-is-better.
"""

from __future__ import annotations

LOWER_IS_BETTER_HINTS = ("perplexity", "loss", "error", "_ppl", "bits_per_byte", "ttft", "itl", "tpot",
                         "latency", "size_bytes", "wall_time")
LOWER_IS_BETTER_SUFFIXES = ("_ms", "_s", "_seconds", "_bytes")
#: Figures that are not model quality (timings, sizes, stderr): never compared as accuracy.
NOT_ACCURACY_HINTS = ("stderr", "wall_time", "time_s", "duration", "seconds", "size", "bytes", "n_samples",
                      "gate_passed", "recovery/")


def higher_is_better(name: str, declared: bool | None = None) -> bool:
    """Whether a larger value of ``name`` is better: ``declared`` (lm-eval) when known, else the name."""
    if declared is not None:
        return bool(declared)
    lowered = name.lower()
    if any(hint in lowered for hint in LOWER_IS_BETTER_HINTS):
        return False
    return "_per_" in lowered or not lowered.endswith(LOWER_IS_BETTER_SUFFIXES)


def is_accuracy(name: str) -> bool:
    """Whether ``name`` is a model-quality figure (an eval score), not a timing, size or stderr."""
    lowered = name.lower()
    return not any(hint in lowered for hint in NOT_ACCURACY_HINTS)


def worse_by(name: str, candidate: float, reference: float, declared: bool | None = None) -> float:
    """How much worse ``candidate`` is than ``reference`` (negative when better), in the metric's units."""
    return reference - candidate if higher_is_better(name, declared) else candidate - reference
