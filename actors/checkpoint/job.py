"""Checkpoint a table from a Ray job: ``python -m raydelta.actors.checkpoint.job URI``.

``ray job submit -- python -m raydelta.actors.checkpoint.job s3://bucket/table --v2``
runs it on a cluster: it connects to the cluster the job runs in (a local
one is started when none is reachable), asks the table's ``CheckpointActor``
for the checkpoint (so it never races the actor's own policy checkpoints),
prints progress lines on stderr while the shard tasks run, and a summary
on stdout (one JSON document with ``--json``). ``raydelta checkpoint`` is
the same command.

Exit codes: 0 done; 1 a Delta error (stderr starts with its class name);
2 bad arguments or a missing file.

This module defines the ``checkpoint`` command once: its options
(:func:`add_arguments`) and its run (:func:`command`) are what
``raydelta checkpoint`` (:mod:`raydelta.cli.checkpoint`) registers. Only
:func:`main` is this module's own, and it stays (see its docstring).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from raydelta.protocol.errors import RaydeltaError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``raydelta checkpoint`` and this module."""
    parser.add_argument("uri", help="table URI or local path")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--v2", dest="kind", action="store_const", const="v2", help="a V2 checkpoint (sidecars)"
    )
    kind.add_argument(
        "--classic",
        dest="kind",
        action="store_const",
        const="classic",
        help="a classic single-file V1 checkpoint",
    )
    parser.set_defaults(kind="auto")
    parser.add_argument(
        "--top-level",
        choices=("json", "parquet"),
        default="json",
        help="format of the V2 top-level file (default json)",
    )
    parser.add_argument("--version", type=int, default=None, help="version (default: latest)")
    parser.add_argument(
        "--actions-per-sidecar",
        type=int,
        default=None,
        help="target file actions per sidecar (default 50,000)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress", dest="progress", action="store_const", const=True, help="progress on stderr"
    )
    progress.add_argument(
        "--quiet", dest="progress", action="store_const", const=False, help="no progress lines"
    )
    parser.set_defaults(progress=None)


def run_checkpoint(
    uri: str,
    *,
    version: int | None = None,
    kind: str = "auto",
    top_level: str = "json",
    actions_per_sidecar: int | None = None,
    trigger: str = "job",
    progress: bool = True,
    poll_s: float = 0.25,
) -> dict[str, Any]:
    """Ask the table's ``CheckpointActor`` for a checkpoint; return its summary (JSON form).

    Starts a local Ray cluster when this process is not connected to one.
    Progress lines go to stderr while it runs.
    """
    import ray

    from raydelta.actors.checkpoint.actor import checkpoint_actor
    from raydelta.actors.cluster import ensure_ray, get_unwrapped
    from raydelta.storage.table_location import normalize_uri

    ensure_ray()
    handle = checkpoint_actor(normalize_uri(uri))
    ref = handle.checkpoint.remote(
        version,
        kind=kind,
        top_level=top_level,
        target_actions_per_sidecar=actions_per_sidecar,
        trigger=trigger,
    )
    last_line = ""
    interactive = sys.stderr.isatty()
    started = time.monotonic()
    shown = False
    while True:
        ready, _ = ray.wait([ref], timeout=poll_s)
        if ready:
            break
        if not progress:
            continue
        state = ray.get(handle.progress.remote())
        line = (
            state.line()
            if state is not None
            else f"checkpoint: reading the log, {time.monotonic() - started:.1f} s"
        )
        if line != last_line:
            sys.stderr.write(("\r" + line.ljust(len(last_line))) if interactive else (line + "\n"))
            sys.stderr.flush()
            last_line, shown = line, True
    try:
        summary = get_unwrapped(ref)
    except Exception:
        if shown and interactive:  # the error message starts a clean line
            sys.stderr.write("\r" + " " * len(last_line) + "\r")
        raise
    if shown or (progress and not interactive):
        done = (
            f"checkpoint v{summary.version} done: {summary.kind} {summary.top_level}, "
            f"{summary.sidecars_written} sidecars written, {summary.sidecars_reused} reused, "
            f"{summary.bytes_written / 1e6:.1f} MB, {summary.seconds:.2f} s"
        )
        sys.stderr.write(
            ("\r" + done.ljust(len(last_line)) + "\n") if shown and interactive else (done + "\n")
        )
    result: dict[str, Any] = summary.to_json_dict()
    return result


def print_summary(summary: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(summary, separators=(",", ":")) + "\n")
        return
    sys.stdout.write(
        f"table       {summary['tableUri']}\n"
        f"version     {summary['version']}\n"
        f"kind        {summary['kind']}\n"
        f"checkpoint  {summary['topLevel']}\n"
        f"sidecars    {summary['sidecarsWritten']} written, {summary['sidecarsReused']} reused"
        f" ({summary['numShards']} shards)\n"
        f"actions     {summary['numActions']} ({summary['numAdds']} live files)\n"
        f"bytes       {summary['bytesWritten']} written ({summary['checkpointBytes']} in all)\n"
        f"seconds     {summary['seconds']:.3f}\n"
    )
    if summary.get("skipped"):
        sys.stdout.write(f"skipped     {summary['skipped']}\n")


def command(args: argparse.Namespace, *, trigger: str = "job") -> int:
    """Run a parsed ``checkpoint`` command line; the exit code.

    Progress lines go to stderr when ``--progress`` is given, or by default
    when stderr is a terminal (updated in place) or when run as a job
    (``trigger="job"``: job logs are where progress is watched). The
    ``raydelta`` CLI otherwise keeps stderr for the error line only.
    """
    progress = args.progress
    if progress is None:
        progress = trigger == "job" or sys.stderr.isatty()

    summary = run_checkpoint(
        args.uri,
        version=args.version,
        kind=args.kind,
        top_level=args.top_level,
        actions_per_sidecar=args.actions_per_sidecar,
        trigger=trigger,
        progress=progress,
    )
    print_summary(summary, as_json=args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The Ray job's entry point: ``python -m raydelta.actors.checkpoint.job``.

    Why a second ``main`` beside ``raydelta checkpoint``: jobs are submitted
    as this module (``ray_cluster.yaml``, ``tests/cluster/test_autoscaling.py``)
    and tests call it; it runs with ``trigger="job"`` (progress on by
    default, ``"trigger": "job"`` in the summary) and takes the URI as
    given. It cannot hand its arguments to the CLI's parser: ``actors`` may
    not import the face (``raydelta.cli``; ``tests/test_layering.py``). So
    it builds a parser from the same :func:`add_arguments` and maps errors
    to the same exit codes as :func:`raydelta.cli.app.main`.
    """
    parser = argparse.ArgumentParser(
        prog="python -m raydelta.actors.checkpoint.job", description=__doc__.split("\n\n")[0]
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return command(args)
    except RaydeltaError as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
