"""Unity Catalog's side of the catalog, as one service composed of parts:
:class:`UnityCatalogService`.

The ``CatalogActor`` holds one, built from the pieces of state each part
needs (the lock, the durable store, the authorizer, the settings, the
namespace and external-location registries, the managed tables and the
table lifecycle), all passed explicitly:

- ``namespaces`` (:class:`~raydelta.actors.catalog.unity.namespaces.NamespaceService`):
  the metastore summary, catalogs and schemas;
- ``tables`` (:class:`~raydelta.actors.catalog.unity.tables.UnityTableService`):
  staging tables, managed and external tables;
- ``commits`` (:class:`~raydelta.actors.catalog.unity.commits.UnityCommitService`):
  both of Unity Catalog's commit APIs;
- ``locations`` (:class:`~raydelta.actors.catalog.locations.CatalogLocations`):
  external locations;
- ``credentials`` (:class:`~raydelta.actors.catalog.credentials.CredentialService`):
  temporary table and path credentials;
- ``permissions`` (:class:`~raydelta.actors.catalog.unity.permissions.PermissionService`):
  the permissions API and the principals.

Every operation is a public method of one part, returning a frozen reply
model of :mod:`raydelta.protocol.unity_catalog` (or None). Callers name the
operation by the method itself, never by a string: the actor's one entry
point ``CatalogActor.unity(operation, *args)`` runs
:meth:`UnityCatalogService.run`, and :func:`call_unity` is its typed
synchronous client (the REST server's typed asynchronous one is
:class:`raydelta.uc.client.UnityCatalogClient`), so ``mypy`` checks every
caller's arguments and use of the reply against the part's signature.

Invariant: :meth:`UnityCatalogService.run` runs only a public method defined
on one of the parts' classes; anything else is refused with
:class:`~raydelta.protocol.errors.InvalidArgumentError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from raydelta.actors.catalog.credentials import CredentialService
from raydelta.actors.catalog.locations import CatalogLocations
from raydelta.actors.catalog.unity.commits import UnityCommitService
from raydelta.actors.catalog.unity.namespaces import NamespaceService
from raydelta.actors.catalog.unity.permissions import PermissionService
from raydelta.actors.catalog.unity.tables import UnityTableService
from raydelta.actors.cluster import get_unwrapped
from raydelta.protocol.errors import InvalidArgumentError

P = ParamSpec("P")
R = TypeVar("R")
Part = TypeVar("Part")


class UnityCatalogService:
    """The parts (module docstring), and the one way to run their operations."""

    def __init__(
        self,
        *,
        namespaces: NamespaceService,
        tables: UnityTableService,
        commits: UnityCommitService,
        locations: CatalogLocations,
        credentials: CredentialService,
        permissions: PermissionService,
    ) -> None:
        self.namespaces = namespaces
        self.tables = tables
        self.commits = commits
        self.locations = locations
        self.credentials = credentials
        self.permissions = permissions
        self._parts: tuple[object, ...] = (
            namespaces,
            tables,
            commits,
            locations,
            credentials,
            permissions,
        )

    def run(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``operation`` (a part's method, unbound) on its part."""
        name = getattr(operation, "__name__", "")
        if not name.startswith("_"):
            for part in self._parts:
                if getattr(type(part), name, None) is operation:
                    return operation(part, *args, **kwargs)
        raise InvalidArgumentError(
            f"{operation!r} is not an operation of the catalog's Unity Catalog service"
        )


def call_unity(
    actor: Any,
    operation: Callable[Concatenate[Part, P], R],
    *args: P.args,
    **kwargs: P.kwargs,
) -> R:
    """Run ``operation`` on the Unity Catalog service of the catalog ``actor``
    and wait for its reply (an error it raised is raised as itself)."""
    reply: R = get_unwrapped(actor.unity.remote(operation, *args, **kwargs))
    return reply


__all__ = ["UnityCatalogService", "call_unity"]
