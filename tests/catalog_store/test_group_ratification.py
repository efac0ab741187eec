"""Group commit: ``ratify_many`` on every durable store, and the catalog's
:class:`GroupRatifier` (leader/follower) on a real SQLite store and a real
PostgreSQL database with real threads: every commit durable before its
waiter returns, in order, and a failed transaction fails everything numbered
on top of it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest

from raydelta.actors.catalog.group_commit import GroupRatifier, Ticket
from raydelta.protocol.catalog_managed import RatifiedCommit
from raydelta.protocol.errors import RatificationError, VersionAlreadyRatifiedError
from raydelta.storage.catalog.ratified_store import (
    Ratification,
    RatifiedCommitStore,
)
from tests.catalog_managed.managed_tables import data_commit

StoreFactory = Callable[[], RatifiedCommitStore]  # the fixtures: conftest.py


def ratification(table_id: str, version: int, txn_id: str | None = None) -> Ratification:
    commit = RatifiedCommit.inline(version, data_commit(version), timestamp=1000 + version)
    return Ratification(table_id, commit, txn_id or f"txn-{table_id}-{version}")


def test_ratify_many_in_order_across_tables(make_store: StoreFactory) -> None:
    store = make_store()
    batch = [ratification("a", 0), ratification("b", 0), ratification("a", 1)]
    assert store.ratify_many(batch) == 3
    reopened = make_store()
    assert [c.version for c in reopened.ratified("a")] == [0, 1]
    assert reopened.latest_version("b") == 0
    assert reopened.find_txn("a", "txn-a-1") == 1
    assert store.ratify_many([]) == 0


def test_ratify_many_stops_at_the_first_refusal(make_store: StoreFactory) -> None:
    store = make_store()
    store.ratify("t", ratification("t", 0).commit, txn_id="first")
    batch = [ratification("t", 1), ratification("t", 1, "other"), ratification("t", 2)]
    with pytest.raises(VersionAlreadyRatifiedError) as refused:
        store.ratify_many(batch)
    before = refused.value.ratified_before  # type: ignore[attr-defined]
    latest = make_store().latest_version("t")
    # SQLite writes the batch in one transaction (none of it); files go one by one.
    assert latest == before  # 0 + the prefix written before the refusal
    assert before in (0, 1)
    assert make_store().find_txn("t", "other") is None


def test_a_txn_ratified_before_is_refused_in_a_batch(make_store: StoreFactory) -> None:
    store = make_store()
    store.ratify("t", ratification("t", 0).commit, txn_id="x")
    with pytest.raises(RatificationError):
        store.ratify_many([ratification("t", 1, "x")])  # x won version 0, not 1
    assert make_store().latest_version("t") == 0


def test_group_ratifier_concurrent_waiters_are_durable_in_order(
    make_database_store: StoreFactory,
) -> None:
    store = make_database_store()
    durable: list[int] = []
    group = GroupRatifier(
        store,
        on_durable=lambda t: durable.append(t.ratification.commit.version),
        on_failure=lambda ids: pytest.fail(f"no transaction should fail: {ids}"),
    )
    lock = threading.Lock()  # the actor's lock: numbering is serial
    next_version = [0]
    seen: dict[int, int | None] = {}
    barrier = threading.Barrier(8)

    def writer(index: int) -> None:
        barrier.wait()
        for _ in range(25):
            with lock:
                version = next_version[0]
                next_version[0] += 1
                group.submit(ratification("t", version, str(uuid.uuid4())), b"{}")
                ticket = group.last
            group.wait(ticket)
            # answered only once the store has it (read through another connection)
            seen[version] = make_database_store().latest_version("t")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 200
    assert all(latest is not None and latest >= version for version, latest in seen.items())
    assert durable == list(range(200))  # handed to the publisher in version order
    assert group.ratified == 200
    assert 1 <= group.transactions <= 200


def test_group_ratifier_failure_fails_the_rest_and_reports_the_table(
    make_database_store: StoreFactory,
) -> None:
    store = make_database_store()
    stale: set[str] = set()
    durable: list[Ticket] = []
    group = GroupRatifier(store, on_durable=durable.append, on_failure=stale.update)
    group.submit(ratification("t", 0), b"{}")
    group.wait(group.last)
    # Another incarnation of the catalog wins version 1 meanwhile.
    make_database_store().ratify("t", ratification("t", 1, "elsewhere").commit, txn_id="elsewhere")
    first = group.submit(ratification("t", 1), b"{}")
    second = group.submit(ratification("t", 2), b"{}")
    with pytest.raises(VersionAlreadyRatifiedError):
        group.wait(second)
    assert first.done and first.error is not None
    assert stale == {"t"}
    assert [t.ratification.commit.version for t in durable] == [0]
    assert store.find_txn("t", "elsewhere") == 1
    assert store.latest_version("t") == 1
    group.settle()  # nothing left
