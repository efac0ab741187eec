"""What a checkpoint reports: its summary, the reports of its Ray tasks, and
progress while it runs.

These are the typed results of :class:`raydelta.actors.checkpoint.actor.CheckpointActor`
and :class:`raydelta.actors.checkpoint.runner.CheckpointRunner`
(``raydelta checkpoint --json`` prints a :class:`CheckpointSummary`).

Invariants:
- Frozen pydantic models with the camelCase aliases they are printed with;
  unknown fields are refused (``extra="forbid"``), so a renamed field fails
  loudly instead of vanishing.
- ``Progress.phase == "done"`` is the last progress of a checkpoint;
  :class:`StderrProgress` always prints it, whatever its rate limit.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CheckpointKind = Literal["auto", "v2", "classic"]
TopLevel = Literal["json", "parquet"]
Trigger = Literal["demand", "policy", "job"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


class TaskReport(_Model):
    """What one Ray task says about itself."""

    kind: Literal["map", "shard", "overflow", "v1"]
    pid: int
    seconds: float
    peak_rss_mb: float = Field(alias="peakRssMb")
    rows: int = 0
    output_bytes: int = Field(default=0, alias="outputBytes")
    """Map task: Arrow bytes of its outputs (object store); shard task: sidecar bytes."""
    ended_at: float = Field(default=0.0, alias="endedAt")
    """Wall clock (epoch seconds) when the task ended: with ``seconds``, a timeline."""
    memory_mb: dict[str, float] = Field(default_factory=dict, alias="memoryMb")
    """The worker's resident memory when the task ended: ``anon`` (private),
    ``shmem`` (object-store pages it touched), ``file``."""
    largest_read_rows: int = Field(default=0, alias="largestReadRows")
    """The most checkpoint rows one read handed out at once since the task
    started (:data:`raydelta.storage.log.read_bound.READS`): never above the
    read bound the task was given."""


class CheckpointSummary(_Model):
    """The outcome of one checkpoint (what ``raydelta checkpoint --json`` prints)."""

    table_uri: str = Field(alias="tableUri")
    version: int
    kind: Literal["classic", "v2"]
    top_level: str = Field(alias="topLevel")
    """File name of the checkpoint file (under ``_delta_log``)."""
    trigger: Trigger
    source: Literal["none", "sidecars", "shuffle", "stream"]
    """How the previous checkpoint's rows were read: not at all (no previous
    checkpoint, or every shard reused), shard by shard from its sidecars,
    through map tasks, or streamed by the V1 writer."""
    files_written: list[str] = Field(alias="filesWritten")
    sidecars_written: int = Field(alias="sidecarsWritten")
    sidecars_reused: int = Field(alias="sidecarsReused")
    num_shards: int = Field(alias="numShards")
    shards_checked: int = Field(default=0, alias="shardsChecked")
    """Touched shards whose previous sidecar's key index was consulted."""
    overflow_actions: int = Field(default=0, alias="overflowActions")
    """Actions in the overflow sidecar (committed actions of shards not rebuilt)."""
    execution: Literal["fan_out", "one_task"] = "fan_out"
    """V2: sidecars written by map and shard tasks, or all by one task (small
    tables; :mod:`raydelta.actors.checkpoint.one_task`)."""
    num_adds: int = Field(alias="numAdds")
    num_actions: int = Field(alias="numActions")
    """Rows of the checkpoint, sidecars included (``_last_checkpoint.size``)."""
    bytes_written: int = Field(alias="bytesWritten")
    checkpoint_bytes: int = Field(alias="checkpointBytes")
    """Bytes of the whole checkpoint, reused sidecars included."""
    seconds: float
    commits_since_previous: int = Field(alias="commitsSincePrevious")
    previous_version: int | None = Field(alias="previousVersion")
    actor_peak_rss_mb: float = Field(alias="actorPeakRssMb")
    phases: dict[str, float] = Field(default_factory=dict)
    """Wall seconds of ``plan`` (reading the log), ``sidecars`` / ``classic``
    (the tasks), ``top_level`` (top-level file and ``_last_checkpoint``)."""
    tasks: list[TaskReport] = Field(default_factory=list)
    skipped: str | None = None
    """Why nothing was written, when nothing was: a classic checkpoint of the
    version was already there (another writer's, such as delta-spark's, which
    checkpoints the same versions); ``topLevel`` then names that file and
    ``filesWritten`` is empty."""


class Progress(_Model):
    version: int
    phase: str
    shards_total: int = Field(default=0, alias="shardsTotal")
    shards_done: int = Field(default=0, alias="shardsDone")
    shards_reused: int = Field(default=0, alias="shardsReused")
    bytes_written: int = Field(default=0, alias="bytesWritten")
    seconds: float = 0.0

    def line(self) -> str:
        """``checkpoint v110 [sidecars] shards 12/20 (3 reused), 1.2 GB, 0.8 s``."""
        shards = ""
        if self.shards_total:
            shards = f" shards {self.shards_done}/{self.shards_total}"
            if self.shards_reused:
                shards += f" ({self.shards_reused} reused)"
            shards += ","
        return (
            f"checkpoint v{self.version} [{self.phase}]{shards} "
            f"{_format_bytes(self.bytes_written)}, {self.seconds:.1f} s"
        )


def _format_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # pragma: no cover


ProgressCallback = Callable[[Progress], None]


class StderrProgress:
    """Prints progress lines to stderr, at most every ``interval_s`` (and the last one)."""

    def __init__(self, *, interval_s: float = 0.5, prefix: str = "") -> None:
        self.interval_s = interval_s
        self.prefix = prefix
        self._last = 0.0

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        final = progress.phase == "done"
        if not final and now - self._last < self.interval_s:
            return
        self._last = now
        sys.stderr.write(f"{self.prefix}{progress.line()}\n")
        sys.stderr.flush()
