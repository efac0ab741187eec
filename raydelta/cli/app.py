"""The ``raydelta`` command line: a stable, scriptable contract.

``raydelta snapshot URI [--version N | --timestamp ISO8601] [--json]``
``raydelta history URI [--limit N] [--json]``
``raydelta demo [DIR]`` (:mod:`raydelta.demo`), ``checkpoint``, ``cleanup``, ``vacuum``

With ``--json`` each command prints exactly one JSON document on stdout.
On error the exit code is non-zero and stderr starts with the exception
class name (``TableNotFoundError: ...``), so scripts can branch on it.
Subcommands that need Ray (checkpoint, cleanup, vacuum) import it lazily.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from raydelta.protocol.errors import RaydeltaError

Handler = Callable[[argparse.Namespace], int]
_HANDLERS: dict[str, Handler] = {}


def _command(name: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        _HANDLERS[name] = handler
        return handler

    return register


def _print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=None, sort_keys=False, default=str) + "\n")


def _format_ms(timestamp_ms: int) -> str:
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _print_rows(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers], *[[("" if c is None else str(c)) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        sys.stdout.write("\n")
        if index == 0:
            sys.stdout.write("  ".join("-" * w for w in widths) + "\n")


EXAMPLE_NAME = "example"


def resolve_uri(uri: str) -> str:
    """``example`` names the bundled example table unless such a path exists."""
    import os

    if uri == EXAMPLE_NAME and not os.path.exists(uri):
        return os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "v2-checkpoint")
    return uri


def snapshot_document(uri: str, *, version: int | None, timestamp: str | None) -> dict[str, Any]:
    """The JSON document of ``raydelta snapshot`` (see the module docstring)."""
    from raydelta.protocol.file_actions import ADD_TYPE, arrow_to_json, file_key
    from raydelta.protocol.statistics import num_records_of
    from raydelta.storage.snapshot import load_snapshot

    snap = load_snapshot(uri, version=version, timestamp=timestamp)
    files = []
    for row in snap.files.sort_by("path").to_pylist():
        add = arrow_to_json(row, ADD_TYPE)
        descriptor = add.get("deletionVector")
        files.append(
            {
                "path": add["path"],
                "deletionVector": descriptor,
                "deletionVectorId": file_key(add["path"], descriptor)[1],
                "size": add.get("size"),
                "partitionValues": add.get("partitionValues", {}),
                "numRecords": num_records_of(add.get("stats")),
            }
        )
    return {
        "version": snap.version,
        "timestamp": snap.timestamp,
        "protocol": snap.protocol.to_json_dict(),
        "metadata": snap.metadata.to_json_dict(),
        "files": files,
        "tombstones": sorted(r.path for r in snap.tombstones()),
        "txns": snap.txns,
        "domains": {name: d.configuration for name, d in sorted(snap.domains.items())},
    }


@_command("snapshot")
def _snapshot(args: argparse.Namespace) -> int:
    document = snapshot_document(
        resolve_uri(args.uri), version=args.version, timestamp=args.timestamp
    )
    if args.json:
        _print_json(document)
        return 0
    protocol = document["protocol"]
    sys.stdout.write(
        f"table      {args.uri}\n"
        f"version    {document['version']}  ({_format_ms(document['timestamp'])})\n"
        f"protocol   reader {protocol['minReaderVersion']}, writer {protocol['minWriterVersion']}"
        f"  {' '.join(protocol.get('writerFeatures') or [])}\n"
        f"files      {len(document['files'])}\n"
        f"tombstones {len(document['tombstones'])}\n\n"
    )
    _print_rows(
        ["path", "size", "records", "partition", "dv"],
        [
            [
                f["path"],
                f["size"],
                f["numRecords"],
                ",".join(f"{k}={v}" for k, v in f["partitionValues"].items()),
                f["deletionVectorId"],
            ]
            for f in document["files"]
        ],
    )
    return 0


@_command("history")
def _history(args: argparse.Namespace) -> int:
    from raydelta.storage.history import load_history

    entries = load_history(resolve_uri(args.uri), limit=args.limit)
    if args.json:
        _print_json([e.to_json_dict() for e in entries])
        return 0
    _print_rows(
        ["version", "timestamp", "operation"],
        [[e.version, _format_ms(e.timestamp), e.operation] for e in entries],
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raydelta", description="Delta Lake transaction-log engine on Ray."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    snapshot = commands.add_parser("snapshot", help="the table's state at a version")
    snapshot.add_argument("uri")
    when = snapshot.add_mutually_exclusive_group()
    when.add_argument("--version", type=int)
    when.add_argument("--timestamp", help="ISO-8601; UTC when no offset is given")
    snapshot.add_argument("--json", action="store_true")

    history = commands.add_parser("history", help="the table's commits, newest first")
    history.add_argument("uri")
    history.add_argument("--limit", type=int)
    history.add_argument("--json", action="store_true")

    for module_name in EXTENSION_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(commands, _command)
    return parser


EXTENSION_MODULES = (
    "raydelta.cli.checkpoint",
    "raydelta.cli.cleanup",
    "raydelta.cli.status",
    "raydelta.cli.catalog",
    "raydelta.demo",
)
"""Modules adding subcommands; each defines ``register(subparsers, command)``
where ``command(name)`` is the decorator that registers a handler."""


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _HANDLERS[args.command](args)
    except RaydeltaError as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
