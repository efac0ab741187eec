"""Whose put-if-absent: delta-spark and raydelta committing to one local table
at the same time, counting every acknowledged commit in the log.

raydelta's ``LocalLogStore`` creates ``<v>.json`` with ``os.link`` of a
temp file, which fails when the name exists: atomic across processes.
delta-spark 4.4 has no log store whose commit is a put-if-absent on local
paths: its default for ``file:`` (``HDFSLogStore``) checks the name is free
through Hadoop's ``FileContext`` and then ``rename(2)``s its temp file,
which replaces a file created in between (the check and the rename are two
steps; only a ``synchronized`` block orders writers inside one JVM);
``LocalLogStore`` is the same check-then-rename through ``FileSystem``.
So a raydelta commit linked in that window would be replaced by Spark's.
This test measures it: Ray tasks and Spark threads append at once, and
every acknowledged commit of either side must be in the log exactly once
(raydelta's by ``txnId``, Spark's by count). The assertion is never
weakened; the numbers are printed for the record (``pytest -s``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray

import raydelta
from tests.spark_delta.create_races import race
from tests.spark_delta.delta_spark_view import commits_by_txn_id, spark_history

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RAY_WRITERS, RAY_COMMITS = 3, 8
SPARK_WRITERS, SPARK_COMMITS = 2, 3


@ray.remote
def _ray_writer(uri: str, writer: int, commits: int) -> list[tuple[str, int]]:
    table = raydelta.open_table(uri)
    done = []
    for i in range(commits):
        table.append(pa.table({"id": pa.array([writer * 1000 + i], pa.int64())}))
        assert table.last_commit is not None
        done.append((table.last_commit.txn_id, table.last_commit.version))
    return done


def test_concurrent_local_commits_of_both_engines_are_each_in_the_log_once(
    delta: Any, tmp_path: Path
) -> None:
    spark, uri = delta, str(tmp_path / "race")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id BIGINT) USING delta")
    raydelta.open_table(uri)  # start the actor before the race
    spark_acknowledged: list[int] = []
    spark_errors: list[BaseException] = []

    def spark_writer(writer: int) -> None:
        for i in range(SPARK_COMMITS):
            try:
                frame = spark.createDataFrame([(500_000 + writer * 1000 + i,)], "id long")
                frame.write.format("delta").mode("append").save(uri)
                spark_acknowledged.append(writer * 1000 + i)
            except BaseException as error:  # a refused commit is counted, not lost
                spark_errors.append(error)

    ray_runs = [_ray_writer.remote(uri, w, RAY_COMMITS) for w in range(RAY_WRITERS)]
    threads = [threading.Thread(target=spark_writer, args=(w,)) for w in range(SPARK_WRITERS)]
    for thread in threads:
        thread.start()
    ray_acknowledged = [pair for run in ray.get(ray_runs) for pair in run]
    for thread in threads:
        thread.join(600)

    ours = commits_by_txn_id(uri)
    lost_ours = [t for t, v in ray_acknowledged if ours.get(t) != [v]]
    history = spark_history(spark, uri)
    spark_writes = [v for v, op, engine in history if op == "WRITE" and "Spark" in engine]
    rows = raydelta.open_table(uri).to_arrow().num_rows
    print(
        f"\nput-if-absent race: raydelta {len(ray_acknowledged)} acknowledged, "
        f"{len(lost_ours)} lost; delta-spark {len(spark_acknowledged)} acknowledged, "
        f"{len(spark_acknowledged) - len(spark_writes)} lost, {len(spark_errors)} refused; "
        f"{len(history)} versions, {rows} rows"
    )
    assert not spark_errors  # blind appends never conflict
    assert lost_ours == []
    assert len(spark_writes) == len(spark_acknowledged) == SPARK_WRITERS * SPARK_COMMITS
    assert [v for v, _, _ in history] == list(range(len(history)))
    assert rows == len(ray_acknowledged) + len(spark_acknowledged)


ROUNDS = 60


def test_measure_create_races_of_each_log_store(delta: Any, tmp_path: Path) -> None:
    """The commit primitive alone, name by name: two creators of one log file
    name at the same instant. raydelta's store: exactly one wins, always
    (asserted). delta-spark's local store (two ``HDFSLogStore`` instances, as
    two Spark drivers have; and against raydelta's store): the number of
    names both were told they created, i.e. one acknowledged commit lost, is
    measured and printed, not asserted (it depends on timing).

    Recorded on this machine, 400 names per pair: raydelta/raydelta 0 lost;
    delta-spark/delta-spark 2 lost: the loser's rename replaced the winner's
    file and only then failed (on renaming its ``.crc`` checksum file), so
    the winner's acknowledged commit was gone and the loser, told it lost,
    would retry its actions at the next version; raydelta/delta-spark 0
    lost (a raydelta create replaced in the window remains possible)."""
    from raydelta.storage.log.store import log_store_for

    spark = delta
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()

    def spark_creator(root: Path, text: str) -> Any:
        store = jvm.io.delta.storage.HDFSLogStore(conf)

        def create(round_: int) -> None:
            path = jvm.org.apache.hadoop.fs.Path(f"file://{root}/_delta_log/{round_:020d}.json")
            lines = jvm.java.util.Collections.singletonList(text)
            store.write(path, lines.iterator(), False, conf)

        return create

    def raydelta_creator(root: Path, text: str) -> Any:
        store = log_store_for(str(root))

        def create(round_: int) -> None:
            store.put_if_absent(f"{round_:020d}.json", f"{text}\n".encode())

        return create

    measured = {}
    for name, make_first, make_second in (
        ("raydelta/raydelta", raydelta_creator, raydelta_creator),
        ("delta-spark/delta-spark", spark_creator, spark_creator),
        ("raydelta/delta-spark", raydelta_creator, spark_creator),
    ):
        root = tmp_path / name.replace("/", "-")
        (root / "_delta_log").mkdir(parents=True)
        outcomes = race(make_first(root, "first"), make_second(root, "second"), ROUNDS)
        both = sum(1 for a, b in outcomes if a and b)
        neither = sum(1 for a, b in outcomes if not a and not b)
        survivors = [
            (root / "_delta_log" / f"{r:020d}.json").read_text().strip() for r in range(ROUNDS)
        ]
        lost_first = sum(
            1 for (a, b), s in zip(outcomes, survivors, strict=True) if a and s != "first"
        )
        measured[name] = (both, neither, lost_first)
        assert neither == 0  # someone always creates the file
    print(f"\ncreate races over {ROUNDS} names (both acknowledged, neither, first's lost):")
    for name, numbers in measured.items():
        print(f"  {name}: {numbers}")
    assert measured["raydelta/raydelta"][0] == 0  # put-if-absent: exactly one winner
    assert measured["raydelta/raydelta"][2] == 0
