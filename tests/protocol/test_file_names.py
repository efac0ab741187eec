"""Tests for protocol.file_names: builders, strict parser, and real log names."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.file_names import (
    DELTA_LOG_DIR,
    LAST_CHECKPOINT_NAME,
    SIDECAR_DIR,
    STAGED_COMMITS_DIR,
    LogFile,
    LogFileKind,
    checksum_name,
    classic_checkpoint_name,
    commit_name,
    compaction_name,
    hadoop_crc_name,
    hadoop_crc_target,
    multipart_checkpoint_name,
    parse_log_file_name,
    sidecar_name,
    staged_commit_name,
    uuid_checkpoint_name,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"
UUID_A = "80a083e8-7026-4e79-81be-64bd76c43a11"
UUID_B = "3a0d65cd-4056-49b8-937b-95f9e3ee90e5"

versions = st.integers(min_value=0, max_value=10**20 - 1)
uuids = st.uuids().map(str)


def test_constants() -> None:
    assert DELTA_LOG_DIR == "_delta_log"
    assert SIDECAR_DIR == "_sidecars"
    assert STAGED_COMMITS_DIR == "_staged_commits"
    assert LAST_CHECKPOINT_NAME == "_last_checkpoint"


# --- builders: the spec's own example names ---------------------------------------


def test_builders_match_spec_examples() -> None:
    assert commit_name(0) == "00000000000000000000.json"
    assert classic_checkpoint_name(10) == "00000000000000000010.checkpoint.parquet"
    assert [multipart_checkpoint_name(10, o, 3) for o in (1, 2, 3)] == [
        "00000000000000000010.checkpoint.0000000001.0000000003.parquet",
        "00000000000000000010.checkpoint.0000000002.0000000003.parquet",
        "00000000000000000010.checkpoint.0000000003.0000000003.parquet",
    ]
    assert (
        uuid_checkpoint_name(10, UUID_A, "json")
        == "00000000000000000010.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json"
    )
    assert (
        uuid_checkpoint_name(20, UUID_A, "parquet")
        == "00000000000000000020.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.parquet"
    )
    assert compaction_name(4, 6) == "00000000000000000004.00000000000000000006.compacted.json"
    assert checksum_name(7) == "00000000000000000007.crc"
    assert (
        staged_commit_name(0, UUID_B)
        == "_staged_commits/00000000000000000000.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json"
    )
    assert sidecar_name(UUID_B) == "_sidecars/3a0d65cd-4056-49b8-937b-95f9e3ee90e5.parquet"


@pytest.mark.parametrize(
    "build",
    [
        lambda: commit_name(-1),
        lambda: commit_name(10**20),
        lambda: classic_checkpoint_name(-5),
        lambda: multipart_checkpoint_name(1, 0, 3),
        lambda: multipart_checkpoint_name(1, 4, 3),
        lambda: multipart_checkpoint_name(1, 1, 10**10),
        lambda: uuid_checkpoint_name(1, "not-a-uuid", "json"),
        lambda: uuid_checkpoint_name(1, UUID_A, "avro"),  # type: ignore[arg-type]
        lambda: compaction_name(5, 4),
        lambda: staged_commit_name(1, "x"),
        lambda: sidecar_name("../escape"),
    ],
)
def test_builders_reject_invalid_input(build: object) -> None:
    with pytest.raises(ValueError):
        build()  # type: ignore[operator]


# --- round trips ----------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(version=versions, size=st.integers(-1, 2**40), mtime=st.integers(0, 2**45))
def test_commit_round_trip(version: int, size: int, mtime: int) -> None:
    parsed = parse_log_file_name(commit_name(version), size=size, modification_time=mtime)
    assert parsed == LogFile(
        commit_name(version), LogFileKind.COMMIT, version, size, mtime, format="json"
    )
    assert parsed.is_commit and not parsed.is_checkpoint


@settings(max_examples=200, deadline=None)
@given(version=versions)
def test_classic_and_checksum_round_trip(version: int) -> None:
    cp = parse_log_file_name(classic_checkpoint_name(version))
    assert cp is not None
    assert (cp.kind, cp.version, cp.format) == (LogFileKind.CHECKPOINT_CLASSIC, version, "parquet")
    assert cp.is_checkpoint
    crc = parse_log_file_name(checksum_name(version))
    assert crc is not None
    assert (crc.kind, crc.version) == (LogFileKind.CHECKSUM, version)


@settings(max_examples=200, deadline=None)
@given(version=versions, data=st.data())
def test_multipart_round_trip(version: int, data: st.DataObject) -> None:
    parts = data.draw(st.integers(1, 10**10 - 1))
    part = data.draw(st.integers(1, parts))
    f = parse_log_file_name(multipart_checkpoint_name(version, part, parts))
    assert f is not None
    assert (f.kind, f.version, f.part, f.num_parts) == (
        LogFileKind.CHECKPOINT_MULTIPART,
        version,
        part,
        parts,
    )


@settings(max_examples=200, deadline=None)
@given(version=versions, uuid=uuids, fmt=st.sampled_from(["json", "parquet"]))
def test_uuid_checkpoint_round_trip(version: int, uuid: str, fmt: str) -> None:
    f = parse_log_file_name(uuid_checkpoint_name(version, uuid, fmt))  # type: ignore[arg-type]
    assert f is not None
    assert (f.kind, f.version, f.uuid, f.format) == (
        LogFileKind.CHECKPOINT_UUID,
        version,
        uuid,
        fmt,
    )


@settings(max_examples=200, deadline=None)
@given(a=versions, b=versions)
def test_compaction_round_trip(a: int, b: int) -> None:
    start, end = min(a, b), max(a, b)
    f = parse_log_file_name(compaction_name(start, end))
    assert f is not None
    assert (f.kind, f.version, f.end_version) == (LogFileKind.COMPACTION, start, end)


@settings(max_examples=200, deadline=None)
@given(version=versions, uuid=uuids)
def test_staged_commit_and_sidecar_round_trip(version: int, uuid: str) -> None:
    staged = parse_log_file_name(staged_commit_name(version, uuid))
    assert staged is not None
    assert (staged.kind, staged.version, staged.uuid) == (
        LogFileKind.STAGED_COMMIT,
        version,
        uuid,
    )
    assert staged.is_commit
    sidecar = parse_log_file_name(sidecar_name(uuid))
    assert sidecar is not None
    assert (sidecar.kind, sidecar.version, sidecar.format) == (
        LogFileKind.SIDECAR,
        None,
        "parquet",
    )


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=80))
def test_parser_never_raises_and_names_agree(name: str) -> None:
    f = parse_log_file_name(name)
    if f is None:
        return
    assert f.name == name
    if f.kind not in (LogFileKind.SIDECAR, LogFileKind.LAST_CHECKPOINT):
        # every versioned name starts (after its directory) with 20 digits
        base = name.rpartition("/")[2]
        assert re.fullmatch(r"[0-9]{20}", base[:20])
        assert f.version == int(base[:20])


# --- strictness -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "abc.json",
        "1.json",
        "0000000000000000001.json",  # 19 digits
        "000000000000000000001.json",  # 21 digits
        "-0000000000000000001.json",
        ".00000000000000000000.json.crc",  # Hadoop checksum side file
        "._last_checkpoint.crc",
        "_last_checkpoint.crc",
        "_sidecars/.x.parquet.crc",
        "_sidecars/a/b.parquet",
        "_sidecars/x.json",
        "_staged_commits/5.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json",
        "_staged_commits/00000000000000000005.json",
        "_staged_commits/00000000000000000005.not-a-uuid.json",
        "other/00000000000000000000.json",
        "_delta_log/00000000000000000000.json",  # names are relative to _delta_log
        "\u0661" * 20 + ".json",  # Arabic-Indic digits are digits to Python, not to Delta
        "",
    ],
)
def test_non_log_names_give_none(name: str) -> None:
    assert parse_log_file_name(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000010.checkpoint.0000000000.0000000003.parquet",  # part 0
        "00000000000000000010.checkpoint.0000000004.0000000003.parquet",  # part > parts
        "00000000000000000010.checkpoint.001.003.parquet",  # parts not padded to 10
        "00000000000000000010.checkpoint.not-a-uuid.json",
        "00000000000000000010.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.avro",
        "00000000000000000010.checkpoint.json",
        "00000000000000000006.00000000000000000004.compacted.json",  # start > end
        "00000000000000000004.6.compacted.json",
        "00000000000000000001.json.tmp",
        "00000000000000000001.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json",  # staged, wrong dir
    ],
)
def test_versioned_but_unrecognised_names_are_unknown(name: str) -> None:
    f = parse_log_file_name(name)
    assert f is not None
    assert f.kind is LogFileKind.UNKNOWN
    assert f.version == int(name[:20])
    assert f.format is None


def test_special_names() -> None:
    last = parse_log_file_name("_last_checkpoint", size=12, modification_time=5)
    assert last == LogFile(
        "_last_checkpoint", LogFileKind.LAST_CHECKPOINT, None, 12, 5, format="json"
    )
    sidecar = parse_log_file_name("_sidecars/anything-unique.parquet")
    assert sidecar is not None and sidecar.kind is LogFileKind.SIDECAR
    upper = parse_log_file_name(
        "00000000000000000010.checkpoint.80A083E8-7026-4E79-81BE-64BD76C43A11.json"
    )
    assert upper is not None and upper.kind is LogFileKind.CHECKPOINT_UUID


def test_log_file_helpers() -> None:
    f = LogFile("_last_checkpoint", LogFileKind.LAST_CHECKPOINT)
    with pytest.raises(ValueError):
        f.require_version()
    assert LogFile("x", LogFileKind.COMMIT, 1, size=0).is_empty
    assert not LogFile("x", LogFileKind.COMMIT, 1, size=-1).is_empty
    assert LogFileKind.CHECKPOINT_UUID.is_checkpoint
    assert not LogFileKind.COMPACTION.is_checkpoint


# --- real logs ----------------------------------------------------------------------


def _golden_log_names() -> list[str]:
    names: list[str] = []
    if not GOLDEN.is_dir():
        return names
    for table in sorted(os.listdir(GOLDEN)):
        log = GOLDEN / table / "_delta_log"
        if not log.is_dir():
            continue
        for entry in sorted(os.listdir(log)):
            if (log / entry).is_dir():
                names.extend(f"{entry}/{sub}" for sub in sorted(os.listdir(log / entry)))
            else:
                names.append(entry)
    return names


@pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden tables not present")
def test_every_golden_log_name_is_recognised() -> None:
    names = _golden_log_names()
    assert len(names) > 300
    kinds: set[LogFileKind] = set()
    for name in names:
        f = parse_log_file_name(name)
        if name.rpartition("/")[2].startswith("."):
            assert f is None, name  # Hadoop .crc side files
            continue
        assert f is not None, name
        assert f.kind is not LogFileKind.UNKNOWN, name
        kinds.add(f.kind)
    assert {
        LogFileKind.COMMIT,
        LogFileKind.CHECKPOINT_CLASSIC,
        LogFileKind.CHECKPOINT_MULTIPART,
        LogFileKind.CHECKPOINT_UUID,
        LogFileKind.CHECKSUM,
        LogFileKind.SIDECAR,
        LogFileKind.LAST_CHECKPOINT,
    } <= kinds


@pytest.mark.parametrize(
    ("name", "crc"),
    [
        ("00000000000000000000.json", ".00000000000000000000.json.crc"),
        ("00000000000000000010.crc", ".00000000000000000010.crc.crc"),  # Delta's own checksum
        ("_last_checkpoint", "._last_checkpoint.crc"),
        ("_sidecars/a.parquet", "_sidecars/.a.parquet.crc"),
        ("part=1/part-0.parquet", "part=1/.part-0.parquet.crc"),
    ],
)
def test_hadoop_checksum_file_names(name: str, crc: str) -> None:
    assert hadoop_crc_name(name) == crc
    assert hadoop_crc_target(crc) == name
    assert parse_log_file_name(crc) is None  # never a log file
    assert parse_log_file_name(crc.rpartition("/")[2]) is None


@pytest.mark.parametrize(
    "name",
    ["00000000000000000010.crc", "a.crc", ".crc", "..crc", ".x.json", "._x.crc.tmp", "dir/"],
)
def test_names_that_are_not_hadoop_checksum_files(name: str) -> None:
    assert hadoop_crc_target(name) is None


def test_every_golden_hadoop_checksum_file_names_a_file_beside_it() -> None:
    found = 0
    for directory, _, files in os.walk(GOLDEN):
        for name in files:
            target = hadoop_crc_target(name)
            if target is not None:
                found += 1
                assert hadoop_crc_name(target) == name
                assert os.path.exists(os.path.join(directory, target)), (directory, name)
    assert found > 100
