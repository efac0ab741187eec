"""The tables a catalog holds: :class:`ManagedTables`.

One object per catalog actor: it finds tables by name and by id in the
durable :class:`~raydelta.storage.catalog.ratified_store.RatifiedCommitStore`,
and keeps one :class:`~raydelta.actors.catalog.tables.ManagedTableCoordinator`
per catalog-managed table it has loaded, with the
:class:`~raydelta.actors.catalog.group_commit.GroupRatifier` that makes their
ratifications durable and the :class:`~raydelta.actors.catalog.publisher.Publisher`
that copies them to ``_delta_log/<v>.json``. The catalog's services
(:mod:`raydelta.actors.catalog.lifecycle`, :mod:`raydelta.actors.catalog.unity`)
hold it instead of reaching into the actor.

Invariants:
- Callers hold the catalog's lock; only the ratifier's callbacks
  (``on_durable``, ``on_failure``) run on its own thread, and they touch
  only the publisher and the set of stale tables (its own lock).
- Loading a coordinator submits its ratified, unpublished commits to the
  publisher (recovery after any crash); a coordinator whose versions a failed
  group transaction lost is reloaded from the store before its next use.
- A dropped table's log store stays known to the publisher (its pending
  copies still land).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from raydelta.actors.catalog.group_commit import GroupRatifier, Ticket
from raydelta.actors.catalog.publisher import Publisher
from raydelta.actors.catalog.settings import CatalogSettings
from raydelta.actors.catalog.tables import ManagedTableCoordinator
from raydelta.protocol.actions import serialize_actions
from raydelta.protocol.errors import (
    CatalogManagedTableError,
    PublishBacklogError,
    TableNotFoundError,
)
from raydelta.storage.catalog.ratified_store import RatifiedCommitStore, TableEntry
from raydelta.storage.log.store import LogStore


class ManagedTables:
    """See the module docstring."""

    def __init__(
        self,
        store: RatifiedCommitStore,
        settings: CatalogSettings,
        *,
        on_published: Callable[[str, int], None] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self._coordinators: dict[str, ManagedTableCoordinator] = {}
        self._log_stores: dict[str, LogStore] = {}
        """Each table's log store, for the publisher (kept after a drop)."""
        self._stale: set[str] = set()
        """Tables whose coordinator holds versions a failed transaction lost."""
        self._stale_lock = threading.Lock()
        self._names_by_id: dict[str, str] = {}
        """Table id -> name, remembered (checked against the store on every use)."""
        self.publisher = Publisher(store.mark_published, on_published=on_published)
        self.ratifier = GroupRatifier(
            store, on_durable=self._on_durable, on_failure=self._mark_stale
        )

    def recover(self) -> None:
        """Republish what was ratified and not yet published (any crash)."""
        for entry in self.store.list_tables():
            if not entry.catalog_managed or not self.store.ratified(entry.table_id):
                continue
            self.coordinator(entry)  # loading it submits its held commits

    # --- finding tables ----------------------------------------------------------------

    def entry(self, name: str) -> TableEntry:
        entry = self.store.lookup(name)
        if entry is None:
            raise TableNotFoundError(f"no table named {name!r} in the catalog")
        return entry

    def entry_by_id(self, table_id: str) -> TableEntry | None:
        name = self._names_by_id.get(table_id)
        if name is not None:
            entry = self.store.lookup(name)
            if entry is not None and entry.table_id == table_id:
                return entry
        for entry in self.store.list_tables():
            self._names_by_id[entry.table_id] = entry.name
        name = self._names_by_id.get(table_id)
        found = None if name is None else self.store.lookup(name)
        return found if found is not None and found.table_id == table_id else None

    def table(self, name: str) -> ManagedTableCoordinator:
        """The coordinator of catalog-managed table ``name``."""
        entry = self.entry(name)
        if not entry.catalog_managed:
            raise CatalogManagedTableError(f"{name!r} is not catalog-managed", entry.location)
        return self.coordinator(entry)

    def coordinator(self, entry: TableEntry) -> ManagedTableCoordinator:
        """``entry``'s coordinator, loaded (and its backlog republished) on first use."""
        coordinator = self._coordinators.get(entry.table_id)
        if coordinator is None:
            coordinator = ManagedTableCoordinator(
                entry.table_id,
                entry.location,
                self.store,
                storage_options=self.settings.storage_options,
                ratifier=self.ratifier,
            )
            self._coordinators[entry.table_id] = coordinator
            self._log_stores[entry.table_id] = coordinator.store
            self._names_by_id[entry.table_id] = entry.name
            self._republish(coordinator)
        elif entry.table_id in self._stale:
            self.ratifier.settle()
            with self._stale_lock:
                self._stale.discard(entry.table_id)
            coordinator.reload()  # back to what the store holds
        return coordinator

    def describe(self, table_id: str) -> tuple[str, str] | None:
        """``(name, location)`` of a loaded catalog-managed table (any thread;
        None once it is dropped or was never loaded)."""
        coordinator = self._coordinators.get(table_id)
        name = self._names_by_id.get(table_id)
        return None if coordinator is None or name is None else (name, coordinator.table_uri)

    def forget(self, table_id: str) -> None:
        """Drop the loaded coordinator of ``table_id`` (dropped, or never created)."""
        self._coordinators.pop(table_id, None)

    # --- ratifying and publishing ------------------------------------------------------

    def require_publish_capacity(self, table_id: str, name: str) -> None:
        """Refuse a new commit while ``max_unpublished`` ratified commits of the
        table wait for the publisher."""
        backlog = self.publisher.backlog(table_id)
        if backlog >= self.settings.max_unpublished:
            raise PublishBacklogError(
                f"{backlog} ratified commits of {name!r} are not yet published "
                f"(max_unpublished={self.settings.max_unpublished}); retry shortly",
                setting="max_unpublished",
                backlog=backlog,
            )

    def _mark_stale(self, table_ids: set[str]) -> None:
        with self._stale_lock:
            self._stale |= table_ids

    def _republish(self, coordinator: ManagedTableCoordinator) -> None:
        for commit in self.store.ratified(coordinator.table_id):
            if commit.actions is not None:
                data = serialize_actions(list(commit.actions))
            else:
                data = coordinator.store.read(commit.staged_name or "")
            self.publisher.submit(coordinator.table_id, coordinator.store, commit.version, data)

    def _on_durable(self, ticket: Ticket) -> None:
        """A ratification is durable: hand it to the publisher (in order)."""
        table_id = ticket.ratification.table_id
        self.publisher.submit(
            table_id, self._log_stores[table_id], ticket.ratification.commit.version, ticket.data
        )


__all__ = ["ManagedTables"]
