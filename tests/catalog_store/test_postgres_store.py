"""What only the PostgreSQL store has (the contract itself: test_ratified_store.py and
test_group_ratification.py, on every store): a bad DSN's typed errors without its
password, tables that do not wait for each other, durability whatever the server's
default, the versioned schema, forked children, and the missing extra."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import psycopg
import pytest

from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.errors import (
    CatalogStoreError,
    InvalidArgumentError,
    MissingDependencyError,
    RatificationError,
    RaydeltaError,
)
from raydelta.storage.catalog import postgres_store
from raydelta.storage.catalog.postgres_store import SCHEMA_VERSION, PostgresRatifiedStore
from raydelta.storage.catalog.ratified_store import Ratification

SECRET = "s3cret-Pa55word"


def inline(version: int) -> RatifiedCommit:
    return RatifiedCommit.inline(version, [], timestamp=1000 + version)


def no_secret(error: BaseException, *secrets: str) -> None:
    for secret in (SECRET, *secrets):
        assert secret not in str(error) and secret not in repr(error), error


def test_a_wrong_password_is_a_typed_error_without_it(postgres_server: Any) -> None:
    database = postgres_server.new_database().rsplit("/", 1)[1]
    dsn = postgres_server.dsn(database, password=SECRET)
    with pytest.raises(CatalogStoreError, match="password authentication failed") as refused:
        PostgresRatifiedStore(dsn)
    no_secret(refused.value, postgres_server.password)
    assert (
        refused.value.store == f"postgresql://raydelta@127.0.0.1:{postgres_server.port}/{database}"
    )
    assert refused.value.__cause__ is None and refused.value.__context__ is not None  # from None
    assert isinstance(refused.value, RaydeltaError)


def test_unreachable_and_malformed_dsns(postgres_server: Any) -> None:
    with pytest.raises(CatalogStoreError, match="Connection refused") as down:
        PostgresRatifiedStore(f"postgresql://raydelta:{SECRET}@127.0.0.1:1/db")
    no_secret(down.value)
    for malformed in (
        f"postgresql://raydelta:{SECRET}@[::1/db",  # libpq echoes the whole URI
        f"host=127.0.0.1 password={SECRET} port",
        f"postgresql://raydelta@127.0.0.1/db?password={SECRET}&nonsense=1",
    ):
        with pytest.raises(InvalidArgumentError, match="not a PostgreSQL connection string") as bad:
            PostgresRatifiedStore(malformed)
        no_secret(bad.value)
    with pytest.raises(CatalogStoreError, match="port") as port:
        PostgresRatifiedStore(f"host=127.0.0.1 port=notaport password={SECRET}")
    no_secret(port.value)
    for empty in ("", "   "):
        with pytest.raises(InvalidArgumentError, match="DSN"):
            PostgresRatifiedStore(empty)
    with pytest.raises(InvalidArgumentError, match="pool_size"):
        PostgresRatifiedStore(postgres_server.dsn(), pool_size=0)


def test_repr_and_pickle_keep_the_password_out_of_sight(postgres_server: Any) -> None:
    dsn = postgres_server.new_database()
    store = PostgresRatifiedStore(dsn)
    again = pickle.loads(pickle.dumps(store))
    for shown in (repr(store), str(store), repr(again), store.redacted_dsn):
        assert postgres_server.password not in shown, shown
    assert repr(again) == repr(store) and again.redacted_dsn.startswith("postgresql://raydelta@")
    store.ratify("t", inline(0), txn_id="a")
    assert again.find_txn("t", "a") == 0  # the copy reconnected on its own


def test_tables_do_not_wait_for_each_other(postgres_server: Any) -> None:
    """Another session holds table a's lock: a's ratification waits for it, b's does not."""
    dsn = postgres_server.new_database()
    store = PostgresRatifiedStore(dsn)
    with psycopg.connect(dsn) as holder:
        holder.execute(
            "SELECT pg_advisory_xact_lock(%s)", (postgres_store._lock_key("table", "a"),)
        )
        done: list[int] = []
        waiting = threading.Thread(
            target=lambda: done.append(store.ratify("a", inline(0), txn_id="x").version)
        )
        waiting.start()
        started = time.monotonic()
        assert store.ratify("b", inline(0), txn_id="y").version == 0
        assert store.latest_version("b") == 0
        waiting.join(timeout=1.0)
        assert done == [] and waiting.is_alive(), "a's ratification ignored a's lock"
        assert time.monotonic() - started < 30
    # the holder's transaction ended (rolled back): a's ratification goes through
    waiting.join(timeout=60)
    assert done == [0] and store.latest_version("a") == 0


def test_groups_over_the_same_tables_in_opposite_orders_never_deadlock(
    postgres_server: Any,
) -> None:
    """Each group locks its tables in one global order: [a, b] and [b, a] racing
    neither deadlock (PostgreSQL would abort one) nor lose a version."""
    store = PostgresRatifiedStore(postgres_server.new_database())
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def next_version(table_id: str) -> int:
        latest = store.latest_version(table_id)
        return 0 if latest is None else latest + 1

    def groups(order: tuple[str, str]) -> None:
        barrier.wait()
        for round_ in range(20):
            while True:
                batch = [
                    Ratification(t, inline(next_version(t)), f"{order}-{round_}-{t}") for t in order
                ]
                try:
                    store.ratify_many(batch)
                    break
                except RatificationError:
                    continue  # the other group took a version: renumber (none was written)
                except BaseException as error:
                    errors.append(error)
                    return

    threads = [threading.Thread(target=groups, args=(o,)) for o in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.latest_version("a") == store.latest_version("b") == 39


def test_ratifications_are_synchronous_whatever_the_server_default(postgres_server: Any) -> None:
    dsn = postgres_server.new_database()
    database = dsn.rsplit("/", 1)[1]
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" SET synchronous_commit TO off')
    with psycopg.connect(dsn) as plain:
        assert plain.execute("SHOW synchronous_commit").fetchone() == ("off",)
    store = PostgresRatifiedStore(dsn)
    with store._connection() as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("1min",)


def test_the_schema_is_versioned_and_created_once(postgres_server: Any) -> None:
    dsn = postgres_server.new_database()
    stores: list[PostgresRatifiedStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            stores.append(PostgresRatifiedStore(dsn))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_one) for _ in range(6)]  # racing first uses
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(stores) == 6
    with psycopg.connect(dsn) as check:
        assert check.execute("SELECT version FROM raydelta_schema_version").fetchall() == [
            (SCHEMA_VERSION,)
        ]
        check.execute("UPDATE raydelta_schema_version SET version = version + 1")
    with pytest.raises(CatalogStoreError, match="upgrade raydelta"):
        PostgresRatifiedStore(dsn)


def test_a_forked_child_leaves_the_parents_sessions_alone(postgres_server: Any) -> None:
    store = PostgresRatifiedStore(postgres_server.new_database())
    store.ratify("t", inline(0), txn_id="a")
    with store._connection() as conn:
        backend = conn.info.backend_pid
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome is its exit code
        try:
            store.close()  # closes the inherited connection: no goodbye to the server
            os._exit(0 if store.latest_version("t") == 0 else 1)  # its own new connection
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with store._connection() as conn:
        assert conn.info.backend_pid == backend
        assert conn.execute("SELECT 1").fetchone() == (1,)
    store.ratify("t", inline(1), txn_id="b")  # a write on the same session: no retry hides it


def test_a_session_the_server_dropped_is_replaced_before_a_write(postgres_server: Any) -> None:
    dsn = postgres_server.new_database()
    store = PostgresRatifiedStore(dsn)
    store.ratify("t", inline(0), txn_id="a")
    with store._connection() as conn:
        backend = conn.info.backend_pid
    with psycopg.connect(dsn, autocommit=True) as admin:  # a restart or failover, as seen by us
        assert admin.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone() == (True,)
    time.sleep(5.5)  # idle past the pool's check_after_s (5 s)
    assert store.ratify("t", inline(1), txn_id="b").version == 1  # no CatalogStoreError
    with store._connection() as conn:
        assert conn.info.backend_pid != backend


_WITHOUT_PSYCOPG = textwrap.dedent(
    """
    import importlib.abc, sys

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == "psycopg":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    import raydelta
    from raydelta.errors import MissingDependencyError
    from raydelta.storage.catalog.stores import open_store

    for attempt in (
        lambda: __import__("raydelta.storage.catalog.postgres_store"),
        lambda: open_store("postgresql://u:pw@127.0.0.1:1/db"),
    ):
        try:
            attempt()
        except MissingDependencyError as error:
            assert isinstance(error, ImportError)
            print(error.package, error.extra, str(error))
        else:
            raise SystemExit("imported without psycopg")
    """
)


def test_without_psycopg_the_error_names_the_extra() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PSYCOPG],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, result.stdout
    for line in lines:
        assert line.startswith("psycopg postgres ") and "pip install 'raydelta[postgres]'" in line
    assert issubclass(MissingDependencyError, ImportError)
