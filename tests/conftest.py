"""Session fixtures: one local Ray cluster and one local Spark, both started lazily.

Ray: ``ray.init(num_cpus=2, include_dashboard=False)`` once per session, shut
down at the end. Spark: ``local[2]`` once per session (PySpark 4 on Java 17) with delta-spark's
jars (``tests/delta_spark_jars.py``), its snapshot state rebuilt on one partition
(``spark.databricks.delta.snapshotPartitions=1``: the tables are a few files).
Tests that don't ask for them never start them.
"""

from __future__ import annotations

import importlib.abc
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# delta-spark's golden tables ship with the repository (tests/data/, see its
# README): a clone alone runs the conformance suite. Test modules that read the
# RAYDELTA_GOLDEN variable see the same folder.
GOLDEN_ROOT = Path(__file__).resolve().parent / "data" / "delta-spark-golden"
os.environ["RAYDELTA_GOLDEN"] = str(GOLDEN_ROOT)


def pytest_configure(config: pytest.Config) -> None:
    # Several test modules build their parameters from the golden tables at
    # import time: without them they would collect nothing, silently.
    if not (GOLDEN_ROOT / "checkpoint" / "_delta_log").is_dir():
        raise pytest.UsageError(f"golden tables missing from the repository: {GOLDEN_ROOT}")


class _OldTopLevelNames(importlib.abc.MetaPathFinder):
    """``protocol``, ``storage`` and ``actors`` are folders of this repository,
    installed only as ``raydelta.protocol``/``.storage``/``.actors``. pytest puts
    the repository on ``sys.path`` (``pythonpath = ["."]``, for ``benchmarks``),
    which would let the old top-level names import here and nowhere else: refuse
    them in the test process as an installed package does."""

    NAMES = frozenset({"protocol", "storage", "actors"})

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] in self.NAMES:
            raise ModuleNotFoundError(
                f"No module named {name!r} (installed as raydelta.{name})", name=name
            )
        return None


sys.meta_path.insert(0, _OldTopLevelNames())

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def golden_root() -> Path:
    """The in-repository golden tables. Missing is a failure, never a skip."""
    if not (GOLDEN_ROOT / "checkpoint" / "_delta_log").is_dir():
        pytest.fail(f"golden tables missing from the repository: {GOLDEN_ROOT}")
    return GOLDEN_ROOT


@pytest.fixture
def golden_copy(golden_root: Path, tmp_path: Path) -> Any:
    """Copy a golden table to a temp dir (they are read-only) and return its path."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(golden_root / name, target)
        for path in target.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        target.chmod(0o755)
        return target

    return copy


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    import ray

    if not ray.is_initialized():
        tmp = os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="ray", dir="/tmp")
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            namespace="raydelta-tests",
            _temp_dir=tmp,
            log_to_driver=False,
            configure_logging=False,
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def duck() -> Iterator[Any]:
    """A duckdb connection with the delta extension loaded from its pip package
    (by file path: this machine cannot download extensions)."""
    import importlib.util

    duckdb = pytest.importorskip("duckdb")
    spec = importlib.util.find_spec("duckdb_extension_delta")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("duckdb-extension-delta is not installed")
    found = [
        path
        for location in spec.submodule_search_locations
        for path in sorted(Path(location).rglob("*.duckdb_extension"))
    ]
    if not found:
        pytest.skip("no .duckdb_extension file in duckdb_extension_delta")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{found[0]}'")
    yield con
    con.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None:
        pytest.skip("PySpark needs Java 17, which is not on PATH")
    from pyspark.sql import SparkSession

    from tests.delta_spark_jars import delta_jars, s3a_jars

    # The one session of the run has the real delta-spark on it (the JVM Delta
    # source, its SQL extensions and catalog), next to our `raydelta` format,
    # and Hadoop's S3A connector (s3a:// paths; each S3 test points it at the
    # s3_server fixture's endpoint through the Hadoop configuration).
    session = (
        SparkSession.builder.master("local[2]")
        .appName("raydelta-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # delta-spark rebuilds a snapshot's state on this many shuffle
        # partitions (50 by default): on the few-file tables of the tests each
        # read of a table ran 50 tasks on local[2]. A performance setting only:
        # the state and every read are the same on 1 partition.
        .config("spark.databricks.delta.snapshotPartitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.jars", ",".join(str(jar) for jar in delta_jars() + s3a_jars()))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog",
            "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        )
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """A real S3 API on loopback: moto's server in a child process, started once
    per session (``tests/s3_server.py``: ``endpoint``, ``new_bucket()``,
    ``new_table_uri()``, ``storage_options`` for s3fs, ``aws_options`` as
    deltalake users spell them). Use a fresh bucket per test."""
    from tests.s3_server import start_s3_server

    server = start_s3_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A real PostgreSQL server on loopback, from the machine's own binaries,
    started once per session and stopped at its end (``tests/postgres_server.py``:
    ``new_database()`` returns the URL of a fresh database, ``dsn()``). Missing
    binaries fail the test with what to install (``.ci/run`` installs them)."""
    from tests.postgres_server import PostgresNotInstalledError, start_postgres_server

    try:
        server = start_postgres_server()
    except PostgresNotInstalledError as missing:
        pytest.fail(str(missing))
    yield server
    server.stop()
