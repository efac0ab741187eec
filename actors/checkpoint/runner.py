"""Building one checkpoint: plan from the log, launch the Ray tasks, publish.

:class:`CheckpointRunner` is plain Python (the ``CheckpointActor`` uses it,
and so can any Ray driver). How a checkpoint is built is described in
:mod:`raydelta.actors.checkpoint.actor`.

Invariants:
- Order of publication: every sidecar exists before the top-level file is
  written (``after_sidecars`` crash point in between), and the top-level
  file exists before ``_last_checkpoint`` names it
  (``before_last_checkpoint``). A crash anywhere leaves unreferenced files
  only.
- The checkpoint names exactly the sidecars reused from the previous
  checkpoint plus those the collected task results wrote; a failed shard
  task fails the checkpoint (:class:`CheckpointWriteError`) before anything
  is published.
- Tombstones older than ``delta.deletedFileRetentionDuration`` are dropped.
- Fan-out or one task: a V2 checkpoint of a table with fewer than
  ``fan_out_min_actions`` file actions (estimated) builds its sidecars in
  one task (:mod:`raydelta.actors.checkpoint.one_task`), a larger one in map
  and shard tasks; both build the same sidecars from the same jobs.
- Progress and metrics are best effort: a failing callback or metrics
  exporter never fails the checkpoint.
- A classic checkpoint is never written over one already there (another
  engine's: delta-spark checkpoints the same versions, and on a local disk
  its Hadoop checksum file would no longer match, issue 31): the run stops
  with a summary whose ``skipped`` says so, and leaves ``_last_checkpoint``
  to that file's writer. UUID-named V2 checkpoints never share a name.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from typing import Any, Literal

import ray

from raydelta.actors.checkpoint.one_task import (
    DEFAULT_FAN_OUT_MIN_ACTIONS,
    ONE_TASK_THREADS,
    SidecarWork,
    write_in_one_task,
)
from raydelta.actors.checkpoint.process_memory import peak_rss_mb
from raydelta.actors.checkpoint.results import (
    CheckpointKind,
    CheckpointSummary,
    Progress,
    ProgressCallback,
    TaskReport,
    TopLevel,
    Trigger,
)
from raydelta.actors.checkpoint.sidecar_plan import SidecarPlan, plan_sidecars
from raydelta.actors.checkpoint.tasks import (
    DEFAULT_SHARDS_PER_MAP_OUTPUT,
    OVERFLOW_SHARD,
    ShardResult,
    cpu_nodes,
    map_output_groups,
    map_piece,
    max_node_cpus,
    node_of_group,
    node_strategy,
    write_overflow,
    write_shard,
    write_v1,
)
from raydelta.actors.faults import crash_point
from raydelta.protocol.actions import Metadata, Protocol, Sidecar
from raydelta.protocol.checkpoint_plan import (
    DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    sidecar_counts,
    table_configuration,
)
from raydelta.protocol.errors import CheckpointWriteError
from raydelta.protocol.file_names import classic_checkpoint_name, uuid_checkpoint_name
from raydelta.protocol.last_checkpoint import LastCheckpointInfo
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import V2_CHECKPOINT
from raydelta.storage.checkpoint.shards import group_bounds
from raydelta.storage.checkpoint.sources import (
    LogDelta,
    checkpoint_pieces,
    read_log_delta,
)
from raydelta.storage.checkpoint.writer import (
    classic_checkpoint_exists,
    write_last_checkpoint,
    write_v2_checkpoint,
)
from raydelta.storage.log.read_bound import checkpoint_read_rows
from raydelta.storage.log.store import LogStore, log_store_for

logger = logging.getLogger(__name__)


class CheckpointMetrics:
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
        fan_out_min_actions: int = DEFAULT_FAN_OUT_MIN_ACTIONS,
        on_progress: ProgressCallback | None = None,
        metrics: CheckpointMetrics | None = None,
        read_rows: int | None = None,
        shards_per_map_output: int = DEFAULT_SHARDS_PER_MAP_OUTPUT,
    ) -> None:
        if shards_per_map_output < 1:
            raise ValueError(f"shards_per_map_output must be >= 1, got {shards_per_map_output}")
        self.table_uri = table_uri
        self.read_rows = checkpoint_read_rows(read_rows)
        """Rows every task decodes at a time: resolved here (argument, else this
        process's :data:`~raydelta.storage.log.read_bound.READ_ROWS_ENV`, else
        the default) and handed to each task, whose worker may not share this
        process's environment."""
        self.shards_per_map_output = shards_per_map_output
        self.fan_out_min_actions = fan_out_min_actions
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
        max_published_version: int | None = None,
    ) -> CheckpointSummary:
        """Checkpoint ``version`` (the newest published one when None).
        ``max_published_version``: what a catalog-managed table's catalog says
        is published (required for such a table; nothing past it is read)."""
        if kind not in ("auto", "v2", "classic"):
            raise ValueError(f"kind must be auto, v2 or classic, got {kind!r}")
        if top_level not in ("json", "parquet"):
            raise ValueError(f"top_level must be json or parquet, got {top_level!r}")
        start = time.perf_counter()
        store = self.store
        delta = read_log_delta(store, version, max_published_version=max_published_version)
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
        name = classic_checkpoint_name(delta.version)
        if classic_checkpoint_exists(store, delta.version):
            return self._existing(delta, name, trigger, start)
        pieces = checkpoint_pieces(store, delta.previous) if delta.previous is not None else []
        planned = time.perf_counter()
        self._progress(Progress(version=delta.version, phase="classic"))
        ref = write_v1.remote(
            self.table_uri, self.storage_options, delta, pieces, now_ms, self.read_rows
        )
        info, created, report = ray.get(ref)
        if not created:  # another writer's classic checkpoint landed first
            return self._existing(delta, name, trigger, start, tasks=[report])
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

    def _existing(
        self,
        delta: LogDelta,
        name: str,
        trigger: Trigger,
        start: float,
        *,
        tasks: list[TaskReport] | None = None,
    ) -> CheckpointSummary:
        """The summary of a classic checkpoint found in place: nothing written,
        ``_last_checkpoint`` left to the writer of that file."""
        summary = CheckpointSummary(
            tableUri=self.table_uri,
            version=delta.version,
            kind="classic",
            topLevel=name,
            trigger=trigger,
            source="none",
            filesWritten=[],
            sidecarsWritten=0,
            sidecarsReused=0,
            numShards=0,
            numAdds=0,
            numActions=0,
            bytesWritten=0,
            checkpointBytes=0,
            seconds=time.perf_counter() - start,
            commitsSincePrevious=delta.num_commits,
            previousVersion=None if delta.previous is None else delta.previous.version,
            actorPeakRssMb=peak_rss_mb(),
            tasks=tasks or [],
            skipped=f"{name} is already there (a checkpoint of this version serves as it is)",
        )
        self._progress(Progress(version=delta.version, phase="done", seconds=summary.seconds))
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
        """Plan the sidecars (:func:`~raydelta.actors.checkpoint.sidecar_plan.plan_sidecars`),
        write them (one task or fanned out), then the top-level file and
        ``_last_checkpoint``."""
        protocol, metadata = delta.head.protocol, delta.head.metadata
        assert protocol is not None and metadata is not None  # table_configuration checked
        plan = plan_sidecars(
            store,
            delta,
            config,
            now_ms,
            target_actions_per_sidecar=self.target_actions_per_sidecar,
            max_overflow_actions=self.max_overflow_actions,
        )
        planned = time.perf_counter()
        one_task = plan.estimate < self.fan_out_min_actions
        bound = self.read_rows
        work = SidecarWork(
            tuple(plan.pieces),
            plan.num_shards,
            plan.exclude,
            delta.head.table_root,
            tuple(replace(job, read_rows=bound) for job in plan.jobs),
            None if plan.overflow_job is None else replace(plan.overflow_job, read_rows=bound),
            read_rows=bound,
        )
        args = (protocol, metadata, now_ms, plan.cutoff)
        if one_task:
            written, reports = self._in_one_task(delta.version, work, args, plan.reused)
        else:
            written, reports = self._fanned_out(delta.version, work, args, plan.reused)
        sidecars_at = time.perf_counter()
        crash_point("after_sidecars")
        by_shard = dict(plan.reused)
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
        phases = {
            "plan": planned - start,
            "sidecars": sidecars_at - planned,
            "top_level": time.perf_counter() - sidecars_at,
        }
        return self._v2_summary(
            delta,
            plan,
            uuid_checkpoint_name(delta.version, file_id, top_level),
            info,
            sidecars,
            written,
            reports,
            overflow_actions=sum(overflow_counts or (0, 0)),
            execution="one_task" if one_task else "fan_out",
            trigger=trigger,
            phases=phases,
            start=start,
        )

    def _v2_summary(
        self,
        delta: LogDelta,
        plan: SidecarPlan,
        name: str,
        info: LastCheckpointInfo,
        sidecars: list[Sidecar],
        written: list[ShardResult],
        reports: list[TaskReport],
        *,
        overflow_actions: int,
        execution: Literal["one_task", "fan_out"],
        trigger: Trigger,
        phases: dict[str, float],
        start: float,
    ) -> CheckpointSummary:
        """The summary of a published V2 checkpoint (metrics and the last
        progress report included)."""
        new_sidecars = [r.sidecar for r in written if r.sidecar is not None]
        sidecar_bytes = sum(s.size_in_bytes for s in sidecars)
        top_bytes = (info.size_in_bytes or 0) - sidecar_bytes
        bytes_written = top_bytes + sum(s.size_in_bytes for s in new_sidecars)
        if self.metrics is not None:
            self.metrics.shard_done(self.table_uri, top_bytes)
        reused = plan.reused
        summary = CheckpointSummary(
            tableUri=self.table_uri,
            version=delta.version,
            kind="v2",
            topLevel=name,
            trigger=trigger,
            source=plan.source,
            filesWritten=[f"_sidecars/{s.path}" for s in new_sidecars] + [name],
            sidecarsWritten=len(new_sidecars),
            sidecarsReused=len(reused),
            numShards=plan.num_shards,
            shardsChecked=plan.checked,
            overflowActions=overflow_actions,
            numAdds=info.num_of_add_files or 0,
            numActions=info.size,
            bytesWritten=bytes_written,
            checkpointBytes=info.size_in_bytes or 0,
            seconds=time.perf_counter() - start,
            commitsSincePrevious=delta.num_commits,
            previousVersion=None if delta.previous is None else delta.previous.version,
            actorPeakRssMb=peak_rss_mb(),
            phases=phases,
            tasks=reports,
            execution=execution,
        )
        self._progress(
            Progress(
                version=delta.version,
                phase="done",
                shardsTotal=len(written) + len(reused),
                shardsDone=len(written) + len(reused),
                shardsReused=len(reused),
                bytesWritten=bytes_written,
                seconds=summary.seconds,
            )
        )
        return summary

    def _fanned_out(
        self,
        version: int,
        work: SidecarWork,
        args: tuple[Protocol, Metadata, int, int],
        reused: dict[int, Sidecar],
    ) -> tuple[list[ShardResult], list[TaskReport]]:
        """Map tasks (if there are ``pieces``), one task per shard job, one for the overflow."""
        where = (self.table_uri, self.storage_options)
        refs: dict[Any, int] = {}
        map_reports: list[Any] = []
        if not work.pieces:
            for job in work.jobs:
                ref = write_shard.options(scheduling_strategy="SPREAD").remote(*where, job, *args)
                refs[ref] = job.shard
        else:
            nodes = cpu_nodes()
            num_groups = map_output_groups(work.num_shards, len(nodes), self.shards_per_map_output)
            bounds = group_bounds(work.num_shards, num_groups)
            outputs: list[list[Any]] = [
                map_piece.options(num_returns=num_groups + 1).remote(
                    *where,
                    piece,
                    work.num_shards,
                    num_groups,
                    work.exclude_keys,
                    args[3],
                    work.table_root,
                    work.read_rows,
                )
                for piece in work.pieces
            ]
            map_reports = [out[-1] for out in outputs]
            by_shard = {job.shard: job for job in work.jobs}
            for group in range(num_groups):
                node = nodes[node_of_group(bounds, group, work.num_shards, len(nodes))]
                strategy = node_strategy(node) if len(nodes) > 1 else "DEFAULT"
                for shard in range(bounds[group], bounds[group + 1]):
                    ref = write_shard.options(scheduling_strategy=strategy).remote(
                        *where, by_shard[shard], *args, *(out[group] for out in outputs)
                    )
                    refs[ref] = shard
            del outputs
        if work.overflow is not None:
            protocol, metadata, now_ms, cutoff = args
            ref = write_overflow.remote(*where, work.overflow, protocol, metadata, now_ms, cutoff)
            refs[ref] = OVERFLOW_SHARD
        written, reports = self._collect(version, refs, len(reused))
        reports.extend(ray.get(map_reports))
        return written, reports

    def _in_one_task(
        self,
        version: int,
        work: SidecarWork,
        args: tuple[Protocol, Metadata, int, int],
        reused: dict[int, Sidecar],
    ) -> tuple[list[ShardResult], list[TaskReport]]:
        """Every step in one task (:mod:`raydelta.actors.checkpoint.one_task`)."""
        if work.empty:
            return [], []
        one = replace(work, threads=min(ONE_TASK_THREADS, max_node_cpus()))
        total = len(work.jobs) + (work.overflow is not None) + len(reused)
        self._progress(
            Progress(
                version=version,
                phase="sidecars",
                shardsTotal=total,
                shardsDone=len(reused),
                shardsReused=len(reused),
            )
        )
        ref = write_in_one_task.options(num_cpus=one.threads).remote(
            self.table_uri, self.storage_options, one, *args
        )
        try:
            written, map_reports = ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise CheckpointWriteError(
                f"the task writing the v{version} checkpoint's sidecars failed: {exc}"
            ) from exc
        if self.metrics is not None:
            for result in written:
                size = result.sidecar.size_in_bytes if result.sidecar is not None else 0
                self.metrics.shard_done(self.table_uri, size)
            for _ in range(len(reused)):
                self.metrics.shard_done(self.table_uri, 0)
        return written, [r.report for r in written] + map_reports

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
