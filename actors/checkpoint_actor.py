"""``CheckpointActor``: checkpoints built in parallel Ray tasks, on policy and on demand.

One named, detached, restartable actor per table (``checkpoint:<uri>`` in
the ``raydelta`` namespace), subscribed to the table's ``TableActor``
(:func:`ensure_checkpointer`). It checkpoints every
``delta.checkpointInterval`` commits (default 10) when a
:class:`~raydelta.protocol.events.CommitPublished` says a version is durable
(``published``), on demand (:meth:`CheckpointActor.checkpoint`), and from a
Ray job (:mod:`raydelta.actors.checkpoint_job`). ``raydelta.compactionInterval = k``
(optional) also writes a log compaction file for every ``k`` commits.

How a checkpoint of version ``v`` is built (:class:`CheckpointRunner`):

- The actor reads only what is not a file action
  (:func:`raydelta.storage.checkpoint_sources.read_log_delta`): the previous
  checkpoint's non-file rows and the commits since it, i.e. the table's
  head plus the newest action of every file those commits touched.
- Tables without ``v2Checkpoint`` get a classic single-file V1 checkpoint
  (never multi-part), streamed by one task row group by row group.
- Tables with ``v2Checkpoint`` get a UUID-named V2 checkpoint whose file
  actions are in sidecars, ``target_actions_per_sidecar`` (50,000) per
  sidecar, hash-sharded by logical-file key. **Each sidecar is written by
  its own Ray task.** A shard task reads only its hash partition: the
  previous checkpoint's sidecar of that shard when the previous checkpoint
  was sharded the same way, else the rows that map tasks (one per row group
  range of the previous checkpoint) routed to it; plus the committed actions
  of its shard. A map task returns one object per node (its rows for the
  shards that node's tasks write, sorted by shard), so shard tasks slice
  their rows out of objects already on their node without copying.
- Incremental checkpoints (previous one sharded the same way): a shard is
  rewritten only if a committed action touches a key its sidecar holds,
  which the sidecar's footer index of key fingerprints tells without
  reading it. Actions on keys no sidecar holds (new files) go to one small
  overflow sidecar (at most ``target / 4`` actions, then folded into the
  shards). Every other sidecar is reused as it is
  (:func:`raydelta.storage.checkpoint_sources.plan_aligned`).

Invariants:
- Order of publication: every sidecar exists before the top-level file is
  written (``after_sidecars`` crash point in between), the top-level file
  exists before ``_last_checkpoint`` names it (``before_last_checkpoint``).
  A crash anywhere leaves unreferenced files only; readers never see a
  partial checkpoint. A shard task that dies is retried by Ray and writes a
  fresh sidecar; the dead attempt's file is never referenced.
- Only published versions are checkpointed: policy checkpoints take the
  version of a ``published`` event; on-demand ones the newest commit file.
- Tombstones older than ``delta.deletedFileRetentionDuration`` are dropped,
  younger ones kept.
- Checkpoints run one at a time per actor; commit events are handled one at
  a time in commit order (those arriving during a checkpoint wait for it), a
  policy checkpoint for every version that is a multiple of the interval
  and newer than the last checkpoint.
- Progress: :meth:`CheckpointActor.progress` while running, a text progress
  line on stderr (the actor's log), Ray metrics
  ``raydelta_checkpoint_shards_done`` / ``raydelta_checkpoint_bytes_written``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import ray
from pydantic import BaseModel, ConfigDict, Field

from raydelta.actors.cluster import checkpoint_actor_name, normalize_uri, start_actor
from raydelta.actors.faults import crash_point
from raydelta.protocol.actions import Metadata, Protocol, Sidecar
from raydelta.protocol.checkpoint_plan import (
    DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    ShardWork,
    choose_num_shards,
    sidecar_counts,
    table_configuration,
)
from raydelta.protocol.checkpoint_schema import CheckpointLayout
from raydelta.protocol.errors import CheckpointWriteError, RaydeltaError
from raydelta.protocol.events import CommitPublished
from raydelta.protocol.file_names import (
    LAST_CHECKPOINT_NAME,
    classic_checkpoint_name,
    uuid_checkpoint_name,
)
from raydelta.protocol.last_checkpoint import LastCheckpointInfo, parse_last_checkpoint
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import V2_CHECKPOINT
from raydelta.storage.checkpoint_sources import (
    AlignedSidecars,
    LogDelta,
    SourcePiece,
    checkpoint_pieces,
    estimated_file_actions,
    fingerprint_footer,
    full_rows,
    group_bounds,
    memory_mb,
    merge_shard_rows,
    overflow_tags,
    partition_rows,
    partition_rows_grouped,
    peak_rss_mb,
    plan_aligned,
    read_file_actions,
    read_fingerprints,
    read_log_delta,
    select_shard_rows,
    shard_slice,
    shards_of_rows,
    slim_rows,
    split_delta,
    with_fingerprints,
    write_log_compaction,
    write_v1_streaming,
)
from raydelta.storage.checkpoint_writer import (
    write_last_checkpoint,
    write_shard_sidecar,
    write_sidecar,
    write_v2_checkpoint,
)
from raydelta.storage.log_reader import sidecar_path
from raydelta.storage.log_store import LogStore, log_store_for

COMPACTION_INTERVAL = "raydelta.compactionInterval"
"""Table property: write ``<v-k+1>.<v>.compacted.json`` after every ``k`` commits."""

SHARD_TASK_FAULT = "shard_task"
"""Crash point inside a shard task, after its sidecar is written (test hook)."""
MAP_TASK_FAULT = "map_task"
"""Crash point inside a map task, after it read and split its piece (test hook)."""

CheckpointKind = Literal["auto", "v2", "classic"]
TopLevel = Literal["json", "parquet"]
Trigger = Literal["demand", "policy", "job"]

logger = logging.getLogger(__name__)


actor_name = checkpoint_actor_name


# --- results -----------------------------------------------------------------------------


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


# --- Ray tasks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardJob:
    """One shard sidecar to build.

    Its previous rows come from map tasks (the ``mapped`` task arguments,
    already filtered), or from its previous sidecar and the previous
    overflow sidecar's rows of the shard (both filtered in the task).
    """

    shard: int
    num_shards: int
    previous_sidecar: str | None
    """Filesystem path of the shard's previous sidecar."""
    previous_overflow: str | None
    """Filesystem path of the previous overflow sidecar, when it holds rows of this shard."""
    delta_adds: pa.Table
    delta_removes: pa.Table


@dataclass(frozen=True)
class OverflowJob:
    """The overflow sidecar to write: the previous one's rows that stay, plus
    the committed actions of the shards that are not rebuilt."""

    num_shards: int
    previous_overflow: str | None
    rebuilt: frozenset[int]
    """Shards rebuilt by shard tasks: their rows leave the overflow."""
    delta_adds: pa.Table
    delta_removes: pa.Table
    touched_keys: pa.Array
    """Key strings of every committed action (they replace the previous overflow's rows)."""


@dataclass(frozen=True)
class ShardResult:
    shard: int
    """The shard, or -1 for the overflow sidecar."""
    sidecar: Sidecar | None
    num_adds: int
    num_removes: int
    report: TaskReport


OVERFLOW_SHARD = -1


def _report(
    kind: Literal["map", "shard", "overflow", "v1"],
    start: float,
    rows: int,
    output_bytes: int = 0,
) -> TaskReport:
    return TaskReport(
        kind=kind,
        pid=os.getpid(),
        seconds=time.perf_counter() - start,
        peakRssMb=peak_rss_mb(),
        rows=rows,
        outputBytes=output_bytes,
        endedAt=time.time(),
        memoryMb=memory_mb(),
    )


@ray.remote(num_cpus=1)
def _map_piece(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    piece: SourcePiece,
    num_shards: int,
    num_groups: int,
    exclude_keys: pa.Array,
    tombstone_cutoff_ms: int,
) -> tuple[Any, ...]:
    """Read one piece of the previous checkpoint; its rows in ``num_groups`` groups of
    consecutive shards (one object per group), then a report."""
    start = time.perf_counter()
    store = log_store_for(table_uri, storage_options)
    adds, removes = read_file_actions(store, piece)
    rows = adds.num_rows + removes.num_rows
    groups = partition_rows_grouped(
        adds,
        removes,
        num_shards=num_shards,
        num_groups=num_groups,
        exclude_keys=exclude_keys,
        tombstone_cutoff_ms=tombstone_cutoff_ms,
    )
    del adds, removes
    crash_point(MAP_TASK_FAULT)
    slim = [slim_rows(a, r) for a, r in groups]
    output = sum(a.nbytes + r.nbytes for a, r in slim)
    return (*slim, _report("map", start, rows, output))


@ray.remote(num_cpus=1)
def _write_shard(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    job: ShardJob,
    protocol: Protocol,
    metadata: Metadata,
    now_ms: int,
    tombstone_cutoff_ms: int,
    *mapped: tuple[pa.Table, pa.Table],
) -> ShardResult:
    """Merge and write one shard's sidecar (the unit of parallel work)."""
    start = time.perf_counter()
    store = log_store_for(table_uri, storage_options)
    layout = CheckpointLayout.for_table(TableConfiguration(protocol, metadata))
    if mapped:
        base = [full_rows(shard_slice(a, job.shard), shard_slice(r, job.shard)) for a, r in mapped]
    else:
        base = []
        if job.previous_sidecar is not None:
            piece = SourcePiece(job.previous_sidecar)
            base.append(read_file_actions(store, piece, with_fingerprints=True))
        if job.previous_overflow is not None:
            rows = read_file_actions(store, SourcePiece(job.previous_overflow))
            base.append(select_shard_rows(*rows, job.shard, job.num_shards))
    adds, removes = merge_shard_rows(
        base,
        job.delta_adds,
        job.delta_removes,
        tombstone_cutoff_ms=tombstone_cutoff_ms,
        base_filtered=bool(mapped),
    )
    sidecar = None
    if adds.num_rows or removes.num_rows:
        work = ShardWork(job.shard, job.num_shards, adds, removes)
        sidecar = write_shard_sidecar(
            store,
            work,
            layout=layout,
            now_ms=now_ms,
            footer_metadata=fingerprint_footer(adds, removes),
        )
    crash_point(SHARD_TASK_FAULT)
    rows_out = adds.num_rows + removes.num_rows
    size = 0 if sidecar is None else sidecar.size_in_bytes
    return ShardResult(
        job.shard, sidecar, adds.num_rows, removes.num_rows, _report("shard", start, rows_out, size)
    )


@ray.remote(num_cpus=1)
def _write_overflow(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    job: OverflowJob,
    protocol: Protocol,
    metadata: Metadata,
    now_ms: int,
    tombstone_cutoff_ms: int,
) -> ShardResult:
    """Write the overflow sidecar (see :class:`raydelta.storage.checkpoint_sources.AlignedPlan`)."""
    start = time.perf_counter()
    store = log_store_for(table_uri, storage_options)
    layout = CheckpointLayout.for_table(TableConfiguration(protocol, metadata))
    base: list[tuple[pa.Table, pa.Table]] = []
    if job.previous_overflow is not None:
        old_adds, old_removes = read_file_actions(store, SourcePiece(job.previous_overflow))
        kept = [
            (a, r)
            for shard, (a, r) in enumerate(
                partition_rows(
                    old_adds,
                    old_removes,
                    num_shards=job.num_shards,
                    exclude_keys=job.touched_keys,
                    tombstone_cutoff_ms=tombstone_cutoff_ms,
                )
            )
            if shard not in job.rebuilt
        ]
        base.extend(kept)
    adds, removes = merge_shard_rows(
        base,
        job.delta_adds,
        job.delta_removes,
        tombstone_cutoff_ms=tombstone_cutoff_ms,
        base_filtered=True,
    )
    sidecar = None
    if adds.num_rows or removes.num_rows:
        tags = overflow_tags(
            job.num_shards,
            shards_of_rows(adds, removes, job.num_shards),
            layout=layout.fingerprint,
            adds=adds,
            removes=removes,
        )
        sidecar = write_sidecar(store, adds, removes, layout=layout, tags=tags, now_ms=now_ms)
    rows = adds.num_rows + removes.num_rows
    size = 0 if sidecar is None else sidecar.size_in_bytes
    return ShardResult(
        OVERFLOW_SHARD,
        sidecar,
        adds.num_rows,
        removes.num_rows,
        _report("overflow", start, rows, size),
    )


@ray.remote(num_cpus=1)
def _write_v1(
    table_uri: str,
    storage_options: dict[str, Any] | None,
    delta: LogDelta,
    pieces: list[SourcePiece],
    now_ms: int,
) -> tuple[LastCheckpointInfo, TaskReport]:
    start = time.perf_counter()
    store = log_store_for(table_uri, storage_options)
    info = write_v1_streaming(store, delta, pieces, now_ms=now_ms)
    return info, _report("v1", start, info.size)


def _cpu_nodes() -> list[str]:
    """Ids of the alive nodes that have CPUs (one map output group per node)."""
    try:
        nodes = [
            n["NodeID"]
            for n in ray.nodes()  # type: ignore[no-untyped-call]
            if n.get("Alive") and float(n.get("Resources", {}).get("CPU", 0)) > 0
        ]
    except Exception:  # no cluster view: one group
        return [""]
    return nodes or [""]


def _node_strategy(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)


def _concat_rows(tables: list[pa.Table], empty: pa.Table) -> pa.Table:
    """Tables of one layout, concatenated (``empty``'s schema plus fingerprints if none)."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return with_fingerprints(empty.slice(0, 0))
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


# --- metrics -----------------------------------------------------------------------------------


class _Metrics:
    """Ray metrics, when this process can export them (silently absent otherwise)."""

    def __init__(self) -> None:
        self._shards: Any = None
        self._bytes: Any = None
        try:
            from ray.util.metrics import Counter

            self._shards = Counter(
                "raydelta_checkpoint_shards_done",
                description="Checkpoint sidecars written or reused.",
                tag_keys=("table",),
            )
            self._bytes = Counter(
                "raydelta_checkpoint_bytes_written",
                description="Bytes of checkpoint files written.",
                tag_keys=("table",),
            )
        except Exception:  # metrics are optional (no Ray worker context, old Ray)
            logger.debug("Ray metrics unavailable", exc_info=True)

    def shard_done(self, table_uri: str, num_bytes: int) -> None:
        tags = {"table": table_uri}
        try:
            if self._shards is not None:
                self._shards.inc(1.0, tags=tags)
            if self._bytes is not None and num_bytes:
                self._bytes.inc(float(num_bytes), tags=tags)
        except Exception:
            logger.debug("cannot record metrics", exc_info=True)


# --- the runner --------------------------------------------------------------------------------

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


class CheckpointRunner:
    """Builds one checkpoint with Ray tasks (see the module docstring).

    Plain Python: the actor uses it, and so can any Ray driver.
    """

    def __init__(
        self,
        table_uri: str,
        storage_options: dict[str, Any] | None = None,
        *,
        target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
        max_overflow_actions: int | None = None,
        on_progress: ProgressCallback | None = None,
        metrics: _Metrics | None = None,
    ) -> None:
        self.table_uri = table_uri
        self.storage_options = storage_options
        self.target_actions_per_sidecar = target_actions_per_sidecar
        self.max_overflow_actions = (
            max(1, target_actions_per_sidecar // 4)
            if max_overflow_actions is None
            else max_overflow_actions
        )
        self.on_progress = on_progress
        self.metrics = metrics

    @property
    def store(self) -> LogStore:
        return log_store_for(self.table_uri, self.storage_options)

    def run(
        self,
        version: int | None = None,
        *,
        kind: CheckpointKind = "auto",
        top_level: TopLevel = "json",
        trigger: Trigger = "demand",
    ) -> CheckpointSummary:
        """Checkpoint ``version`` (the newest published one when None)."""
        if kind not in ("auto", "v2", "classic"):
            raise ValueError(f"kind must be auto, v2 or classic, got {kind!r}")
        if top_level not in ("json", "parquet"):
            raise ValueError(f"top_level must be json or parquet, got {top_level!r}")
        start = time.perf_counter()
        store = self.store
        delta = read_log_delta(store, version)
        config = table_configuration(delta.head)
        config.ensure_writable()
        v2_supported = config.is_feature_supported(V2_CHECKPOINT)
        if kind == "v2" and not v2_supported:
            raise CheckpointWriteError(
                f"the table does not support {V2_CHECKPOINT!r}: it can only have V1 checkpoints"
            )
        now_ms = int(time.time() * 1000)
        if kind == "v2" or (kind == "auto" and v2_supported):
            return self._run_v2(store, delta, config, now_ms, top_level, trigger, start)
        return self._run_v1(store, delta, now_ms, trigger, start)

    # --- progress ----------------------------------------------------------------------

    def _progress(self, progress: Progress) -> None:
        if self.on_progress is not None:
            try:
                self.on_progress(progress)
            except Exception:
                logger.debug("progress callback failed", exc_info=True)

    # --- V1 -------------------------------------------------------------------------------

    def _run_v1(
        self, store: LogStore, delta: LogDelta, now_ms: int, trigger: Trigger, start: float
    ) -> CheckpointSummary:
        pieces = checkpoint_pieces(store, delta.previous) if delta.previous is not None else []
        planned = time.perf_counter()
        self._progress(Progress(version=delta.version, phase="classic"))
        ref = _write_v1.remote(self.table_uri, self.storage_options, delta, pieces, now_ms)
        info, report = ray.get(ref)
        written_at = time.perf_counter()
        crash_point("before_last_checkpoint")
        write_last_checkpoint(store, info)
        phases = {
            "plan": planned - start,
            "classic": written_at - planned,
            "top_level": time.perf_counter() - written_at,
        }
        written = info.size_in_bytes or 0
        if self.metrics is not None:
            self.metrics.shard_done(self.table_uri, written)
        name = classic_checkpoint_name(delta.version)
        summary = CheckpointSummary(
            tableUri=self.table_uri,
            version=delta.version,
            kind="classic",
            topLevel=name,
            trigger=trigger,
            source="stream" if pieces else "none",
            filesWritten=[name],
            sidecarsWritten=0,
            sidecarsReused=0,
            numShards=0,
            numAdds=info.num_of_add_files or 0,
            numActions=info.size,
            bytesWritten=written,
            checkpointBytes=written,
            seconds=time.perf_counter() - start,
            commitsSincePrevious=delta.num_commits,
            previousVersion=None if delta.previous is None else delta.previous.version,
            actorPeakRssMb=peak_rss_mb(),
            phases=phases,
            tasks=[report],
        )
        self._progress(
            Progress(
                version=delta.version, phase="done", bytesWritten=written, seconds=summary.seconds
            )
        )
        return summary

    # --- V2 -------------------------------------------------------------------------------

    def _run_v2(
        self,
        store: LogStore,
        delta: LogDelta,
        config: TableConfiguration,
        now_ms: int,
        top_level: TopLevel,
        trigger: Trigger,
        start: float,
    ) -> CheckpointSummary:
        protocol, metadata = delta.head.protocol, delta.head.metadata
        assert protocol is not None and metadata is not None  # table_configuration checked
        layout = CheckpointLayout.for_table(config)
        cutoff = now_ms - config.deleted_file_retention_ms
        previous = delta.previous
        estimate = estimated_file_actions(store, previous)
        estimate += delta.adds.num_rows + delta.removes.num_rows
        num_shards = choose_num_shards(
            estimate,
            target_actions_per_sidecar=self.target_actions_per_sidecar,
            previous_num_shards=None if previous is None else previous.previous_num_shards(),
        )
        aligned = AlignedSidecars({}) if previous is None else previous.aligned_sidecars(num_shards)
        delta_parts = split_delta(delta.adds, delta.removes, num_shards)
        args = (self.table_uri, self.storage_options)
        refs: dict[Any, int] = {}
        map_reports: list[Any] = []
        reused: dict[int, Sidecar] = {}
        source: Literal["none", "sidecars", "shuffle", "stream"] = "none"
        checked = 0
        if aligned is not None:
            fingerprints = self._fingerprints(store, aligned, delta_parts)
            plan = plan_aligned(
                aligned,
                delta_parts,
                fingerprints,
                layout=layout.fingerprint,
                tombstone_cutoff_ms=cutoff,
                max_overflow_actions=self.max_overflow_actions,
            )
            checked = plan.checked_shards
            planned = time.perf_counter()
            reused = dict(plan.reuse)
            if plan.overflow == "reuse" and aligned.overflow is not None:
                reused[OVERFLOW_SHARD] = aligned.overflow
            overflow_path = (
                None if aligned.overflow is None else sidecar_path(store, aligned.overflow)
            )
            for shard in sorted(plan.rebuild):
                previous_sidecar = aligned.base.get(shard)
                from_overflow = overflow_path if shard in aligned.overflow_shards else None
                shard_adds, shard_removes = delta_parts[shard]
                if previous_sidecar is None and from_overflow is None:
                    if not (shard_adds.num_rows or shard_removes.num_rows):
                        continue
                else:
                    source = "sidecars"
                job = ShardJob(
                    shard,
                    num_shards,
                    None if previous_sidecar is None else sidecar_path(store, previous_sidecar),
                    from_overflow,
                    shard_adds,
                    shard_removes,
                )
                ref = _write_shard.options(scheduling_strategy="SPREAD").remote(
                    *args, job, protocol, metadata, now_ms, cutoff
                )
                refs[ref] = shard
            if plan.overflow == "rewrite":
                stays = [delta_parts[s] for s in sorted(plan.overflow_shards)]
                overflow_job = OverflowJob(
                    num_shards,
                    overflow_path,
                    plan.rebuild,
                    _concat_rows([a for a, _ in stays], delta.adds),
                    _concat_rows([r for _, r in stays], delta.removes),
                    delta.touched_key_strings(),
                )
                ref = _write_overflow.remote(
                    *args, overflow_job, protocol, metadata, now_ms, cutoff
                )
                refs[ref] = OVERFLOW_SHARD
        else:
            assert previous is not None
            source = "shuffle"
            planned = time.perf_counter()
            pieces = checkpoint_pieces(store, previous)
            exclude = delta.touched_key_strings()
            nodes = _cpu_nodes()
            bounds = group_bounds(num_shards, len(nodes))
            num_groups = len(bounds) - 1
            outputs: list[list[Any]] = [
                _map_piece.options(num_returns=num_groups + 1).remote(  # type: ignore[misc]
                    *args, piece, num_shards, num_groups, exclude, cutoff
                )
                for piece in pieces
            ]
            map_reports = [out[-1] for out in outputs]
            for group in range(num_groups):
                strategy = _node_strategy(nodes[group]) if num_groups > 1 else "DEFAULT"
                for shard in range(bounds[group], bounds[group + 1]):
                    shard_adds, shard_removes = delta_parts[shard]
                    job = ShardJob(shard, num_shards, None, None, shard_adds, shard_removes)
                    ref = _write_shard.options(scheduling_strategy=strategy).remote(
                        *args,
                        job,
                        protocol,
                        metadata,
                        now_ms,
                        cutoff,
                        *(out[group] for out in outputs),
                    )
                    refs[ref] = shard
            del outputs
        written, reports = self._collect(delta.version, refs, len(reused))
        reports.extend(ray.get(map_reports))
        sidecars_at = time.perf_counter()
        crash_point("after_sidecars")
        by_shard = dict(reused)
        by_shard.update({r.shard: r.sidecar for r in written if r.sidecar is not None})
        sidecars = [by_shard[s] for s in sorted(by_shard) if s != OVERFLOW_SHARD]
        if OVERFLOW_SHARD in by_shard:
            sidecars.append(by_shard[OVERFLOW_SHARD])
        overflow_counts = (
            sidecar_counts(by_shard[OVERFLOW_SHARD]) if OVERFLOW_SHARD in by_shard else None
        )
        file_id = str(uuid.uuid4())
        info = write_v2_checkpoint(
            store,
            delta.head,
            sidecars,
            now_ms=now_ms,
            fmt=top_level,
            update_last_checkpoint=False,
            file_id=file_id,
        )
        crash_point("before_last_checkpoint")
        write_last_checkpoint(store, info)
        name = uuid_checkpoint_name(delta.version, file_id, top_level)
        phases = {
            "plan": planned - start,
            "sidecars": sidecars_at - planned,
            "top_level": time.perf_counter() - sidecars_at,
        }
        new_sidecars = [r.sidecar for r in written if r.sidecar is not None]
        sidecar_bytes = sum(s.size_in_bytes for s in sidecars)
        top_bytes = (info.size_in_bytes or 0) - sidecar_bytes
        bytes_written = top_bytes + sum(s.size_in_bytes for s in new_sidecars)
        if self.metrics is not None:
            self.metrics.shard_done(self.table_uri, top_bytes)
        summary = CheckpointSummary(
            tableUri=self.table_uri,
            version=delta.version,
            kind="v2",
            topLevel=name,
            trigger=trigger,
            source=source,
            filesWritten=[f"_sidecars/{s.path}" for s in new_sidecars] + [name],
            sidecarsWritten=len(new_sidecars),
            sidecarsReused=len(reused),
            numShards=num_shards,
            shardsChecked=checked,
            overflowActions=sum(overflow_counts or (0, 0)),
            numAdds=info.num_of_add_files or 0,
            numActions=info.size,
            bytesWritten=bytes_written,
            checkpointBytes=info.size_in_bytes or 0,
            seconds=time.perf_counter() - start,
            commitsSincePrevious=delta.num_commits,
            previousVersion=None if previous is None else previous.version,
            actorPeakRssMb=peak_rss_mb(),
            phases=phases,
            tasks=reports,
        )
        self._progress(
            Progress(
                version=delta.version,
                phase="done",
                shardsTotal=len(refs) + len(reused),
                shardsDone=len(refs) + len(reused),
                shardsReused=len(reused),
                bytesWritten=bytes_written,
                seconds=summary.seconds,
            )
        )
        return summary

    def _fingerprints(
        self,
        store: LogStore,
        aligned: AlignedSidecars,
        delta_parts: list[tuple[pa.Table, pa.Table]],
    ) -> dict[int, pa.Array | None]:
        """The key index of every touched shard's previous sidecar (footers, read in parallel)."""
        wanted = [
            s
            for s, (adds, removes) in enumerate(delta_parts)
            if (adds.num_rows or removes.num_rows) and s in aligned.base
        ]
        if not wanted:
            return {}
        with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
            found = pool.map(lambda s: read_fingerprints(store, aligned.base[s]), wanted)
            return dict(zip(wanted, found, strict=True))

    def _collect(
        self, version: int, refs: dict[Any, int], num_reused: int
    ) -> tuple[list[ShardResult], list[TaskReport]]:
        """Wait for the shard tasks, reporting progress as each one ends."""
        start = time.perf_counter()
        total = len(refs) + num_reused
        results: list[ShardResult] = []
        done_bytes = 0
        pending = list(refs)
        self._progress(
            Progress(
                version=version,
                phase="sidecars",
                shardsTotal=total,
                shardsDone=num_reused,
                shardsReused=num_reused,
            )
        )
        if self.metrics is not None:
            for _ in range(num_reused):
                self.metrics.shard_done(self.table_uri, 0)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=0.5)
            for ref in ready:
                try:
                    result: ShardResult = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise CheckpointWriteError(
                        f"shard {refs[ref]} of the v{version} checkpoint failed: {exc}"
                    ) from exc
                results.append(result)
                size = result.sidecar.size_in_bytes if result.sidecar is not None else 0
                done_bytes += size
                if self.metrics is not None:
                    self.metrics.shard_done(self.table_uri, size)
            self._progress(
                Progress(
                    version=version,
                    phase="sidecars",
                    shardsTotal=total,
                    shardsDone=num_reused + len(results),
                    shardsReused=num_reused,
                    bytesWritten=done_bytes,
                    seconds=time.perf_counter() - start,
                )
            )
        return results, [r.report for r in results]


# --- the actor ---------------------------------------------------------------------------------


def _compaction_interval(config: TableConfiguration) -> int | None:
    value = config.configuration.get(COMPACTION_INTERVAL)
    if value is None:
        return None
    try:
        interval = int(value)
    except ValueError:
        return None
    return interval if interval >= 2 else None


MAX_CONCURRENCY = 8
"""Threads for calls (``checkpoint``, ``progress``, ``status``): progress is served
while a checkpoint runs. Commit events have their own single thread (the
``events`` concurrency group), so they are handled one at a time, in order."""


@ray.remote(  # type: ignore[call-overload]
    num_cpus=0,
    max_restarts=-1,
    max_task_retries=-1,
    concurrency_groups={"events": 1, "status": 1},
)
class CheckpointActor:
    """See the module docstring. Create through :func:`checkpoint_actor` or
    :func:`ensure_checkpointer`."""

    def __init__(
        self,
        table_uri: str,
        storage_options: dict[str, Any] | None = None,
        target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    ) -> None:
        self._uri = table_uri
        self._storage_options = storage_options
        self._target = target_actions_per_sidecar
        self._run_lock = threading.Lock()
        self._progress: Progress | None = None
        self._last: CheckpointSummary | None = None
        self._last_version: int | None = None
        self._config: TableConfiguration | None = None
        self._errors: list[str] = []
        self._compactions: list[str] = []
        self._metrics = _Metrics()
        self._printer = StderrProgress(prefix=f"[{table_uri}] ")
        self._last_event = -1

    def ping(self) -> str:
        return self._uri

    @ray.method(concurrency_group="status")
    def last_seen_version(self) -> int:
        """The newest commit event received (-1: none since this process started);
        a restarted ``TableActor`` re-sends the events after it."""
        return self._last_event

    # --- on demand ----------------------------------------------------------------------

    def checkpoint(
        self,
        version: int | None = None,
        *,
        kind: CheckpointKind = "auto",
        top_level: TopLevel = "json",
        target_actions_per_sidecar: int | None = None,
        max_overflow_actions: int | None = None,
        trigger: Trigger = "demand",
    ) -> CheckpointSummary:
        """Checkpoint ``version`` (the newest published commit when None) now.

        ``target_actions_per_sidecar`` / ``max_overflow_actions`` override the
        actor's settings for this checkpoint.
        """
        with self._run_lock:
            return self._run(
                version,
                kind=kind,
                top_level=top_level,
                trigger=trigger,
                target=target_actions_per_sidecar,
                max_overflow=max_overflow_actions,
            )

    def progress(self) -> Progress | None:
        """The running checkpoint's progress (None when idle)."""
        return self._progress

    def status(self) -> dict[str, Any]:
        return {
            "tableUri": self._uri,
            "running": self._run_lock.locked(),
            "lastCheckpointVersion": self._last_version,
            "last": None if self._last is None else self._last.to_json_dict(),
            "compactions": list(self._compactions),
            "errors": list(self._errors),
        }

    def _run(
        self,
        version: int | None,
        *,
        kind: CheckpointKind,
        top_level: TopLevel,
        trigger: Trigger,
        target: int | None = None,
        max_overflow: int | None = None,
    ) -> CheckpointSummary:
        runner = CheckpointRunner(
            self._uri,
            self._storage_options,
            target_actions_per_sidecar=target or self._target,
            max_overflow_actions=max_overflow,
            on_progress=self._on_progress,
            metrics=self._metrics,
        )
        try:
            summary = runner.run(version, kind=kind, top_level=top_level, trigger=trigger)
        finally:
            self._progress = None
        self._last = summary
        self._last_version = max(self._last_version or -1, summary.version)
        return summary

    def _on_progress(self, progress: Progress) -> None:
        self._progress = None if progress.phase == "done" else progress
        self._printer(progress)

    # --- policy ---------------------------------------------------------------------------

    @ray.method(concurrency_group="events")
    def on_commit(self, event: CommitPublished) -> None:
        """A commit is durable: checkpoint / compact when the table's policy says so.

        Runs in the ``events`` thread: events are handled in commit order, and
        those arriving during a policy checkpoint wait for it.
        """
        if event.table_uri != self._uri or not event.published:
            return
        self._last_event = max(self._last_event, event.version)
        try:
            config = self._configuration(event)
        except RaydeltaError:
            logger.warning("cannot read the configuration of %s", self._uri, exc_info=True)
            return
        compaction = _compaction_interval(config)
        if compaction and (event.version + 1) % compaction == 0:
            self._compact(event.version - compaction + 1, event.version)
        if event.version <= 0 or event.version % config.checkpoint_interval:
            return
        last = self._last_checkpoint_version()
        if last is not None and last >= event.version:
            return
        with self._run_lock:
            try:
                self._run(event.version, kind="auto", top_level="json", trigger="policy")
            except Exception as exc:  # the next interval tries again
                logger.warning("policy checkpoint of v%d failed", event.version, exc_info=True)
                self._errors.append(f"v{event.version}: {type(exc).__name__}: {exc}")

    def _compact(self, start: int, end: int) -> None:
        last = self._last_checkpoint_version()
        if start < 1 or (last is not None and start <= last):
            return
        try:
            name = write_log_compaction(log_store_for(self._uri, self._storage_options), start, end)
        except RaydeltaError as exc:
            self._errors.append(f"compaction [{start}, {end}]: {type(exc).__name__}: {exc}")
            return
        if name is not None:
            self._compactions.append(name)

    def _configuration(self, event: CommitPublished) -> TableConfiguration:
        if self._config is None or event.has_metadata_change or event.has_protocol_change:
            store = log_store_for(self._uri, self._storage_options)
            self._config = table_configuration(read_log_delta(store, event.version).head)
        return self._config

    def _last_checkpoint_version(self) -> int | None:
        if self._last_version is None:
            store = log_store_for(self._uri, self._storage_options)
            try:
                info = parse_last_checkpoint(store.read(LAST_CHECKPOINT_NAME))
            except FileNotFoundError:
                info = None
            listed = [f.require_version() for f in store.list_from(0) if f.is_checkpoint]
            versions = listed + ([info.version] if info is not None else [])
            self._last_version = max(versions) if versions else None
        return self._last_version


# --- handles -----------------------------------------------------------------------------------


def checkpoint_actor(
    table_uri: str,
    *,
    storage_options: dict[str, Any] | None = None,
    target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    runtime_env: dict[str, Any] | None = None,
) -> Any:
    """The table's ``CheckpointActor`` (created if none runs; ``table_uri`` normalized)."""
    uri = normalize_uri(table_uri)
    options: dict[str, Any] = {"max_concurrency": MAX_CONCURRENCY}
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    return start_actor(
        CheckpointActor,
        actor_name(uri),
        uri,
        storage_options,
        target_actions_per_sidecar,
        options=options,
    )


def ensure_checkpointer(
    table: Any,
    *,
    target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    runtime_env: dict[str, Any] | None = None,
) -> Any:
    """Start (or find) ``table``'s ``CheckpointActor`` and subscribe it to its commits.

    ``table`` is an :class:`raydelta.actors.client.Table`. Returns the actor handle.
    """
    handle = checkpoint_actor(
        table.uri,
        storage_options=table.storage_options,
        target_actions_per_sidecar=target_actions_per_sidecar,
        runtime_env=runtime_env,
    )
    ray.get(handle.ping.remote())
    ray.get(table.actor.subscribe.remote(actor_name(table.uri), handle))
    return handle
