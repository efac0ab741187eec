"""Where tables may live and who may put them there, on the ``Catalog`` actor
(Unity Catalog's external locations): :class:`CatalogLocations`, a service
the actor holds (with the store, the authorizer, the settings and the two
registries it reads given to its constructor).

The actor's own table creation (:mod:`raydelta.actors.catalog.lifecycle`),
Unity Catalog's tables (:mod:`raydelta.actors.catalog.unity.tables`) and
credential vending (:mod:`raydelta.actors.catalog.credentials`) ask it
before anything is created or vended; the REST server reaches its external
locations through :class:`~raydelta.actors.catalog.unity.service.UnityCatalogService`.

Invariants:
- Locations are compared with one function,
  :func:`~raydelta.protocol.locations.parse_location` (local paths folded
  for case when the root's file system folds case: :class:`LocationComparison`).
- A table's location never equals, contains or lies inside another
  table's (a staging table's location counts as a table's), never contains
  the managed root or an external location, and lies inside the managed
  root only if the table is managed; an object store's location is spelled
  literally (:func:`~raydelta.protocol.locations.object_store_spelling_problem`).
  A refusal is :class:`~raydelta.protocol.errors.LocationOverlapError` and
  creates nothing.
- Creating a table needs Unity Catalog's privileges
  (:func:`~raydelta.protocol.securables.table_creation_requirements`):
  ``USE_CATALOG``, ``USE_SCHEMA`` and ``CREATE_TABLE``; a table outside
  the managed root also ``CREATE_EXTERNAL_TABLE`` on the external location
  holding it. The admin (OWN on the metastore) needs no external location.
- External locations are the admin's to create, change and delete; they
  never overlap each other or the managed root.
- Path access: inside a table, the table's ``READ``/``WRITE``; a
  path holding tables or inside the managed root, the admin only; inside an
  external location, its ``READ_FILES``/``WRITE_FILES``
  (``CREATE_EXTERNAL_TABLE`` to create a table there, where no table may
  be yet); anywhere else, the admin only. A read-only external location
  is never written.
- Tables registered before these rules whose locations overlap are found
  when the catalog starts (and again after every drop): they are listed by
  :meth:`CatalogLocations.location_report` (``raydelta status``), and
  no credential is vended for them
  (:class:`~raydelta.protocol.errors.OverlappingTablesError`) until an admin
  drops one.
- Methods taking a token take the catalog's lock; the others are called
  with it held.
"""

from __future__ import annotations

import threading
import time
import uuid

from raydelta.actors.catalog.auth import Authorizer
from raydelta.actors.catalog.settings import CatalogSettings
from raydelta.protocol.errors import (
    InvalidArgumentError,
    LocationOverlapError,
    OverlappingTablesError,
    PermissionDeniedError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from raydelta.protocol.locations import (
    StorageLocation,
    object_store_spelling_problem,
    overlapping_pairs,
    parse_location,
)
from raydelta.protocol.privileges import Privilege
from raydelta.protocol.securables import Securable, table_creation_requirements
from raydelta.protocol.unity_catalog import ExternalLocationInfo
from raydelta.storage.catalog.external_locations import ExternalLocationRegistry
from raydelta.storage.catalog.location_case import local_paths_case_insensitive
from raydelta.storage.catalog.namespaces import NamespaceRegistry
from raydelta.storage.catalog.ratified_store import RatifiedCommitStore

MANAGED_ROOT = "<managed root>"
"""The label of the catalog's managed storage root in overlap reports."""

PATH_OPERATIONS = ("read", "write", "create")


class ExternalLocationNotFoundError(TableNotFoundError):
    """No external location of that name."""


class ExternalLocationAlreadyExistsError(TableAlreadyExistsError):
    """An external location of that name exists already."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class LocationComparison:
    """URIs as the catalog compares them: :func:`parse_location`, local paths
    folded for case when the file system of the catalog's ``root`` folds case
    (asked once, on the first local path, unless ``folds_case`` is given)."""

    def __init__(self, root: str, *, folds_case: bool | None = None) -> None:
        self.root = root
        self._folds_case = folds_case

    def location(self, uri: str) -> StorageLocation:
        plain = parse_location(uri)
        if plain.scheme != "file":
            return plain
        if self._folds_case is None:
            root = parse_location(self.root)
            self._folds_case = root.scheme == "file" and local_paths_case_insensitive(
                root.uri()[len("file://") :]
            )
        return parse_location(uri, case_insensitive=True) if self._folds_case else plain


class CatalogLocations:
    """The location rules and the external locations (module docstring).

    ``namespaces`` is read for the staging tables' locations (they count as
    tables'); ``external`` holds the external locations. Everything it needs
    is given here, so the service can be built wherever the catalog's tables
    are."""

    def __init__(
        self,
        *,
        lock: threading.RLock,
        store: RatifiedCommitStore,
        auth: Authorizer,
        settings: CatalogSettings,
        namespaces: NamespaceRegistry,
        external: ExternalLocationRegistry,
    ) -> None:
        self._lock = lock
        self._store = store
        self._auth = auth
        self._settings = settings
        self._ns = namespaces
        self._external = external
        self._comparison = LocationComparison(settings.root)
        self._overlaps: dict[str, list[dict[str, str]]] | None = None

    # --- comparing locations -----------------------------------------------------------

    def location(self, uri: str) -> StorageLocation:
        """``uri`` as the catalog compares it (module invariants)."""
        return self._comparison.location(uri)

    def _managed_root(self) -> StorageLocation:
        return self.location(self._settings.root)

    def _table_locations(self, *, skip_id: str | None = None) -> dict[str, tuple[str, str]]:
        """``{label: (name, location)}`` of every table and staging table
        (the one with id ``skip_id`` left out: the table being created)."""
        taken: dict[str, tuple[str, str]] = {}
        for entry in self._store.list_tables():
            if entry.table_id != skip_id:
                taken[f"table {entry.name!r}"] = (entry.name, entry.location)
        for table_id, staging in self._ns.staging.items():
            if table_id != skip_id:
                label = f"staging table {staging['full_name']!r} ({table_id})"
                taken[label] = (str(staging["full_name"]), str(staging["location"]))
        return taken

    def _check_spelling(self, uri: str) -> None:
        here = parse_location(uri)
        if here.scheme == "file":
            return
        problem = object_store_spelling_problem(uri)
        if problem is not None:
            raise InvalidArgumentError(f"location {uri} cannot be used: {problem}")

    def _refuse_overlap(self, uri: str, here: StorageLocation, *, skip_id: str | None) -> None:
        """:class:`LocationOverlapError` if ``uri`` overlaps a table, contains an
        external location or contains the managed root."""
        root = self._managed_root()
        if here.contains(root):
            relation = "is" if here == root else "contains"
            raise LocationOverlapError(
                f"location {uri} {relation} the catalog's managed storage root "
                f"{self._settings.root}",
                location=uri,
                other=MANAGED_ROOT,
                other_location=self._settings.root,
            )
        for label, (name, location) in self._table_locations(skip_id=skip_id).items():
            met = here.relation_to(self.location(location))
            if met is not None:
                raise LocationOverlapError(
                    f"location {uri} {met} {label}'s location {location}: two tables "
                    "never share storage",
                    location=uri,
                    other=name,
                    other_location=location,
                )
        for name, info in self._external.locations.items():
            other = self.location(info["url"])
            if here.contains(other) and here != other:
                raise LocationOverlapError(
                    f"location {uri} contains external location {name!r} ({info['url']}): "
                    "a table lies inside an external location, never around one",
                    location=uri,
                    other=name,
                    other_location=str(info["url"]),
                )

    def _external_location_holding(self, here: StorageLocation) -> str | None:
        for name, info in self._external.locations.items():
            if self.location(info["url"]).contains(here):
                return name
        return None

    def _require_external_location(
        self, principal: str, uri: str, here: StorageLocation, privilege: Privilege
    ) -> None:
        """``privilege`` on the external location holding ``uri`` (the admin
        needs none); a read-only one refuses writing."""
        holder = self._external_location_holding(here)
        writes = privilege in (Privilege.WRITE_FILES, Privilege.CREATE_EXTERNAL_TABLE)
        if holder is not None and writes and self._external.locations[holder].get("read_only"):
            raise PermissionDeniedError(
                f"external location {holder!r} is read-only: {uri} cannot be written",
                principal=principal,
                table=holder,
                missing=(privilege.value,),
            )
        if self._auth.is_admin(principal):
            return
        if holder is None:
            raise PermissionDeniedError(
                f"principal {principal!r} may not use {uri}: no external location holds it "
                "(an admin registers one: POST /external-locations, or "
                "Catalog.create_external_location, and grants "
                f"{privilege.value.upper()} on it)",
                principal=principal,
                table=None,
                missing=(privilege.value,),
            )
        self._auth.require_on(principal, Securable.external_location(holder), [privilege])

    def require_creation(self, principal: str, name: str) -> None:
        """Unity Catalog's privileges to create table ``name`` (module invariants)."""
        for securable, needed in table_creation_requirements(name):
            self._auth.require_on(principal, securable, needed)

    def check_table_location(
        self, principal: str, location: str, *, managed: bool, skip_id: str | None = None
    ) -> None:
        """The location rules for a new table at ``location`` (module invariants)."""
        self._check_spelling(location)
        here = self.location(location)
        self._refuse_overlap(location, here, skip_id=skip_id)
        inside_root = self._managed_root().contains(here)
        if inside_root and not managed:
            raise LocationOverlapError(
                f"location {location} lies inside the catalog's managed storage root "
                f"{self._settings.root}: only managed tables live there",
                location=location,
                other=MANAGED_ROOT,
                other_location=self._settings.root,
            )
        if not inside_root:
            self._require_external_location(
                principal, location, here, Privilege.CREATE_EXTERNAL_TABLE
            )

    # --- external locations ------------------------------------------------------------

    def _external_info(self, name: str) -> ExternalLocationInfo:
        info = self._external.locations.get(name)
        if info is None:
            raise ExternalLocationNotFoundError(f"external location {name!r} does not exist")
        return ExternalLocationInfo.model_validate(info)

    def _check_external_url(self, name: str, url: str) -> None:
        self._check_spelling(url)
        here = self.location(url)
        root = self._managed_root()
        if here.overlaps(root):
            raise LocationOverlapError(
                f"external location {url} {here.relation_to(root)} the catalog's managed "
                f"storage root {self._settings.root}",
                location=url,
                other=MANAGED_ROOT,
                other_location=self._settings.root,
            )
        for other_name, info in self._external.locations.items():
            relation = here.relation_to(self.location(info["url"]))
            if other_name != name and relation is not None:
                raise LocationOverlapError(
                    f"external location {url} {relation} external location {other_name!r} "
                    f"({info['url']}): external locations never overlap",
                    location=url,
                    other=other_name,
                    other_location=str(info["url"]),
                )
        for label, (table, location) in self._table_locations().items():
            if self.location(location).contains(here):
                raise LocationOverlapError(
                    f"external location {url} lies inside {label}'s location {location}",
                    location=url,
                    other=table,
                    other_location=location,
                )

    def create_external_location(
        self,
        token: str | None,
        name: str,
        url: str,
        *,
        credential_name: str | None = None,
        comment: str | None = None,
        read_only: bool = False,
    ) -> ExternalLocationInfo:
        """Register external location ``name`` at ``url`` (the admin only)."""
        with self._lock:
            principal = self._auth.authenticate(token)
            self._auth.require_on(principal, Securable.metastore(), [Privilege.OWN])
            if not isinstance(name, str) or not name or "." in name:
                raise InvalidArgumentError(f"invalid external location name {name!r}")
            if name in self._external.locations:
                raise ExternalLocationAlreadyExistsError(
                    f"external location {name!r} already exists"
                )
            self._check_external_url(name, url)
            now, location_id = _now_ms(), str(uuid.uuid4())
            info = ExternalLocationInfo(
                name=name,
                url=url,
                credential_name=credential_name,
                comment=comment,
                read_only=bool(read_only),
                owner=principal,
                created_at=now,
                created_by=principal,
                updated_at=now,
                updated_by=principal,
                id=location_id,
                external_location_id=location_id,
            )
            self._external.locations[name] = info.model_dump()
            self._external.save()
            return info

    def external_locations(
        self, token: str | None, name: str | None = None
    ) -> list[ExternalLocationInfo]:
        """One external location, or every one the caller holds a privilege on."""
        with self._lock:
            principal = self._auth.authenticate(token)
            if name is not None:
                info = self._external_info(name)
                if not self._auth.privileges_on(principal, Securable.external_location(name)):
                    self._auth.require_on(
                        principal, Securable.external_location(name), [Privilege.READ_FILES]
                    )
                return [info]
            return [
                ExternalLocationInfo.model_validate(info)
                for key, info in sorted(self._external.locations.items())
                if self._auth.privileges_on(principal, Securable.external_location(key))
            ]

    def update_external_location(
        self,
        token: str | None,
        name: str,
        *,
        new_name: str | None = None,
        url: str | None = None,
        comment: str | None = None,
        credential_name: str | None = None,
        read_only: bool | None = None,
    ) -> ExternalLocationInfo:
        """Change an external location's url, comment, credential name or read-only
        flag (None: unchanged)."""
        with self._lock:
            principal = self._auth.authenticate(token)
            self._auth.require_on(principal, Securable.external_location(name), [Privilege.OWN])
            info = self._external_info(name)
            if new_name and new_name != name:
                raise InvalidArgumentError("renaming an external location is not supported")
            changes: dict[str, object] = {"updated_at": _now_ms(), "updated_by": principal}
            if url is not None and url != info.url:
                self._check_external_url(name, url)
                changes["url"] = url
            if comment is not None:
                changes["comment"] = comment
            if credential_name is not None:
                changes["credential_name"] = credential_name
            if read_only is not None:
                changes["read_only"] = read_only
            changed = ExternalLocationInfo.model_validate({**info.model_dump(), **changes})
            self._external.locations[name] = changed.model_dump()
            self._external.save()
            return changed

    def delete_external_location(self, token: str | None, name: str, force: bool) -> None:
        """Delete an external location (with ``force`` even if tables lie inside it)."""
        with self._lock:
            principal = self._auth.authenticate(token)
            self._auth.require_on(principal, Securable.external_location(name), [Privilege.OWN])
            here = self.location(self._external_info(name).url)
            inside = sorted(
                table
                for _, (table, location) in self._table_locations().items()
                if here.contains(self.location(location))
            )
            if inside and not force:
                raise InvalidArgumentError(
                    f"external location {name!r} holds tables {inside}; delete with force=true"
                )
            del self._external.locations[name]
            self._external.save()
            self._auth.forget(Securable.external_location(name))

    # --- overlaps found at start -------------------------------------------------------

    def find_overlaps(self) -> None:
        """Record every registered table whose location overlaps another one's
        or (an external table) the managed root (module invariants)."""
        located: dict[str, StorageLocation] = {}
        where: dict[str, str] = {}
        for entry in self._store.list_tables():
            try:
                located[entry.name] = self.location(entry.location)
            except InvalidArgumentError:  # unreadable spelling: compare it literally
                continue
            where[entry.name] = entry.location
        root = self._managed_root()
        found: dict[str, list[dict[str, str]]] = {}

        def note(table: str, other: str, other_location: str, relation: str) -> None:
            found.setdefault(table, []).append(
                {
                    "table": table,
                    "location": where[table],
                    "relation": relation,
                    "overlaps": other,
                    "other_location": other_location,
                }
            )

        for a, b in overlapping_pairs(located):
            note(a, b, where[b], located[a].relation_to(located[b]) or "overlaps")
            note(b, a, where[a], located[b].relation_to(located[a]) or "overlaps")
        for entry in self._store.list_tables():
            here = located.get(entry.name)
            if here is None:
                continue
            if here.contains(root) or (not entry.catalog_managed and root.contains(here)):
                note(entry.name, MANAGED_ROOT, self._settings.root, here.relation_to(root) or "")
        self._overlaps = found

    def refuse_if_overlapping(self, name: str) -> None:
        if self._overlaps is None:
            self.find_overlaps()
        assert self._overlaps is not None
        conflicts = self._overlaps.get(name)
        if conflicts:
            others = ", ".join(f"{c['overlaps']} ({c['other_location']})" for c in conflicts)
            raise OverlappingTablesError(
                f"no credentials for table {name!r}: its location {conflicts[0]['location']} "
                f"overlaps {others} (registered before the catalog refused overlapping "
                "locations); an admin must drop one of them (or register it elsewhere)",
                tables=(name, *(c["overlaps"] for c in conflicts)),
            )

    def location_report(self) -> list[dict[str, str]]:
        """Every table whose location overlaps another one's (found at start and
        after every drop), one entry per overlap; read-only, no token needed."""
        with self._lock:
            if self._overlaps is None:
                self.find_overlaps()
            assert self._overlaps is not None
            return [c for name in sorted(self._overlaps) for c in self._overlaps[name]]

    # --- path access --------------------------------------------------------------------

    def path_access(self, principal: str, url: str, operation: str) -> str | None:
        """Check ``principal`` may reach ``url`` for ``operation`` (module
        invariants); the name of the table holding it, or None."""
        if operation not in PATH_OPERATIONS:
            raise InvalidArgumentError(f"unknown path operation {operation!r}")
        self._check_spelling(url)
        here = self.location(url)
        admin = self._auth.is_admin(principal)
        for entry in self._store.list_tables():
            location = self.location(entry.location)
            if not location.contains(here):
                continue
            if operation == "create":
                raise LocationOverlapError(
                    f"{url} is inside table {entry.name!r} at {entry.location}",
                    location=url,
                    other=entry.name,
                    other_location=entry.location,
                )
            self.refuse_if_overlapping(entry.name)
            needed = Privilege.READ if operation == "read" else Privilege.WRITE
            self._auth.require(principal, entry.name, [needed])
            return str(entry.name)
        for staging in self._ns.staging.values():
            if self.location(str(staging["location"])).contains(here):
                if principal != staging["created_by"] and not admin:
                    self._auth.require_on(principal, Securable.metastore(), [Privilege.OWN])
                return str(staging["full_name"])
        if operation == "create":
            self.check_table_location(principal, url, managed=False)
            return None
        root = self._managed_root()
        holds_tables = here.contains(root) or any(
            here.contains(self.location(location))
            for _, location in self._table_locations().values()
        )
        if holds_tables or root.contains(here):
            if not admin:
                where = "holds tables" if holds_tables else "is inside the managed storage root"
                raise PermissionDeniedError(
                    f"principal {principal!r} may not reach {url}: it {where} (only the admin may)",
                    principal=principal,
                    table=None,
                    missing=(Privilege.OWN.value,),
                )
            return None
        files = Privilege.READ_FILES if operation == "read" else Privilege.WRITE_FILES
        self._require_external_location(principal, url, here, files)
        return None


__all__ = [
    "MANAGED_ROOT",
    "PATH_OPERATIONS",
    "CatalogLocations",
    "ExternalLocationAlreadyExistsError",
    "ExternalLocationNotFoundError",
    "LocationComparison",
]
