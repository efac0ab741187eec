"""The durable store contract (storage/catalog/ratified_store.py), on both implementations."""

from __future__ import annotations

import multiprocessing
import pickle
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from raydelta.protocol.catalog_managed import RatifiedCommit, staged_commit_path
from raydelta.protocol.errors import (
    InvalidArgumentError,
    RatificationError,
    RatificationOutOfOrderError,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionAlreadyRatifiedError,
)
from raydelta.storage.catalog.ratified_store import (
    RatifiedCommitStore,
    SqliteRatifiedStore,
    TableEntry,
)
from tests.catalog_managed.managed_tables import data_commit
from tests.catalog_store.store_race import race

StoreFactory = Callable[[], RatifiedCommitStore]  # the fixtures: conftest.py


def staged(version: int) -> RatifiedCommit:
    return RatifiedCommit.staged(version, staged_commit_path(version, str(uuid.uuid4())))


def inline(version: int) -> RatifiedCommit:
    return RatifiedCommit.inline(version, data_commit(version), timestamp=1000 + version)


def test_versions_are_ratified_in_order_and_at_most_once(make_store: StoreFactory) -> None:
    store = make_store()
    assert store.latest_version("t") is None and store.ratified("t") == []
    first = staged(0)
    assert store.ratify("t", first, txn_id="a") == first
    with pytest.raises(VersionAlreadyRatifiedError) as taken:
        store.ratify("t", staged(0), txn_id="b")
    assert (taken.value.version, taken.value.latest_version, taken.value.table_id) == (0, 0, "t")
    with pytest.raises(RatificationOutOfOrderError) as gap:
        store.ratify("t", inline(2), txn_id="b")
    assert (gap.value.version, gap.value.latest_version) == (2, 0)
    second = inline(1)
    store.ratify("t", second, txn_id="b")
    assert store.latest_version("t") == 1
    assert store.ratified("t") == [first, second]
    assert store.ratified("t")[1].actions == tuple(data_commit(1))
    assert store.latest_version("other") is None  # tables are independent
    store.ratify("other", inline(0), txn_id="a")  # txn ids are per table
    assert store.latest_version("other") == 0 and store.latest_version("t") == 1


def test_a_retried_txn_gets_its_original_commit(make_store: StoreFactory) -> None:
    store = make_store()
    original = inline(0)
    store.ratify("t", original, txn_id="x")
    store.ratify("t", staged(1), txn_id="y")
    # The client retried after a lost reply, rebased onto version 2: still version 0.
    assert store.ratify("t", inline(2), txn_id="x") == original
    assert store.find_txn("t", "x") == 0 and store.find_txn("t", "y") == 1
    assert store.find_txn("t", "z") is None
    assert store.latest_version("t") == 1


def test_first_ratification_fixes_the_start(make_store: StoreFactory) -> None:
    # A filesystem table taken over at version 5: 0-4 are published files.
    store = make_store()
    store.ratify("t", inline(5), txn_id="upgrade")
    with pytest.raises(VersionAlreadyRatifiedError):
        store.ratify("t", inline(4), txn_id="late")
    with pytest.raises(RatificationOutOfOrderError):
        store.ratify("t", inline(7), txn_id="early")
    store.ratify("t", inline(6), txn_id="next")
    assert [c.version for c in store.ratified("t")] == [5, 6]


def test_ranges_and_publishing(make_store: StoreFactory) -> None:
    store = make_store()
    commits = [inline(0), staged(1), inline(2), staged(3)]
    for number, commit in enumerate(commits):
        store.ratify("t", commit, txn_id=f"txn-{number}")
    assert store.ratified("t", start_version=1, end_version=2) == commits[1:3]
    assert store.ratified("t", start_version=3) == commits[3:]
    assert store.ratified("t", end_version=0) == commits[:1]
    assert store.published_version("t") is None
    store.mark_published("t", 1)
    assert store.ratified("t") == commits[2:]
    assert store.published_version("t") == 1
    store.mark_published("t", 0)  # never backwards
    assert store.published_version("t") == 1 and store.ratified("t") == commits[2:]
    with pytest.raises(RatificationError, match="latest ratified version is 3"):
        store.mark_published("t", 4)
    with pytest.raises(RatificationError):
        store.mark_published("unknown", 0)
    store.mark_published("t", 3)
    assert store.ratified("t") == [] and store.latest_version("t") == 3
    # Published txns are still known: a late retry is not committed twice.
    assert store.find_txn("t", "txn-0") == 0
    assert store.ratify("t", inline(4), txn_id="txn-2").version == 2
    store.ratify("t", inline(4), txn_id="txn-4")
    assert store.ratified("t") == [inline(4)]


def test_everything_survives_a_restart(make_store: StoreFactory) -> None:
    store = make_store()
    for version in range(3):
        store.ratify("t", inline(version), txn_id=f"txn-{version}")
    store.mark_published("t", 0)
    store.register_table("db.events", location="file:///data/events", table_id="t")
    for again in (make_store(), pickle.loads(pickle.dumps(store))):
        assert again.latest_version("t") == 2 and again.published_version("t") == 0
        assert again.ratified("t") == [inline(1), inline(2)]
        assert again.find_txn("t", "txn-0") == 0
        assert again.lookup("db.events") == TableEntry(
            name="db.events", location="file:///data/events", table_id="t"
        )
        with pytest.raises(VersionAlreadyRatifiedError):
            again.ratify("t", inline(2), txn_id="new")


def test_name_registry(make_store: StoreFactory) -> None:
    store = make_store()
    assert store.lookup("a") is None and store.list_tables() == []
    entry = store.register_table("b/weird name", location="s3://x/b", table_id="id-b")
    assert entry.catalog_managed
    store.register_table("a", location="/a", table_id="id-a", catalog_managed=False)
    assert [e.name for e in store.list_tables()] == ["a", "b/weird name"]
    assert store.lookup("b/weird name") == entry
    with pytest.raises(TableAlreadyExistsError):
        store.register_table("a", location="/elsewhere", table_id="id-c")
    with pytest.raises(TableAlreadyExistsError):
        store.register_table("c", location="/c", table_id="id-a")
    assert store.lookup("c") is None
    assert store.drop_table("a").table_id == "id-a"
    with pytest.raises(TableNotFoundError):
        store.drop_table("a")
    assert [e.name for e in store.list_tables()] == ["b/weird name"]
    store.register_table("a", location="/a2", table_id="id-a")
    assert store.lookup("a") == TableEntry(name="a", location="/a2", table_id="id-a")


def test_bad_arguments(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store()
    with pytest.raises(InvalidArgumentError):
        store.ratify("", inline(0), txn_id="x")
    with pytest.raises(InvalidArgumentError):
        store.ratify("t", inline(0), txn_id="")
    for memory in (":memory:", ""):  # "" is a private temporary database
        with pytest.raises(InvalidArgumentError, match="file path"):
            SqliteRatifiedStore(memory)


def _run_race(store: RatifiedCommitStore, txns_of: list[list[str]]) -> list[dict[str, int]]:
    context = multiprocessing.get_context("fork")  # fast: no re-import of raydelta
    with context.Manager() as manager:
        barrier = manager.Barrier(len(txns_of))
        with ProcessPoolExecutor(len(txns_of), mp_context=context) as pool:
            futures = [
                pool.submit(race, store, "t", worker, txns, barrier)
                for worker, txns in enumerate(txns_of)
            ]
            return [f.result(timeout=120) for f in futures]


def test_processes_racing_ratify_each_version_once(make_store: StoreFactory) -> None:
    """Three processes (three catalog incarnations) race on one table: some
    with their own transactions, some retrying the same shared ones."""
    store = make_store()
    own = [[f"w{w}-{i}" for i in range(6)] for w in range(2)]
    shared = [f"shared-{i}" for i in range(6)]
    told = _run_race(store, [own[0] + shared, own[1] + shared, list(reversed(shared))])
    every_txn = {t for txns in [*own, shared] for t in txns}
    held = store.ratified("t")
    # Contiguous from 0, one commit per transaction, never two for one.
    assert [c.version for c in held] == list(range(len(every_txn)))
    assert store.latest_version("t") == len(every_txn) - 1
    by_txn = {txn: store.find_txn("t", txn) for txn in every_txn}
    assert sorted(v for v in by_txn.values() if v is not None) == list(range(len(every_txn)))
    # Every process was told the version the store holds for each of its txns.
    for answers in told:
        for txn, version in answers.items():
            assert by_txn[txn] == version
