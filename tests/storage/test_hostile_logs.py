"""Hostile logs: every reader entry point gives a typed error or a right snapshot.

The readers under test are ``load_snapshot`` (latest, by version, by
timestamp), ``load_table_head``, ``load_history`` and ``scan`` (deletion
vectors). Each case damages a copy of a real log (delta-spark's golden tables,
or a table deltalake writes here) and checks:

- no exception other than a :class:`RaydeltaError` ever escapes, from any
  entry point (:func:`_read_every_way`);
- a hand-written case gets exactly the documented outcome: its typed error, or
  the documented fallback, whose snapshot must equal what deltalake reads from
  the undamaged table (:data:`HOSTILE_CASES`);
- a fuzzed case (hypothesis) that still loads must equal an independent
  replay of the damaged log written in this module (JSON damage), or
  deltalake's read of the undamaged table at that version (file damage:
  truncation, garbage, deletion never change what a version holds).
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raydelta.protocol.errors import (
    ChecksumMismatchError,
    CorruptLogError,
    DeletionVectorError,
    InvalidCheckpointError,
    InvalidTableError,
    MissingMetadataError,
    MissingProtocolError,
    RaydeltaError,
    SchemaError,
    TableNotFoundError,
    VersionsNotContiguousError,
)
from raydelta.storage.history import load_history
from raydelta.storage.scan import scan
from raydelta.storage.snapshot import Snapshot, load_snapshot, load_table_head

LOG = "_delta_log"
FALLBACK = "fallback"
"""Expected outcome: the snapshot deltalake reads from the undamaged table."""

FileState = tuple[int, dict[str, int]]
"""(version, {decoded path: size}) of a snapshot: what two readers must agree on."""


def _commit(version: int) -> str:
    return f"{LOG}/{version:020d}.json"


def _classic_checkpoint(version: int) -> str:
    return f"{LOG}/{version:020d}.checkpoint.parquet"


# --- reading every way -----------------------------------------------------------


def _read_every_way(root: Path) -> dict[str, Any]:
    """Every reader entry point on ``root``: its result or the typed error it
    raised. Anything that is not a RaydeltaError fails the test here."""
    uri = str(root)
    versions = sorted(
        int(p.name.split(".")[0])
        for p in (root / LOG).glob("*.json")
        if p.name.split(".")[0].isdigit() and len(p.name) == 25
    )
    readers: dict[str, Callable[[], Any]] = {
        "latest": lambda: load_snapshot(uri),
        "head": lambda: load_table_head(uri),
        "history": lambda: load_history(uri),
        "timestamp": lambda: load_snapshot(uri, timestamp=int(time.time() * 1000) + 86_400_000),
    }
    for version in {versions[0], versions[len(versions) // 2], versions[-1]} if versions else ():
        readers[f"v{version}"] = functools.partial(load_snapshot, uri, version=version)
    outcomes: dict[str, Any] = {}
    for name, read in readers.items():
        try:
            outcomes[name] = read()
        except RaydeltaError as exc:
            outcomes[name] = exc
        except Exception as exc:  # the bug this module hunts
            raise AssertionError(
                f"{name} read of {root} raised {type(exc).__name__}: {exc}"
            ) from exc
    return outcomes


def _ours(snapshot: Snapshot) -> FileState:
    rows = snapshot.files.select(["path", "size"]).to_pylist()
    return snapshot.version, {unquote(r["path"]): r["size"] for r in rows}


def _deltalake(root: Path, version: int | None = None) -> FileState:
    table = deltalake.DeltaTable(str(root), version=version)
    adds = pa.table(table.get_add_actions(flatten=True))
    rows = adds.select(["path", "size_bytes"]).to_pylist()
    return table.version(), {unquote(r["path"]): r["size_bytes"] for r in rows}


@functools.cache
def _undamaged_by_deltalake(root: Path, version: int) -> FileState:
    """``_deltalake`` of the module's undamaged table (``written_table``, never
    written to: every example damages a copy), read once per version."""
    return _deltalake(root, version)


def _beyond_bmp(state: FileState) -> bool:
    """Whether a path holds a character above U+FFFF. deltalake 1.6.6 misreads
    those (an add whose path is U+20000 comes back as U+10000; reproduced with
    a two-line commit), so the peer comparison leaves such states to the
    independent replay, which our snapshot must still equal."""
    return any(ord(c) > 0xFFFF for path in state[1] for c in path)


def _fresh_copy(source: Path, under: Path) -> Path:
    target = Path(tempfile.mkdtemp(prefix="hostile-", dir=under)) / source.name
    shutil.copytree(source, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


# --- hand-written hostile cases -------------------------------------------------------


def _write(relative: str, data: bytes | str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        raw = data.encode() if isinstance(data, str) else data
        (root / relative).write_bytes(raw)

    return mutate


def _append_line(version: int, line: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        with (root / _commit(version)).open("a") as out:
            out.write(line + "\n")

    return mutate


def _delete(*relatives: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for relative in relatives:
            (root / relative).unlink()

    return mutate


def _delete_log_files_but(*kept: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for path in (root / LOG).iterdir():
            if path.is_file() and path.name not in kept:
                path.unlink()

    return mutate


def _truncate(relative: str, keep: float = 0.5) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / relative
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])

    return mutate


def _drop_lines(version: int, action: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / _commit(version)
        lines = [x for x in path.read_text().split("\n") if x and f'"{action}"' not in x]
        path.write_text("\n".join(lines) + "\n")

    return mutate


def _rewrite_checkpoint(
    version: int, rewrite: Callable[[pa.Table], pa.Table]
) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / _classic_checkpoint(version)
        pq.write_table(rewrite(pq.read_table(path)), path)

    return mutate


def _null_add_paths(table: pa.Table) -> pa.Table:
    add = table.column("add").combine_chunks()
    children = [
        pa.nulls(len(add), pa.string()) if field.name == "path" else add.field(i)
        for i, field in enumerate(add.type)
    ]
    rebuilt = pa.StructArray.from_arrays(children, fields=list(add.type), mask=add.is_null())
    return table.set_column(table.schema.get_field_index("add"), "add", rebuilt)


def _multipart(version: int, part: int, parts: int = 2) -> str:
    return f"{LOG}/{version:020d}.checkpoint.{part:010d}.{parts:010d}.parquet"


def _rewrite_parts(
    version: int, rewrite: Callable[[list[pa.Table]], list[pa.Table]], parts: int = 2
) -> Callable[[Path], None]:
    """Rewrite every part of a multi-part checkpoint at once."""

    def mutate(root: Path) -> None:
        paths = [root / _multipart(version, i, parts) for i in range(1, parts + 1)]
        for path, table in zip(paths, rewrite([pq.read_table(p) for p in paths]), strict=True):
            pq.write_table(table, path)

    return mutate


def _adds_moved_to_the_last_part(tables: list[pa.Table]) -> list[pa.Table]:
    """Part 1 keeps its non-file rows and only their columns; its adds join the
    last part: the same checkpoint, its parts holding some columns each."""
    first, *rest = tables
    has_add = first.column("add").is_valid()
    head = first.filter(pc.invert(has_add)).drop_columns(["add", "remove"])
    last = pa.concat_tables([rest[-1], first.filter(has_add)])
    return [head, *rest[:-1], last]


def _second_protocol(table: pa.Table) -> pa.Table:
    row = next(r for r in table.to_pylist() if r.get("protocol"))
    row["protocol"] = {
        **row["protocol"],
        "minWriterVersion": row["protocol"]["minWriterVersion"] + 1,
    }
    return pa.concat_tables([table, pa.Table.from_pylist([row], schema=table.schema)])


def _rewrite_sidecars(make: Callable[[], pa.Table]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for sidecar in (root / LOG / "_sidecars").glob("*.parquet"):
            pq.write_table(make(), sidecar)

    return mutate


def _delete_sidecar(root: Path) -> None:
    next((root / LOG / "_sidecars").glob("*.parquet")).unlink()


def _garbage_sidecar(root: Path) -> None:
    next((root / LOG / "_sidecars").glob("*.parquet")).write_bytes(b"PAR1 not a sidecar PAR1")


def _rewrite_v2_json(line: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        top = next((root / LOG).glob("*.checkpoint.*.json"))
        kept = [x for x in top.read_text().split("\n") if x and '"sidecar"' not in x]
        top.write_text("\n".join([*kept, line]) + "\n")

    return mutate


def _drop_v2_json_lines(action: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        top = next((root / LOG).glob("*.checkpoint.*.json"))
        kept = [x for x in top.read_text().split("\n") if x and f'"{action}"' not in x]
        top.write_text("\n".join(kept) + "\n")

    return mutate


def _many(*mutations: Callable[[Path], None]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for m in mutations:
            m(root)

    return mutate


_ADD = (
    '{{"add":{{"path":{path},"size":{size},"modificationTime":1,"dataChange":true,'
    '"partitionValues":{pv}}}}}'
)
_SCHEMA = json.dumps({"type": "struct", "fields": []})
_PROTOCOL_12 = '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}'
_PROTOCOL_13 = '{"protocol":{"minReaderVersion":1,"minWriterVersion":3}}'


def _metadata(**fields: Any) -> str:
    body = {"id": "x", "format": {"provider": "parquet", "options": {}}, "schemaString": _SCHEMA}
    body.update({"partitionColumns": [], "configuration": {}}, **fields)
    return json.dumps({"metaData": body})


HOSTILE_CASES: list[tuple[str, str, Callable[[Path], None], Any]] = [
    # commits: bytes that are not a log line
    ("truncated-line", "checkpoint", _truncate(_commit(12)), CorruptLogError),
    ("non-utf8", "checkpoint", _write(_commit(14), b"\xff\xfe\x00{}\n"), CorruptLogError),
    ("line-is-array", "checkpoint", _append_line(14, "[1, 2]"), CorruptLogError),
    ("line-is-null", "checkpoint", _append_line(14, "null"), CorruptLogError),
    ("line-is-number", "checkpoint", _append_line(14, "7"), CorruptLogError),
    (
        "two-actions-one-line",
        "checkpoint",
        _append_line(14, '{"add":{},"remove":{}}'),
        CorruptLogError,
    ),
    # commits: wrong JSON types
    ("add-is-list", "checkpoint", _append_line(14, '{"add":[]}'), CorruptLogError),
    ("add-is-string", "checkpoint", _append_line(14, '{"add":"x"}'), CorruptLogError),
    (
        "add-size-text",
        "checkpoint",
        _append_line(14, _ADD.format(path='"a"', size='"big"', pv="{}")),
        CorruptLogError,
    ),
    (
        "add-path-int",
        "checkpoint",
        _append_line(14, _ADD.format(path="5", size=1, pv="{}")),
        CorruptLogError,
    ),
    (
        "add-path-null",
        "checkpoint",
        _append_line(14, _ADD.format(path="null", size=1, pv="{}")),
        CorruptLogError,
    ),
    (
        "add-partition-values-list",
        "checkpoint",
        _append_line(14, _ADD.format(path='"a"', size=1, pv="[]")),
        CorruptLogError,
    ),
    (
        "add-partition-value-object",
        "checkpoint",
        _append_line(14, _ADD.format(path='"a"', size=1, pv='{"p":{}}')),
        CorruptLogError,
    ),
    (
        "add-dv-garbage",
        "checkpoint",
        _append_line(
            14,
            '{"add":{"path":"a","size":1,"modificationTime":1,"dataChange":true,"partitionValues":{},'
            '"deletionVector":{"storageType":5,"pathOrInlineDv":[]}}}',
        ),
        CorruptLogError,
    ),
    ("remove-is-list", "checkpoint", _append_line(14, '{"remove":[1]}'), CorruptLogError),
    (
        "remove-path-missing",
        "checkpoint",
        _append_line(14, '{"remove":{"deletionTimestamp":1}}'),
        CorruptLogError,
    ),
    ("commit-info-list", "checkpoint", _append_line(14, '{"commitInfo":[1]}'), CorruptLogError),
    (
        "commit-info-ict-text",
        "checkpoint",
        _append_line(14, '{"commitInfo":{"inCommitTimestamp":"x"}}'),
        CorruptLogError,
    ),
    (
        "protocol-version-text",
        "checkpoint",
        _append_line(14, '{"protocol":{"minReaderVersion":"one","minWriterVersion":2}}'),
        CorruptLogError,
    ),
    (
        "protocol-version-fraction",
        "checkpoint",
        _append_line(14, '{"protocol":{"minReaderVersion":1.5,"minWriterVersion":2}}'),
        CorruptLogError,
    ),
    (
        "protocol-version-null",
        "checkpoint",
        _append_line(14, '{"protocol":{"minReaderVersion":null,"minWriterVersion":2}}'),
        CorruptLogError,
    ),
    (
        "protocol-features-text",
        "checkpoint",
        _append_line(
            14,
            '{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":"x","writerFeatures":[]}}',
        ),
        CorruptLogError,
    ),
    ("metadata-is-list", "checkpoint", _append_line(14, '{"metaData":[]}'), CorruptLogError),
    (
        "metadata-configuration-int",
        "checkpoint",
        _append_line(14, _metadata(configuration={"a": 1})),
        CorruptLogError,
    ),
    (
        "metadata-partition-columns-text",
        "checkpoint",
        _append_line(14, _metadata(partitionColumns="a")),
        CorruptLogError,
    ),
    (
        "metadata-schema-not-json",
        "checkpoint",
        _append_line(14, _metadata(schemaString="garbage")),
        SchemaError,
    ),
    (
        "metadata-schema-fields-int",
        "checkpoint",
        _append_line(14, _metadata(schemaString='{"type":"struct","fields":5}')),
        SchemaError,
    ),
    (
        "metadata-partition-column-unknown",
        "checkpoint",
        _append_line(14, _metadata(partitionColumns=["zz"])),
        InvalidTableError,
    ),
    (
        "txn-mistyped",
        "checkpoint",
        _append_line(14, '{"txn":{"appId":null,"version":"x"}}'),
        CorruptLogError,
    ),
    (
        "domain-mistyped",
        "checkpoint",
        _append_line(14, '{"domainMetadata":{"domain":1,"configuration":{}}}'),
        CorruptLogError,
    ),
    # commits: missing or doubled protocol / metadata
    ("no-protocol", "snapshot-data0", _drop_lines(0, "protocol"), MissingProtocolError),
    ("no-metadata", "snapshot-data0", _drop_lines(0, "metaData"), MissingMetadataError),
    (
        "two-protocols-one-commit",
        "checkpoint",
        _many(_append_line(14, _PROTOCOL_12), _append_line(14, _PROTOCOL_13)),
        CorruptLogError,
    ),
    (
        "two-metadata-one-commit",
        "checkpoint",
        _many(_append_line(14, _metadata(id="a")), _append_line(14, _metadata(id="b"))),
        CorruptLogError,
    ),
    # commits: empty files, gaps, strays
    (
        "empty-log-dir",
        "checkpoint",
        _delete_log_files_but(),
        TableNotFoundError,
    ),
    (
        "only-last-checkpoint",
        "checkpoint",
        _delete_log_files_but("_last_checkpoint"),
        TableNotFoundError,
    ),
    ("gap-after-checkpoint", "checkpoint", _delete(_commit(12)), VersionsNotContiguousError),
    ("gap-before-checkpoint", "checkpoint", _delete(_commit(3)), FALLBACK),
    ("first-commit-gone-no-checkpoint", "snapshot-data3", _delete(_commit(0)), InvalidTableError),
    (
        "stray-names",
        "checkpoint",
        _many(_write(f"{LOG}/abc.json", "x"), _write(f"{LOG}/{'9' * 21}.txt", "y")),
        FALLBACK,
    ),
    # checkpoints
    (
        "checkpoint-not-parquet",
        "checkpoint",
        _write(_classic_checkpoint(10), b"PAR1 garbage PAR1"),
        CorruptLogError,
    ),
    ("checkpoint-truncated", "checkpoint", _truncate(_classic_checkpoint(10)), CorruptLogError),
    ("checkpoint-empty-file", "checkpoint", _write(_classic_checkpoint(10), b""), FALLBACK),
    (
        "checkpoint-wrong-schema",
        "checkpoint",
        _rewrite_checkpoint(10, lambda _: pa.table({"add": [1, 2], "protocol": ["a", "b"]})),
        CorruptLogError,
    ),
    (
        "checkpoint-wrong-row-types",
        "checkpoint",
        _rewrite_checkpoint(
            10,
            lambda _: pa.table(
                {
                    "add": [{"path": 1, "size": "x"}],
                    "protocol": [{"minReaderVersion": "a", "minWriterVersion": None}],
                    "metaData": [{"id": 5}],
                }
            ),
        ),
        CorruptLogError,
    ),
    (
        "checkpoint-add-path-null",
        "checkpoint",
        _rewrite_checkpoint(10, _null_add_paths),
        CorruptLogError,
    ),
    (
        "checkpoint-two-protocols",
        "checkpoint",
        _rewrite_checkpoint(10, _second_protocol),
        CorruptLogError,
    ),
    (
        "checkpoint-no-add-column",
        "checkpoint",
        _rewrite_checkpoint(10, lambda t: t.drop_columns(["add"])),
        CorruptLogError,
    ),
    (
        "checkpoint-add-column-int",
        "checkpoint",
        _rewrite_checkpoint(
            10,
            lambda t: t.set_column(
                t.schema.get_field_index("add"), "add", pa.nulls(t.num_rows, pa.int64())
            ),
        ),
        CorruptLogError,
    ),
    (
        "checkpoint-no-protocol-column",
        "checkpoint",
        _rewrite_checkpoint(10, lambda t: t.drop_columns(["protocol"])),
        MissingProtocolError,
    ),
    (
        "checkpoint-no-metadata-column",
        "checkpoint",
        _rewrite_checkpoint(10, lambda t: t.drop_columns(["metaData"])),
        MissingMetadataError,
    ),
    (
        "checkpoint-no-rows",
        "checkpoint",
        _rewrite_checkpoint(10, lambda t: t.slice(0, 0)),
        MissingProtocolError,
    ),
    ("checkpoint-gone-hint-stays", "checkpoint", _delete(_classic_checkpoint(10)), FALLBACK),
    (
        "multipart-missing-part",
        "multi-part-checkpoint",
        _delete(f"{LOG}/{1:020d}.checkpoint.0000000002.0000000002.parquet"),
        FALLBACK,
    ),
    (
        "multipart-parts-hold-some-columns",
        "multi-part-checkpoint",
        _many(_rewrite_parts(1, _adds_moved_to_the_last_part), _delete(_commit(0))),
        FALLBACK,
    ),
    (
        "multipart-part-add-column-int",
        "multi-part-checkpoint",
        _rewrite_parts(
            1,
            lambda ts: [
                ts[0],
                ts[1].set_column(
                    ts[1].schema.get_field_index("add"), "add", pa.nulls(ts[1].num_rows, pa.int64())
                ),
            ],
        ),
        CorruptLogError,
    ),
    (
        "multipart-no-part-has-add",
        "multi-part-checkpoint",
        _rewrite_parts(1, lambda ts: [t.drop_columns(["add"]) for t in ts]),
        CorruptLogError,
    ),
    (
        "multipart-missing-part-no-first-commit",
        "multi-part-checkpoint",
        _delete(f"{LOG}/{1:020d}.checkpoint.0000000002.0000000002.parquet", _commit(0)),
        InvalidTableError,
    ),
    # _last_checkpoint
    (
        "last-checkpoint-garbage",
        "checkpoint",
        _write(f"{LOG}/_last_checkpoint", b"\xff\x00{{{"),
        FALLBACK,
    ),
    ("last-checkpoint-empty", "checkpoint", _write(f"{LOG}/_last_checkpoint", b""), FALLBACK),
    (
        "last-checkpoint-beyond-log",
        "checkpoint",
        _write(f"{LOG}/_last_checkpoint", '{"version":999,"size":3}'),
        FALLBACK,
    ),
    (
        "last-checkpoint-wrong-parts",
        "checkpoint",
        _write(f"{LOG}/_last_checkpoint", '{"version":10,"size":3,"parts":5}'),
        FALLBACK,
    ),
    (
        "last-checkpoint-version-text",
        "checkpoint",
        _write(f"{LOG}/_last_checkpoint", '{"version":"10","size":3}'),
        FALLBACK,
    ),
    (
        "last-checkpoint-bad-checksum",
        "checkpoint",
        _write(f"{LOG}/_last_checkpoint", '{"version":10,"size":3,"checksum":"00"}'),
        FALLBACK,
    ),
    (
        "last-checkpoint-odd-fields",
        "checkpoint",
        _write(
            f"{LOG}/_last_checkpoint",
            '{"version":10,"size":3,"v2Checkpoint":{"path":5},"checkpointSchema":[1],"tags":7}',
        ),
        FALLBACK,
    ),
    (
        "last-checkpoint-is-a-list",
        "checkpoint",
        _write(f"{LOG}/_last_checkpoint", "[10]"),
        FALLBACK,
    ),
    # V2 checkpoints and sidecars
    ("v2-parquet-sidecar-missing", "v2-checkpoint-parquet", _delete_sidecar, CorruptLogError),
    ("v2-json-sidecar-missing", "v2-checkpoint-json", _delete_sidecar, CorruptLogError),
    ("v2-parquet-sidecar-garbage", "v2-checkpoint-parquet", _garbage_sidecar, CorruptLogError),
    (
        "v2-sidecar-wrong-schema",
        "v2-checkpoint-parquet",
        _rewrite_sidecars(lambda: pa.table({"protocol": [{"minReaderVersion": 1}]})),
        CorruptLogError,
    ),
    (
        "v2-sidecar-add-int",
        "v2-checkpoint-parquet",
        _rewrite_sidecars(lambda: pa.table({"add": [1, 2]})),
        CorruptLogError,
    ),
    (
        "v2-json-sidecar-path-int",
        "v2-checkpoint-json",
        _rewrite_v2_json('{"sidecar":{"path":5,"sizeInBytes":1,"modificationTime":1}}'),
        CorruptLogError,
    ),
    (
        "v2-json-sidecar-size-text",
        "v2-checkpoint-json",
        _rewrite_v2_json('{"sidecar":{"path":"x.parquet","sizeInBytes":"q","modificationTime":1}}'),
        CorruptLogError,
    ),
    (
        "v2-json-sidecar-names-nothing",
        "v2-checkpoint-json",
        _rewrite_v2_json(
            '{"sidecar":{"path":"gone.parquet","sizeInBytes":1,"modificationTime":1}}'
        ),
        CorruptLogError,
    ),
    (
        "v2-json-no-checkpoint-metadata",
        "v2-checkpoint-json",
        _drop_v2_json_lines("checkpointMetadata"),
        FALLBACK,
    ),
    (
        "v2-json-no-checkpoint-metadata-no-commits",
        "v2-checkpoint-json",
        _many(
            _drop_v2_json_lines("checkpointMetadata"),
            _delete(_commit(0), _commit(1), _commit(2)),
        ),
        InvalidCheckpointError,
    ),
    (
        "v2-top-file-truncated",
        "v2-checkpoint-parquet",
        lambda root: _truncate(
            str(next((root / LOG).glob("*.checkpoint.*.parquet")).relative_to(root))
        )(root),
        CorruptLogError,
    ),
    # compaction and checksum files: optional, so garbage there falls back to the commits
    (
        "compaction-garbage",
        "checkpoint",
        _write(f"{LOG}/{11:020d}.{13:020d}.compacted.json", b"\x00\xff garbage"),
        FALLBACK,
    ),
    (
        "compaction-not-json",
        "checkpoint",
        _write(f"{LOG}/{11:020d}.{14:020d}.compacted.json", "{not json\n"),
        FALLBACK,
    ),
    (
        "compaction-wrong-types",
        "checkpoint",
        _write(f"{LOG}/{11:020d}.{12:020d}.compacted.json", '{"add":[]}\n'),
        FALLBACK,
    ),
    (
        "compaction-empty",
        "checkpoint",
        _write(f"{LOG}/{11:020d}.{13:020d}.compacted.json", b""),
        FALLBACK,
    ),
    (
        "checksum-garbage",
        "checkpoint",
        _write(f"{LOG}/{14:020d}.crc", b"\x00\xff garbage"),
        FALLBACK,
    ),
    (
        "checksum-wrong-json",
        "checkpoint",
        _write(f"{LOG}/{14:020d}.crc", '{"numFiles":"many","tableSizeBytes":[]}'),
        FALLBACK,
    ),
]


@pytest.mark.parametrize(
    ("table", "mutate", "expected"),
    [pytest.param(t, m, e, id=name) for name, t, m, e in HOSTILE_CASES],
)
def test_hostile_case(
    golden_root: Path, tmp_path: Path, table: str, mutate: Callable[[Path], None], expected: Any
) -> None:
    root = _fresh_copy(golden_root / table, tmp_path)
    mutate(root)
    outcomes = _read_every_way(root)
    latest = outcomes["latest"]
    if expected is FALLBACK:
        assert isinstance(latest, Snapshot), f"expected the fallback, got {latest!r}"
        assert _ours(latest) == _deltalake(golden_root / table)
        assert not isinstance(outcomes["head"], Exception)
        assert outcomes["head"].version == latest.version
        assert not isinstance(outcomes["history"], Exception)
    else:
        assert isinstance(latest, expected), f"expected {expected.__name__}, got {latest!r}"
    for name, outcome in outcomes.items():
        if name.startswith("v") and isinstance(outcome, Snapshot):
            # time travel that still works reads what deltalake reads there
            assert _ours(outcome) == _deltalake(golden_root / table, outcome.version), name


# --- deletion vectors through scan ---------------------------------------------------------


def _damage_dvs(how: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for dv in root.glob("deletion_vector_*.bin"):
            data = dv.read_bytes()
            if how == "garbage":
                dv.write_bytes(b"\x00" * len(data))
            elif how == "truncated":
                dv.write_bytes(data[: len(data) // 2])
            elif how == "flipped":  # one bit of the bitmap: the CRC-32 catches it
                dv.write_bytes(data[:12] + bytes([data[12] ^ 0x01]) + data[13:])
            elif how == "empty":
                dv.write_bytes(b"")
            else:
                dv.unlink()

    return mutate


@pytest.mark.parametrize(
    ("how", "error"),
    [
        ("garbage", DeletionVectorError),
        ("truncated", DeletionVectorError),
        ("flipped", ChecksumMismatchError),
        ("empty", DeletionVectorError),
        ("missing", DeletionVectorError),
    ],
)
def test_scan_with_damaged_deletion_vectors_is_a_typed_error(
    golden_root: Path, tmp_path: Path, how: str, error: type[RaydeltaError]
) -> None:
    root = _fresh_copy(golden_root / "dv-partitioned-with-checkpoint", tmp_path)
    _damage_dvs(how)(root)
    snapshot = load_snapshot(str(root))
    with pytest.raises(error):
        scan(str(root), snapshot.files, snapshot.schema, snapshot.metadata.partition_columns)


# --- fuzzing a table deltalake wrote ---------------------------------------------------------


@pytest.fixture(scope="module")
def written_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A partitioned table written by deltalake: appends, a checkpoint at v3,
    then an overwrite of one partition, a delete and more appends (v4..v7)."""
    root = tmp_path_factory.mktemp("hostile") / "written"
    uri = str(root)

    def rows(start: int, part: str) -> pa.Table:
        return pa.table({"id": list(range(start, start + 3)), "part": [part] * 3})

    deltalake.write_deltalake(uri, rows(0, "a"), partition_by=["part"])
    deltalake.write_deltalake(uri, rows(3, "b"), mode="append")
    deltalake.write_deltalake(uri, rows(6, "a"), mode="append")
    deltalake.write_deltalake(uri, rows(9, "c"), mode="append")
    deltalake.DeltaTable(uri).create_checkpoint()
    deltalake.write_deltalake(uri, rows(12, "b"), mode="overwrite", predicate="part = 'b'")
    deltalake.DeltaTable(uri).delete("id = 0")
    deltalake.write_deltalake(uri, rows(15, "d"), mode="append")
    deltalake.write_deltalake(uri, rows(18, "a"), mode="append")
    assert deltalake.DeltaTable(uri).version() == 7
    assert (root / _classic_checkpoint(3)).exists()
    return root


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """Where one hypothesis test's examples copy the table; emptied afterwards."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


class _Invalid(Exception):
    """The independent replay finds the log invalid."""


def _replay(root: Path) -> FileState:
    """An independent replay of the latest version (JSON and pyarrow only): the
    newest classic checkpoint, then the commits after it. Strict about what
    the compared state depends on; raises _Invalid where the log has no meaning."""
    log = root / LOG
    commits = sorted(int(p.name[:20]) for p in log.glob("*.json") if len(p.name) == 25)
    checkpoints = sorted(
        int(p.name[:20]) for p in log.glob("*.checkpoint.parquet") if p.stat().st_size > 0
    )
    if not commits:
        raise _Invalid("no commits")
    latest = max(commits[-1], checkpoints[-1] if checkpoints else -1)
    files: dict[str, int] = {}
    has_protocol = has_metadata = False
    start = 0
    if checkpoints:
        start = checkpoints[-1] + 1
        try:
            table = pq.read_table(log / f"{checkpoints[-1]:020d}.checkpoint.parquet")
        except (OSError, pa.ArrowException) as exc:
            raise _Invalid("checkpoint") from exc
        for row in table.to_pylist():
            if row.get("add"):
                files[unquote(row["add"]["path"])] = row["add"]["size"]
            has_protocol |= bool(row.get("protocol"))
            has_metadata |= bool(row.get("metaData"))
    if [v for v in commits if v >= start] != list(range(start, latest + 1)):
        raise _Invalid("gap")
    for version in range(start, latest + 1):
        try:
            text = (log / f"{version:020d}.json").read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Invalid("utf-8") from exc
        adds: dict[str, int] = {}
        removes: set[str] = set()
        protocols, metadatas = [], []
        for line in text.split("\n"):
            if not line.strip():
                continue
            try:
                wrapper = json.loads(line)
            except ValueError as exc:
                raise _Invalid("json") from exc
            if not isinstance(wrapper, dict):
                raise _Invalid("line")
            live = {k: v for k, v in wrapper.items() if v is not None}
            if len(live) > 1:
                raise _Invalid("two actions")
            for name, body in live.items():
                if name in ("add", "remove"):
                    if not isinstance(body, dict) or not isinstance(body.get("path"), str):
                        raise _Invalid(name)
                    path = unquote(body["path"])
                    if name == "add":
                        size = body.get("size")
                        if type(size) is not int:
                            raise _Invalid("size")
                        adds[path] = size
                    else:
                        removes.add(path)
                elif name == "protocol":
                    protocols.append(json.dumps(body, sort_keys=True))
                elif name == "metaData":
                    metadatas.append(json.dumps(body, sort_keys=True))
        if len(set(protocols)) > 1 or len(set(metadatas)) > 1:
            raise _Invalid("two protocols or metadata")
        has_protocol |= bool(protocols)
        has_metadata |= bool(metadatas)
        for path in removes:
            files.pop(path, None)
        files.update(adds)
    if not (has_protocol and has_metadata):
        raise _Invalid("no protocol or metadata")
    return latest, files


_HOSTILE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def _json_damage(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "set-field",
                "drop-field",
                "set-body",
                "rename-action",
                "truncate",
                "insert-bytes",
                "duplicate-line",
                "drop-line",
                "nest-field",
            ]
        )
    )
    if kind in ("set-field", "set-body", "nest-field"):
        return kind, draw(_HOSTILE_VALUES)
    if kind == "rename-action":
        return kind, draw(
            st.sampled_from(["add", "remove", "metaData", "protocol", "txn", "cdc", "zzz"])
        )
    if kind == "insert-bytes":
        return kind, draw(st.binary(min_size=1, max_size=6))
    return kind, None


def _apply_json_damage(path: Path, kind: str, value: Any, choice: st.DataObject) -> None:
    data = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(data[: choice.draw(st.integers(0, max(len(data) - 1, 0)), label="cut")])
        return
    if kind == "insert-bytes":
        at = choice.draw(st.integers(0, len(data)), label="at")
        path.write_bytes(data[:at] + value + data[at:])
        return
    lines = [x for x in data.decode().split("\n") if x]
    index = choice.draw(st.integers(0, len(lines) - 1), label="line")
    wrapper = json.loads(lines[index])
    ((name, body),) = wrapper.items()
    if kind == "duplicate-line":
        lines.insert(index, lines[index])
    elif kind == "drop-line":
        del lines[index]
    elif kind == "set-body":
        lines[index] = json.dumps({name: value})
    elif kind == "rename-action":
        lines[index] = json.dumps({value: body})
    else:
        keys = sorted(body)
        key = choice.draw(st.sampled_from(keys), label="field")
        if kind == "drop-field":
            del body[key]
        elif kind == "nest-field" and isinstance(body[key], dict) and body[key]:
            inner = choice.draw(st.sampled_from(sorted(body[key])), label="inner")
            body[key][inner] = value
        else:
            body[key] = value
        lines[index] = json.dumps({name: body})
    path.write_text("\n".join(lines) + "\n")


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(damage=_json_damage(), version=st.integers(4, 7), choice=st.data())
def test_damaged_commit_reads_as_its_replay_or_a_typed_error(
    written_table: Path, scratch: Path, damage: tuple[str, Any], version: int, choice: st.DataObject
) -> None:
    root = _fresh_copy(written_table, scratch)
    _apply_json_damage(root / _commit(version), *damage, choice)
    outcomes = _read_every_way(root)
    latest = outcomes["latest"]
    try:
        expected: FileState | None = _replay(root)
    except _Invalid:
        expected = None
    if isinstance(latest, Snapshot):
        assert expected is not None, f"raydelta read a log the replay finds invalid: {damage}"
        assert _ours(latest) == expected
        try:
            theirs = _deltalake(root)
        except Exception:  # deltalake may refuse what the spec lets us read
            theirs = None
        if theirs is not None and not _beyond_bmp(expected):
            assert _ours(latest) == theirs


def _log_files(root: Path) -> list[Path]:
    log = root / LOG
    return sorted(p for p in log.iterdir() if p.is_file() and not p.name.startswith("."))


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    how=st.sampled_from(["truncate", "garbage", "empty", "delete"]),
    garbage=st.binary(max_size=64),
    extra=st.sampled_from(["none", "compaction", "checksum", "last-checkpoint"]),
    choice=st.data(),
)
def test_damaged_log_files_never_change_a_version(
    written_table: Path,
    scratch: Path,
    how: str,
    garbage: bytes,
    extra: str,
    choice: st.DataObject,
) -> None:
    """Truncating, emptying, overwriting with garbage or deleting one log file
    (and dropping garbage where optional files go) may make a version
    unreadable, but a version that still loads holds what it held before; a
    damaged commit that still parses (cut at a line end, or emptied: both
    deltalake and delta-spark read an empty commit as no actions) holds what
    its lines say, which the independent replay and deltalake read too."""
    root = _fresh_copy(written_table, scratch)
    target = choice.draw(st.sampled_from(_log_files(root)), label="file")
    data = target.read_bytes()
    if how == "truncate":
        target.write_bytes(data[: choice.draw(st.integers(0, max(len(data) - 1, 0)), label="cut")])
    elif how == "garbage":
        target.write_bytes(garbage)
    elif how == "empty":
        target.write_bytes(b"")
    else:
        target.unlink()
    if extra == "compaction":
        (root / f"{LOG}/{4:020d}.{6:020d}.compacted.json").write_bytes(garbage)
    elif extra == "checksum":
        (root / f"{LOG}/{7:020d}.crc").write_bytes(garbage)
    elif extra == "last-checkpoint":
        (root / f"{LOG}/_last_checkpoint").write_bytes(garbage)
    damaged_commit = int(target.name[:20]) if len(target.name) == 25 and how != "delete" else None
    outcomes = _read_every_way(root)
    for name, outcome in outcomes.items():
        if not isinstance(outcome, Snapshot):
            continue
        if damaged_commit is None or outcome.version < damaged_commit:
            assert _ours(outcome) == _undamaged_by_deltalake(written_table, outcome.version), name
            continue
        if name in ("latest", "timestamp"):
            assert _ours(outcome) == _replay(root), name
        try:
            theirs: FileState | None = _deltalake(root, outcome.version)
        except Exception:  # deltalake may refuse a log we read
            theirs = None
        if theirs is not None:
            assert _ours(outcome) == theirs, name


def test_written_table_reads_as_deltalake(written_table: Path) -> None:
    """The fuzz oracles agree on the undamaged table."""
    assert (
        _ours(load_snapshot(str(written_table)))
        == _deltalake(written_table)
        == _replay(written_table)
    )


# --- in-commit timestamps ---------------------------------------------------------------

_ICT_SCHEMA = json.dumps(
    {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
)
_ICT_BASE = 1_700_000_000_000


def _ict_table(root: Path, commit_infos: list[dict[str, Any]]) -> None:
    """A table with in-commit timestamps enabled at creation: one commit per
    ``commitInfo`` given, each adding one file."""
    log = root / LOG
    log.mkdir(parents=True)
    for version, info in enumerate(commit_infos):
        lines: list[dict[str, Any]] = [{"commitInfo": info}]
        if version == 0:
            lines.append(
                {
                    "protocol": {
                        "minReaderVersion": 1,
                        "minWriterVersion": 7,
                        "writerFeatures": ["inCommitTimestamp"],
                    }
                }
            )
            lines.append(
                {
                    "metaData": {
                        "id": "ict",
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": _ICT_SCHEMA,
                        "partitionColumns": [],
                        "configuration": {"delta.enableInCommitTimestamps": "true"},
                    }
                }
            )
        add = {"path": f"f{version}.parquet", "size": 1, "modificationTime": 1}
        lines.append({"add": {**add, "partitionValues": {}, "dataChange": True}})
        (log / f"{version:020d}.json").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _ict(version: int) -> dict[str, Any]:
    return {"inCommitTimestamp": _ICT_BASE + 1000 * version, "operation": "WRITE"}


def test_in_commit_timestamps_resolve_time_travel(tmp_path: Path) -> None:
    _ict_table(tmp_path, [_ict(0), _ict(1), _ict(2)])
    for version in range(3):
        at = _ict(version)["inCommitTimestamp"]
        assert load_snapshot(str(tmp_path), timestamp=at).version == version
        assert load_snapshot(str(tmp_path), version=version).timestamp == at


@pytest.mark.parametrize(
    ("damaged", "readers"),
    [
        pytest.param({"operation": "WRITE"}, ("latest", "timestamp"), id="missing"),
        pytest.param({"inCommitTimestamp": None}, ("latest", "timestamp"), id="null"),
        pytest.param({"inCommitTimestamp": True}, ("latest", "timestamp", "head"), id="bool"),
        pytest.param({"inCommitTimestamp": "1700000002000"}, ("latest", "head"), id="text"),
        pytest.param({"inCommitTimestamp": 1.7e12}, ("latest", "head"), id="fraction"),
    ],
)
def test_a_missing_or_mistyped_in_commit_timestamp_is_a_typed_error(
    tmp_path: Path, damaged: dict[str, Any], readers: tuple[str, ...]
) -> None:
    """Falling back to the file time would mix two clocks: time travel could
    resolve to the wrong version, and the snapshot's timestamp would be wrong."""
    _ict_table(tmp_path, [_ict(0), _ict(1), damaged])
    outcomes = _read_every_way(tmp_path)
    for name in readers:
        assert isinstance(outcomes[name], CorruptLogError), (name, outcomes[name])
    # versions before the damage still read, with their own timestamps
    assert load_snapshot(str(tmp_path), version=1).timestamp == _ict(1)["inCommitTimestamp"]
