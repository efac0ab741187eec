"""Fixtures of the ``raydelta`` Spark format tests.

``rd_spark`` is the session's one Spark (which has delta-spark's jars, so
``format("delta")`` is delta-spark's there) with the ``raydelta`` format
registered, attached to the session's Ray cluster. ``table_dir`` is a fresh
table path under ``tmp_path`` whose table actors are killed at teardown.
``peers_read(uri)`` reads a table with delta-spark, deltalake and duckdb and
returns their rows, each sorted, for the tests to compare.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def kill_actors_under(root: Path | str) -> None:
    """Kill (without waiting) every raydelta actor of a table under ``root``:
    its ``TableActor``, ``CheckpointActor`` and ``CleanupActor``. One listing
    of the named actors; ``ray.kill`` only asks, so a test's teardown does not
    wait for the processes to exit (no later test uses their paths). Their
    saved subscriptions are dropped, as ``raydelta.release_table`` does."""
    import ray

    if not ray.is_initialized():
        return
    from raydelta.actors.cluster import NAMESPACE, normalize_uri
    from raydelta.actors.table_actor import forget_subscribers

    prefix = normalize_uri(str(root))
    tables = set()
    for entry in ray.util.list_named_actors(all_namespaces=True):
        _, _, uri = entry["name"].partition(":")
        if entry["namespace"] != NAMESPACE or not (uri == prefix or uri.startswith(prefix + "/")):
            continue
        try:
            ray.kill(ray.get_actor(entry["name"], namespace=NAMESPACE), no_restart=True)
        except ValueError:
            continue
        tables.add(uri)
    for uri in tables:
        forget_subscribers(uri)


@pytest.fixture
def rd_spark(spark: Any, ray_cluster: Any) -> Any:
    from raydelta.spark import register

    register(spark)
    return spark


@pytest.fixture
def table_dir(tmp_path: Path, ray_cluster: Any) -> Iterator[str]:
    yield str(tmp_path / "table")
    kill_actors_under(tmp_path)


def delta_spark_rows(spark: Any, uri: str, columns: list[str]) -> list[Any]:
    """delta-spark's rows of ``uri`` (its log replay on one partition: the
    session's ``snapshotPartitions``, tests/conftest.py)."""
    return spark.read.format("delta").load(uri).select(*columns).collect()  # type: ignore[no-any-return]


@pytest.fixture
def peers_read(rd_spark: Any, duck: Any) -> Callable[..., dict[str, list[tuple[Any, ...]]]]:
    """``peers_read(uri, columns)``: ``{"delta-spark": rows, "deltalake": rows,
    "duckdb": rows, "raydelta": rows}``, rows as sorted tuples of ``columns``."""
    import deltalake
    import pyarrow as pa

    def read(uri: str, columns: list[str]) -> dict[str, list[tuple[Any, ...]]]:
        select = ", ".join(f'"{c}"' for c in columns)
        spark_rows = delta_spark_rows(rd_spark, uri, columns)
        ours = rd_spark.read.format("raydelta").load(uri).select(*columns).collect()
        theirs = deltalake.DeltaTable(uri)
        rs = pa.table(
            deltalake.QueryBuilder()
            .register("t", theirs)
            .execute(f"select {select} from t")
            .read_all()
        ).to_pylist()
        duck_rows = duck.execute(f"SELECT {select} FROM delta_scan('{uri}')").fetchall()
        return {
            "delta-spark": sorted((tuple(r) for r in spark_rows), key=repr),
            "raydelta": sorted((tuple(r) for r in ours), key=repr),
            "deltalake": sorted((tuple(r[c] for c in columns) for r in rs), key=repr),
            "duckdb": sorted((tuple(r) for r in duck_rows), key=repr),
        }

    return read
