"""A table's history as users see it: :class:`History` (``Table.history()``)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from raydelta.storage.history import HistoryEntry


class History:
    """A table's history: one row per retained commit, newest first.

    An Arrow table (:meth:`to_arrow`, or ``pa.table(history)`` through the
    Arrow C stream interface) with columns ``version``, ``timestamp``
    (UTC), ``operation``, ``operationParameters`` and ``commitInfo`` (JSON
    text); iterating yields :class:`~raydelta.storage.history.HistoryEntry`.
    """

    def __init__(self, entries: Sequence[HistoryEntry]) -> None:
        self.entries = tuple(entries)

    def to_arrow(self) -> pa.Table:
        import json

        return pa.table(
            {
                "version": pa.array([e.version for e in self.entries], pa.int64()),
                "timestamp": pa.array(
                    [e.timestamp for e in self.entries], pa.timestamp("ms", tz="UTC")
                ),
                "operation": pa.array([e.operation for e in self.entries], pa.string()),
                "operationParameters": pa.array(
                    [
                        json.dumps((e.commit_info or {}).get("operationParameters"))
                        if e.commit_info and "operationParameters" in e.commit_info
                        else None
                        for e in self.entries
                    ],
                    pa.string(),
                ),
                "commitInfo": pa.array(
                    [json.dumps(e.commit_info) if e.commit_info else None for e in self.entries],
                    pa.string(),
                ),
            }
        )

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.to_arrow().__arrow_c_stream__(requested_schema)

    def to_pandas(self) -> Any:
        return self.to_arrow().to_pandas()

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Any:
        return iter(self.entries)

    def __getitem__(self, index: int) -> HistoryEntry:
        return self.entries[index]

    def __repr__(self) -> str:
        if not self.entries:
            return "History(no commits)"
        newest, oldest = self.entries[0], self.entries[-1]
        return (
            f"History({len(self.entries)} commits, v{oldest.version}..v{newest.version},"
            f" latest {newest.operation})"
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>".format(
                e.version,
                datetime.fromtimestamp(e.timestamp / 1000, tz=UTC).isoformat(timespec="seconds"),
                html.escape(e.operation or ""),
            )
            for e in self.entries
        )
        return f"<table><tr><th>version</th><th>timestamp</th><th>operation</th></tr>{rows}</table>"


__all__ = ["History"]
