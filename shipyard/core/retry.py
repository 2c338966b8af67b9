"""The one retry policy: a number of attempts and an exponential backoff between them.

The first wait is ``backoff_s`` seconds, each next one twice the last, capped at ``cap_s``
(default 30 s). A client reads its policy from two environment variables of its own
(:meth:`Retry.from_env`, parsed by :mod:`shipyard.core.env`, so a bad value is a one-line error):

========== ============================== ================================ =========
client     attempts                       first wait (seconds)             defaults
========== ============================== ================================ =========
registry   ``SHIPYARD_REGISTRY_RETRIES``  ``SHIPYARD_REGISTRY_BACKOFF``    5, 1 s
MLflow     ``SHIPYARD_MLFLOW_ATTEMPTS``   ``SHIPYARD_MLFLOW_BACKOFF_S``    5, 2 s
========== ============================== ================================ =========

A retry loop reads::

    for attempt in policy.tries():      # sleeps before every attempt but the first
        try:
            return do_it()
        except TransientError as err:
            last = err
    raise ShipyardError(..., f"failed after {policy.attempts} attempts ({last})", ...)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from shipyard.core.env import env_float, env_int

CAP_S = 30.0


@dataclass(frozen=True)
class Retry:
    """``attempts`` tries (at least one) with waits of ``backoff_s``, doubling, capped at ``cap_s``."""

    attempts: int
    backoff_s: float
    cap_s: float = CAP_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "attempts", max(1, int(self.attempts)))
        object.__setattr__(self, "backoff_s", max(0.0, float(self.backoff_s)))

    @classmethod
    def from_env(cls, attempts_env: str, backoff_env: str, *, attempts: int, backoff_s: float) -> Retry:
        """The policy named by two environment variables, with these defaults when unset."""
        return cls(env_int(attempts_env, attempts, minimum=1), env_float(backoff_env, backoff_s, minimum=0.0))

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        return min(self.cap_s, self.backoff_s * 2 ** (attempt - 1))

    def is_last(self, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1-based) is the final one."""
        return attempt >= self.attempts

    def tries(self) -> Iterator[int]:
        """Attempt numbers 1..attempts, sleeping :meth:`delay` before each one after the first.

        Leave the loop (``return``/``break``/``raise``) on success; no wait follows the last attempt.
        """
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                time.sleep(self.delay(attempt - 1))
            yield attempt
