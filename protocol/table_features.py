"""Table features and protocol versions: what a table needs, and what raydelta can do.

PROTOCOL.md, "Protocol Evolution", "Table Features", "Valid Feature Names in
Table Features", "Writer/Reader Version Requirements". A feature is
*supported* when the protocol lists it (or, below writer version 7, when the
legacy versions imply it) and *active* when it is supported and its metadata
requirement holds (e.g. ``appendOnly`` + ``delta.appendOnly=true``;
:mod:`raydelta.protocol.feature_activation`).

Invariants:
- Unknown feature names are data, never dropped: they are reported as
  supported, refused by the gates with their names, and kept by
  :func:`upgrade_protocol`.
- Legacy protocols (reader < 3 and writer < 7) imply exactly the legacy
  features whose versions they reach; a protocol using writer version 7
  implies nothing, every feature is listed (as delta-spark reads it).
- The gates check versions first, so ``ensure_readable`` on reader version 99
  says "reader version 99", then the spec's shape rules, then the features.
- Writers must implement every reader feature too, so ``ensure_writable``
  includes ``ensure_readable``.
- In-Commit Timestamps has two spellings. The spec text says
  ``inCommitTimestamps`` (a known typo); delta-spark, delta-kernel and Unity
  Catalog write and read ``inCommitTimestamp``, and a protocol listing only
  the typo is one they do not recognise. Reading accepts both: they name one
  feature here, and supported/active sets contain both spellings whenever
  either is listed, so a membership test with either name is right.
  Writing uses :data:`IN_COMMIT_TIMESTAMP` only: it is the catalogue name
  (so a feature that requires ICT brings that spelling along), and the
  typo exists only as :data:`IN_COMMIT_TIMESTAMPS_SPEC_TYPO`, an alias to
  recognise. :func:`upgrade_protocol` lists a feature it adds by its
  catalogue name whichever spelling was asked for, keeps the names a
  protocol already lists as they are (another writer's protocol is not
  rewritten) and never adds the second spelling of a listed feature.

What raydelta implements, feature by feature, is documented at
:data:`READER_FEATURES_IMPLEMENTED` and :data:`WRITER_FEATURES_IMPLEMENTED`.
raydelta serves the *log*: snapshots, file lists, commits, checkpoints,
cleanup. Parquet data files are read and written by the engines using the
table (Spark, delta-rs, duckdb...). A feature whose rules concern only the
content of data files is therefore "implemented" once the log-level rules
are, and the data-content rules stay the data writer's job (stated per
feature below).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from raydelta.protocol.actions import Protocol
from raydelta.protocol.errors import (
    InvalidProtocolError,
    InvalidProtocolVersionException,
    UnsupportedTableFeatureException,
)

MIN_VERSION = 1
MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7
TABLE_FEATURES_READER_VERSION = 3
TABLE_FEATURES_WRITER_VERSION = 7


class FeatureKind(enum.StrEnum):
    WRITER_ONLY = "writer"
    READER_WRITER = "readerWriter"


@dataclass(frozen=True, slots=True)
class TableFeature:
    """One entry of the feature catalogue.

    ``legacy_reader_version`` / ``legacy_writer_version`` are the protocol
    versions that imply the feature without a feature list (None for features
    that exist only in table-features protocols). ``requires`` lists features
    that must be supported with it.
    """

    name: str
    kind: FeatureKind
    legacy_reader_version: int | None = None
    legacy_writer_version: int | None = None
    requires: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    @property
    def is_reader_writer(self) -> bool:
        return self.kind is FeatureKind.READER_WRITER

    @property
    def is_legacy(self) -> bool:
        return self.legacy_writer_version is not None


# Feature names (spec spelling).
APPEND_ONLY = "appendOnly"
INVARIANTS = "invariants"
CHECK_CONSTRAINTS = "checkConstraints"
GENERATED_COLUMNS = "generatedColumns"
ALLOW_COLUMN_DEFAULTS = "allowColumnDefaults"
CHANGE_DATA_FEED = "changeDataFeed"
COLUMN_MAPPING = "columnMapping"
IDENTITY_COLUMNS = "identityColumns"
DELETION_VECTORS = "deletionVectors"
ROW_TRACKING = "rowTracking"
TIMESTAMP_NTZ = "timestampNtz"
DOMAIN_METADATA = "domainMetadata"
V2_CHECKPOINT = "v2Checkpoint"
ICEBERG_COMPAT_V1 = "icebergCompatV1"
ICEBERG_COMPAT_V2 = "icebergCompatV2"
ICEBERG_COMPAT_V3 = "icebergCompatV3"
CLUSTERING = "clustering"
VACUUM_PROTOCOL_CHECK = "vacuumProtocolCheck"
IN_COMMIT_TIMESTAMP = "inCommitTimestamp"
"""In-Commit Timestamps as delta-spark, delta-kernel and Unity Catalog spell it:
the one spelling raydelta writes or answers."""
IN_COMMIT_TIMESTAMPS_SPEC_TYPO = "inCommitTimestamps"
"""The spec text's spelling (a typo): accepted when read, never written."""
TYPE_WIDENING = "typeWidening"
TYPE_WIDENING_PREVIEW = "typeWidening-preview"
VARIANT_TYPE = "variantType"
VARIANT_TYPE_PREVIEW = "variantType-preview"
VARIANT_SHREDDING = "variantShredding"
VARIANT_SHREDDING_PREVIEW = "variantShredding-preview"
CATALOG_MANAGED = "catalogManaged"
CATALOG_OWNED_PREVIEW = "catalogOwned-preview"
CHECKPOINT_PROTECTION = "checkpointProtection"
COLLATIONS = "collations"
COLLATIONS_PREVIEW = "collations-preview"
COORDINATED_COMMITS_PREVIEW = "coordinatedCommits-preview"
MATERIALIZE_PARTITION_COLUMNS = "materializePartitionColumns"

_W = FeatureKind.WRITER_ONLY
_RW = FeatureKind.READER_WRITER

CATALOGUE: tuple[TableFeature, ...] = (
    # Legacy features, in the order their versions introduced them.
    TableFeature(APPEND_ONLY, _W, legacy_writer_version=2),
    TableFeature(INVARIANTS, _W, legacy_writer_version=2),
    TableFeature(CHECK_CONSTRAINTS, _W, legacy_writer_version=3),
    TableFeature(CHANGE_DATA_FEED, _W, legacy_writer_version=4),
    TableFeature(GENERATED_COLUMNS, _W, legacy_writer_version=4),
    TableFeature(COLUMN_MAPPING, _RW, legacy_reader_version=2, legacy_writer_version=5),
    TableFeature(IDENTITY_COLUMNS, _W, legacy_writer_version=6),
    # Table-features-only writer features.
    TableFeature(ALLOW_COLUMN_DEFAULTS, _W),
    TableFeature(DOMAIN_METADATA, _W),
    TableFeature(ROW_TRACKING, _W, requires=(DOMAIN_METADATA,)),
    TableFeature(ICEBERG_COMPAT_V1, _W, requires=(COLUMN_MAPPING,)),
    TableFeature(ICEBERG_COMPAT_V2, _W, requires=(COLUMN_MAPPING,)),
    TableFeature(ICEBERG_COMPAT_V3, _W, requires=(COLUMN_MAPPING, ROW_TRACKING)),
    TableFeature(CLUSTERING, _W, requires=(DOMAIN_METADATA,)),
    TableFeature(IN_COMMIT_TIMESTAMP, _W, aliases=(IN_COMMIT_TIMESTAMPS_SPEC_TYPO,)),
    TableFeature(CHECKPOINT_PROTECTION, _W),
    TableFeature(COLLATIONS, _W, requires=(DOMAIN_METADATA,)),
    TableFeature(COLLATIONS_PREVIEW, _W, requires=(DOMAIN_METADATA,)),
    TableFeature(
        COORDINATED_COMMITS_PREVIEW, _W, requires=(IN_COMMIT_TIMESTAMP, VACUUM_PROTOCOL_CHECK)
    ),
    TableFeature(MATERIALIZE_PARTITION_COLUMNS, _W),
    # Table-features-only reader-writer features.
    TableFeature(DELETION_VECTORS, _RW),
    TableFeature(TIMESTAMP_NTZ, _RW),
    TableFeature(V2_CHECKPOINT, _RW),
    TableFeature(VACUUM_PROTOCOL_CHECK, _RW),
    TableFeature(TYPE_WIDENING, _RW),
    TableFeature(TYPE_WIDENING_PREVIEW, _RW),
    TableFeature(VARIANT_TYPE, _RW),
    TableFeature(VARIANT_TYPE_PREVIEW, _RW),
    TableFeature(VARIANT_SHREDDING, _RW),
    TableFeature(VARIANT_SHREDDING_PREVIEW, _RW),
    TableFeature(CATALOG_MANAGED, _RW, requires=(IN_COMMIT_TIMESTAMP,)),
    TableFeature(CATALOG_OWNED_PREVIEW, _RW, requires=(IN_COMMIT_TIMESTAMP,)),
)

_BY_NAME: dict[str, TableFeature] = {name: f for f in CATALOGUE for name in (f.name, *f.aliases)}

# Reader features raydelta can read. raydelta reads the log, never row data.
READER_FEATURES_IMPLEMENTED: frozenset[str] = frozenset(
    {
        # Partition values and stats are keyed by physical names: resolved
        # through schema.physical_name; the schema keeps ids/physical names.
        COLUMN_MAPPING,
        # A file's identity is (path, DV unique id) in reconciliation; the DV
        # descriptor is parsed and kept. Applying DVs to rows is the data reader's job.
        DELETION_VECTORS,
        # A schema type plus a partition-value format; both parsed here.
        TIMESTAMP_NTZ,
        # UUID-named checkpoints, checkpointMetadata and sidecars are read by
        # the log segment / checkpoint readers.
        V2_CHECKPOINT,
        # Readers need only acknowledge it (spec).
        VACUUM_PROTOCOL_CHECK,
        # Widened types only change how old data files decode; in the log the
        # schema carries delta.typeChanges and stats/partition values are parsed
        # tolerantly against the current (wider) type.
        TYPE_WIDENING,
        TYPE_WIDENING_PREVIEW,
        # A schema type with no stats and no partition values; the log is unchanged.
        VARIANT_TYPE,
        VARIANT_TYPE_PREVIEW,
        # Shredding changes only how data files store a variant (a struct of
        # metadata, value and typed_value) and lets variant min/max stats be
        # z85 strings, which are kept as data and never used for skipping
        # (statistics.has_min_max). The Arrow reader returns the struct as
        # stored (storage.data_files); reassembling variants is the engine's job.
        VARIANT_SHREDDING,
        VARIANT_SHREDDING_PREVIEW,
        # raydelta's TableActor is the table's catalog: ratified commits come
        # from it, so the read rules of CATALOG_MANAGED.md hold by construction.
        CATALOG_MANAGED,
    }
)
# Known but refused for reading: catalogOwned-preview, the pre-spec variant
# of catalogManaged whose commit protocol raydelta does not follow.

# Writer features raydelta can commit under. raydelta validates and writes
# log actions; the data files (and rules on their content) come from the
# engine that wrote them.
WRITER_FEATURES_IMPLEMENTED: frozenset[str] = frozenset(
    {
        # Commits refuse data-changing removes when delta.appendOnly=true.
        APPEND_ONLY,
        # Data content rules (invariants, CHECK, generated/default/identity
        # values): enforced by the data writer that produced the files.
        INVARIANTS,
        CHECK_CONSTRAINTS,
        GENERATED_COLUMNS,
        ALLOW_COLUMN_DEFAULTS,
        IDENTITY_COLUMNS,
        # cdc actions are carried and reconciled; the data writer writes them.
        CHANGE_DATA_FEED,
        # Physical names/ids kept in the schema; maxColumnId via max_column_id.
        COLUMN_MAPPING,
        # DV descriptors carried; numRecords checked by the committer.
        DELETION_VECTORS,
        # Row ids / commit versions are assigned at commit (rebase-aware).
        ROW_TRACKING,
        DOMAIN_METADATA,
        # V2 (UUID-named) checkpoints and sidecars are written when the
        # policy says v2; classic checkpoints otherwise.
        V2_CHECKPOINT,
        # commitInfo first, with a monotonic inCommitTimestamp, at every commit.
        IN_COMMIT_TIMESTAMP,
        IN_COMMIT_TIMESTAMPS_SPEC_TYPO,
        TIMESTAMP_NTZ,
        # Iceberg compat rules concern data files and schema; the engine's job,
        # numRecords-present is checkable at commit.
        ICEBERG_COMPAT_V1,
        ICEBERG_COMPAT_V2,
        # delta.clustering domain metadata and clusteringProvider are carried.
        CLUSTERING,
        # raydelta's VACUUM always runs the writer protocol check.
        VACUUM_PROTOCOL_CHECK,
        TYPE_WIDENING,
        TYPE_WIDENING_PREVIEW,
        VARIANT_TYPE,
        VARIANT_TYPE_PREVIEW,
        # Shredded or not is how the engine writing the data files stores a
        # variant (it honours delta.enableVariantShredding); the log is the
        # same. raydelta's own data writer refuses variant tables (write_rules).
        VARIANT_SHREDDING,
        VARIANT_SHREDDING_PREVIEW,
        # The TableActor is the managing catalog (ratify, store, publish).
        CATALOG_MANAGED,
        # Metadata cleanup truncates history in one step up to
        # delta.requireCheckpointProtectionBeforeVersion (the cleanup's duty).
        CHECKPOINT_PROTECTION,
    }
)


def feature(name: str) -> TableFeature | None:
    """The catalogue entry of ``name`` (any spelling), or None if unknown."""
    return _BY_NAME.get(name)


def same_feature_names(name: str) -> frozenset[str]:
    """Every spelling of the feature called ``name`` (just ``name`` if unknown)."""
    known = _BY_NAME.get(name)
    if known is None:
        return frozenset({name})
    return frozenset({known.name, *known.aliases})


def _with_aliases(names: Iterable[str]) -> frozenset[str]:
    out: set[str] = set()
    for name in names:
        out |= same_feature_names(name)
    return frozenset(out)


def uses_table_features(protocol: Protocol) -> bool:
    """Whether the protocol lists writer features (writer version 7)."""
    return protocol.min_writer_version >= TABLE_FEATURES_WRITER_VERSION


def _legacy_features(reader_version: int, writer_version: int) -> list[str]:
    return [
        f.name
        for f in CATALOGUE
        if f.legacy_writer_version is not None
        and f.legacy_writer_version <= writer_version
        and (f.legacy_reader_version is None or f.legacy_reader_version <= reader_version)
    ]


def supported_features(protocol: Protocol) -> frozenset[str]:
    """Every feature the table supports (writers must respect all of them)."""
    if uses_table_features(protocol):
        listed = [*(protocol.reader_features or []), *(protocol.writer_features or [])]
        return _with_aliases(listed)
    return _with_aliases(_legacy_features(protocol.min_reader_version, protocol.min_writer_version))


def features_required_to_read(protocol: Protocol) -> frozenset[str]:
    """The features a reader must implement.

    The ``readerFeatures`` list, or what the legacy reader version implies,
    plus any *known* reader-writer feature listed only in ``writerFeatures``
    (a malformed protocol; honouring it is the safe reading).
    """
    if protocol.min_reader_version >= TABLE_FEATURES_READER_VERSION:
        names: set[str] = set(protocol.reader_features or [])
    else:
        names = {
            f.name
            for f in CATALOGUE
            if f.is_reader_writer
            and f.legacy_reader_version is not None
            and f.legacy_reader_version <= protocol.min_reader_version
        }
    for name in protocol.writer_features or []:
        known = feature(name)
        if known is not None and known.is_reader_writer:
            names.add(name)
    return _with_aliases(names)


def is_feature_supported(protocol: Protocol, name: str) -> bool:
    return name in supported_features(protocol)


# --- validation and gates -------------------------------------------------------------


def validate_protocol(protocol: Protocol) -> None:
    """Check the spec's shape rules; :class:`InvalidProtocolError` when broken.

    - versions are at least 1;
    - reader version 3 (or more) needs writer version 7 (or more);
    - ``readerFeatures`` exists iff the reader version is 3, ``writerFeatures``
      iff the writer version is 7 (an *empty* list on a lower version is
      tolerated: it carries nothing; versions above the maximum are not
      judged, the gates refuse them by version);
    - every reader feature is also a writer feature.
    """
    r, w = protocol.min_reader_version, protocol.min_writer_version
    rf, wf = protocol.reader_features, protocol.writer_features
    if r < MIN_VERSION or w < MIN_VERSION:
        raise InvalidProtocolError(
            f"protocol versions must be at least 1, got reader {r} and writer {w}"
        )
    if r >= TABLE_FEATURES_READER_VERSION and w < TABLE_FEATURES_WRITER_VERSION:
        raise InvalidProtocolError(
            f"reader version {r} requires writer version 7, got writer version {w}"
        )
    if r == TABLE_FEATURES_READER_VERSION and rf is None:
        raise InvalidProtocolError("reader version 3 requires the readerFeatures list")
    if r < TABLE_FEATURES_READER_VERSION and rf:
        raise InvalidProtocolError(
            f"readerFeatures {rf} are only allowed with reader version 3, got {r}"
        )
    if w == TABLE_FEATURES_WRITER_VERSION and wf is None:
        raise InvalidProtocolError("writer version 7 requires the writerFeatures list")
    if w < TABLE_FEATURES_WRITER_VERSION and wf:
        raise InvalidProtocolError(
            f"writerFeatures {wf} are only allowed with writer version 7, got {w}"
        )
    if rf:
        missing = sorted(set(rf) - set(wf or []))
        if missing:
            raise InvalidProtocolError(
                f"reader features {missing} must also be listed in writerFeatures"
            )


def _check_versions(protocol: Protocol, *, writing: bool) -> None:
    r, w = protocol.min_reader_version, protocol.min_writer_version
    if r > MAX_READER_VERSION:
        raise InvalidProtocolVersionException(
            f"the table requires reader version {r}; raydelta supports reader versions "
            f"{MIN_VERSION} to {MAX_READER_VERSION}"
        )
    if writing and w > MAX_WRITER_VERSION:
        raise InvalidProtocolVersionException(
            f"the table requires writer version {w}; raydelta supports writer versions "
            f"{MIN_VERSION} to {MAX_WRITER_VERSION}"
        )


def ensure_readable(protocol: Protocol) -> None:
    """Refuse a table raydelta cannot read, naming the version or the features."""
    _check_versions(protocol, writing=False)
    validate_protocol(protocol)
    missing = sorted(
        name
        for name in features_required_to_read(protocol)
        if not _implemented(name, READER_FEATURES_IMPLEMENTED, reading=True)
    )
    if missing:
        raise UnsupportedTableFeatureException(
            f"the table requires reader features raydelta does not support: {missing}"
        )


_last_writable: list[Protocol] = []
"""The last protocol :func:`ensure_writable` accepted (actions are frozen): a
table's commits all carry the same protocol object, so its check runs once,
not once per commit (~0.05 ms of a 1-file commit's ~0.5 ms of CPU)."""


def ensure_writable(protocol: Protocol) -> None:
    """Refuse a table raydelta cannot commit to, naming the version or the features."""
    if _last_writable and _last_writable[0] is protocol:
        return
    _check_writable(protocol)
    _last_writable[:] = [protocol]


def _check_writable(protocol: Protocol) -> None:
    _check_versions(protocol, writing=True)
    ensure_readable(protocol)
    needed = supported_features(protocol) | features_required_to_read(protocol)
    missing = sorted(
        name
        for name in needed
        if not _implemented(name, WRITER_FEATURES_IMPLEMENTED, reading=False)
    )
    if missing:
        raise UnsupportedTableFeatureException(
            f"the table requires writer features raydelta does not support: {missing}"
        )


def _implemented(name: str, implemented: frozenset[str], *, reading: bool) -> bool:
    known = feature(name)
    if known is None:
        return False
    if reading and not known.is_reader_writer:
        # A writer-only feature never changes how the table reads.
        return True
    return name in implemented


# --- upgrade ----------------------------------------------------------------------------


def _requested(reader_features: Iterable[str], writer_features: Iterable[str]) -> list[str]:
    """Every feature asked for (readers first), each a known one; a reader
    feature must be a reader-writer feature."""
    requested_reader = list(reader_features)
    requested = [*requested_reader, *writer_features]
    for name in requested:
        if feature(name) is None:
            raise UnsupportedTableFeatureException(f"unknown table feature {name!r}")
    for name in requested_reader:
        known = feature(name)
        if known is not None and not known.is_reader_writer:
            raise InvalidProtocolError(f"{name!r} is a writer-only feature, not a reader feature")
    return requested


def _features_to_add(current: Protocol, requested: list[str]) -> list[str]:
    """The requested features ``current`` lacks and the features they
    require, in the order they are met (none twice under another name)."""
    existing = supported_features(current)
    new: list[str] = []
    queue = list(requested)
    while queue:
        name = queue.pop(0)
        if name in existing or any(n in new for n in same_feature_names(name)):
            continue
        known = feature(name)
        # A feature added is written by its catalogue name, whichever
        # spelling was asked for (``inCommitTimestamps`` is written
        # ``inCommitTimestamp``); names already listed are kept as they are.
        new.append(known.name if known is not None else name)
        if known is not None:
            queue.extend(known.requires)
    return new


def upgrade_protocol(
    current: Protocol,
    *,
    reader_features: Iterable[str] = (),
    writer_features: Iterable[str] = (),
) -> Protocol:
    """The smallest protocol above ``current`` that supports the requested features.

    Required features come along (``rowTracking`` brings ``domainMetadata``...);
    a reader-writer feature asked for as a writer feature is also a reader
    feature. Existing support is never dropped: when the result must use
    feature lists, everything the legacy versions implied is listed. The
    legacy form is kept while it can express everything (e.g. asking for
    ``changeDataFeed`` on (1, 2) gives (1, 4)). A feature added is listed by
    its catalogue name (:data:`IN_COMMIT_TIMESTAMP`, never the spec's typo);
    the names ``current`` lists are kept as they are. Returns ``current``
    itself when nothing is missing.
    """
    new = _features_to_add(current, _requested(reader_features, writer_features))
    if not new:
        return current

    r, w = current.min_reader_version, current.min_writer_version
    new_features = [f for f in (feature(n) for n in new) if f is not None]
    stays_legacy = (
        not uses_table_features(current)
        and r < TABLE_FEATURES_READER_VERSION
        and all(f.is_legacy for f in new_features)
    )
    if stays_legacy:
        for f in new_features:
            w = max(w, f.legacy_writer_version or w)
            if f.is_reader_writer:
                r = max(r, f.legacy_reader_version or r)
        return current.model_copy(update={"min_reader_version": r, "min_writer_version": w})

    # Table-features form: list everything.
    if uses_table_features(current):
        writer_list = list(current.writer_features or [])
    else:
        writer_list = _legacy_features(r, w)
    writer_list += [n for n in new if n not in writer_list]

    all_rw = [f for f in (feature(n) for n in writer_list) if f is not None and f.is_reader_writer]
    needs_reader_list = r >= TABLE_FEATURES_READER_VERSION or any(
        f.legacy_reader_version is None for f in all_rw
    )
    update: dict[str, object] = {
        "min_writer_version": TABLE_FEATURES_WRITER_VERSION,
        "writer_features": writer_list,
    }
    if needs_reader_list:
        reader_list = list(current.reader_features or [])
        listed = _with_aliases(reader_list)
        for name in writer_list:
            known = feature(name)
            if known is not None and known.is_reader_writer and name not in listed:
                reader_list.append(name)
        update["min_reader_version"] = TABLE_FEATURES_READER_VERSION
        update["reader_features"] = reader_list
    else:
        update["min_reader_version"] = max([r, *(f.legacy_reader_version or r for f in all_rw)])
    upgraded = current.model_copy(update=update)
    validate_protocol(upgraded)
    return upgraded
