"""Ray metrics and the cheap live counters behind ``TableActor.status()``.

Two views of the same events, kept by the table's actor process:

- Ray metrics (:mod:`ray.util.metrics`), exported by each node's metrics
  agent in Prometheus format (Ray prefixes every name with ``ray_``):
  ``raydelta_commits`` (counter, tag ``outcome``: ``committed``,
  ``conflict``, ``rejected``), ``raydelta_commit_rebases`` (commits that
  lost a race and were rebased), ``raydelta_commit_latency_seconds``
  (histogram of the actor's time per commit request) and
  ``raydelta_checkpoint_shards_done`` / ``raydelta_checkpoint_bytes_written``
  (recorded by the checkpoint tasks' driver, see
  :class:`raydelta.actors.checkpoint.runner.CheckpointMetrics`). Every
  series carries the tag ``table`` (the table's URI).
- :class:`CommitCounters`: in-memory totals and a one-minute window of
  commit times, read by ``status()`` without touching Ray or storage.

Invariants:
- Recording never fails a commit: a process that cannot export metrics (no
  Ray worker context) keeps the counters only, and an error while recording
  is logged at debug level and dropped.
- The counters count this incarnation's work: a restarted actor starts them
  at zero (its ``restarts`` says so).
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

LATENCY_BOUNDARIES_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0)
"""Histogram buckets of ``raydelta_commit_latency_seconds``."""

RATE_WINDOW_S = 60.0
"""``commits_per_second`` is the rate over this many most recent seconds."""

COMMIT_OUTCOMES = ("committed", "conflict", "rejected")


class _RayMetrics:
    """The process's Ray metric objects, shared by every table it hosts (one
    set per process, not per table: a host holds thousands of tables)."""

    def __init__(self) -> None:
        self.commits: Any = None
        self.rebases: Any = None
        self.latency: Any = None
        try:
            from ray.util.metrics import Counter, Histogram

            self.commits = Counter(
                "raydelta_commits",
                description="Commit requests answered by the TableActor, by outcome.",
                tag_keys=("table", "outcome"),
            )
            self.rebases = Counter(
                "raydelta_commit_rebases",
                description="Commits that lost a race and were rebased onto the winners.",
                tag_keys=("table",),
            )
            self.latency = Histogram(
                "raydelta_commit_latency_seconds",
                description="Time the TableActor spent on one commit request.",
                boundaries=list(LATENCY_BOUNDARIES_S),
                tag_keys=("table",),
            )
        except Exception:  # no Ray worker context, or an old Ray: counters only
            logger.debug("Ray metrics unavailable", exc_info=True)


@functools.cache
def _ray_metrics() -> _RayMetrics:
    return _RayMetrics()


class TableMetrics:
    """The Ray metrics of one table's commits (absent, silently, where Ray cannot export)."""

    def __init__(self, table_uri: str) -> None:
        self._tags = {"table": table_uri}
        shared = _ray_metrics()
        self._commits: Any = shared.commits
        self._rebases: Any = shared.rebases
        self._latency: Any = shared.latency

    def commit(self, outcome: str, seconds: float, *, rebased: bool) -> None:
        try:
            if self._commits is not None:
                self._commits.inc(1.0, tags={**self._tags, "outcome": outcome})
            if self._rebases is not None and rebased:
                self._rebases.inc(1.0, tags=self._tags)
            if self._latency is not None:
                self._latency.observe(seconds, tags=self._tags)
        except Exception:
            logger.debug("cannot record metrics", exc_info=True)


class CommitCounters:
    """Totals since this incarnation started, and the recent commit rate."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock: Callable[[], float] = clock
        self.outcomes: dict[str, int] = dict.fromkeys(COMMIT_OUTCOMES, 0)
        self.rebased = 0
        self._recent: deque[float] = deque()

    def record(self, outcome: str, *, rebased: bool) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if rebased:
            self.rebased += 1
        if outcome == "committed":
            now = self._clock()
            self._recent.append(now)
            self._trim(now)

    def commits_per_second(self) -> float:
        """Commits over the last :data:`RATE_WINDOW_S` seconds (or since the
        first one, when that is more recent), per second."""
        now = self._clock()
        self._trim(now)
        if not self._recent:
            return 0.0
        span = max(now - self._recent[0], 1.0)
        return len(self._recent) / min(span, RATE_WINDOW_S)

    def _trim(self, now: float) -> None:
        while self._recent and now - self._recent[0] > RATE_WINDOW_S:
            self._recent.popleft()
