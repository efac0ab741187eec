"""Fixtures for the end-to-end tests of the table actors.

Every test here runs against the session's Ray cluster (``ray_cluster``,
2 CPUs). TableClient actors are *detached* processes named ``table:<uri>`` in the
``raydelta`` namespace, so they outlive the handles a test holds: the
``reap_actors`` fixture kills every table actor whose table lies under the
test's ``tmp_path`` when the test ends, whoever created it (the test, a Ray
task, a fault test building the actor itself).

Shared helpers are fixtures too (the suite runs with
``--import-mode=importlib``, so test modules do not import each other):

- ``new_table(...)`` creates a table on a fresh directory and returns
  ``(uri, TableClient)``; ``new_tables(n, ...)`` creates ``n`` at once;
- ``make_add(path, date=..., records=...)`` builds an ``AddFile``;
- ``log_files(uri)`` is ``{name: bytes}`` of everything under ``_delta_log``;
- ``log_commits(uri)`` is ``[(version, actions)]`` of every commit file.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import Action, AddFile, Protocol, parse_actions
from raydelta.protocol.file_names import commit_name
from raydelta.storage.table_location import normalize_uri
from tests.actor_teardown import kill_actors_under

DEFAULT_SCHEMA = pa.schema([("date", pa.string()), ("value", pa.int64())])

NewTable = Callable[..., tuple[str, TableClient]]
NewTables = Callable[..., list[tuple[str, TableClient]]]
MakeAdd = Callable[..., AddFile]


def table_path(uri: str) -> str:
    """The local path of a ``file://`` table URI."""
    return uri[len("file://") :] if uri.startswith("file://") else uri


@pytest.fixture
def reap_actors(ray_cluster: Any, tmp_path: Path) -> Iterator[str]:
    """Yields the URI prefix of this test's tables; kills their actors at teardown."""
    yield normalize_uri(str(tmp_path))
    kill_actors_under(tmp_path)


@pytest.fixture
def new_table(reap_actors: str, tmp_path: Path) -> NewTable:
    """``new_table(schema=, partition_by=, properties=, protocol=)`` -> ``(uri, Table)``.

    Defaults: ``date string, value long`` partitioned by ``date``.
    """
    counter = itertools.count()

    def make(
        *,
        schema: pa.Schema = DEFAULT_SCHEMA,
        partition_by: tuple[str, ...] | list[str] = ("date",),
        properties: dict[str, str] | None = None,
        protocol: Protocol | None = None,
    ) -> tuple[str, TableClient]:
        path = tmp_path / f"table-{next(counter)}"
        table = TableClient.create(
            str(path),
            schema=schema,
            partition_by=list(partition_by),
            properties=properties,
            protocol=protocol,
        )
        return table.uri, table

    return make


@pytest.fixture(scope="module")
def module_table(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NewTable]:
    """Like ``new_table`` but one table per distinct set of options for the whole
    module (a table actor costs a process start); killed when the module ends."""
    root = tmp_path_factory.mktemp("module-tables")
    cache: dict[str, tuple[str, TableClient]] = {}

    def get(**options: Any) -> tuple[str, TableClient]:
        key = repr(sorted(options.items(), key=lambda item: item[0]))
        if key not in cache:
            schema = options.get("schema", DEFAULT_SCHEMA)
            table = TableClient.create(
                str(root / f"table-{len(cache)}"),
                schema=schema,
                partition_by=list(options.get("partition_by", ("date",))),
                properties=options.get("properties"),
                protocol=options.get("protocol"),
            )
            cache[key] = (table.uri, table)
        return cache[key]

    yield get
    kill_actors_under(root)


@pytest.fixture
def new_tables(new_table: NewTable) -> NewTables:
    """``new_tables(count, **options)``: ``count`` tables created concurrently.

    Starting an actor process costs about a second; starting several at once
    overlaps that cost.
    """

    def make(count: int, **options: Any) -> list[tuple[str, TableClient]]:
        with ThreadPoolExecutor(max_workers=count) as pool:
            return list(pool.map(lambda _: new_table(**options), range(count)))

    return make


@pytest.fixture
def make_add() -> MakeAdd:
    """``make_add(path, date="2024-01-01", records=10, partitioned=True, **fields)``."""

    def make(
        path: str,
        date: str | None = "2024-01-01",
        *,
        records: int | None = 10,
        partitioned: bool = True,
        **fields: Any,
    ) -> AddFile:
        stats = None if records is None else json.dumps({"numRecords": records})
        body: dict[str, Any] = {
            "path": path,
            "partitionValues": {"date": date} if partitioned else {},
            "size": 100,
            "modificationTime": 1_700_000_000_000,
            "dataChange": True,
            "stats": stats,
        }
        body.update(fields)
        return AddFile.model_validate(body)

    return make


def read_log_files(uri: str) -> dict[str, bytes]:
    root = os.path.join(table_path(uri), "_delta_log")
    out: dict[str, bytes] = {}
    if not os.path.isdir(root):
        return out
    for directory, _, names in os.walk(root):
        for name in names:
            full = os.path.join(directory, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, root)] = handle.read()
    return out


def read_log_commits(uri: str) -> list[tuple[int, list[Action]]]:
    files = read_log_files(uri)
    commits = []
    version = 0
    while commit_name(version) in files:
        commits.append((version, parse_actions(files[commit_name(version)])))
        version += 1
    return commits


@pytest.fixture
def log_files() -> Callable[[str], dict[str, bytes]]:
    return read_log_files


@pytest.fixture
def log_commits() -> Callable[[str], list[tuple[int, list[Action]]]]:
    return read_log_commits
