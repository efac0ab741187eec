"""``raydelta cleanup`` and ``raydelta vacuum``: maintenance through the table's CleanupActor.

``raydelta cleanup URI [--retention DURATION] [--dry-run] [--json]``
``raydelta vacuum URI [--retention DURATION] [--lite] [--no-dry-run] [--force] [--json]``

Each command connects to the running Ray cluster (or starts a local one),
gets the table's ``CleanupActor`` (:func:`raydelta.actors.cleanup.actor.ensure_cleaner`)
and runs the work there. Progress goes to stderr while it runs; stdout gets
one JSON document with ``--json`` and a short summary otherwise. Errors keep
the CLI contract: the exception raised in the actor is re-raised here, so
stderr starts with its class name (``RetentionTooShortError: ...``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Handler = Callable[[argparse.Namespace], int]
POLL_SECONDS = 0.5


def register(subparsers: Any, command: Callable[[str], Callable[[Handler], Handler]]) -> None:
    """Add ``cleanup`` and ``vacuum`` to the ``raydelta`` parser (see :mod:`raydelta.cli`)."""
    cleanup = subparsers.add_parser(
        "cleanup", help="delete expired log files (delta.logRetentionDuration)"
    )
    cleanup.add_argument("uri")
    cleanup.add_argument(
        "--retention",
        help="override delta.logRetentionDuration, e.g. '30 days', 'interval 1 week'",
    )
    cleanup.add_argument(
        "--dry-run",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="report, delete nothing (default: delete)",
    )
    cleanup.add_argument("--json", action="store_true")

    vacuum = subparsers.add_parser("vacuum", help="delete data files the table no longer needs")
    vacuum.add_argument("uri")
    vacuum.add_argument(
        "--retention",
        help="override delta.deletedFileRetentionDuration, e.g. '7 days' (shorter needs --force)",
    )
    vacuum.add_argument(
        "--lite", action="store_true", help="only the files of expired tombstones (no listing)"
    )
    vacuum.add_argument(
        "--dry-run",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="report, delete nothing (the default, as in the API); --no-dry-run deletes",
    )
    vacuum.add_argument("--force", action="store_true", help="allow a retention below the table's")
    vacuum.add_argument("--json", action="store_true")

    command("cleanup")(_cleanup)
    command("vacuum")(_vacuum)


def _progress(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _run(cleaner: Any, method: str, kwargs: dict[str, Any]) -> Any:
    """Call ``cleaner.<method>(**kwargs)``, echoing its progress to stderr."""
    import ray

    from raydelta.actors.cluster import get_unwrapped

    ref = getattr(cleaner, method).remote(**kwargs)
    shown: tuple[Any, ...] = ()
    while True:
        ready, _ = ray.wait([ref], timeout=POLL_SECONDS)
        if ready:
            break
        try:
            status = ray.get(cleaner.progress.remote(), timeout=POLL_SECONDS)
        except Exception:  # progress is best effort (e.g. the actor is restarting)
            continue
        line = (status.get("stage"), status.get("done"), status.get("total"))
        if status.get("state") != "idle" and line != shown:
            shown = line
            stage, done, total = line
            _progress(f"{method}: {stage}" + (f" {done}/{total}" if total else ""))
    return get_unwrapped(ref)


def _cleaner(uri: str) -> Any:
    from raydelta.actors.cleanup.actor import ensure_cleaner
    from raydelta.cli.app import resolve_uri
    from raydelta.storage.table_location import normalize_uri

    _progress("connecting to Ray (a local cluster starts if none runs) ...")
    return ensure_cleaner(normalize_uri(resolve_uri(uri)))


def _format_ms(timestamp_ms: int | None) -> str:
    if timestamp_ms is None:
        return "-"
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat(timespec="seconds")


def _cleanup(args: argparse.Namespace) -> int:
    cleaner = _cleaner(args.uri)
    report = _run(cleaner, "cleanup", {"retention": args.retention, "dry_run": args.dry_run})
    document = {"command": "cleanup", **report.to_json_dict()}
    if args.json:
        sys.stdout.write(json.dumps(document, default=str) + "\n")
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    if report.skipped:
        sys.stdout.write(f"nothing to clean up: {report.skipped}\n")
        return 0
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(report.counts.items())) or "nothing"
    sys.stdout.write(
        f"cutoff     {_format_ms(report.cutoff_timestamp)} (commit {report.cutoff_version})\n"
        f"kept       checkpoint {report.kept_checkpoint_version}: "
        f"{', '.join(report.kept_checkpoint)}\n"
        f"{verb:<10} {len(report.deleted)} files ({report.deleted_bytes} bytes): {counts}\n"
    )
    if report.classic_copy:
        sys.stdout.write(f"classic    {report.classic_copy}\n")
    if report.orphan_crcs_deleted:
        sys.stdout.write(f"{verb:<10} {report.orphan_crcs_deleted} orphaned .crc files\n")
    return 0


def _vacuum(args: argparse.Namespace) -> int:
    cleaner = _cleaner(args.uri)
    report = _run(
        cleaner,
        "vacuum",
        {
            "retention": args.retention,
            "lite": args.lite,
            "dry_run": args.dry_run,
            "force": args.force,
        },
    )
    document = {"command": "vacuum", **report.to_json_dict()}
    if args.json:
        sys.stdout.write(json.dumps(document, default=str) + "\n")
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    sys.stdout.write(
        f"mode       {report.mode} (version {report.version}, retention "
        f"{report.retention_hours:g} hours, cutoff {_format_ms(report.cutoff_timestamp)})\n"
        f"{verb:<10} {report.num_files} files, {report.total_bytes} bytes, "
        f"{len(report.dirs)} directories\n"
    )
    for path in report.files:
        sys.stdout.write(f"  {path}\n")
    if report.orphan_crcs_deleted:
        sys.stdout.write(f"{verb:<10} {report.orphan_crcs_deleted} orphaned .crc files\n")
    for ignored in report.ignored:
        sys.stdout.write(f"ignored    {ignored.path}: {ignored.reason}\n")
    return 0
