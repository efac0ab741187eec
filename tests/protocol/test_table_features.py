"""Table features: supported/active sets, the spec's protocol rules, the gates, upgrades."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import Metadata, Protocol
from raydelta.protocol.errors import (
    InvalidProtocolError,
    InvalidProtocolVersionException,
    InvalidTableError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.feature_activation import active_features
from raydelta.protocol.table_features import (
    CATALOGUE,
    MAX_READER_VERSION,
    MAX_WRITER_VERSION,
    READER_FEATURES_IMPLEMENTED,
    WRITER_FEATURES_IMPLEMENTED,
    FeatureKind,
    ensure_readable,
    ensure_writable,
    feature,
    features_required_to_read,
    is_feature_supported,
    supported_features,
    upgrade_protocol,
    validate_protocol,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"
INVALID_VERSION_TABLE = "deltalog-invalid-protocol-version"


def proto(
    reader: int, writer: int, rf: list[str] | None = None, wf: list[str] | None = None
) -> Protocol:
    return Protocol(
        minReaderVersion=reader, minWriterVersion=writer, readerFeatures=rf, writerFeatures=wf
    )


def meta(
    config: dict[str, str] | None = None, fields: list[dict[str, object]] | None = None
) -> Metadata:
    schema = {"type": "struct", "fields": fields or []}
    return Metadata(id="t", schemaString=json.dumps(schema), configuration=config or {})


# --- catalogue -------------------------------------------------------------------------


def test_spec_appendix_names_and_kinds() -> None:
    # PROTOCOL.md, "Valid Feature Names in Table Features".
    appendix = {
        "appendOnly": FeatureKind.WRITER_ONLY,
        "invariants": FeatureKind.WRITER_ONLY,
        "checkConstraints": FeatureKind.WRITER_ONLY,
        "generatedColumns": FeatureKind.WRITER_ONLY,
        "allowColumnDefaults": FeatureKind.WRITER_ONLY,
        "changeDataFeed": FeatureKind.WRITER_ONLY,
        "columnMapping": FeatureKind.READER_WRITER,
        "identityColumns": FeatureKind.WRITER_ONLY,
        "deletionVectors": FeatureKind.READER_WRITER,
        "rowTracking": FeatureKind.WRITER_ONLY,
        "timestampNtz": FeatureKind.READER_WRITER,
        "domainMetadata": FeatureKind.WRITER_ONLY,
        "v2Checkpoint": FeatureKind.READER_WRITER,
        "icebergCompatV1": FeatureKind.WRITER_ONLY,
        "icebergCompatV2": FeatureKind.WRITER_ONLY,
        "clustering": FeatureKind.WRITER_ONLY,
        "vacuumProtocolCheck": FeatureKind.READER_WRITER,
        # Feature sections outside the appendix / CATALOG_MANAGED.md.
        "inCommitTimestamps": FeatureKind.WRITER_ONLY,
        "catalogManaged": FeatureKind.READER_WRITER,
    }
    for name, kind in appendix.items():
        known = feature(name)
        assert known is not None, name
        assert known.kind is kind, name


def test_legacy_versions_from_the_spec() -> None:
    legacy = {
        "appendOnly": (None, 2),
        "invariants": (None, 2),
        "checkConstraints": (None, 3),
        "changeDataFeed": (None, 4),
        "generatedColumns": (None, 4),
        "columnMapping": (2, 5),
        "identityColumns": (None, 6),
    }
    for f in CATALOGUE:
        assert (f.legacy_reader_version, f.legacy_writer_version) == legacy.get(
            f.name, (None, None)
        )


def test_in_commit_timestamp_spellings_are_one_feature() -> None:
    assert feature("inCommitTimestamp") is feature("inCommitTimestamps")
    for listed in ("inCommitTimestamp", "inCommitTimestamps"):
        supported = supported_features(proto(1, 7, wf=[listed]))
        assert {"inCommitTimestamp", "inCommitTimestamps"} <= supported
        active = active_features(
            proto(1, 7, wf=[listed]), meta({"delta.enableInCommitTimestamps": "true"})
        )
        assert {"inCommitTimestamp", "inCommitTimestamps"} <= active


def test_implemented_features_are_known_and_reader_ones_are_writable() -> None:
    for name in READER_FEATURES_IMPLEMENTED | WRITER_FEATURES_IMPLEMENTED:
        assert feature(name) is not None, name
    for name in READER_FEATURES_IMPLEMENTED:
        known = feature(name)
        assert known is not None and known.is_reader_writer, name
        assert name in WRITER_FEATURES_IMPLEMENTED, name


# --- supported / active ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reader", "writer", "expected"),
    [
        (1, 1, set()),
        (1, 2, {"appendOnly", "invariants"}),
        (1, 3, {"appendOnly", "invariants", "checkConstraints"}),
        (
            1,
            4,
            {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"},
        ),
        # Column mapping needs reader 2 as well as writer 5.
        (
            1,
            5,
            {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"},
        ),
        (
            2,
            5,
            {
                "appendOnly",
                "invariants",
                "checkConstraints",
                "changeDataFeed",
                "generatedColumns",
                "columnMapping",
            },
        ),
        (
            2,
            6,
            {
                "appendOnly",
                "invariants",
                "checkConstraints",
                "changeDataFeed",
                "generatedColumns",
                "columnMapping",
                "identityColumns",
            },
        ),
    ],
)
def test_legacy_protocols_imply_their_features(
    reader: int, writer: int, expected: set[str]
) -> None:
    assert supported_features(proto(reader, writer)) == expected


def test_table_features_protocols_imply_nothing() -> None:
    assert supported_features(proto(3, 7, [], [])) == frozenset()
    assert supported_features(proto(1, 7, wf=["rowTracking", "domainMetadata"])) == {
        "rowTracking",
        "domainMetadata",
    }
    p = proto(3, 7, ["deletionVectors"], ["deletionVectors", "appendOnly", "madeUp"])
    assert supported_features(p) == {"deletionVectors", "appendOnly", "madeUp"}
    assert is_feature_supported(p, "madeUp")
    assert not is_feature_supported(p, "invariants")


def test_features_required_to_read() -> None:
    assert features_required_to_read(proto(1, 6)) == frozenset()
    assert features_required_to_read(proto(2, 5)) == {"columnMapping"}
    assert features_required_to_read(proto(2, 7, wf=["columnMapping", "icebergCompatV2"])) == {
        "columnMapping"
    }
    # A known reader-writer feature listed only for writers is honoured by readers.
    assert features_required_to_read(proto(3, 7, [], ["deletionVectors"])) == {"deletionVectors"}


def test_active_features_follow_their_metadata_requirements() -> None:
    p = proto(
        3,
        7,
        ["deletionVectors", "columnMapping", "timestampNtz"],
        [
            "deletionVectors",
            "columnMapping",
            "timestampNtz",
            "appendOnly",
            "invariants",
            "checkConstraints",
            "changeDataFeed",
            "rowTracking",
            "domainMetadata",
            "generatedColumns",
            "identityColumns",
            "allowColumnDefaults",
            "icebergCompatV2",
        ],
    )
    bare = active_features(p, meta())
    # Features without a metadata requirement are active once supported.
    assert bare == {"timestampNtz", "domainMetadata"}
    config = {
        "delta.appendOnly": "true",
        "delta.enableDeletionVectors": "TRUE",
        "delta.columnMapping.mode": "name",
        "delta.enableChangeDataFeed": "true",
        "delta.enableRowTracking": "true",
        "delta.constraints.positive": "x > 0",
        "delta.enableIcebergCompatV2": "true",
    }
    fields: list[dict[str, object]] = [
        {
            "name": "x",
            "type": "long",
            "nullable": True,
            "metadata": {"delta.invariants": "{}", "delta.identity.start": 1},
        },
        {
            "name": "y",
            "type": "long",
            "nullable": True,
            "metadata": {"delta.generationExpression": "x + 1", "CURRENT_DEFAULT": "0"},
        },
    ]
    assert active_features(p, meta(config, fields)) == supported_features(p)
    off = {
        key: "false"
        for key in config
        if key.startswith("delta.enable") or key == "delta.appendOnly"
    }
    assert "appendOnly" not in active_features(p, meta(off))
    # Supported is required: the property alone activates nothing.
    assert active_features(proto(1, 1), meta({"delta.appendOnly": "true"})) == frozenset()
    with pytest.raises(InvalidTableError, match=r"delta\.appendOnly"):
        active_features(proto(1, 2), meta({"delta.appendOnly": "yes"}))


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        proto(0, 2),
        proto(1, 0),
        proto(3, 5, [], None),
        proto(3, 7, None, []),
        proto(3, 7, [], None),
        proto(1, 7, None, None),
        proto(2, 5, ["columnMapping"], None),
        proto(1, 4, None, ["appendOnly"]),
        proto(3, 7, ["deletionVectors"], ["appendOnly"]),
    ],
)
def test_validate_protocol_refuses_what_the_spec_forbids(bad: Protocol) -> None:
    with pytest.raises(InvalidProtocolError):
        validate_protocol(bad)


@pytest.mark.parametrize(
    "good",
    [
        proto(1, 1),
        proto(2, 6),
        proto(1, 7, None, []),
        proto(2, 7, None, ["columnMapping", "identityColumns"]),
        proto(3, 7, ["columnMapping"], ["columnMapping", "identityColumns"]),
        # Empty lists below the feature versions carry nothing: tolerated.
        proto(1, 2, [], []),
    ],
)
def test_validate_protocol_accepts_spec_examples(good: Protocol) -> None:
    validate_protocol(good)


# --- gates ----------------------------------------------------------------------------------


def test_versions_above_the_maximum_are_named() -> None:
    with pytest.raises(InvalidProtocolVersionException, match="reader version 99"):
        ensure_readable(proto(99, 7, [], []))
    with pytest.raises(InvalidProtocolVersionException, match="writer version 8"):
        ensure_writable(proto(1, 8))
    # Reading does not depend on the writer version.
    ensure_readable(proto(1, 8))
    assert (MAX_READER_VERSION, MAX_WRITER_VERSION) == (3, 7)


def test_unknown_and_unimplemented_features_are_named() -> None:
    with pytest.raises(UnsupportedTableFeatureException, match="madeUpFeature"):
        ensure_readable(proto(3, 7, ["madeUpFeature"], ["madeUpFeature"]))
    # A known reader feature raydelta does not implement (variantShredding
    # became readable with issue 10: data files are returned as stored).
    with pytest.raises(UnsupportedTableFeatureException, match="catalogOwned-preview"):
        ensure_readable(
            proto(3, 7, ["catalogOwned-preview"], ["catalogOwned-preview", "inCommitTimestamp"])
        )
    # Unknown writer-only features do not stop readers, but stop writers.
    readable = proto(1, 7, None, ["madeUpWriterFeature"])
    ensure_readable(readable)
    with pytest.raises(UnsupportedTableFeatureException, match="madeUpWriterFeature"):
        ensure_writable(readable)
    with pytest.raises(UnsupportedTableFeatureException, match="collations"):
        ensure_writable(proto(1, 7, None, ["domainMetadata", "collations"]))


def test_every_implemented_feature_passes_its_gate() -> None:
    rw = sorted(READER_FEATURES_IMPLEMENTED)
    ensure_readable(proto(3, 7, rw, rw))
    writer_only = sorted(
        n
        for n in WRITER_FEATURES_IMPLEMENTED
        if not feature(n).is_reader_writer  # type: ignore[union-attr]
    )
    ensure_writable(proto(3, 7, rw, rw + writer_only))
    for legacy in [(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (2, 5), (2, 6)]:
        ensure_writable(proto(*legacy))


def _golden_protocols() -> list[tuple[str, Protocol]]:
    found: list[tuple[str, Protocol]] = []
    if not GOLDEN.is_dir():
        return found
    for log in sorted(GOLDEN.rglob("_delta_log")):
        table = str(log.parent.relative_to(GOLDEN))
        for path in sorted(log.glob("*.json")):
            for line in path.read_text().splitlines():
                if '"protocol"' in line:
                    body = json.loads(line).get("protocol")
                    if body:
                        found.append((table, Protocol.model_validate(body)))
        for path in sorted(log.rglob("*.parquet")):
            parquet = pq.read_table(path)
            if "protocol" in parquet.schema.names:
                for body in parquet.column("protocol").to_pylist():
                    if body:
                        found.append((table, Protocol.model_validate(body)))
    return found


GOLDEN_PROTOCOLS = _golden_protocols()


@pytest.mark.parametrize(
    ("table", "protocol"),
    [(t, p) for t, p in GOLDEN_PROTOCOLS if t != INVALID_VERSION_TABLE],
    ids=[t for t, _ in GOLDEN_PROTOCOLS if t != INVALID_VERSION_TABLE],
)
def test_every_loadable_golden_table_is_readable(table: str, protocol: Protocol) -> None:
    ensure_readable(protocol)


def test_golden_invalid_protocol_version_is_refused_by_version() -> None:
    if not GOLDEN.is_dir():
        pytest.skip("golden tables not present")
    refused = [p for t, p in GOLDEN_PROTOCOLS if t == INVALID_VERSION_TABLE]
    assert refused
    with pytest.raises(InvalidProtocolVersionException, match="99"):
        ensure_readable(refused[-1])
    assert len(GOLDEN_PROTOCOLS) > 90


def test_golden_writability() -> None:
    writable = {t for t, p in GOLDEN_PROTOCOLS if t != INVALID_VERSION_TABLE}
    refused = set()
    for table, protocol in GOLDEN_PROTOCOLS:
        if table == INVALID_VERSION_TABLE:
            continue
        try:
            ensure_writable(protocol)
        except UnsupportedTableFeatureException as exc:
            assert "collations" in str(exc)
            refused.add(table)
    if GOLDEN.is_dir():
        # Only the collations tables need a writer feature raydelta leaves out.
        assert refused == {"collations-table", "collations-preview-table"}
        assert writable - refused


# --- upgrade -------------------------------------------------------------------------------


def test_upgrade_stays_legacy_when_it_can() -> None:
    assert upgrade_protocol(proto(1, 2), writer_features=["changeDataFeed"]) == proto(1, 4)
    assert upgrade_protocol(proto(1, 2), writer_features=["columnMapping"]) == proto(2, 5)
    assert upgrade_protocol(proto(1, 4), writer_features=["appendOnly"]) == proto(1, 4)
    same = proto(2, 6)
    assert upgrade_protocol(same, writer_features=["identityColumns"]) is same


def test_upgrade_to_table_features_carries_implied_features() -> None:
    up = upgrade_protocol(proto(2, 5), reader_features=["deletionVectors"])
    assert up.min_reader_version == 3 and up.min_writer_version == 7
    assert up.reader_features == ["columnMapping", "deletionVectors"]
    assert up.writer_features == [
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "deletionVectors",
    ]
    validate_protocol(up)


def test_upgrade_writer_only_keeps_legacy_reader() -> None:
    up = upgrade_protocol(proto(1, 2), writer_features=["rowTracking"])
    assert (up.min_reader_version, up.reader_features) == (1, None)
    assert up.writer_features == ["appendOnly", "invariants", "rowTracking", "domainMetadata"]
    # Column mapping alone needs only reader 2 with writer features.
    up = upgrade_protocol(proto(1, 7, None, ["appendOnly"]), writer_features=["columnMapping"])
    assert (up.min_reader_version, up.reader_features) == (2, None)
    assert up.writer_features == ["appendOnly", "columnMapping"]


def test_upgrade_adds_reader_writer_features_to_both_lists_and_dependencies() -> None:
    up = upgrade_protocol(proto(3, 7, [], ["madeUp"]), writer_features=["catalogManaged"])
    assert up.reader_features == ["catalogManaged"]
    assert up.writer_features == ["madeUp", "catalogManaged", "inCommitTimestamp"]
    # The spelling already present is kept; no second spelling is added.
    up = upgrade_protocol(
        proto(1, 7, None, ["inCommitTimestamp"]), writer_features=["catalogManaged"]
    )
    assert up.writer_features == ["inCommitTimestamp", "catalogManaged"]
    # Another writer's spec spelling is kept as it is (its protocol is not rewritten).
    up = upgrade_protocol(
        proto(1, 7, None, ["inCommitTimestamps"]), writer_features=["catalogManaged"]
    )
    assert up.writer_features == ["inCommitTimestamps", "catalogManaged"]


def test_upgrade_writes_in_commit_timestamp_whichever_spelling_is_asked() -> None:
    for asked in ("inCommitTimestamp", "inCommitTimestamps"):
        up = upgrade_protocol(proto(1, 2), writer_features=[asked])
        assert up.writer_features == ["appendOnly", "invariants", "inCommitTimestamp"], asked


def test_upgrade_refuses_unknown_or_misplaced_features() -> None:
    with pytest.raises(UnsupportedTableFeatureException, match="noSuchFeature"):
        upgrade_protocol(proto(1, 2), writer_features=["noSuchFeature"])
    with pytest.raises(InvalidProtocolError, match="appendOnly"):
        upgrade_protocol(proto(1, 2), reader_features=["appendOnly"])


_LEGACY = st.sampled_from([(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (2, 5), (2, 6)])
_KNOWN = st.sampled_from([f.name for f in CATALOGUE])


@settings(max_examples=200, deadline=None)
@given(_LEGACY, st.lists(_KNOWN, max_size=4), st.lists(_KNOWN, max_size=3))
def test_upgrade_never_drops_support_and_gives_what_was_asked(
    versions: tuple[int, int], first: list[str], second: list[str]
) -> None:
    current = proto(*versions)
    for request in (first, second):
        before = supported_features(current)
        upgraded = upgrade_protocol(current, writer_features=request)
        validate_protocol(upgraded)
        after = supported_features(upgraded)
        assert before <= after
        assert set(request) <= after
        for name in request:
            for required in feature(name).requires:  # type: ignore[union-attr]
                assert required in after
            if feature(name).is_reader_writer:  # type: ignore[union-attr]
                assert name in features_required_to_read(upgraded)
        assert upgraded.min_reader_version >= current.min_reader_version
        assert upgraded.min_writer_version >= current.min_writer_version
        current = upgraded
