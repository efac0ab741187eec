"""The one error root of raydelta and its typed subclasses.

Invariants:
- Every error raydelta raises on purpose derives from :class:`RaydeltaError`.
- Class names follow delta-spark where delta-spark has one
  (``ConcurrentAppendException`` and friends), so a Delta user recognises them.
- Errors carry structured fields (versions, paths, feature names) as well as a
  message, so callers can react without parsing text.
- Every class is picklable (Ray ships errors between processes), so each
  passes all its constructor arguments to ``Exception.__init__``.
"""

from __future__ import annotations


class RaydeltaError(Exception):
    """Root of every error raydelta raises on purpose."""


# --- table and log shape ---------------------------------------------------


class TableNotFoundError(RaydeltaError):
    """The location holds no Delta table (no ``_delta_log`` or no commits)."""


class TableAlreadyExistsError(RaydeltaError):
    """A table was to be created where one already exists."""


class InvalidTableError(RaydeltaError):
    """The log is not a valid Delta table (missing protocol or metadata...)."""


class MissingProtocolError(InvalidTableError):
    """Replay found no ``protocol`` action."""


class MissingMetadataError(InvalidTableError):
    """Replay found no ``metaData`` action."""


class VersionsNotContiguousError(InvalidTableError):
    """The commit versions of a log segment have a gap.

    ``versions`` is the list of versions found; ``missing`` the first gap as
    ``(after, before)``.
    """

    def __init__(self, message: str, versions: list[int] | None = None) -> None:
        super().__init__(message, versions)
        self.versions = versions or []

    def __str__(self) -> str:
        return str(self.args[0])


class VersionNotFoundError(RaydeltaError):
    """The requested version (or timestamp) is not reachable in the log."""


class CorruptLogError(RaydeltaError):
    """A log file could not be parsed (bad JSON, bad parquet, bad checksum)."""


class InvalidCheckpointError(CorruptLogError):
    """A checkpoint breaks the spec's rules for its naming scheme: a V2
    checkpoint (UUID-named, or classic-named with ``checkpointMetadata`` or
    sidecars) without exactly one ``checkpointMetadata`` of its own version,
    or a multi-part checkpoint carrying V2 actions. Readers do not use it:
    they rebuild the version from older files, and raise this only when
    nothing else can (:func:`raydelta.protocol.log_segment.check_checkpoint_spec`)."""


class ChecksumMismatchError(CorruptLogError):
    """Stored and computed checksums differ (``_last_checkpoint``, DV CRC-32)."""


class DeletionVectorError(RaydeltaError):
    """A deletion vector descriptor or payload is invalid."""


# --- protocol support --------------------------------------------------------


class UnsupportedProtocolError(RaydeltaError):
    """The table needs a protocol version or feature raydelta does not implement.

    Named after delta-spark's ``InvalidProtocolVersionException`` family; the
    message names the version or the features.
    """


class InvalidProtocolVersionException(UnsupportedProtocolError):
    """Reader or writer version outside what raydelta supports."""


class UnsupportedTableFeatureException(UnsupportedProtocolError):
    """The table lists reader/writer features raydelta does not implement."""


class InvalidProtocolError(InvalidTableError):
    """The protocol action itself breaks the spec's rules (e.g. reader 3, writer 5)."""


# --- bad requests from writers ----------------------------------------------


class InvalidCommitError(RaydeltaError):
    """A commit request breaks a writer rule; nothing was written."""


class AppendOnlyViolationError(InvalidCommitError):
    """A commit removes data from a table with ``delta.appendOnly=true``."""


class SchemaError(RaydeltaError):
    """A schema string or type could not be parsed or is invalid."""


class InvalidArgumentError(RaydeltaError, ValueError):
    """A public function was called with an argument it cannot take (a negative
    retention, an unknown option, a wrong type); the message says what was expected."""


class InvalidPredicateError(RaydeltaError):
    """A partition predicate could not be parsed or is malformed."""


class DuplicateActionError(InvalidCommitError):
    """A commit holds two actions that reconcile with each other (two
    ``metaData``, two ``protocol``, two file actions of one type for a path,
    two ``txn`` of one app id, two ``domainMetadata`` of one domain)."""


class InvalidFileActionError(InvalidCommitError):
    """An ``add``/``remove``/``cdc`` action breaks a rule of the table
    (partition values, ``numRecords`` with a deletion vector, row tracking,
    a negative or out-of-range size, a malformed deletion vector).

    ``field`` names the offending field as ``<action>.<field>`` (``add.size``,
    ``remove.deletionVector.cardinality``...) and ``path`` the action's path,
    when known; the message always names both and the reason (only the
    message crosses the actor boundary)."""

    def __init__(self, message: str, field: str | None = None, path: str | None = None) -> None:
        super().__init__(message, field, path)
        self.field = field
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0])


class UnsafePathError(InvalidFileActionError):
    """A file path (``add.path``, ``remove.path``, ``cdc.path``, a ``p``-type
    deletion vector's path, a ``u``-type one's random prefix) is empty, is an
    absolute local path, escapes the table root with ``..`` or holds an ASCII
    control character such as NUL (after decoding percent-encoding once), or
    is an absolute URI outside the table root on a table that does not allow
    external files (``raydelta.allowExternalFiles``)."""


class InvalidStatisticsError(InvalidFileActionError):
    """A file action's ``stats`` is not a JSON object, or a value in it does
    not fit its column's type (``field`` is e.g. ``add.stats.minValues.id``)."""


class InvalidCommitInfoError(InvalidCommitError):
    """The ``commitInfo`` action is missing, misplaced or lacks a required
    field (``inCommitTimestamp``, ``txnId``)."""


class IllegalActionError(InvalidCommitError):
    """A commit holds an action no commit may hold (checkpoint-only actions,
    unknown actions, system domains raydelta does not manage)."""


class InvalidMetadataChangeError(InvalidCommitError):
    """A ``metaData`` action is invalid (schema, partition columns)."""


class ProtocolDowngradeError(InvalidCommitError):
    """A ``protocol`` action lowers a version or removes a table feature."""


# --- concurrency (delta-spark names) -----------------------------------------


class DeltaConcurrentModificationException(RaydeltaError):
    """A commit conflicts with a commit that won since its read version.

    ``winning_version`` is the version of the winning commit that conflicted.
    """

    def __init__(self, message: str, winning_version: int | None = None) -> None:
        super().__init__(message, winning_version)
        self.winning_version = winning_version

    def __str__(self) -> str:
        return str(self.args[0])


class ProtocolChangedException(DeltaConcurrentModificationException):
    """A winning commit changed the protocol."""


class MetadataChangedException(DeltaConcurrentModificationException):
    """A winning commit changed the metadata in a way that cannot be merged."""


class ConcurrentTransactionException(DeltaConcurrentModificationException):
    """A winning commit set the version of an app id this transaction read,
    or wrote the same metadata domain."""


class ConcurrentAppendException(DeltaConcurrentModificationException):
    """A winning commit added files matching what this transaction read."""


class ConcurrentDeleteReadException(DeltaConcurrentModificationException):
    """A winning commit removed a file this transaction read."""


class ConcurrentDeleteDeleteException(DeltaConcurrentModificationException):
    """A winning commit removed a file this transaction also removes."""


class CommitFailedError(RaydeltaError):
    """The commit could not be written for a non-logical reason (I/O)."""


class UnsupportedStorageError(RaydeltaError):
    """The table's storage cannot create a file atomically (put-if-absent), so
    raydelta refuses to write it; the message says how to opt into
    single-writer mode (``storage_options={"single_writer": "true"}``) when
    every commit goes through one TableActor and no other engine writes."""


class FileAlreadyExistsError(RaydeltaError):
    """Put-if-absent found the target already present."""


class TableMovedError(RaydeltaError):
    """The table host a call reached does not own the table (it was placed on
    another host, or its claim was superseded): nothing was served. Table
    handles catch it and send the call to the owner; it reaches a caller only
    when the table keeps moving for longer than the handle retries."""


# --- catalog-managed tables (CATALOG_MANAGED.md) -------------------------------


class CatalogManagedTableError(RaydeltaError):
    """A ``catalogManaged`` table was read, written or maintained without its
    managing catalog (by path only): the log on storage may lack ratified,
    unpublished commits, so the result would be stale or would bypass the
    catalog. ``table_uri`` names the table."""

    def __init__(self, message: str, table_uri: str | None = None) -> None:
        super().__init__(message, table_uri)
        self.table_uri = table_uri

    def __str__(self) -> str:
        return str(self.args[0])


class CatalogManagedRequirementError(InvalidCommitError):
    """A commit to a catalog-managed table breaks the feature's writer rules:
    ``catalogManaged`` missing from the reader or writer features, or
    in-commit timestamps not supported and active."""


class RatificationError(RaydeltaError):
    """The durable store refused to ratify ``version`` of ``table_id``;
    ``latest_version`` is the store's latest ratified version (None when it
    has none)."""

    def __init__(
        self,
        message: str,
        table_id: str | None = None,
        version: int | None = None,
        latest_version: int | None = None,
    ) -> None:
        super().__init__(message, table_id, version, latest_version)
        self.table_id = table_id
        self.version = version
        self.latest_version = latest_version

    def __str__(self) -> str:
        return str(self.args[0])


class VersionAlreadyRatifiedError(RatificationError):
    """Another transaction already holds ``version`` (at most once per version)."""


class RatificationOutOfOrderError(RatificationError):
    """``version`` is not the next one (``latest_version + 1``): ratified only after v-1."""


class PublishBacklogError(RaydeltaError):
    """Retryable: the catalog has ``backlog`` ratified commits of the table not
    yet published, the bound its ``setting`` (``max_unpublished``) allows;
    nothing was committed. Retry the same commit (same ``txnId``) shortly."""

    retryable = True

    def __init__(self, message: str, setting: str | None = None, backlog: int | None = None):
        super().__init__(message, setting, backlog)
        self.setting = setting
        self.backlog = backlog

    def __str__(self) -> str:
        return str(self.args[0])


class CatalogStoreError(RaydeltaError):
    """The catalog's durable store failed: it could not be reached, refused
    the credentials, or holds a schema this raydelta does not know.
    ``store`` names the store without its secrets (a PostgreSQL DSN without
    its password); the message never holds one either. A write in flight when
    it failed may or may not have taken effect: retry it with the same
    ``txnId`` (exactly once)."""

    def __init__(self, message: str, store: str | None = None) -> None:
        super().__init__(message, store)
        self.store = store

    def __str__(self) -> str:
        return str(self.args[0])


# --- authorization (catalog-managed tables) ---------------------------------------


class UnauthenticatedError(RaydeltaError):
    """The caller presented no catalog token, or one the catalog did not issue."""


class AuthorizationDisabledError(RaydeltaError):
    """A security setting asked of a catalog that runs without authorization
    (principals, grants, revokes): refused, since nothing would enforce it.
    Turn authorization on first (``Catalog.enable_authorization()``, or
    ``raydelta catalog serve --authorization``)."""


class PrincipalAlreadyExistsError(RaydeltaError):
    """A principal of that name exists already (rotate its token instead)."""


class CatalogRequestError(RaydeltaError):
    """A catalog server refused a request (``raydelta catalog``): Unity Catalog's
    ``error_code`` and the HTTP ``status`` are kept."""

    def __init__(self, message: str, error_code: str = "", status: int = 0) -> None:
        super().__init__(message, error_code, status)
        self.error_code = error_code
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


class PermissionDeniedError(RaydeltaError):
    """The principal lacks privileges on the table; ``missing`` names them
    (``"write"``, ``"alter"``...). Nothing was changed."""

    def __init__(
        self,
        message: str,
        principal: str | None = None,
        table: str | None = None,
        missing: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, principal, table, missing)
        self.principal = principal
        self.table = table
        self.missing = tuple(missing)

    def __str__(self) -> str:
        return str(self.args[0])


# --- storage locations and vended credentials (catalogs) -------------------------


class LocationOverlapError(InvalidArgumentError):
    """A location equals, contains or lies inside one the catalog holds already
    (a table's, a staging table's, an external location's, or its managed
    root), or is spelled so that two stores could read it differently;
    nothing was created. ``location`` is the refused one, ``other`` what it
    overlaps (a table's or external location's name) and ``other_location``
    where that is."""

    def __init__(
        self,
        message: str,
        location: str | None = None,
        other: str | None = None,
        other_location: str | None = None,
    ) -> None:
        super().__init__(message, location, other, other_location)
        self.location = location
        self.other = other
        self.other_location = other_location

    def __str__(self) -> str:
        return str(self.args[0])


class OverlappingTablesError(RaydeltaError):
    """No credentials for a table the catalog found overlapping another one's
    location when it started (registered under older rules): vending for
    either would reach the other's data. ``tables`` names them; an admin
    resolves it by dropping (or re-registering elsewhere) one of them."""

    def __init__(self, message: str, tables: tuple[str, ...] = ()) -> None:
        super().__init__(message, tables)
        self.tables = tuple(tables)

    def __str__(self) -> str:
        return str(self.args[0])


class CredentialsUnavailableError(RaydeltaError):
    """The catalog cannot vend credentials scoped to the location asked for
    (no role to assume is configured, or the token service refused); it
    never hands out its own keys instead. The message says how to configure it."""


# --- installation --------------------------------------------------------------


class MissingDependencyError(RaydeltaError, ImportError):
    """A feature needs an optional dependency that is not installed:
    ``package`` is what is missing, ``extra`` raydelta's extra that installs
    it (``pip install 'raydelta[<extra>]'``, in the message too)."""

    def __init__(self, message: str, package: str | None = None, extra: str | None = None):
        super().__init__(message, package, extra)
        self.package = package
        self.extra = extra

    def __str__(self) -> str:
        return str(self.args[0])


# --- maintenance ---------------------------------------------------------------


class RetentionTooShortError(RaydeltaError):
    """VACUUM asked for a retention below the table's, without ``force``."""


class CheckpointWriteError(RaydeltaError):
    """A checkpoint could not be written consistently (a sidecar it would
    reference is missing or has another size, or the table does not allow
    that kind of checkpoint); nothing that names it was published."""


# --- data written by raydelta's own data writer --------------------------------


class SchemaMismatchError(RaydeltaError):
    """The data to write does not fit the table's schema (delta-rs's name):
    a missing, extra or mistyped column. ``column`` is the column path,
    ``expected`` what the table wants, ``found`` what the data has."""

    def __init__(
        self,
        message: str,
        column: str | None = None,
        expected: str | None = None,
        found: str | None = None,
    ) -> None:
        super().__init__(message, column, expected, found)
        self.column = column
        self.expected = expected
        self.found = found

    def __str__(self) -> str:
        return str(self.args[0])


class DeltaInvariantViolationException(RaydeltaError):
    """A row breaks a data rule of the table (delta-spark's name): a NOT NULL
    column, a ``delta.invariants`` expression, a CHECK constraint or a
    generated column's expression. ``constraint`` names the rule (the CHECK
    constraint's name, ``<column> NOT NULL``, ``EXPRESSION(<sql>)`` for an
    invariant, ``Generated Column`` for a generation expression); ``column``
    the column involved when there is one; ``expression`` the SQL text;
    ``values`` the offending row's values of the referenced columns."""

    def __init__(
        self,
        message: str,
        constraint: str | None = None,
        column: str | None = None,
        expression: str | None = None,
        values: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message, constraint, column, expression, values)
        self.constraint = constraint
        self.column = column
        self.expression = expression
        self.values = values or {}

    def __str__(self) -> str:
        return str(self.args[0])


class InvalidExpressionError(RaydeltaError):
    """A SQL expression could not be parsed, names an unknown column, mixes
    types it cannot compare, or failed to evaluate (overflow, bad cast)."""

    def __init__(self, message: str, expression: str | None = None) -> None:
        super().__init__(message, expression)
        self.expression = expression

    def __str__(self) -> str:
        return str(self.args[0])


class UnsupportedExpressionError(InvalidExpressionError):
    """A SQL expression uses a construct raydelta does not evaluate; a table
    whose data rules use one is refused for writing."""


class SparkRuntimeException(InvalidExpressionError):
    """A value failed at run time under ANSI SQL mode (``ansi=True``, Spark 4's
    default), where Spark raises too; ``error_class`` is Spark's error class
    name, which the message starts with (``[DIVIDE_BY_ZERO] ...``). Under
    legacy mode the same value is NULL (or wraps, as Spark's does)."""

    def __init__(
        self, message: str, expression: str | None = None, error_class: str | None = None
    ) -> None:
        super().__init__(message, expression)
        self.args = (message, expression, error_class)
        self.error_class = error_class


class SparkArithmeticException(SparkRuntimeException):
    """ANSI: ``DIVIDE_BY_ZERO``, ``ARITHMETIC_OVERFLOW``, ``CAST_OVERFLOW`` or
    ``NUMERIC_VALUE_OUT_OF_RANGE`` (a decimal that does not fit its type)."""


class SparkNumberFormatException(SparkRuntimeException):
    """ANSI: ``CAST_INVALID_INPUT``, a string that is not a number of the
    target type (Spark raises the same for booleans and dates, with other
    exception names)."""


class NonDeterministicExpressionError(InvalidExpressionError):
    """A DML condition or new value is non-deterministic (``rand()``,
    ``uuid()``...): delta-spark refuses these in DELETE/UPDATE/MERGE
    conditions, since a retry or a re-read would select other rows."""


class IdentityColumnError(RaydeltaError):
    """An identity column's rules were broken: an explicit value for a column
    without ``delta.identity.allowExplicitInsert``, a step of 0, or an
    overflow of the generated values. ``column`` names the column."""

    def __init__(self, message: str, column: str | None = None) -> None:
        super().__init__(message, column)
        self.column = column

    def __str__(self) -> str:
        return str(self.args[0])


class DeltaUnsupportedOperationException(RaydeltaError):
    """An operation delta-spark refuses for what the data is, not for how it
    was asked: a MERGE whose source has several rows matching one target row
    (``error_class`` ``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE``,
    in the message too, as delta-spark writes it)."""

    def __init__(self, message: str, error_class: str) -> None:
        super().__init__(f"[{error_class}] {message}", error_class)
        self.error_class = error_class

    def __str__(self) -> str:
        return str(self.args[0])
