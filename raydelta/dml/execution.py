"""Running a DML's per-file work: candidate files, task groups, Ray tasks.

Invariants:
- Candidates come from the snapshot with partition pruning and statistics
  skipping (:func:`raydelta.storage.scan.select_files`): the work is
  proportional to the files a condition may touch. A pyarrow expression
  prunes nothing (every file is a candidate).
- Groups hold whole files, balanced by bytes (largest first onto the
  lightest group), so small files share a task. A small job (under
  ``SMALL_JOB_BYTES`` and ``SMALL_JOB_FILES``, no task count asked for) runs in the caller's
  process, one group per usable CPU on a thread pool (parquet reads and
  writes and Arrow kernels release the GIL; a Ray worker would first have
  to import the engine); a larger job, or one given a task count, runs its
  groups as Ray tasks, in parallel on the cluster.
- A table with row tracking enabled has its commits tagged
  ``delta.rowTracking.preserved=true`` (:func:`tag_preserved`): the file
  work preserves stable row ids or raises.
- All or nothing: when any task fails, every file the other tasks wrote is
  deleted and the first failure is raised as the original exception (not
  Ray's wrapper), so the caller sees the typed error and nothing is left.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from raydelta.protocol.errors import InvalidPredicateError
from raydelta.protocol.predicates import AlwaysTrue, Predicate, parse_predicate
from raydelta.storage.data.dml import Condition, FileRewrite, RewriteSpec, rewrite_files
from raydelta.storage.data.files import remove_data_files
from raydelta.storage.scan import select_files
from raydelta.storage.snapshot import Snapshot

SMALL_JOB_BYTES = 64 * 1024 * 1024
"""Candidates smaller than this (in all) are handled in the caller's process
unless the caller asks for tasks."""
SMALL_JOB_FILES = 256
"""...and fewer files than this: a DML over many files (1,000 small ones
included) uses the cluster, not one process."""
TASKS_PER_CPU = 2

T = TypeVar("T")


def candidate_files(snapshot: Snapshot, condition: Condition) -> pa.Table:
    """The snapshot's file rows a condition may select rows from."""
    if condition is None or not isinstance(condition, str):
        return snapshot.files
    config = snapshot.table_configuration
    return select_files(
        snapshot.files,
        condition,
        snapshot.schema,
        list(snapshot.metadata.partition_columns),
        column_mapping_mode=config.column_mapping_mode,
    )


def read_predicate(condition: Condition) -> Predicate | None:
    """What a DML records as read for conflict checks: its condition when it
    fits the predicate subset, else the prunable ``AND`` terms of it, else
    ``true`` (it may read any partition); None for no condition (the whole table)."""
    if condition is None:
        return None
    if isinstance(condition, str):
        try:
            return parse_predicate(condition)
        except InvalidPredicateError:
            from raydelta.storage.scan import _prunable_terms

            terms = _prunable_terms(condition)
            if terms is not None:
                return terms
    return AlwaysTrue()


def group_files(files: pa.Table, *, tasks: int) -> list[list[dict[str, Any]]]:
    """Split file rows into at most ``tasks`` groups of similar total size."""
    rows = files.to_pylist()
    if not rows:
        return []
    tasks = max(1, min(tasks, len(rows)))
    groups: list[list[dict[str, Any]]] = [[] for _ in range(tasks)]
    weights = [0] * tasks
    for row in sorted(rows, key=lambda r: -(r.get("size") or 0)):
        lightest = weights.index(min(weights))
        groups[lightest].append(row)
        weights[lightest] += int(row.get("size") or 0)
    return [g for g in groups if g]


def local_cpus() -> int:
    """The CPUs this process may run on."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def is_small_job(files: pa.Table) -> bool:
    """Whether the candidates are few bytes enough for the caller's process."""
    total = sum(int(s or 0) for s in files.column("size").to_pylist()) if files.num_rows else 0
    return files.num_rows <= 1 or (total < SMALL_JOB_BYTES and files.num_rows < SMALL_JOB_FILES)


def plan_groups(files: pa.Table, *, tasks: int | None) -> tuple[list[list[dict[str, Any]]], bool]:
    """The groups of ``files`` and whether they run in this process (see module)."""
    if tasks is None and is_small_job(files):
        return group_files(files, tasks=local_cpus()), True
    return group_files(files, tasks=default_tasks(files) if tasks is None else tasks), False


def default_tasks(files: pa.Table) -> int:
    """1 for a small job; else ``TASKS_PER_CPU`` per CPU of the Ray cluster."""
    if is_small_job(files):
        return 1
    import ray

    from raydelta.actors.cluster import ensure_ray

    ensure_ray()
    cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
    return max(1, cpus * TASKS_PER_CPU)


def run_rewrites(
    spec: RewriteSpec, files: pa.Table, *, tasks: int | None = None
) -> list[FileRewrite]:
    """Apply ``spec`` to ``files``: in process for one group, else as Ray tasks."""
    groups, local = plan_groups(files, tasks=tasks)
    return run_groups(
        rewrite_files, spec, groups, cleanup=lambda r: delete_written(spec, r), local=local
    )


def run_groups(
    work: Callable[[Any, list[dict[str, Any]]], T],
    argument: Any,
    groups: Sequence[list[dict[str, Any]]],
    *,
    cleanup: Callable[[T], None],
    local: bool = False,
) -> list[T]:
    """``work(argument, group)`` for every group; all results, or none (see module).
    ``local``: on a thread pool of this process, else as Ray tasks (one group:
    in this process)."""
    if len(groups) <= 1:
        return [work(argument, g) for g in groups]
    if local:
        return _run_threads(work, argument, groups, cleanup=cleanup)
    import ray

    from raydelta.actors.cluster import ensure_ray

    ensure_ray()
    remote = ray.remote(num_cpus=1, max_retries=0)(work)
    shared = ray.put(argument)
    refs = [remote.remote(shared, g) for g in groups]
    results: list[T] = []
    failure: BaseException | None = None
    for ref in refs:
        try:
            results.append(ray.get(ref))
        except BaseException as error:
            if failure is None:
                failure = error
    if failure is not None:
        for result in results:
            cleanup(result)
        raise _unwrapped(failure)
    return results


def _run_threads(
    work: Callable[[Any, list[dict[str, Any]]], T],
    argument: Any,
    groups: Sequence[list[dict[str, Any]]],
    *,
    cleanup: Callable[[T], None],
) -> list[T]:
    from concurrent.futures import ThreadPoolExecutor

    results: list[T] = []
    failure: BaseException | None = None
    with ThreadPoolExecutor(max_workers=len(groups), thread_name_prefix="raydelta-dml") as pool:
        futures = [pool.submit(work, argument, g) for g in groups]
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as error:
                if failure is None:
                    failure = error
    if failure is not None:
        for result in results:
            cleanup(result)
        raise failure
    return results


def tag_preserved(txn: Any, snapshot: Snapshot) -> None:
    """Tag the commit ``delta.rowTracking.preserved=true`` on a table with row
    tracking enabled: the DML's writers materialized every copied or updated
    row's stable id (and copied rows' commit versions), or refused."""
    from raydelta.protocol.row_tracking import ROW_TRACKING_PRESERVED_TAG

    if snapshot.table_configuration.row_tracking_enabled:
        txn.set_commit_tags({ROW_TRACKING_PRESERVED_TAG: "true"})


def _unwrapped(error: BaseException) -> BaseException:
    """The task's own exception inside Ray's ``RayTaskError``."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


def delete_written(spec: RewriteSpec, result: FileRewrite) -> None:
    """Remove the files one rewrite wrote (the DML is not committed)."""
    remove_data_files(spec.table_uri, result.written, storage_options=spec.storage_options)
