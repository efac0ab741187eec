"""``raydelta checkpoint URI [--v2 | --classic] [--top-level json|parquet] [--json]``.

Registered by :mod:`raydelta.cli` (an extension module). The checkpoint runs
through the table's ``CheckpointActor`` (a local Ray cluster is started when
none runs), progress lines go to stderr, the summary to stdout (one JSON
document with ``--json``: ``version``, ``kind``, ``filesWritten``,
``sidecarsWritten``, ``sidecarsReused``, ``bytesWritten``, ``seconds``...).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]


def _checkpoint(args: argparse.Namespace) -> int:
    from raydelta.actors.checkpoint.job import command
    from raydelta.cli.app import resolve_uri

    args.uri = resolve_uri(args.uri)
    return command(args, trigger="demand")


def register(subparsers: Any, command: Callable[[str], Callable[[Handler], Handler]]) -> None:
    """Add the ``checkpoint`` subcommand (see :data:`raydelta.cli.EXTENSION_MODULES`)."""
    from raydelta.actors.checkpoint.job import add_arguments

    parser = subparsers.add_parser(
        "checkpoint", help="write a checkpoint (V2 with sidecars, or classic V1)"
    )
    add_arguments(parser)
    command("checkpoint")(_checkpoint)
