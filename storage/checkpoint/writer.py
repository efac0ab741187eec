"""Write checkpoints: classic V1, V2 with sidecars (UUID-named or classic-named).

The pieces are shaped for a driver that fans work out (a Ray actor): it
calls :func:`raydelta.protocol.checkpoint_plan.plan_v2_checkpoint`, runs
:func:`write_shard_sidecar` once per :class:`~raydelta.protocol.checkpoint_plan.ShardWork`
in parallel tasks, then :func:`write_v2_checkpoint` with the sidecars (new
and reused). :func:`write_v2_checkpoint_single_process` does the same in
one process.

Invariants:
- Order of publication: every sidecar exists (checked: present, with the
  size its ``sidecar`` action records) before the top-level V2 file that
  references it is written, and the checkpoint file is completely written
  before ``_last_checkpoint`` names it. A crash in between leaves only
  unreferenced files (sidecars, an unnamed UUID checkpoint), never a
  reference to a missing one.
- Unique names (UUID checkpoints, sidecars) are created with
  ``put_if_absent``. Classic names (``<v>.checkpoint.parquet``, V1 or V2
  content) too, by :func:`create_classic_checkpoint`: a classic checkpoint
  that already exists at that version is left as it is and nothing is
  written (every checkpoint of a version holds the same state, so the one
  there serves), except an empty file, which is no checkpoint and is
  replaced. Never overwriting matters on local disks: delta-spark writes the
  same names (it checkpoints every ``delta.checkpointInterval`` commits it
  makes) through Hadoop, whose ``.<name>.crc`` checksum file would then
  describe bytes that are gone and fail its next read (issue 31). When
  delta-spark renames its checkpoint over ours instead, Hadoop renames its
  checksum file with it, and the pair agrees.
- Never multi-part. Never ``commitInfo`` or ``cdc``. Tombstones and ``txn``s
  expired at ``now_ms`` are dropped (:func:`raydelta.protocol.checkpoint_plan.checkpoint_view`).
- V2 checkpoints are written only for tables that support ``v2Checkpoint``;
  a V2 checkpoint holds either all its file actions or none (all in sidecars).
- A catalog-managed table is checkpointed only at a published version
  (``_delta_log/<v>.json`` exists; CATALOG_MANAGED.md, "Maintenance
  Operations"), else :class:`CheckpointWriteError`.
- ``_last_checkpoint`` is not moved backwards, nor rewritten for the version
  it already names: if it names this version or a newer one it is left alone
  (fewer rewrites of a file delta-spark also writes; see
  :mod:`raydelta.storage.log.store` on how a rewrite keeps Hadoop's checksum
  file in step). ``size`` counts every action of the checkpoint
  (sidecar rows included) and ``sizeInBytes`` every byte (sidecars included),
  as delta-spark does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from raydelta.protocol.actions import (
    Action,
    Sidecar,
    action_name,
    action_to_wrapper,
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.checkpoint_plan import (
    DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    ShardWork,
    checkpoint_view,
    non_file_actions,
    plan_v2_checkpoint,
    shard_tags,
    sidecar_counts,
    table_configuration,
)
from raydelta.protocol.checkpoint_schema import CheckpointLayout, assemble_rows, non_file_rows
from raydelta.protocol.errors import CheckpointWriteError, FileAlreadyExistsError
from raydelta.protocol.file_actions import FileKey, column_as_json
from raydelta.protocol.file_names import (
    LAST_CHECKPOINT_NAME,
    FileFormat,
    LogFile,
    classic_checkpoint_name,
    commit_name,
    sidecar_name,
    uuid_checkpoint_name,
)
from raydelta.protocol.last_checkpoint import (
    LastCheckpointInfo,
    serialize_last_checkpoint,
)
from raydelta.protocol.reconciliation import TableState
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import V2_CHECKPOINT
from raydelta.storage.log.reader import read_last_checkpoint, read_parquet_actions, sidecar_path
from raydelta.storage.log.store import LogStore

INLINE_MAX_SIDECARS = 100
INLINE_MAX_NON_FILE_BYTES = 64 * 1024

Naming = Literal["uuid", "classic"]


# --- bytes ---------------------------------------------------------------------------------


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """Leaf columns worth dictionary encoding: partition values and DV storage types.

    Paths, stats and numbers are nearly unique per row: trying a dictionary
    on them costs a third of the write time for nothing.
    """
    out: list[str] = []

    def walk(path: str, type_: pa.DataType, wanted: bool) -> None:
        if pa.types.is_struct(type_):
            for child in type_:
                walk(f"{path}.{child.name}", child.type, wanted or "partitionValues" in child.name)
        elif pa.types.is_map(type_):
            walk(f"{path}.key_value.key", type_.key_type, wanted)
            walk(f"{path}.key_value.value", type_.item_type, wanted)
        elif pa.types.is_list(type_) or pa.types.is_large_list(type_):
            walk(f"{path}.list.element", type_.value_type, wanted)
        elif wanted or path.endswith(".storageType"):
            out.append(path)

    for field in schema:
        walk(field.name, field.type, False)
    return out


def parquet_write_options(schema: pa.Schema) -> dict[str, Any]:
    """``pyarrow.parquet`` writer options for checkpoint and sidecar files."""
    return {"compression": "snappy", "use_dictionary": _dictionary_columns(schema)}


def _parquet_bytes(table: pa.Table, metadata: Mapping[str, str] | None = None) -> bytes:
    """``table`` as one parquet file; ``metadata`` goes to the footer's key-value pairs."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, **parquet_write_options(table.schema)) as writer:
        writer.write_table(table)
        if metadata:
            writer.add_key_value_metadata(dict(metadata))
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _modification_time(store: LogStore, name: str, fallback_ms: int | None) -> int:
    """The stored file's modification time in ms, else ``fallback_ms`` (else 0)."""
    try:
        stamp = store.status(store.path_of(name)).modification_time
    except OSError:  # FileNotFoundError among them
        stamp = 0
    if stamp > 0:
        return stamp
    return fallback_ms if fallback_ms is not None else 0


def write_last_checkpoint(store: LogStore, info: LastCheckpointInfo) -> bool:
    """Overwrite ``_last_checkpoint`` unless it already names this version or a
    newer one; whether it was written."""
    current = read_last_checkpoint(store)
    if current is not None and current.version >= info.version:
        return False
    store.write(LAST_CHECKPOINT_NAME, serialize_last_checkpoint(info))
    return True


def classic_checkpoint_exists(store: LogStore, version: int) -> bool:
    """Whether ``<version>.checkpoint.parquet`` is there and not empty."""
    try:
        return store.status(store.path_of(classic_checkpoint_name(version))).size > 0
    except FileNotFoundError:
        return False


def create_classic_checkpoint(store: LogStore, version: int, data: bytes) -> bool:
    """Create ``<version>.checkpoint.parquet`` holding ``data`` unless a
    checkpoint of that name is already there; whether it was written.

    An existing empty file is no checkpoint (a writer without atomic
    visibility died mid-write): it is replaced. A Hadoop checksum file left
    without its file is removed first, so Hadoop never verifies our bytes
    against it.
    """
    name = classic_checkpoint_name(version)
    store.delete_orphan_hadoop_crc(name)
    try:
        store.put_if_absent(name, data)
    except FileAlreadyExistsError:
        try:
            size = store.status(store.path_of(name)).size
        except FileNotFoundError:  # deleted meanwhile (metadata cleanup): it was old
            size = -1
        if size != 0:
            return False
        store.write(name, data)
    return True


def _file_action_blocks(
    layout: CheckpointLayout, adds: pa.Table, removes: pa.Table
) -> list[tuple[str, pa.Array]]:
    return [("add", layout.add_array(adds)), ("remove", layout.remove_array(removes))]


def _non_file_blocks(actions: Sequence[Action]) -> list[tuple[str, pa.Array]]:
    """Consecutive runs of one action kind, in order, as struct arrays."""
    blocks: list[tuple[str, pa.Array]] = []
    run: list[Action] = []
    for action in actions:
        if run and action_name(run[0]) != action_name(action):
            blocks.extend(non_file_rows(run).items())
            run = []
        run.append(action)
    if run:
        blocks.extend(non_file_rows(run).items())
    return blocks


# --- V1 ------------------------------------------------------------------------------------


def ensure_published(store: LogStore, config: TableConfiguration, version: int) -> None:
    """A catalog-managed table's checkpoint needs ``<version>.json`` published."""
    if config.is_catalog_managed and not store.exists(store.path_of(commit_name(version))):
        raise CheckpointWriteError(
            f"version {version} of the catalog-managed table {store.table_root} is not "
            "published yet: only published versions may be checkpointed"
        )


def write_v1_checkpoint(store: LogStore, state: TableState, *, now_ms: int) -> LastCheckpointInfo:
    """Write the classic ``<v>.checkpoint.parquet`` of ``state``, then ``_last_checkpoint``.

    When a classic checkpoint of that version is already there nothing is
    written (:func:`create_classic_checkpoint`); the info returned is the
    one this checkpoint would have had.

    >>> info = write_v1_checkpoint(store, snapshot.state, now_ms=now)   # doctest: +SKIP
    >>> info.version, info.num_of_add_files                              # doctest: +SKIP
    """
    config = table_configuration(state)
    ensure_published(store, config, state.version)
    view = checkpoint_view(state, config, now_ms=now_ms)
    layout = CheckpointLayout.for_table(config)
    blocks = _non_file_blocks(non_file_actions(view))
    blocks += _file_action_blocks(layout, view.adds, view.removes)
    table = assemble_rows(layout.schema(v2=False), blocks)
    data = _parquet_bytes(table)
    info = LastCheckpointInfo(
        version=view.version,
        size=table.num_rows,
        sizeInBytes=len(data),
        numOfAddFiles=view.adds.num_rows,
    )
    if create_classic_checkpoint(store, view.version, data):
        write_last_checkpoint(store, info)
    return info


# --- sidecars ------------------------------------------------------------------------------


def write_sidecar(
    store: LogStore,
    adds: pa.Table,
    removes: pa.Table,
    *,
    layout: CheckpointLayout,
    tags: dict[str, str | None] | None = None,
    now_ms: int | None = None,
    footer_metadata: Mapping[str, str] | None = None,
) -> Sidecar:
    """Write ``_delta_log/_sidecars/<uuid>.parquet`` holding ``adds`` and ``removes``.

    ``adds`` / ``removes`` are canonical rows (:mod:`raydelta.protocol.file_actions`),
    written in the checkpoint layout ``layout``. Returns the ``sidecar``
    action (its ``path`` is the bare file name; ``modificationTime`` is the
    stored file's, ``now_ms`` when the store reports none).
    ``footer_metadata`` is written to the parquet footer's key-value pairs
    (readers ignore keys they do not know).
    """
    table = assemble_rows(layout.sidecar_schema(), _file_action_blocks(layout, adds, removes))
    data = _parquet_bytes(table, footer_metadata)
    file_id = str(uuid.uuid4())
    name = sidecar_name(file_id)
    store.put_if_absent(name, data)
    return Sidecar(
        path=name.rsplit("/", 1)[-1],
        sizeInBytes=len(data),
        modificationTime=_modification_time(store, name, now_ms),
        tags=dict(tags or {}),
    )


def write_shard_sidecar(
    store: LogStore,
    work: ShardWork,
    *,
    layout: CheckpointLayout,
    now_ms: int | None = None,
    footer_metadata: Mapping[str, str] | None = None,
) -> Sidecar:
    """Write one planned shard (a parallel task's unit of work), tagged for reuse."""
    tags = shard_tags(
        work.shard, work.num_shards, layout=layout.fingerprint, adds=work.adds, removes=work.removes
    )
    return write_sidecar(
        store,
        work.adds,
        work.removes,
        layout=layout,
        tags=tags,
        now_ms=now_ms,
        footer_metadata=footer_metadata,
    )


def _verify_sidecars(store: LogStore, sidecars: Sequence[Sidecar]) -> None:
    for sidecar in sidecars:
        path = sidecar_path(store, sidecar)
        try:
            size = store.status(path).size or -1
        except FileNotFoundError:
            raise CheckpointWriteError(f"sidecar {sidecar.path} does not exist ({path})") from None
        if size != sidecar.size_in_bytes:
            raise CheckpointWriteError(
                f"sidecar {sidecar.path} holds {size} bytes, its action says "
                f"{sidecar.size_in_bytes}"
            )


def _sidecar_rows(store: LogStore, sidecars: Sequence[Sidecar]) -> tuple[int, int | None]:
    """Total file actions in ``sidecars`` and, when every tag says, total adds."""
    actions = 0
    adds: int | None = 0
    for sidecar in sidecars:
        counts = sidecar_counts(sidecar)
        if counts is not None:
            actions += counts[0] + counts[1]
            if adds is not None:
                adds += counts[0]
            continue
        adds = None
        with store.open_input(sidecar_path(store, sidecar)) as handle:
            actions += pq.ParquetFile(handle).metadata.num_rows
    return actions, adds


# --- V2 ------------------------------------------------------------------------------------


def _v2_content(
    view: TableState,
    layout: CheckpointLayout,
    config: TableConfiguration,
    sidecars: Sequence[Sidecar] | None,
    fmt: FileFormat,
) -> tuple[bytes, int, list[Action]]:
    """The bytes of a V2 top-level file, its number of rows, its non-file actions."""
    non_file = non_file_actions(view, checkpoint_version=view.version)
    embedded = sidecars is None
    if fmt == "json":
        lines = serialize_actions(non_file)
        rows = len(non_file)
        if embedded:
            adds = _canonical_json("add", view.adds, drop_stats=not config.write_stats_as_json)
            removes = _canonical_json("remove", view.removes, drop_stats=True)
            lines += _json_lines(adds) + _json_lines(removes)
            rows += len(adds) + len(removes)
        else:
            lines += serialize_actions(list(sidecars or ()))
            rows += len(sidecars or ())
        return lines, rows, non_file
    blocks = _non_file_blocks(non_file)
    if embedded:
        blocks += _file_action_blocks(layout, view.adds, view.removes)
    elif sidecars:
        blocks += _non_file_blocks(list(sidecars))
    table = assemble_rows(layout.schema(v2=True), blocks)
    return _parquet_bytes(table), table.num_rows, non_file


def _canonical_json(name: str, table: pa.Table, *, drop_stats: bool) -> list[dict[str, Any]]:
    if table.num_rows == 0:
        return []
    struct = pa.StructArray.from_arrays(
        [c.combine_chunks() for c in table.columns], fields=list(table.schema)
    )
    bodies = column_as_json(struct)
    if drop_stats:
        for body in bodies:
            body.pop("stats", None)
    return [{name: body} for body in bodies]


def _json_lines(wrappers: Iterable[dict[str, Any]]) -> bytes:
    return "".join(
        json.dumps(w, separators=(",", ":"), ensure_ascii=False) + "\n" for w in wrappers
    ).encode("utf-8")


def _inline_v2_info(
    name: str,
    size_in_bytes: int,
    modification_time: int,
    non_file: Sequence[Action],
    sidecars: Sequence[Sidecar] | None,
) -> dict[str, Any] | None:
    """The ``v2Checkpoint`` field of ``_last_checkpoint`` when it is small enough."""
    if sidecars is None or len(sidecars) >= INLINE_MAX_SIDECARS:
        return None
    wrappers = [action_to_wrapper(a) for a in non_file]
    if len(json.dumps(wrappers, separators=(",", ":"))) >= INLINE_MAX_NON_FILE_BYTES:
        return None
    return {
        "path": name,
        "sizeInBytes": size_in_bytes,
        "modificationTime": modification_time,
        "nonFileActions": wrappers,
        "sidecarFiles": [s.to_json_dict() for s in sidecars],
    }


def write_v2_checkpoint(
    store: LogStore,
    state: TableState,
    sidecars: Sequence[Sidecar] | None,
    *,
    now_ms: int,
    fmt: FileFormat = "json",
    naming: Naming = "uuid",
    update_last_checkpoint: bool = True,
    file_id: str | None = None,
) -> LastCheckpointInfo:
    """Write the V2 checkpoint of ``state`` whose file actions are in ``sidecars``.

    ``sidecars=None`` embeds the file actions in the top-level file instead.
    The sidecars must already exist (checked) and together hold exactly the
    file actions of ``state`` as of ``now_ms``, as
    :func:`raydelta.protocol.checkpoint_plan.plan_v2_checkpoint` arranges. ``naming``
    ``"uuid"`` writes ``<v>.checkpoint.<uuid>.<fmt>``; ``"classic"`` writes
    ``<v>.checkpoint.parquet`` with V2 content (for older readers; parquet
    only; left as it is when a classic checkpoint of that version exists,
    see :func:`create_classic_checkpoint`). Then ``_last_checkpoint`` (unless
    ``update_last_checkpoint`` is false or nothing was written), with the
    ``v2Checkpoint`` summary inline when it is small.
    ``file_id`` is the UUID of a UUID-named file (a fresh one when None), so
    the caller knows the name it wrote.
    """
    config = table_configuration(state)
    if not config.is_feature_supported(V2_CHECKPOINT):
        raise CheckpointWriteError(
            f"the table does not support {V2_CHECKPOINT!r}; write a V1 checkpoint instead"
        )
    if naming == "classic" and fmt != "parquet":
        raise ValueError("a classic-named checkpoint is parquet")
    ensure_published(store, config, state.version)
    view = checkpoint_view(state, config, now_ms=now_ms)
    layout = CheckpointLayout.for_table(config)
    if sidecars is not None:
        if not sidecars and (view.adds.num_rows or view.removes.num_rows):
            raise CheckpointWriteError(
                "no sidecars given for a state with file actions; pass sidecars=None to embed them"
            )
        _verify_sidecars(store, sidecars)
    data, rows, non_file = _v2_content(view, layout, config, sidecars, fmt)
    if naming == "uuid":
        name = uuid_checkpoint_name(view.version, file_id or str(uuid.uuid4()), fmt)
        store.put_if_absent(name, data)
    else:
        name = classic_checkpoint_name(view.version)
        if not create_classic_checkpoint(store, view.version, data):
            update_last_checkpoint = False  # the checkpoint there is another writer's
    if sidecars is None:
        total_rows, num_adds = rows, view.adds.num_rows
        total_bytes = len(data)
    else:
        sidecar_actions, sidecar_adds = _sidecar_rows(store, sidecars)
        total_rows = rows + sidecar_actions
        num_adds = sidecar_adds if sidecar_adds is not None else view.adds.num_rows
        total_bytes = len(data) + sum(s.size_in_bytes for s in sidecars)
    inline = None
    if naming == "uuid":
        mtime = _modification_time(store, name, now_ms)
        inline = _inline_v2_info(name, len(data), mtime, non_file, sidecars)
    info = LastCheckpointInfo(
        version=view.version,
        size=total_rows,
        sizeInBytes=total_bytes,
        numOfAddFiles=num_adds,
        v2Checkpoint=inline,
    )
    if update_last_checkpoint:
        write_last_checkpoint(store, info)
    return info


def write_v2_checkpoint_single_process(
    store: LogStore,
    state: TableState,
    *,
    now_ms: int,
    target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    fmt: FileFormat = "json",
    previous_sidecars: Sequence[Sidecar] | None = None,
    touched_keys: Iterable[FileKey] | None = None,
    classic_copy: bool = False,
) -> LastCheckpointInfo:
    """Shard, write the sidecars one after another, then the V2 checkpoint.

    With ``previous_sidecars`` and ``touched_keys`` unchanged shards reuse
    their previous sidecar. ``classic_copy`` also writes the classic-named
    V2 copy (``<v>.checkpoint.parquet``, same sidecars) before
    ``_last_checkpoint`` is updated.
    """
    plan = plan_v2_checkpoint(
        state,
        now_ms=now_ms,
        target_actions_per_sidecar=target_actions_per_sidecar,
        previous_sidecars=previous_sidecars,
        touched_keys=touched_keys,
    )
    written = {
        work.shard: write_shard_sidecar(store, work, layout=plan.layout, now_ms=now_ms)
        for work in plan.to_write
    }
    by_shard = {**plan.reused, **written}
    sidecars = [by_shard[shard] for shard in sorted(by_shard)]
    if classic_copy:
        write_v2_checkpoint(
            store,
            plan.view,
            sidecars,
            now_ms=now_ms,
            fmt="parquet",
            naming="classic",
            update_last_checkpoint=False,
        )
    return write_v2_checkpoint(store, plan.view, sidecars, now_ms=now_ms, fmt=fmt)


def write_checkpoint(
    store: LogStore,
    state: TableState,
    *,
    now_ms: int,
    target_actions_per_sidecar: int = DEFAULT_TARGET_ACTIONS_PER_SIDECAR,
    fmt: FileFormat = "parquet",
) -> LastCheckpointInfo:
    """The checkpoint the table asks for: V2 with sidecars when
    ``delta.checkpointPolicy=v2`` on a ``v2Checkpoint`` table, else classic V1."""
    if table_configuration(state).writes_v2_checkpoints:
        return write_v2_checkpoint_single_process(
            store,
            state,
            now_ms=now_ms,
            target_actions_per_sidecar=target_actions_per_sidecar,
            fmt=fmt,
        )
    return write_v1_checkpoint(store, state, now_ms=now_ms)


def read_checkpoint_sidecars(store: LogStore, checkpoint: LogFile) -> list[Sidecar]:
    """The ``sidecar`` actions of one V2 checkpoint file (the sidecars are not read).

    This is what an incremental checkpoint passes as ``previous_sidecars``.
    """
    if checkpoint.name.endswith(".json"):
        return [a for a in parse_actions(store.read(checkpoint.name)) if isinstance(a, Sidecar)]
    table = read_parquet_actions(store, store.path_of(checkpoint.name), ("sidecar",))
    if "sidecar" not in table.column_names:
        return []
    return [Sidecar.model_validate(body) for body in column_as_json(table.column("sidecar"))]
