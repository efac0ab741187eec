"""delta-storage's own Unity Catalog clients, driven through py4j in the test Spark JVM.

Nothing here speaks HTTP or writes a log file itself: every request and file
is made by delta's real classes, exactly as delta-spark 4.4.0 makes them when
it commits a catalog-managed table through Unity Catalog:

- the REST client comes from delta-spark's own factory
  (``UCTokenBasedRestClientFactory.createUCClient``), which picks
  ``UCDeltaTokenBasedRestClient`` (``/delta/v1``, delta-spark's default) or
  ``UCTokenBasedRestClient`` (``/delta/preview/commits``, when
  ``deltaRestApi.enabled=false``);
- commits go through ``UCCommitCoordinatorClient.commit``: it lists the log
  for the last published version, writes the staged file
  ``_delta_log/_staged_commits/<v>.<uuid>.json`` through delta-spark's
  configured ``LogStore`` (wrapped as delta-spark wraps it), sends the
  commit, retries transient failures, and publishes ("backfills") on its own
  thread pool afterwards;
- the table's coordinator conf is its metadata ``configuration``, as
  delta-spark passes it (so ``io.unitycatalog.tableId`` must be there).

Delta's Unity Catalog classes link against Unity Catalog's Java SDK
(``io.unitycatalog:unitycatalog-client``, a dependency declared by
delta-storage's POM, version read from it). The session's ``spark.jars``
carry only Delta's jars, so :func:`ensure_uc_client_jars` adds the SDK (and
``unitycatalog-hadoop``) from the local Maven cache to the loader that loaded
delta-storage, once per JVM.

:func:`attach_spark_sql` makes delta-spark's SQL commit catalog-managed
tables through the server without Unity Catalog's Spark connector (whose jar
this machine's Maven mirror does not serve): see its docstring.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.delta_spark_jars import MAVEN_REPOSITORY, delta_version

RestApi = Literal["legacy", "delta"]
UC_TABLE_ID_KEY = "io.unitycatalog.tableId"
STAGED_DIR = "_staged_commits"
_JARS_LOCK = threading.Lock()


# --- the Unity Catalog SDK jars ----------------------------------------------------------


def uc_sdk_version() -> str:
    """The ``unitycatalog-client`` version delta-storage's POM declares."""
    version = delta_version()
    pom = MAVEN_REPOSITORY / "io" / "delta" / "delta-storage" / version
    text = (pom / f"delta-storage-{version}.pom").read_text()
    found = re.search(
        r"<artifactId>unitycatalog-client</artifactId>\s*<version>([^<]+)</version>", text
    )
    if found is None:
        raise RuntimeError(f"delta-storage {version}'s POM names no unitycatalog-client")
    return found.group(1)


def uc_client_jars() -> list[Path]:
    """``unitycatalog-client`` and ``unitycatalog-hadoop`` from ``~/.m2`` (fetched
    with ``mvn dependency:get`` first when missing)."""
    version = uc_sdk_version()
    jars = [
        MAVEN_REPOSITORY / "io" / "unitycatalog" / name / version / f"{name}-{version}.jar"
        for name in ("unitycatalog-client", "unitycatalog-hadoop")
    ]
    mvn = shutil.which("mvn")
    for jar in jars:
        if jar.is_file():
            continue
        if mvn is None:
            raise RuntimeError(f"{jar} is missing and mvn is not installed")
        coordinate = f"io.unitycatalog:{jar.parent.parent.name}:{version}"
        subprocess.run(
            [mvn, "-q", "-B", "dependency:get", f"-Dartifact={coordinate}", "-Dtransitive=false"],
            capture_output=True,
            timeout=900,
            check=False,
        )
        if not jar.is_file():
            raise RuntimeError(f"mvn dependency:get {coordinate} did not produce {jar}")
    return jars


def ensure_uc_client_jars(spark: Any) -> None:
    """Make delta-storage's Unity Catalog classes linkable in ``spark``'s JVM."""
    jvm = spark._jvm
    with _JARS_LOCK:
        context = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader = jvm.java.lang.Class.forName(
            "io.delta.storage.commit.uccommitcoordinator.UCClient", False, context
        ).getClassLoader()
        try:
            jvm.java.lang.Class.forName("io.unitycatalog.client.ApiClient", False, loader)
            return
        except Exception:
            pass
        for jar in uc_client_jars():
            loader.addURL(jvm.java.io.File(str(jar)).toURI().toURL())


# --- py4j helpers --------------------------------------------------------------------------


def scala_object(jvm: Any, name: str) -> Any:
    """The instance of the Scala ``object`` ``name`` (``pkg.Name``)."""
    package, _, simple = name.rpartition(".")
    holder: Any = jvm
    for part in package.split("."):
        holder = getattr(holder, part)
    return getattr(getattr(holder, simple + "$"), "MODULE$")


def java_map(jvm: Any, values: Mapping[str, str]) -> Any:
    result = jvm.java.util.HashMap()
    for key, value in values.items():
        result.put(key, value)
    return result


def optional_long(jvm: Any, value: int | None) -> Any:
    """``Optional<Long>`` built inside the JVM (py4j would box a small int as Integer)."""
    if value is None:
        return jvm.java.util.Optional.empty()
    return jvm.java.util.stream.LongStream.of(value).boxed().findFirst()


def java_class_of(error: BaseException) -> str | None:
    """The class name of the Java exception behind a ``Py4JJavaError``."""
    java = getattr(error, "java_exception", None)
    return None if java is None else str(java.getClass().getName())


class DeltaCommitError(Exception):
    """A Java exception from delta's commit path, with what delta-spark acts on:
    ``java_class`` (e.g. ``io.delta.storage.commit.CommitFailedException``),
    ``retryable`` and ``conflict`` (for ``CommitFailedException``), the chain of
    causes' class names and the message."""

    def __init__(self, error: BaseException) -> None:
        java = getattr(error, "java_exception", None)
        self.java_class = java_class_of(error) or type(error).__name__
        self.retryable: bool | None = None
        self.conflict: bool | None = None
        self.causes: list[str] = []
        message = str(error)
        if java is not None:
            message = str(java.getMessage())
            if self.java_class == "io.delta.storage.commit.CommitFailedException":
                self.retryable = bool(java.getRetryable())
                self.conflict = bool(java.getConflict())
            cause = java.getCause()
            while cause is not None and len(self.causes) < 8:
                self.causes.append(str(cause.getClass().getName()))
                cause = cause.getCause()
        self.message = message
        super().__init__(f"{self.java_class}: {message}")


# --- the client ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JvmCommit:
    """A commit as delta's client reports it: version, staged file, in-commit timestamp."""

    version: int
    path: str
    timestamp: int

    @property
    def file_name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class JvmUCClient:
    """delta-spark's Unity Catalog commit coordinator client for one server.

    ``api``: ``"delta"`` (the ``/delta/v1`` REST API, delta-spark 4.4.0's
    default; commits need the table's three-part name) or ``"legacy"``
    (``/delta/preview/commits``, keyed by table id)."""

    def __init__(self, spark: Any, *, uri: str, token: str, api: RestApi = "legacy") -> None:
        ensure_uc_client_jars(spark)
        self.spark = spark
        self.jvm = spark._jvm
        self.api = api
        conf = {"uri": uri, "token": token, "deltaRestApi.enabled": str(api == "delta").lower()}
        factory = scala_object(
            self.jvm, "org.apache.spark.sql.delta.coordinatedcommits.UCTokenBasedRestClientFactory"
        )
        self.rest = factory.createUCClient(java_map(self.jvm, conf))
        package = self.jvm.io.delta.storage.commit.uccommitcoordinator
        self.coordinator = package.UCCommitCoordinatorClient(java_map(self.jvm, {}), self.rest)

    def metastore_id(self) -> str:
        return str(self.rest.getMetastoreId())

    def table(self, location: str, *, name: Sequence[str] | None = None) -> JvmUCTable:
        """The managed table at ``location`` (its ``file:`` URI); ``name``:
        ``(catalog, schema, table)`` as delta-spark passes the identifier."""
        return JvmUCTable(self, location, name)

    def close(self) -> None:
        self.rest.close()


class JvmUCTable:
    """One catalog-managed table, committed and read through :class:`JvmUCClient`."""

    def __init__(self, client: JvmUCClient, location: str, name: Sequence[str] | None) -> None:
        self.client = client
        jvm = client.jvm
        self.jvm = jvm
        self.location = location.rstrip("/")
        self.root = Path(_local(self.location))
        self.name = tuple(name) if name is not None else None
        hadoop_path = jvm.org.apache.hadoop.fs.Path(self.location + "/_delta_log")
        self.log_path = hadoop_path
        self.hadoop_conf = client.spark._jsc.hadoopConfiguration()
        scala_store = scala_object(jvm, "org.apache.spark.sql.delta.storage.LogStore").apply(
            client.spark._jsparkSession
        )
        self.log_store = jvm.org.apache.spark.sql.delta.storage.LogStoreInverseAdaptor(
            scala_store, self.hadoop_conf
        )
        self._actions = scala_object(jvm, "org.apache.spark.sql.delta.actions.Action")
        self.last_commit_seconds = 0.0

    # --- what delta-spark reads --------------------------------------------------------

    def _identifier(self) -> Any:
        if self.name is None:
            return self.jvm.java.util.Optional.empty()
        *namespace, table = self.name
        array = self.client.spark.sparkContext._gateway.new_array(
            self.jvm.java.lang.String, len(namespace)
        )
        for index, part in enumerate(namespace):
            array[index] = part
        return self.jvm.java.util.Optional.of(
            self.jvm.io.delta.storage.commit.TableIdentifier(array, table)
        )

    def descriptor(self, configuration: Mapping[str, str] | None = None) -> Any:
        """delta's ``TableDescriptor``: log path, identifier, the metadata configuration
        (default: version 0's, where the catalog put ``io.unitycatalog.tableId``)."""
        conf = self.created_configuration() if configuration is None else configuration
        return self.jvm.io.delta.storage.commit.TableDescriptor(
            self.log_path, self._identifier(), java_map(self.jvm, dict(conf))
        )

    def created_configuration(self) -> dict[str, str]:
        """The metadata ``configuration`` of the table's published version 0."""
        zero = self.root / "_delta_log" / f"{0:020d}.json"
        for line in zero.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                return dict(action["metaData"].get("configuration", {}))
        raise AssertionError(f"no metaData in {zero}")

    def get_commits(
        self, start: int | None = None, end: int | None = None
    ) -> tuple[list[JvmCommit], int]:
        """``UCCommitCoordinatorClient.getCommits``: the unpublished ratified commits
        (sorted) and the latest table version."""
        try:
            response = self.client.coordinator.getCommits(self.descriptor(), start, end)
        except Exception as error:
            raise DeltaCommitError(error) from error
        commits = [
            JvmCommit(
                int(c.getVersion()),
                str(c.getFileStatus().getPath().toString()),
                int(c.getCommitTimestamp()),
            )
            for c in response.getCommits()
        ]
        return commits, int(response.getLatestTableVersion())

    def published_versions(self) -> list[int]:
        log = self.root / "_delta_log"
        return sorted(int(p.name[:20]) for p in log.glob("[0-9]" * 20 + ".json"))

    def latest_version(self) -> int:
        """The table's latest version as delta-spark computes it: the catalog's
        latest ratified version, or the last published file when that is later."""
        _, latest = self.get_commits()
        published = self.published_versions()
        return max(latest, published[-1] if published else -1)

    def commit_lines(self, version: int) -> list[str]:
        """The lines of version ``version``: the published file, else the staged one
        the catalog names."""
        published = self.root / "_delta_log" / f"{version:020d}.json"
        if published.exists():
            return published.read_text().splitlines()
        for commit in self.get_commits(version, version)[0]:
            if commit.version == version:
                return Path(_local(commit.path)).read_text().splitlines()
        if published.exists():  # published (and forgotten) between the two looks
            return published.read_text().splitlines()
        raise FileNotFoundError(
            f"version {version} of {self.location} is neither published nor ratified"
        )

    def metadata_protocol(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The table's current ``metaData`` and ``protocol`` (last one wins)."""
        metadata: dict[str, Any] | None = None
        protocol: dict[str, Any] | None = None
        published = self.published_versions()
        # Ratified, unpublished versions come after the last published one.
        versions = [*published, *range((published or [-1])[-1] + 1, self.latest_version() + 1)]
        for version in versions:
            for line in self.commit_lines(version):
                action = json.loads(line)
                metadata = action.get("metaData", metadata)
                protocol = action.get("protocol", protocol)
        if metadata is None or protocol is None:
            raise AssertionError(f"no metaData/protocol in {self.location}")
        return metadata, protocol

    def last_ict(self, version: int) -> int:
        for line in self.commit_lines(version):
            action = json.loads(line)
            if "commitInfo" in action:
                return int(action["commitInfo"].get("inCommitTimestamp", 0))
        return 0

    # --- what delta-spark writes ---------------------------------------------------------

    def commit(
        self,
        version: int,
        actions: Sequence[Mapping[str, Any]],
        *,
        operation: str = "WRITE",
        ict: int | None = None,
        txn_id: str | None = None,
        new_metadata: Mapping[str, Any] | None = None,
        state: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    ) -> JvmCommit:
        """``UCCommitCoordinatorClient.commit`` of version ``version`` whose actions
        are a fresh ``commitInfo`` (in-commit timestamp ``ict``, unique ``txnId``)
        followed by ``actions``. Raises :class:`DeltaCommitError` as delta does.
        ``state``: the current ``(metaData, protocol)`` when the caller knows it.
        ``last_commit_seconds`` is then the time of delta's commit call alone."""
        metadata, protocol = self.metadata_protocol() if state is None else state
        if ict is None:  # after the previous commit's, as delta-spark's in-commit timestamps
            previous = min(version - 1, self.latest_version())
            floor = self.last_ict(previous) + 1 if previous >= 0 else 0
            ict = max(int(time.time() * 1000), floor)
        stamp = ict
        info = {
            "commitInfo": {
                "inCommitTimestamp": stamp,
                "timestamp": stamp,
                "operation": operation,
                "operationParameters": {},
                "isBlindAppend": all("add" in a for a in actions),
                "txnId": txn_id or str(uuid.uuid4()),
                "engineInfo": f"delta-storage/{delta_version()} via tests/uc_api/jvm_clients",
            }
        }
        lines = [json.dumps(info)]
        lines += [json.dumps(dict(a)) for a in actions]
        if new_metadata is not None:
            lines.append(json.dumps({"metaData": dict(new_metadata)}))
        jvm = self.jvm
        old_md = self._actions.fromJson(json.dumps({"metaData": metadata}))
        new_md = (
            old_md
            if new_metadata is None
            else self._actions.fromJson(json.dumps({"metaData": dict(new_metadata)}))
        )
        proto = self._actions.fromJson(json.dumps({"protocol": protocol}))
        updated = jvm.io.delta.storage.commit.UpdatedActions(
            self._actions.fromJson(lines[0]), new_md, proto, old_md, proto
        )
        java_lines = jvm.java.util.ArrayList()
        for line in lines:
            java_lines.add(line)
        start = time.perf_counter()
        try:
            response = self.client.coordinator.commit(
                self.log_store,
                self.hadoop_conf,
                self.descriptor(metadata["configuration"]),
                version,
                java_lines.iterator(),
                updated,
            )
        except Exception as error:
            raise DeltaCommitError(error) from error
        finally:
            self.last_commit_seconds = time.perf_counter() - start
        done = response.getCommit()
        return JvmCommit(
            int(done.getVersion()),
            str(done.getFileStatus().getPath().toString()),
            int(done.getCommitTimestamp()),
        )

    def backfill_to(self, version: int, last_known_backfilled: int | None) -> None:
        """``UCCommitCoordinatorClient.backfillToVersion`` (what delta runs after a commit)."""
        last = (
            None
            if last_known_backfilled is None
            else self.jvm.java.lang.Long(str(last_known_backfilled))
        )
        try:
            self.client.coordinator.backfillToVersion(
                self.log_store, self.hadoop_conf, self.descriptor(), version, last
            )
        except Exception as error:
            raise DeltaCommitError(error) from error

    def append(
        self,
        actions: Sequence[Mapping[str, Any]],
        *,
        txn_id: str | None = None,
        timeout: float = 300.0,
        on_error: Any = None,
    ) -> JvmCommit:
        """One transaction, retried as delta-spark retries it until acknowledged:
        commit at latest+1 with the same ``txnId`` every attempt; a conflict
        (``CommitFailedException`` with ``conflict``) re-reads the table and tries the
        next version (blind appends never conflict logically); a retryable failure
        (the server unreachable, a 5xx) or a failed read tries again after a pause.
        ``on_error(error)`` sees each failure (a :class:`DeltaCommitError`)."""
        txn = txn_id or str(uuid.uuid4())
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            try:
                version = self.latest_version() + 1
                return self.commit(version, actions, txn_id=txn)
            except DeltaCommitError as error:
                if on_error is not None:
                    on_error(error)
                if error.retryable is False or time.monotonic() > deadline:
                    raise
                if not error.conflict:
                    time.sleep(pause)
                    pause = min(pause * 2, 2.0)


def _local(location: str) -> str:
    if location.startswith("file://"):
        return location[len("file://") :]
    if location.startswith("file:"):
        return location[len("file:") :]
    return location


def staged_files(location: str) -> Iterator[Path]:
    yield from sorted((Path(_local(location)) / "_delta_log" / STAGED_DIR).glob("*.json"))


# --- delta-spark SQL without the Unity Catalog connector --------------------------------------

SQL_CATALOG = "uc"
UC_CONNECTOR_CLASS = "io.unitycatalog.spark.UCSingleCatalog"


class _SessionCatalogBuilder:
    """A ``CatalogOwnedCommitCoordinatorBuilder`` (py4j callback) for ``spark_catalog``
    that hands out delta-spark's own Unity Catalog coordinator for the conf of
    catalog :data:`SQL_CATALOG`."""

    def __init__(self, jvm: Any) -> None:
        self._builder = scala_object(
            jvm, "org.apache.spark.sql.delta.coordinatedcommits.UCCommitCoordinatorBuilder"
        )

    def getName(self) -> str:
        return str(self._builder.getName())

    def build(self, spark: Any, conf: Any) -> Any:
        return self._builder.build(spark, conf)

    def buildForCatalog(self, spark: Any, catalog_name: str) -> Any:
        return self._builder.buildForCatalog(spark, SQL_CATALOG)

    class Java:
        implements = [
            "org.apache.spark.sql.delta.coordinatedcommits.CatalogOwnedCommitCoordinatorBuilder"
        ]


_ATTACHED: dict[int, _SessionCatalogBuilder] = {}


def attach_spark_sql(spark: Any, *, uri: str, token: str) -> None:
    """Let delta-spark's SQL commit catalog-managed tables of ``spark_catalog``
    through the Unity Catalog server at ``uri`` without the connector jar.

    - ``spark.sql.catalog.uc`` is set to the connector's class NAME (with
      ``.uri``, ``.token`` and ``deltaRestApi.enabled=false``): delta-spark's
      ``UCCommitCoordinatorBuilder`` only compares that string, and the
      catalog ``uc`` itself is never resolved, so its class never loads;
    - a builder for ``spark_catalog`` is registered with delta-spark's public
      ``CatalogOwnedCommitCoordinatorProvider.registerBuilder``; it returns
      ``UCCommitCoordinatorBuilder.buildForCatalog(spark, "uc")``, i.e.
      delta-spark's own client for that conf. Re-attaching updates the conf.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_uc_client_jars(spark)
    prefix = f"spark.sql.catalog.{SQL_CATALOG}"
    spark.conf.set(prefix, UC_CONNECTOR_CLASS)
    spark.conf.set(f"{prefix}.uri", uri)
    spark.conf.set(f"{prefix}.token", token)
    spark.conf.set(f"{prefix}.deltaRestApi.enabled", "false")
    jvm = spark._jvm
    scala_object(
        jvm, "org.apache.spark.sql.delta.coordinatedcommits.UCCommitCoordinatorBuilder"
    ).clearCache()
    # snapshots keep the coordinator client they were loaded with: drop them
    scala_object(jvm, "org.apache.spark.sql.delta.DeltaLog").clearCache()
    key = id(spark.sparkContext)
    if key in _ATTACHED:
        return
    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    builder = _SessionCatalogBuilder(jvm)
    provider = scala_object(
        jvm, "org.apache.spark.sql.delta.coordinatedcommits.CatalogOwnedCommitCoordinatorProvider"
    )
    if provider.getBuilder("spark_catalog").isEmpty():
        provider.registerBuilder("spark_catalog", builder)
    _ATTACHED[key] = builder


def register_managed_table(spark: Any, name: str, location: str, schema_ddl: str) -> None:
    """Give ``spark_catalog`` a table ``name`` for the catalog-managed table at
    ``location``, created moments ago by the catalog (nothing committed since).

    delta-spark refuses both ways a user would do this (``CREATE TABLE ...
    LOCATION`` over a managed table is a by-path read,
    ``DELTA_PATH_BASED_ACCESS_TO_CATALOG_MANAGED_TABLE_BLOCKED``; creating a
    managed table is ``DELTA_UNSUPPORTED_CATALOG_MANAGED_TABLE_CREATION``): the
    connector does it. So the managed log is moved aside, an empty table with
    the same schema is created there by name, and the managed log is put
    back; delta-spark's log cache is dropped."""
    root = Path(_local(location))
    log = root / "_delta_log"
    aside = root.parent / f".{root.name}.managed-log-{uuid.uuid4().hex[:8]}"
    log.rename(aside)
    try:
        spark.sql(f"CREATE TABLE {name} ({schema_ddl}) USING delta LOCATION '{root}'")
    finally:
        if log.exists():
            shutil.rmtree(log)
        aside.rename(log)
    scala_object(spark._jvm, "org.apache.spark.sql.delta.DeltaLog").clearCache()


__all__ = [
    "DeltaCommitError",
    "JvmCommit",
    "JvmUCClient",
    "JvmUCTable",
    "attach_spark_sql",
    "ensure_uc_client_jars",
    "java_class_of",
    "register_managed_table",
    "staged_files",
    "uc_client_jars",
]
