"""Tests for protocol.last_checkpoint: canonical JSON, checksum, parse, serialize."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.last_checkpoint import (
    LastCheckpointInfo,
    canonicalize_json,
    json_checksum,
    parse_last_checkpoint,
    serialize_last_checkpoint,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "delta-spark-golden"

# The spec's test vector (PROTOCOL.md, "JSON checksum"), verbatim.
SPEC_JSON = (
    '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", '
    '[1, 2], {"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
)
SPEC_CANONICAL = (
    '"k0"="%27v%200%27","k1"+"k2"=2,"k1"+"k3"+0="v3","k1"+"k3"+1+0=1,"k1"+"k3"+1+1=2,'
    '"k1"+"k3"+2+"k4"="v4","k1"+"k3"+2+"k5"+0="v5","k1"+"k3"+2+"k5"+1="v6",'
    '"k1"+"k3"+2+"k5"+2="v7"'
)
SPEC_CHECKSUM = "6a92d155a59bf2eecbd4b4ec7fd1f875"


# --- canonicalization -------------------------------------------------------------


def test_spec_vector_canonical_form() -> None:
    assert canonicalize_json(json.loads(SPEC_JSON)) == SPEC_CANONICAL


def test_spec_vector_checksum() -> None:
    assert json_checksum(json.loads(SPEC_JSON)) == SPEC_CHECKSUM
    # and the checksum is the MD5 of the canonical form the spec prints
    assert hashlib.md5(SPEC_CANONICAL.encode()).hexdigest() == SPEC_CHECKSUM


def test_spec_object_example() -> None:
    obj = {"a": 10, "b": {"y": None, "x": "https://delta.io"}}
    assert canonicalize_json(obj) == '"a"=10,"b"+"x"="https%3A%2F%2Fdelta.io","b"+"y"=null'


def test_spec_array_example() -> None:
    assert canonicalize_json([None, "hi ho", 2.71]) == '0=null,1="hi%20ho",2=2.71'


def test_top_level_checksum_ignored_nested_kept() -> None:
    obj = {"k1": "v1", "checksum": "<anything>", "k3": 23}
    assert canonicalize_json(obj) == '"k1"="v1","k3"=23'
    nested = {"a": {"checksum": "x"}}
    assert canonicalize_json(nested) == '"a"+"checksum"="x"'


def test_literals() -> None:
    assert canonicalize_json({"t": True, "f": False, "n": None}) == '"f"=false,"n"=null,"t"=true'


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("azAZ09-._~", "azAZ09-._~"),  # never encoded
        ("a b", "a%20b"),
        (">", "%3E"),  # uppercase hex
        ("*", "%2A"),  # reserved per the spec even though Java leaves it alone
        ("/", "%2F"),
        ("+", "%2B"),
        ("é", "%C3%A9"),  # UTF-8 octets
        ("€", "%E2%82%AC"),
    ],
)
def test_url_encoding_rules(text: str, encoded: str) -> None:
    assert canonicalize_json({text: text}) == f'"{encoded}"="{encoded}"'


def test_byte_order_sort_of_paths() -> None:
    # '+' (0x2B) sorts before digits, so "+1+0" precedes "+10"; uppercase before lowercase
    obj = {"b": list(range(11)), "B": 1, "a": {"x": 1}, "a0": 2}
    pairs = canonicalize_json(obj).split(",")
    paths = [p.split("=")[0] for p in pairs]
    assert paths == sorted(paths, key=lambda p: p.encode())
    assert paths[0] == '"B"'
    assert paths.index('"b"+1') < paths.index('"b"+10') < paths.index('"b"+2')


def test_empty_containers_contribute_nothing() -> None:
    # Verified against delta-spark's own checksums below (checkpointSchema is full of {}).
    assert canonicalize_json({"a": {}, "b": [], "c": 1}) == '"c"=1'


def test_numbers_keep_their_written_form_when_verifying() -> None:
    body = {"version": 1, "size": 2, "extra": 1.0}
    good = json_checksum(body)  # 1.0 canonicalizes as "1.0"
    text_float = '{"version":1,"size":2,"extra":1.0,"checksum":"' + good + '"}'
    text_int = '{"version":1,"size":2,"extra":1,"checksum":"' + good + '"}'
    assert parse_last_checkpoint(text_float.encode()) is not None
    assert parse_last_checkpoint(text_int.encode()) is None  # "1" is not "1.0"


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(obj=st.dictionaries(st.text(max_size=6), json_values, max_size=6), seed=st.integers())
def test_canonical_form_ignores_key_order(obj: dict[str, Any], seed: int) -> None:
    shuffled = _shuffled(obj, random.Random(seed))
    assert canonicalize_json(shuffled) == canonicalize_json(obj)
    assert json_checksum(shuffled) == json_checksum(obj)


@settings(max_examples=200, deadline=None)
@given(obj=st.dictionaries(st.text(max_size=6).map(lambda k: "x_" + k), json_values, max_size=6))
def test_canonical_form_of_python_values_matches_written_text(obj: dict[str, Any]) -> None:
    # What json.dumps writes, re-read with numbers kept as text, canonicalizes the same.
    text = json.dumps({**obj, "version": 0, "size": 0}, allow_nan=False)
    reparsed = json.loads(text)
    assert canonicalize_json(reparsed) == canonicalize_json({**obj, "version": 0, "size": 0})
    body = dict(reparsed)
    body["checksum"] = json_checksum(body)
    assert parse_last_checkpoint(json.dumps(body).encode()) is not None


# --- parse ---------------------------------------------------------------------------


def _with_checksum(body: dict[str, Any]) -> bytes:
    body = {**body, "checksum": json_checksum(body)}
    return json.dumps(body).encode()


def test_parse_minimal_without_checksum() -> None:
    info = parse_last_checkpoint(b'{"version":10,"size":13}')
    assert info == LastCheckpointInfo(version=10, size=13)
    assert info is not None and info.checksum is None


def test_parse_all_fields_by_alias() -> None:
    body = {
        "version": 2,
        "size": 9,
        "parts": 3,
        "sizeInBytes": 100,
        "numOfAddFiles": 4,
        "checkpointSchema": {"type": "struct", "fields": []},
        "tags": {"k": "v"},
        "v2Checkpoint": {"path": "00000000000000000002.checkpoint.x.json", "sizeInBytes": 9},
        "futureField": {"nested": [1, 2]},
    }
    info = parse_last_checkpoint(_with_checksum(body))
    assert info is not None
    assert (info.version, info.size, info.parts) == (2, 9, 3)
    assert (info.size_in_bytes, info.num_of_add_files) == (100, 4)
    assert info.checkpoint_schema == {"type": "struct", "fields": []}
    assert info.tags == {"k": "v"}
    assert info.v2_checkpoint_path == "00000000000000000002.checkpoint.x.json"
    assert info.model_extra == {"futureField": {"nested": [1, 2]}}
    assert info.checksum == json_checksum(body)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   \n",
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b"42",
        b'{"size": 1}',  # no version
        b'{"version": 1}',  # no size
        b'{"version": "1", "size": 1}',  # mistyped
        b'{"version": true, "size": 1}',
        b'{"version": -1, "size": 1}',
        b'{"version": 1.5, "size": 1}',
        b'{"version": 1, "size": 1, "parts": 0}',
        b'{"version": 1, "size": 2, "version": 3}',  # duplicate key (rule 7)
        b'{"version": 1, "size": 2, "tags": {"a": "x", "a": "y"}}',  # nested duplicate
        b'{"version": 1, "size": 2, "x": NaN}',
        b'{"version": 1, "size": 2, "checksum": 5}',
        b'{"version": 1, "size": 2, "checksum": "00000000000000000000000000000000"}',
        b'{"version":1,"size":2}{"version":1}',
    ],
)
def test_parse_returns_none_for_unusable_content(data: bytes) -> None:
    assert parse_last_checkpoint(data) is None


def test_wrong_checksum_detected_after_any_change() -> None:
    good = _with_checksum({"version": 5, "size": 7})
    assert parse_last_checkpoint(good) is not None
    tampered = good.replace(b'"size": 7', b'"size": 8')
    assert tampered != good
    assert parse_last_checkpoint(tampered) is None


def test_checksum_comparison_ignores_hex_case() -> None:
    body = {"version": 5, "size": 7}
    data = json.dumps({**body, "checksum": json_checksum(body).upper()}).encode()
    assert parse_last_checkpoint(data) is not None


# --- serialize -----------------------------------------------------------------------


def test_serialize_writes_checksum_last_and_omits_unset() -> None:
    info = LastCheckpointInfo(version=3, size=8, sizeInBytes=10, checksum="stale")
    data = serialize_last_checkpoint(info)
    raw = json.loads(data)
    assert list(raw) == ["version", "size", "sizeInBytes", "checksum"]
    assert raw["checksum"] == json_checksum({"version": 3, "size": 8, "sizeInBytes": 10})
    assert b" " not in data


infos = st.builds(
    LastCheckpointInfo,
    version=st.integers(0, 2**63 - 1),
    size=st.integers(0, 2**40),
    parts=st.none() | st.integers(1, 1000),
    size_in_bytes=st.none() | st.integers(0, 2**40),
    num_of_add_files=st.none() | st.integers(0, 2**40),
    checkpoint_schema=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    tags=st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    v2_checkpoint=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(info=infos)
def test_parse_serialize_round_trip(info: LastCheckpointInfo) -> None:
    data = serialize_last_checkpoint(info)
    parsed = parse_last_checkpoint(data)
    assert parsed is not None
    assert parsed.checksum == json.loads(data)["checksum"]
    assert parsed.model_copy(update={"checksum": info.checksum}) == info
    # serializing what we parsed is byte-identical: the checksum is stable
    assert serialize_last_checkpoint(parsed) == data


def test_round_trip_keeps_extra_fields() -> None:
    info = LastCheckpointInfo.model_validate({"version": 1, "size": 2, "zzz": [1, {"a": None}]})
    parsed = parse_last_checkpoint(serialize_last_checkpoint(info))
    assert parsed is not None and parsed.model_extra == {"zzz": [1, {"a": None}]}


# --- real files written by delta-spark ------------------------------------------------


def _golden_last_checkpoints() -> list[Path]:
    if not GOLDEN.is_dir():
        return []
    return sorted(GOLDEN.glob("*/_delta_log/_last_checkpoint"))


@pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden tables not present")
@pytest.mark.parametrize("path", _golden_last_checkpoints(), ids=lambda p: p.parts[-3])
def test_golden_last_checkpoint_files(path: Path) -> None:
    data = path.read_bytes()
    info = parse_last_checkpoint(data)
    if not data.strip():
        assert info is None  # corrupted-last-checkpoint-kernel: empty file
        return
    raw = json.loads(data)
    assert info is not None, "a delta-spark checksum must verify"
    assert info.version == raw["version"]
    assert info.size == raw["size"]
    if "checksum" in raw:
        assert json_checksum(raw) == raw["checksum"]
        assert (
            serialize_last_checkpoint(info)
            == json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode()
        )


@pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden tables not present")
def test_golden_expectations_from_readme() -> None:
    def load(table: str) -> LastCheckpointInfo | None:
        return parse_last_checkpoint((GOLDEN / table / "_delta_log/_last_checkpoint").read_bytes())

    multi = load("multi-part-checkpoint")
    assert multi is not None and (multi.version, multi.parts, multi.size) == (1, 2, 12)
    for table in ("v2-checkpoint-json", "v2-checkpoint-parquet"):
        v2 = load(table)
        assert v2 is not None
        assert (v2.version, v2.size, v2.parts) == (2, 9, None)
        assert v2.v2_checkpoint is not None
        assert len(v2.v2_checkpoint["sidecarFiles"]) == 2
    variant = load("spark-variant-checkpoint")
    assert variant is not None and (variant.version, variant.size) == (2, 6)
    assert load("corrupted-last-checkpoint-kernel") is None
