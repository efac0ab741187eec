"""In-Commit Timestamps is written ``inCommitTimestamp``, on every write path.

The spec text spells the feature ``inCommitTimestamps`` (a known typo);
delta-spark, delta-kernel and Unity Catalog use ``inCommitTimestamp``, and a
protocol that lists only the typo is one delta-spark does not know (it
refuses to write to it). So every protocol raydelta writes names
``inCommitTimestamp``: a new table with ICT on, ICT enabled on an existing
table (also when the caller asks for the typo), a protocol upgrade that
brings ICT along. A table another writer made with the typo keeps loading
and committing, and keeps the protocol it has: raydelta does not rewrite
another writer's protocol (and adds no second spelling).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import AddFile, Protocol
from raydelta.protocol.table_features import upgrade_protocol
from raydelta.storage.snapshot import load_snapshot

NewTable = Callable[..., tuple[str, TableClient]]
MakeAdd = Callable[..., AddFile]

TYPO = "inCommitTimestamps"
RIGHT = "inCommitTimestamp"
ICT_ON = {"delta.enableInCommitTimestamps": "true"}


def _log(uri: str) -> Path:
    return Path(uri[len("file://") :] if uri.startswith("file://") else uri) / "_delta_log"


def _written_protocols(uri: str) -> list[dict[str, Any]]:
    """Every ``protocol`` action in the table's commit files, oldest first."""
    log = _log(uri)
    found = []
    for commit in sorted(log.glob("*.json")):
        for line in commit.read_text().splitlines():
            if line.strip() and "protocol" in (action := json.loads(line)):
                found.append(action["protocol"])
    return found


def _commit_infos(uri: str) -> list[dict[str, Any]]:
    log = _log(uri)
    infos = []
    for commit in sorted(log.glob("*.json")):
        for line in commit.read_text().splitlines():
            if line.strip() and "commitInfo" in (action := json.loads(line)):
                infos.append(action["commitInfo"])
    return infos


def _assert_right_spelling(protocol: dict[str, Any]) -> None:
    assert RIGHT in protocol["writerFeatures"], protocol
    assert TYPO not in protocol["writerFeatures"], protocol
    assert TYPO not in (protocol.get("readerFeatures") or []), protocol


def test_a_new_table_with_ict_on_lists_in_commit_timestamp(new_table: NewTable) -> None:
    uri, table = new_table(properties=ICT_ON)
    [protocol] = _written_protocols(uri)
    _assert_right_spelling(protocol)
    assert table.snapshot().table_configuration.in_commit_timestamps_enabled


@pytest.mark.parametrize("asked", [RIGHT, TYPO])
def test_enabling_ict_on_an_existing_table_lists_in_commit_timestamp(
    new_table: NewTable, make_add: MakeAdd, asked: str
) -> None:
    uri, table = new_table()
    table.transaction().add(make_add("date=2024-01-01/a.parquet")).commit()
    version = (
        table.transaction()
        .upgrade_protocol(writer_features=[asked])
        .set_metadata(properties=ICT_ON)
        .commit()
    )
    protocols = _written_protocols(uri)
    assert len(protocols) == 2  # version 0's and the upgrade's
    _assert_right_spelling(protocols[-1])
    snapshot = load_snapshot(uri)
    assert snapshot.version == version
    assert snapshot.table_configuration.in_commit_timestamps_enabled
    assert isinstance(_commit_infos(uri)[-1].get("inCommitTimestamp"), int)


def test_a_feature_that_requires_ict_brings_the_right_spelling() -> None:
    # coordinatedCommits-preview and catalogManaged require ICT: it comes along
    # by its catalogue name
    for needing in ("catalogManaged", "coordinatedCommits-preview"):
        up = upgrade_protocol(
            Protocol(minReaderVersion=1, minWriterVersion=2), writer_features=[needing]
        )
        assert RIGHT in (up.writer_features or []) and TYPO not in (up.writer_features or [])


def _typo_table(root: Path) -> str:
    """A table another writer created with the spec's spelling and ICT on."""
    schema = {
        "type": "struct",
        "fields": [
            {"name": "date", "type": "string", "nullable": True, "metadata": {}},
            {"name": "value", "type": "long", "nullable": True, "metadata": {}},
        ],
    }
    stamp = 1_700_000_000_000
    actions = [
        {"commitInfo": {"inCommitTimestamp": stamp, "timestamp": stamp, "operation": "CREATE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": [TYPO]}},
        {
            "metaData": {
                "id": "typo-table",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": ["date"],
                "configuration": ICT_ON,
                "createdTime": stamp,
            }
        },
    ]
    log = root / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return str(root)


def test_a_table_listing_the_typo_keeps_loading_committing_and_its_protocol(
    reap_actors: str, tmp_path: Path, make_add: MakeAdd
) -> None:
    uri = _typo_table(tmp_path / "typo")
    snapshot = load_snapshot(uri)
    assert snapshot.table_configuration.in_commit_timestamps_enabled
    table = TableClient.open(uri)
    first = table.transaction().add(make_add("date=2024-01-01/a.parquet")).commit()
    # a protocol upgrade for another feature keeps the listed spelling, adds no second one
    second = (
        table.transaction()
        .upgrade_protocol(reader_features=["deletionVectors"], writer_features=["deletionVectors"])
        .add(make_add("date=2024-01-01/b.parquet"))
        .commit()
    )
    assert (first, second) == (1, 2)
    protocols = _written_protocols(uri)
    assert protocols[0]["writerFeatures"] == [TYPO]
    assert protocols[-1]["writerFeatures"] == [TYPO, "deletionVectors"]
    infos = _commit_infos(uri)
    assert [type(i.get("inCommitTimestamp")) for i in infos] == [int, int, int]
    assert infos[1]["inCommitTimestamp"] > infos[0]["inCommitTimestamp"]
    after = load_snapshot(uri)
    assert after.version == 2 and after.num_files == 2
    assert after.timestamp == infos[2]["inCommitTimestamp"]


@pytest.mark.spark
def test_delta_spark_writes_to_the_ict_table_raydelta_created(
    spark: Any, reap_actors: str, tmp_path: Path
) -> None:
    # delta-spark refuses to write to a table whose protocol lists a writer
    # feature it does not know: it appends to ours, in-commit timestamp and all
    uri = str(tmp_path / "ict")
    schema = pa.schema([("id", pa.int64())])
    table = raydelta.create_table(uri, schema, properties=ICT_ON)
    table.append(pa.table({"id": [1, 2]}, schema=schema))
    spark.createDataFrame([(3,)], "id long").write.format("delta").mode("append").save(uri)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").collect()[0]
    assert RIGHT in detail.tableFeatures
    rows = sorted(r.id for r in spark.read.format("delta").load(uri).collect())
    assert rows == [1, 2, 3]
    infos = _commit_infos(uri)
    assert len(infos) == 3 and all(isinstance(i.get("inCommitTimestamp"), int) for i in infos)
    assert load_snapshot(uri).version == 2
