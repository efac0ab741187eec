"""The client of a catalog-managed table: :class:`CatalogTableClient`.

A :class:`~raydelta.actors.table.client.TableClient` whose calls go to the table's
``CatalogActor`` (with the table's name and the caller's token) instead of a
``TableActor``: the same transactions, snapshots and appends, committed
through the catalog.

Invariants:
- Commits are *inline* (the actions travel to the catalog in the request)
  or *staged* (``commit_mode="staged"``): the client writes
  ``_delta_log/_staged_commits/<v>.<uuid>.json`` with put-if-absent, ``v`` the
  version after the one it read, holding the commit as it would be
  published (``commitInfo`` first, with the ``txnId`` and an in-commit
  timestamp above the last one it saw), and sends only its path. The
  catalog judges the file's content, ratifies it as it is when it can, or
  re-stages it under a new version (the client's file is then garbage).
- A lost reply is answered, when re-sent, with the original version (the
  catalog keys commits by ``txnId``); Ray re-sends the calls in flight when
  the catalog's process dies.
- Snapshots read storage through the catalog's view: the ratified commits it
  still holds win over published files; nothing past its latest version is
  read. Errors the catalog raises arrive as themselves
  (:class:`~raydelta.protocol.errors.PermissionDeniedError`, ...).
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any, Literal

from raydelta.actors.cluster import get_unwrapped
from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import CommitInfo, serialize_actions
from raydelta.protocol.catalog_managed import STAGED_PREFIX, RatifiedCommits
from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.events import CommitCommitted, CommitRequest
from raydelta.protocol.file_names import staged_commit_name
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import Snapshot, load_snapshot

CommitMode = Literal["inline", "staged"]


class CatalogTableClient(TableClient):
    """A table handle whose calls go through its catalog (module docstring)."""

    def __init__(
        self,
        uri: str,
        catalog: Any,
        storage_options: dict[str, Any] | None = None,
        *,
        table_name: str,
        token: str | None = None,
        commit_mode: CommitMode = "inline",
    ) -> None:
        if commit_mode not in ("inline", "staged"):
            raise InvalidArgumentError(
                f"commit_mode must be 'inline' or 'staged', got {commit_mode!r}"
            )
        super().__init__(uri, storage_options, use_channel=False)
        self.catalog = catalog
        self.table_name = table_name
        self.token = token
        self.commit_mode: CommitMode = commit_mode
        self._last_version = -1
        self._last_ict = 0

    @property
    def actor(self) -> Any:
        """The catalog's actor: it coordinates this table's commits."""
        return self.catalog

    def __getstate__(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "catalog": self.catalog,
            "storage_options": self.storage_options,
            "table_name": self.table_name,
            "token": self.token,
            "commit_mode": self.commit_mode,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        CatalogTableClient.__init__(
            self,
            state["uri"],
            state["catalog"],
            state["storage_options"],
            table_name=state["table_name"],
            token=state["token"],
            commit_mode=state["commit_mode"],
        )

    def _call(self, method: str, *args: Any) -> Any:
        if method == "create":
            raise InvalidArgumentError(
                "a catalog-managed table is created by its catalog (Catalog.create_table)"
            )
        if method == "commit" and self.commit_mode == "staged":
            args = (self.stage(args[0]),)
        reply = get_unwrapped(
            getattr(self.catalog, method).remote(self.table_name, self.token, *args)
        )
        if method == "commit" and isinstance(reply, CommitCommitted):
            self._last_version = max(self._last_version, reply.version)
            if reply.in_commit_timestamp is not None:
                self._last_ict = max(self._last_ict, reply.in_commit_timestamp)
        elif method in ("version", "tail"):
            latest = reply if method == "version" else reply[0]
            self._last_version = max(self._last_version, int(latest))
        return reply

    def stage(self, request: CommitRequest) -> CommitRequest:
        """Write ``request``'s commit as a staged file; the request naming it."""
        read_version = request.read_set.read_version
        version = (self._last_version if read_version is None else read_version) + 1
        now = int(time.time() * 1000)
        ict = max(now, self._last_ict + 1)
        own = next((a for a in request.actions if isinstance(a, CommitInfo)), None)
        body: dict[str, Any] = dict(own.to_json_dict()) if own is not None else {}
        body.update(
            {
                "timestamp": ict,
                "inCommitTimestamp": ict,
                "operation": request.operation,
                "operationParameters": request.operation_parameters,
                "isolationLevel": request.read_set.isolation_level.value,
                "isBlindAppend": request.is_blind_append,
                "txnId": request.txn_id,
                "engineInfo": request.engine_info or "raydelta",
            }
        )
        if read_version is not None:
            body["readVersion"] = read_version
        actions = [
            CommitInfo.model_validate(body),
            *(a for a in request.actions if not isinstance(a, CommitInfo)),
        ]
        name = staged_commit_name(version, str(uuid.uuid4()))
        log_store_for(self.uri, self.storage_options).put_if_absent(
            name, serialize_actions(actions)
        )
        return request.model_copy(
            update={
                "actions": (),
                "staged_commit_path": STAGED_PREFIX + name,
                "expected_version": version,
            }
        )

    def ratified_commits(
        self, *, start_version: int | None = None, end_version: int | None = None
    ) -> RatifiedCommits:
        """What the catalog holds of this table (see ``Catalog.get_ratified_commits``)."""
        held: RatifiedCommits = self._call("get_ratified_commits", start_version, end_version)
        return held

    def _load_snapshot(
        self, *, version: int | None = None, timestamp: int | str | datetime | None = None
    ) -> Snapshot:
        held = self.ratified_commits()
        return load_snapshot(
            self.uri,
            version=version,
            timestamp=timestamp,
            storage_options=self.storage_options,
            ratified_commits=held.commits,
            latest_ratified_version=held.latest_version,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.table_name!r} at {self.uri!r})"
