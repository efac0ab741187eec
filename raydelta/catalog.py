"""The public catalog API: :class:`Catalog`, and :class:`CatalogTable` it opens.

>>> import pyarrow as pa, raydelta                                  # doctest: +SKIP
>>> catalog = raydelta.Catalog(root="/tmp/warehouse")
>>> events = catalog.create_table("events", pa.schema([("id", pa.int64())]))
>>> events.append(pa.table({"id": [1, 2]}))                          # doctest: +SKIP
1
>>> catalog.get_ratified_commits("events").latest_version           # doctest: +SKIP
1

Invariants:
- A :class:`Catalog` is a handle on one named, detached ``CatalogActor``
  (``catalog:<name>`` in raydelta's namespace): every process attached to the
  cluster that opens ``Catalog(name=...)`` reaches the same one. The actor
  is started with the store and settings of the first handle; later
  handles attach to it as it is.
- Tables created or upgraded through a catalog are ``catalogManaged``: their
  commits go through the catalog only (inline or staged), and our own
  ``TableActor`` refuses to commit to them.
- With ``authorization=True`` every call carries a token: the handle that
  started the catalog holds the bootstrap token (it owns everything);
  :meth:`Catalog.create_principal` issues others, :meth:`Catalog.grant`
  gives them privileges per table (or per catalog, schema or external
  location). Creating a table needs ``CREATE_TABLE`` (Unity Catalog's
  ``USE_CATALOG``/``USE_SCHEMA``/``CREATE_TABLE`` for a ``c.s.t`` name) and,
  outside the catalog's root, ``CREATE_EXTERNAL_TABLE`` on an external
  location holding it. Off (the default), every caller owns everything, and
  principals and grants are refused
  (:class:`~raydelta.protocol.errors.AuthorizationDisabledError`): nothing
  would enforce them. :meth:`Catalog.enable_authorization` turns it on for
  a catalog that ran without it; once on, it stays on (recorded under the
  root: a later ``authorization=False`` does not turn it off).
- No two tables' locations overlap (equal, inside, around), whoever asks.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raydelta.actors.catalog.actor import CatalogActor, CatalogSettings, catalog_actor_name
from raydelta.actors.catalog.client import CatalogTableClient, CommitMode
from raydelta.actors.catalog.locations import CatalogLocations
from raydelta.actors.catalog.unity.permissions import PermissionService
from raydelta.actors.catalog.unity.service import call_unity
from raydelta.actors.cluster import get_unwrapped, start_actor
from raydelta.actors.table.client import new_table_actions
from raydelta.arguments import check_bool as _check_bool
from raydelta.arguments import check_choice as _check_choice
from raydelta.dml.optimize import auto_compact
from raydelta.history import History
from raydelta.protocol.catalog_managed import RatifiedCommits
from raydelta.protocol.durations import duration_ms
from raydelta.protocol.errors import CatalogManagedTableError, InvalidArgumentError
from raydelta.protocol.maintenance_policy import JobKind as MaintenanceOperation
from raydelta.protocol.maintenance_policy import MaintenanceDefaults
from raydelta.protocol.privileges import Privilege, parse_privileges
from raydelta.protocol.schema_arrow import from_arrow
from raydelta.protocol.securables import SecurableType, parse_securable_type
from raydelta.protocol.table_properties import ENABLE_IN_COMMIT_TIMESTAMPS
from raydelta.storage.catalog.ratified_store import (
    RatifiedCommitStore,
    SqliteRatifiedStore,
    TableEntry,
)
from raydelta.storage.catalog.stores import open_store
from raydelta.storage.history import load_history
from raydelta.storage.table_location import normalize_uri
from raydelta.table import CheckpointKind, Table

if TYPE_CHECKING:
    from raydelta.actors.checkpoint.results import CheckpointSummary
    from raydelta.storage.cleanup.metadata import MetadataCleanupReport
    from raydelta.storage.cleanup.vacuum import VacuumReport
    from raydelta.uc.server import UCServer

DEFAULT_ROOT = "raydelta-catalog"
"""Where the default catalog keeps its store and new tables (relative to the cwd)."""


class CatalogTable(Table):
    """A catalog-managed :class:`~raydelta.Table`: writes and reads go through
    its catalog (its :attr:`client` is a
    :class:`~raydelta.actors.catalog.client.CatalogTableClient`).

    Maintenance consults the catalog first (CATALOG_MANAGED.md, "Maintenance
    Operations"): :meth:`checkpoint` and :meth:`cleanup_metadata` ask it for
    the newest *published* version (after letting publishing catch up) and
    never touch a version past it; :meth:`vacuum` protects every file the
    latest *ratified* version references, published or not; :meth:`history`
    shows the ratified commits not yet published too. They run in the
    caller's process (checkpoint shards as Ray tasks), not in the per-table
    maintenance actors, which follow filesystem tables. The catalog also
    maintains the table itself, by its policy
    (:mod:`raydelta.protocol.maintenance_policy`); :meth:`maintain` asks it to
    run one job now, on its maintenance service.
    """

    maintenance_wait_s: float = 30.0
    """How long maintenance lets the catalog's publishing catch up with the
    latest version before it settles for the newest published one."""

    client: CatalogTableClient

    def __init__(self, client: CatalogTableClient) -> None:
        super().__init__(client)

    @property
    def table_name(self) -> str:
        """The table's name in its catalog."""
        return self.client.table_name

    @property
    def token(self) -> str | None:
        """The token this handle's calls carry (settable: another principal)."""
        return self.client.token

    @token.setter
    def token(self, token: str | None) -> None:
        self.client.token = token

    @property
    def commit_mode(self) -> CommitMode:
        """``"inline"`` or ``"staged"`` commits (see :meth:`Catalog.open_table`)."""
        return self.client.commit_mode

    def ratified_commits(
        self, *, start_version: int | None = None, end_version: int | None = None
    ) -> RatifiedCommits:
        """The commits the catalog ratified and still holds, and its latest version."""
        return self.client.ratified_commits(start_version=start_version, end_version=end_version)

    def _maintenance_version(self) -> int:
        """The newest published version (the catalog checks WRITE on the table)."""
        published, _latest = self.client._call("maintenance_version", self.maintenance_wait_s)
        if published is None:
            raise CatalogManagedTableError(
                f"no version of {self.table_name!r} is published yet: nothing to maintain",
                self.uri,
            )
        return int(published)

    def checkpoint(self, *, kind: CheckpointKind = "auto") -> CheckpointSummary:
        """Checkpoint the newest published version (see the class docstring)."""
        from raydelta.actors.checkpoint.runner import CheckpointRunner

        _check_choice("kind", kind, ("auto", "v2", "classic"))
        published = self._maintenance_version()
        runner = CheckpointRunner(self.uri, self.storage_options)
        return runner.run(published, kind=kind, max_published_version=published)

    def cleanup_metadata(
        self,
        *,
        retention: timedelta | str | None = None,
        dry_run: bool = False,
        now_ms: int | None = None,
    ) -> MetadataCleanupReport:
        """Metadata cleanup up to the newest published version only: expired
        commits, checkpoints, compactions, checksums, and the staged commits at
        or below the kept checkpoint. ``now_ms`` overrides the clock (the
        cutoff is midnight UTC of ``now - retention``)."""
        from raydelta.storage.cleanup.metadata import cleanup_metadata

        _check_bool("dry_run", dry_run)
        retention_ms = duration_ms(retention)
        published = self._maintenance_version()
        return cleanup_metadata(
            self.uri,
            retention_ms=retention_ms,
            dry_run=dry_run,
            now_ms=now_ms,
            storage_options=self.storage_options,
            max_published_version=published,
        )

    def vacuum(
        self,
        *,
        retention: timedelta | str | None = None,
        dry_run: bool = True,
        lite: bool = False,
        enforce_retention_duration: bool = True,
    ) -> VacuumReport:
        """VACUUM against the latest ratified version (files of commits not yet
        published stay); options as :meth:`raydelta.Table.vacuum`. A real run
        records ``VACUUM START`` / ``VACUUM END`` commits through the catalog, as
        delta-spark does."""
        from raydelta.actors.catalog.maintenance_jobs import vacuum_through_catalog

        for option, value in (
            ("dry_run", dry_run),
            ("lite", lite),
            ("enforce_retention_duration", enforce_retention_duration),
        ):
            _check_bool(option, value)
        retention_ms = duration_ms(retention)
        self._maintenance_version()
        return vacuum_through_catalog(
            self.client,
            retention_ms=retention_ms,
            force=not enforce_retention_duration,
            dry_run=dry_run,
            lite=lite,
        )

    def history(self, *, limit: int | None = None) -> History:
        """One row per commit, newest first, the ratified commits its catalog
        has not published yet included."""
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise InvalidArgumentError(f"limit must be a positive int, got {limit!r}")
        held = self.ratified_commits()
        return History(
            load_history(
                self.uri,
                limit=limit,
                storage_options=self.storage_options,
                ratified_commits=held.commits,
                latest_ratified_version=held.latest_version,
            )
        )

    def maintain(
        self, operation: MaintenanceOperation, *, timeout_s: float = 600.0
    ) -> dict[str, Any]:
        """Ask the catalog to run ``operation`` (``"checkpoint"``, ``"cleanup"``,
        ``"optimize"`` or ``"vacuum"``) on this table now, by the table's
        policy (retentions from its properties), on the catalog's maintenance
        service, after the job it may be running; needs WRITE. Returns the run's
        record: ``kind``, ``version`` (the published version it covered),
        ``report`` (or ``error``). OPTIMIZE and VACUUM commit through the
        catalog and show in :meth:`history`.

        >>> table.maintain("optimize")["report"]["numFilesRemoved"]   # doctest: +SKIP
        """
        _check_choice("operation", operation, ("checkpoint", "cleanup", "optimize", "vacuum"))
        actor, table_id, location, published = self.client._call(
            "maintenance_target", self.maintenance_wait_s
        )
        if published is None:
            raise CatalogManagedTableError(
                f"no version of {self.table_name!r} is published yet: nothing to maintain",
                self.uri,
            )
        outcome: dict[str, Any] = get_unwrapped(
            actor.run_now.remote(
                table_id, self.table_name, location, operation, published, timeout_s
            )
        )
        return outcome

    def maintenance_settled(self, *, version: int | None = None, timeout_s: float = 60.0) -> bool:
        """Wait until the catalog's automatic maintenance has read every published
        version through ``version`` (default: the latest) and nothing is due or
        running; False on timeout."""
        latest = self.version() if version is None else version
        actor, table_id, _location, _published = self.client._call("maintenance_target")
        settled: bool = get_unwrapped(actor.settled.remote(table_id, latest, timeout_s))
        return settled

    @property
    def checkpoint_actor(self) -> Any:
        raise CatalogManagedTableError(
            f"{self.table_name!r} is catalog-managed: its maintenance goes through its "
            "catalog (CatalogTable.checkpoint, cleanup_metadata, vacuum), not a table actor",
            self.uri,
        )

    @property
    def cleanup_actor(self) -> Any:
        return self.checkpoint_actor

    def __repr__(self) -> str:
        return f"raydelta.CatalogTable({self.table_name!r} at {self.uri!r})"


class Catalog:
    """A handle on a ``CatalogActor`` (module docstring).

    ``store``: the durable store of ratified commits and names: a
    :class:`~raydelta.storage.catalog.ratified_store.RatifiedCommitStore`, or
    its URL (``"postgresql://user@host:5432/db"`` for a catalog whose hosts
    span nodes, ``"sqlite:///path"``; see
    :func:`~raydelta.storage.catalog.stores.open_store`); default: a SQLite
    file ``catalog.sqlite`` under ``root``. ``root``: where tables
    created without a location go (default ``./raydelta-catalog``).
    ``max_unpublished``: the backlog of ratified, unpublished commits of one
    table past which commits are refused with the retryable
    :class:`~raydelta.protocol.errors.PublishBacklogError`. ``token``: the
    caller's token when ``authorization`` is on (default: the bootstrap token
    when this handle started the catalog).

    Temporary credentials for S3 (Unity Catalog's ``/temporary-*-credentials``)
    come from STS: the catalog assumes ``credential_role_arn`` with a session
    policy scoped to the one table or path (read-only for reads), for
    ``credential_lifetime_s`` seconds (900-43200), at ``sts_endpoint_url``
    (default: the S3 endpoint of ``storage_options``, else AWS's), passing
    ``credential_external_id`` if the role's trust policy asks for one.
    Without a role the catalog refuses to vend S3 credentials
    (:class:`~raydelta.protocol.errors.CredentialsUnavailableError`); it
    never hands out its own keys.

    ``maintenance``: the catalog's automatic maintenance of its managed tables
    (:class:`~raydelta.protocol.maintenance_policy.MaintenanceDefaults`: on by
    default; checkpoints every 10 commits, metadata cleanup after each,
    auto-compaction after 50 small files, VACUUM at most daily; each table's
    properties override them). See :meth:`CatalogTable.maintain`.
    """

    def __init__(
        self,
        store: RatifiedCommitStore | str | os.PathLike[str] | None = None,
        *,
        name: str = "default",
        root: str | None = None,
        authorization: bool = False,
        token: str | None = None,
        max_unpublished: int = 100_000,
        storage_options: dict[str, Any] | None = None,
        credential_role_arn: str | None = None,
        credential_lifetime_s: int = 3600,
        sts_endpoint_url: str | None = None,
        credential_external_id: str | None = None,
        maintenance: MaintenanceDefaults | None = None,
    ) -> None:
        root_uri = normalize_uri(root or DEFAULT_ROOT)
        if store is None:
            if not root_uri.startswith("file://"):
                raise InvalidArgumentError(
                    "a catalog on remote storage needs a store (a postgresql:// URL, "
                    "LogStorageRatifiedStore(root) or SqliteRatifiedStore(path))"
                )
            store = SqliteRatifiedStore(os.path.join(root_uri[len("file://") :], "catalog.sqlite"))
        elif isinstance(store, str | os.PathLike):
            store = open_store(store)
        elif not isinstance(store, RatifiedCommitStore):
            raise InvalidArgumentError(
                f"store must be a RatifiedCommitStore or its URL, got {type(store).__name__}"
            )
        settings = CatalogSettings(
            root=root_uri,
            authorization=authorization,
            max_unpublished=max_unpublished,
            storage_options=storage_options,
            credential_role_arn=credential_role_arn,
            credential_lifetime_s=credential_lifetime_s,
            sts_endpoint_url=sts_endpoint_url,
            credential_external_id=credential_external_id,
            maintenance=maintenance or MaintenanceDefaults(),
        )
        self.name = name
        self.storage_options = storage_options
        self.actor = start_actor(
            CatalogActor, catalog_actor_name(name), store, settings, auto_compact
        )
        bootstrap = get_unwrapped(self.actor.take_bootstrap_token.remote())
        self.token = token if token is not None else bootstrap

    def _get(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return get_unwrapped(getattr(self.actor, method).remote(*args, **kwargs))

    # --- tables ----------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        *,
        location: str | None = None,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        token: str | None = None,
        commit_mode: CommitMode = "inline",
    ) -> CatalogTable:
        """Create the catalog-managed table ``name`` (version 0 ratified, then the
        name registered) at ``location`` or a new location under the root."""
        if not isinstance(schema, pa.Schema):
            raise InvalidArgumentError(f"schema must be a pyarrow.Schema, got {type(schema)}")
        if isinstance(partition_by, str):
            partition_by = (partition_by,)
        config = {**{k: str(v) for k, v in (properties or {}).items()}}
        config[ENABLE_IN_COMMIT_TIMESTAMPS] = "true"
        protocol, metadata = new_table_actions(
            from_arrow(schema), partition_by=partition_by, properties=config
        )
        where = None if location is None else normalize_uri(location)
        self._get(
            "create_table",
            name,
            self._token(token),
            protocol,
            metadata,
            location=where,
            table_id=str(uuid.uuid4()),
            txn_id=str(uuid.uuid4()),
        )
        return self.open_table(name, token=token, commit_mode=commit_mode)

    def upgrade_table(self, name: str, location: str, *, token: str | None = None) -> CatalogTable:
        """Make the filesystem table at ``location`` catalog-managed, registered as ``name``."""
        self._get(
            "upgrade_table", name, self._token(token), normalize_uri(location), str(uuid.uuid4())
        )
        return self.open_table(name, token=token)

    def open_table(
        self, name: str, *, token: str | None = None, commit_mode: CommitMode = "inline"
    ) -> CatalogTable:
        """The table ``name``, committing through this catalog (``commit_mode``:
        send commits ``"inline"`` or write them as ``"staged"`` files)."""
        entry = self.resolve(name, token=token)
        if not entry.catalog_managed:
            raise CatalogManagedTableError(f"{name!r} is not catalog-managed", entry.location)
        return CatalogTable(
            CatalogTableClient(
                entry.location,
                self.actor,
                self.storage_options,
                table_name=name,
                token=self._token(token),
                commit_mode=commit_mode,
            )
        )

    def resolve(self, name: str, *, token: str | None = None) -> TableEntry:
        """Name resolution: where ``name`` lives and whether it is catalog-managed."""
        entry: TableEntry = self._get("resolve", name, self._token(token))
        return entry

    def list_tables(self, *, token: str | None = None) -> list[TableEntry]:
        """The tables the caller holds a privilege on, sorted by name."""
        entries: list[TableEntry] = self._get("list_tables", self._token(token))
        return entries

    def drop_table(self, name: str, *, token: str | None = None) -> TableEntry:
        """Remove ``name`` from the catalog (its files stay: a soft delete)."""
        entry: TableEntry = self._get("drop_table", name, self._token(token))
        return entry

    def get_ratified_commits(
        self,
        name: str,
        *,
        start_version: int | None = None,
        end_version: int | None = None,
        token: str | None = None,
    ) -> RatifiedCommits:
        """The contiguous ratified commits the catalog still holds (staged path or
        inline actions) and the table's latest ratified version."""
        held: RatifiedCommits = self._get(
            "get_ratified_commits", name, self._token(token), start_version, end_version
        )
        return held

    # --- principals --------------------------------------------------------------------

    @property
    def authorization(self) -> bool:
        """Whether the catalog checks tokens and grants (once on, it stays on)."""
        enabled: bool = self._get("authorization_enabled")
        return enabled

    def enable_authorization(self) -> str:
        """Turn authorization on for a catalog that runs without it: the explicit
        step (it is recorded under the root and stays on, restarts included).
        Returns the bootstrap (admin) token, shown this once; this handle
        calls with it from now on. Refused with
        :class:`~raydelta.protocol.errors.InvalidArgumentError` when
        authorization is on already."""
        issued: str | None = self._get("enable_authorization")
        if issued is None:
            raise InvalidArgumentError(f"catalog {self.name!r} has authorization on already")
        self.token = issued
        return issued

    def create_principal(self, name: str, *, token: str | None = None) -> str:
        """A new principal's token (shown once; the catalog keeps only its hash).
        Refused with :class:`~raydelta.protocol.errors.AuthorizationDisabledError`
        on a catalog without authorization (nothing would check the token)."""
        issued: str = self._get("create_principal", name, self._token(token))
        return issued

    def principals(self, *, token: str | None = None) -> list[str]:
        """The principals' names (the admin only)."""
        names = call_unity(self.actor, PermissionService.principals, self._token(token))
        return names

    def rotate_token(self, name: str, *, token: str | None = None) -> str:
        """A new token for principal ``name``; its old token stops working."""
        return call_unity(self.actor, PermissionService.rotate_token, self._token(token), name)

    def delete_principal(self, name: str, *, token: str | None = None) -> None:
        """Forget principal ``name``: its token and every grant it held."""
        call_unity(self.actor, PermissionService.delete_principal, self._token(token), name)

    def grant(
        self,
        principal: str,
        table: str,
        privileges: Iterable[Privilege | str] | Privilege | str,
        *,
        securable_type: SecurableType | str = SecurableType.TABLE,
        token: str | None = None,
    ) -> None:
        """Give ``principal`` ``privileges`` on ``table`` (needs OWN on it).

        ``securable_type`` grants on something else, named by ``table``:
        ``"schema"`` (``"main.sales"``: ``USE_SCHEMA``, ``CREATE_TABLE``...),
        ``"catalog"`` (``"main"``: ``USE_CATALOG``...), ``"external_location"``
        (``CREATE_EXTERNAL_TABLE``, ``READ_FILES``, ``WRITE_FILES``) or
        ``"metastore"`` (everything; the same as the table name ``"*"``).
        A privilege the securable cannot take raises ``ValueError``; a catalog
        without authorization refuses every grant
        (:class:`~raydelta.protocol.errors.AuthorizationDisabledError`)."""
        wanted = sorted(parse_privileges(privileges))
        kind = parse_securable_type(securable_type).value
        self._get("grant", principal, table, wanted, self._token(token), kind)

    def revoke(
        self,
        principal: str,
        table: str,
        privileges: Iterable[Privilege | str] | Privilege | str,
        *,
        securable_type: SecurableType | str = SecurableType.TABLE,
        token: str | None = None,
    ) -> None:
        """Take ``privileges`` on ``table`` (or another securable, as in
        :meth:`grant`) back from ``principal`` (needs OWN)."""
        wanted = sorted(parse_privileges(privileges))
        kind = parse_securable_type(securable_type).value
        self._get("revoke", principal, table, wanted, self._token(token), kind)

    # --- external locations -------------------------------------------------------------

    def create_external_location(
        self,
        name: str,
        url: str,
        *,
        comment: str | None = None,
        credential_name: str | None = None,
        read_only: bool = False,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Register the external location ``name`` at ``url`` (the admin only): a
        path prefix where tables outside the catalog's managed storage may live,
        for the principals granted ``CREATE_EXTERNAL_TABLE`` (and path
        credentials for ``READ_FILES``/``WRITE_FILES``) on it. It may not overlap
        another external location or the managed root. Returns Unity Catalog's
        ``ExternalLocationInfo``."""
        info = call_unity(
            self.actor,
            CatalogLocations.create_external_location,
            self._token(token),
            name,
            normalize_uri(url),
            credential_name=credential_name,
            comment=comment,
            read_only=read_only,
        )
        return info.model_dump()

    def list_external_locations(self, *, token: str | None = None) -> list[dict[str, Any]]:
        """The external locations the caller holds a privilege on, by name."""
        infos = call_unity(self.actor, CatalogLocations.external_locations, self._token(token))
        return [info.model_dump() for info in infos]

    def drop_external_location(
        self, name: str, *, force: bool = False, token: str | None = None
    ) -> None:
        """Delete external location ``name`` (its owner or the admin; with
        ``force`` even while tables lie inside it)."""
        call_unity(
            self.actor, CatalogLocations.delete_external_location, self._token(token), name, force
        )

    def location_report(self) -> list[dict[str, str]]:
        """Tables whose locations overlap another one's, found when the catalog
        started (registered under older rules): no credentials are vended for
        them until an admin drops one (``raydelta status`` shows them too)."""
        report: list[dict[str, str]] = self._get("location_report")
        return report

    # --- Unity Catalog's REST API ------------------------------------------------------

    def serve(self, *, host: str = "127.0.0.1", port: int = 0) -> UCServer:
        """Serve this catalog over Unity Catalog's REST API (``/api/2.1/unity-catalog``)
        from a background thread; returns a handle with ``.url`` and ``.stop()``.
        ``port=0`` picks a free port. Requests carry the principals' tokens as
        bearer tokens (:mod:`raydelta.uc`)."""
        from raydelta.uc.server import serve

        return serve(self, host=host, port=port)

    def _token(self, token: str | None) -> str | None:
        return token if token is not None else self.token

    def __repr__(self) -> str:
        return f"raydelta.Catalog({self.name!r})"


__all__ = ["Catalog", "CatalogTable"]
