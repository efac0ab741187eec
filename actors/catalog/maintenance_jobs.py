"""The work of a catalog's automatic maintenance: Ray tasks, and reading new commits.

Each job is one Ray task (:func:`run_job`); the checkpoint job's sidecars
are written by the checkpoint machinery's own tasks. The jobs that commit
(OPTIMIZE, VACUUM START / END) commit through the catalog like any writer,
with a :class:`~raydelta.actors.catalog.client.CatalogTableClient` holding
the maintenance principal's token.

Invariants:
- A checkpoint or metadata cleanup never reads or covers a version past the
  one the job names, which the caller took from what the catalog published.
- VACUUM protects every file the latest *ratified* version references (the
  snapshot comes from the catalog, published or not) and every file younger
  than the retention (a writer's file on its way to a commit).
- :func:`scan_commits` only reads published commit files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray

from raydelta.actors.catalog.client import CatalogTableClient
from raydelta.protocol.actions import AddFile, CommitInfo, Metadata, parse_actions
from raydelta.protocol.checkpoint_plan import table_configuration
from raydelta.protocol.file_names import commit_name
from raydelta.protocol.maintenance_policy import (
    MAINTENANCE_OPERATIONS,
    MaintenanceJob,
    MaintenancePolicy,
    is_small_data_file,
)
from raydelta.storage.cleanup.vacuum import VacuumReport
from raydelta.storage.log.store import LogStore

Compactor = Callable[..., Any]
"""``compactor(client, *, target_size)``: auto-compaction (OPTIMIZE) of the
table behind ``client``; returns its metrics (a pydantic model or a dict).
The public layer passes ``raydelta.dml.optimize.auto_compact``."""


@dataclass
class CommitScan:
    """What published commits ``(after, through]`` tell the policy."""

    through: int
    configuration: dict[str, str] | None = None
    """The newest ``metaData.configuration`` among them (None: unchanged)."""
    small_files: int = 0
    data_changed: bool = False
    engine_infos: dict[int, str] = field(default_factory=dict)


def initial_configuration(store: LogStore, version: int) -> dict[str, str]:
    """The table's configuration at published ``version``."""
    from raydelta.storage.checkpoint.sources import read_log_delta

    delta = read_log_delta(store, version, max_published_version=version)
    return dict(table_configuration(delta.head).configuration)


def scan_commits(
    store: LogStore,
    after: int,
    through: int,
    *,
    policy: MaintenancePolicy,
    interval_of: Callable[[Mapping[str, str] | None], int],
) -> CommitScan:
    """Read the published commits ``after + 1 .. through`` (their small files,
    whether data changed, new configuration, the engines of interval versions)."""
    scan = CommitScan(through=through)
    for version in range(after + 1, through + 1):
        actions = parse_actions(store.read(commit_name(version)))
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        operation = info.operation if info is not None else None
        maintenance = operation in MAINTENANCE_OPERATIONS
        for action in actions:
            if isinstance(action, Metadata):
                scan.configuration = dict(action.configuration or {})
            elif isinstance(action, AddFile) and not maintenance:
                scan.data_changed = scan.data_changed or action.data_change
                small = is_small_data_file(
                    action.size, data_change=action.data_change, policy=policy
                )
                scan.small_files += int(small)
        if version % interval_of(scan.configuration) == 0 and info is not None:
            engine = getattr(info, "engine_info", None)
            if engine:
                scan.engine_infos[version] = str(engine)
    return scan


@ray.remote(max_retries=0)
def run_job(
    job: MaintenanceJob,
    client: CatalogTableClient,
    compactor: Compactor | None,
    policy: MaintenancePolicy,
) -> dict[str, Any]:
    """Run ``job`` on the table behind ``client``; its report as a JSON dict."""
    if job.kind == "checkpoint":
        from raydelta.actors.checkpoint.runner import CheckpointRunner

        runner = CheckpointRunner(client.uri, client.storage_options)
        summary = runner.run(
            job.version, kind="auto", trigger="policy", max_published_version=job.version
        )
        return summary.to_json_dict()
    if job.kind == "cleanup":
        from raydelta.storage.cleanup.metadata import cleanup_metadata

        return cleanup_metadata(
            client.uri,
            retention_ms=job.retention_ms,
            storage_options=client.storage_options,
            max_published_version=job.version,
        ).to_json_dict()
    if job.kind == "vacuum":
        return _vacuum(client, job)
    if compactor is None:
        return {"skipped": "this catalog was started without a compactor"}
    metrics = compactor(client, target_size=policy.compaction_max_file_size)
    dump = getattr(metrics, "model_dump", None)
    return dict(dump(mode="json") if dump is not None else metrics)


def _vacuum(client: CatalogTableClient, job: MaintenanceJob) -> dict[str, Any]:
    """VACUUM by the policy's retention (the table's, or a catalog-wide default
    below it, which is the admin's explicit choice)."""
    snapshot = client._load_snapshot()
    default_ms = snapshot.table_configuration.deleted_file_retention_ms
    retention_ms = default_ms if job.retention_ms is None else job.retention_ms
    report = vacuum_through_catalog(
        client, retention_ms=retention_ms, force=retention_ms < default_ms, snapshot=snapshot
    )
    return report.to_json_dict()


def vacuum_through_catalog(
    client: CatalogTableClient,
    *,
    retention_ms: int | None,
    force: bool = False,
    dry_run: bool = False,
    lite: bool = False,
    snapshot: Any = None,
) -> VacuumReport:
    """VACUUM of a catalog-managed table against its latest *ratified* version
    (``snapshot``, else loaded through the catalog), with ``VACUUM START`` /
    ``VACUUM END`` committed through the catalog as delta-spark records them
    (none on a dry run)."""
    import pyarrow.compute as pc

    from raydelta.storage.cleanup.vacuum import VacuumPlan, vacuum

    snapshot = snapshot if snapshot is not None else client._load_snapshot()
    default_ms = snapshot.table_configuration.deleted_file_retention_ms

    def started(plan: VacuumPlan) -> None:
        client.record_operation(
            "VACUUM START",
            parameters={
                "retentionCheckEnabled": not force,
                "defaultRetentionMillis": default_ms,
                "specifiedRetentionMillis": plan.retention_ms,
            },
            metrics={
                "numFilesToDelete": plan.files.num_rows,
                "sizeOfDataToDelete": pc.sum(plan.files.column("size")).as_py() or 0,
            },
        )

    def ended(report: VacuumReport) -> None:
        client.record_operation(
            "VACUUM END",
            parameters={"status": "COMPLETED"},
            metrics={
                "numDeletedFiles": report.num_files,
                "numVacuumedDirectories": len(report.dirs),
            },
        )

    return vacuum(
        client.uri,
        retention_hours=None if retention_ms is None else retention_ms / 3_600_000,
        dry_run=dry_run,
        lite=lite,
        force=force,
        storage_options=client.storage_options,
        snapshot=snapshot,
        on_start=started,
        on_end=ended,
    )


__all__ = [
    "CommitScan",
    "Compactor",
    "initial_configuration",
    "run_job",
    "scan_commits",
    "vacuum_through_catalog",
]
