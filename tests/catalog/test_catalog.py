"""The Catalog actor end to end: names, commits inline and staged, publishing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.catalog import Catalog
from raydelta.protocol.actions import CommitInfo, parse_actions
from raydelta.protocol.catalog_managed import is_catalog_managed

SCHEMA = pa.schema([("date", pa.string()), ("value", pa.int64())])
NewCatalog = Callable[..., Catalog]


def rows(n: int, date: str = "2024-01-01") -> pa.Table:
    return pa.table({"date": [date] * n, "value": list(range(n))})


def log_dir(uri: str) -> Path:
    return Path(uri.removeprefix("file://")) / "_delta_log"


def published(uri: str) -> dict[int, list[Any]]:
    out = {}
    for name in sorted(os.listdir(log_dir(uri))):
        if name.endswith(".json") and name[:20].isdigit() and len(name) == 25:
            out[int(name[:20])] = parse_actions((log_dir(uri) / name).read_bytes())
    return out


def test_create_append_read_and_publish(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = catalog.create_table("events", SCHEMA, partition_by=["date"])
    entry = catalog.resolve("events")
    assert entry.catalog_managed and entry.location == table.uri
    assert [e.name for e in catalog.list_tables()] == ["events"]
    assert table.append(rows(3)) == 1
    assert table.append(rows(2, "2024-01-02")) == 2
    assert table.to_arrow().num_rows == 5
    assert table.to_arrow(version=1).num_rows == 3
    snap = table.snapshot()
    assert is_catalog_managed(snap.protocol)
    assert snap.table_configuration.in_commit_timestamps_enabled
    assert catalog.actor.wait_published.remote("events", 2) is not None
    import ray

    assert ray.get(catalog.actor.wait_published.remote("events", 2))
    files = published(table.uri)
    assert sorted(files) == [0, 1, 2]
    for _version, actions in files.items():
        info = actions[0]
        assert isinstance(info, CommitInfo) and info.txn_id and info.in_commit_timestamp
    held = catalog.get_ratified_commits("events")
    assert held.latest_version == 2 and held.commits == ()


def test_filesystem_path_refuses_a_managed_table(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = catalog.create_table("t", SCHEMA)
    table.append(rows(1, "x"))
    with pytest.raises(raydelta.CatalogManagedTableError):
        raydelta.load_snapshot(table.uri)


def test_staged_commits(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    catalog.create_table("s", SCHEMA)
    table = catalog.open_table("s", commit_mode="staged")
    assert table.append(rows(2)) == 1
    held = catalog.get_ratified_commits("s")
    assert held.latest_version == 1
    assert table.to_arrow().num_rows == 2
    staged = os.listdir(log_dir(table.uri) / "_staged_commits")
    assert any(name.startswith(f"{1:020d}.") for name in staged)
