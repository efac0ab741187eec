"""The REST server's typed client of the catalog's Unity Catalog service:
:class:`UnityCatalogClient`.

One asynchronous method per operation, each forwarding to the catalog
actor's one entry point (``CatalogActor.unity``) with the operation named by
the service's method itself
(:mod:`raydelta.actors.catalog.unity.service`), so ``mypy`` checks every
route's arguments and its use of the reply against the service's signature.
A client is built per request, holding the request's bearer token; an error
the service raised arrives as itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from raydelta.actors.catalog.credentials import CredentialService
from raydelta.actors.catalog.locations import CatalogLocations
from raydelta.actors.catalog.unity.commits import UnityCommitService
from raydelta.actors.catalog.unity.namespaces import NamespaceService
from raydelta.actors.catalog.unity.permissions import Naming, PermissionService
from raydelta.actors.catalog.unity.tables import UnityTableService
from raydelta.protocol.actions import Metadata, Protocol
from raydelta.protocol.unity_catalog import (
    CatalogInfo,
    ColumnInfo,
    ExternalLocationInfo,
    GetCommitsResponse,
    GetMetastoreSummaryResponse,
    LoadedTable,
    PermissionsChange,
    PermissionsList,
    SchemaInfo,
    StagingTableInfo,
    TableInfo,
    TemporaryCredentials,
)

P = ParamSpec("P")
R = TypeVar("R")
Part = TypeVar("Part")


async def await_ref(ref: Any) -> Any:
    """The result of a Ray call, awaited; an error the remote method raised is
    re-raised as itself."""
    import ray

    try:
        return await asyncio.wrap_future(ref.future())
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


class UnityCatalogClient:
    """The Unity Catalog service of catalog ``actor``, called as ``token``."""

    def __init__(self, actor: Any, token: str | None) -> None:
        self._actor = actor
        self._token = token

    async def _call(
        self, operation: Callable[Concatenate[Part, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        reply: R = await await_ref(self._actor.unity.remote(operation, *args, **kwargs))
        return reply

    # --- catalogs and schemas ----------------------------------------------------------

    async def metastore_summary(self) -> GetMetastoreSummaryResponse:
        return await self._call(NamespaceService.metastore_summary)

    async def create_catalog(
        self, name: str, comment: str | None, properties: Mapping[str, object] | None
    ) -> CatalogInfo:
        return await self._call(
            NamespaceService.create_catalog, self._token, name, comment, properties
        )

    async def catalogs(self) -> list[CatalogInfo]:
        return await self._call(NamespaceService.catalogs, self._token)

    async def catalog(self, name: str) -> CatalogInfo:
        return await self._call(NamespaceService.catalog, self._token, name)

    async def update_catalog(
        self,
        name: str,
        *,
        comment: str | None,
        properties: Mapping[str, object] | None,
        new_name: str | None,
    ) -> CatalogInfo:
        return await self._call(
            NamespaceService.update_catalog,
            self._token,
            name,
            comment=comment,
            properties=properties,
            new_name=new_name,
        )

    async def delete_catalog(self, name: str, *, force: bool) -> None:
        await self._call(NamespaceService.delete_catalog, self._token, name, force)

    async def create_schema(
        self,
        catalog: str,
        name: str,
        comment: str | None,
        properties: Mapping[str, object] | None,
    ) -> SchemaInfo:
        return await self._call(
            NamespaceService.create_schema, self._token, catalog, name, comment, properties
        )

    async def schemas(self, catalog: str) -> list[SchemaInfo]:
        return await self._call(NamespaceService.schemas, self._token, catalog)

    async def schema(self, full_name: str) -> SchemaInfo:
        return await self._call(NamespaceService.schema, self._token, full_name)

    async def update_schema(
        self,
        full_name: str,
        *,
        comment: str | None,
        properties: Mapping[str, object] | None,
        new_name: str | None,
    ) -> SchemaInfo:
        return await self._call(
            NamespaceService.update_schema,
            self._token,
            full_name,
            comment=comment,
            properties=properties,
            new_name=new_name,
        )

    async def delete_schema(self, full_name: str, *, force: bool) -> None:
        await self._call(NamespaceService.delete_schema, self._token, full_name, force)

    # --- tables ------------------------------------------------------------------------

    async def create_staging_table(self, full_name: str) -> StagingTableInfo:
        return await self._call(UnityTableService.create_staging_table, self._token, full_name)

    async def create_table(
        self,
        full_name: str,
        *,
        table_type: str,
        data_source_format: str,
        location: str | None,
        comment: str | None,
        properties: Mapping[str, str],
        columns: Sequence[ColumnInfo],
        new_table: tuple[Protocol, Metadata] | None,
    ) -> TableInfo:
        return await self._call(
            UnityTableService.create_table,
            self._token,
            full_name,
            table_type=table_type,
            data_source_format=data_source_format,
            location=location,
            comment=comment,
            properties=properties,
            columns=columns,
            new_table=new_table,
        )

    async def get_table(self, full_name: str) -> TableInfo:
        return await self._call(UnityTableService.get_table, self._token, full_name)

    async def list_tables(self, catalog: str, schema: str) -> list[TableInfo]:
        return await self._call(UnityTableService.list_tables, self._token, catalog, schema)

    async def delete_table(self, full_name: str) -> None:
        await self._call(UnityTableService.delete_table, self._token, full_name)

    # --- commits -----------------------------------------------------------------------

    async def get_commits(
        self, table_id: str, table_uri: str, start_version: int, end_version: int | None
    ) -> GetCommitsResponse:
        return await self._call(
            UnityCommitService.get_commits,
            self._token,
            table_id,
            table_uri,
            start_version,
            end_version,
        )

    async def commit(
        self,
        table_id: str,
        table_uri: str,
        commit_info: Mapping[str, Any] | None,
        latest_backfilled_version: int | None,
    ) -> None:
        await self._call(
            UnityCommitService.commit,
            self._token,
            table_id,
            table_uri,
            commit_info,
            latest_backfilled_version,
        )

    async def load_table(self, full_name: str) -> LoadedTable:
        return await self._call(UnityCommitService.load_table, self._token, full_name)

    async def update_table(
        self,
        full_name: str,
        *,
        table_uuid: str | None,
        etag: str | None,
        commit_info: Mapping[str, Any] | None,
        latest_backfilled_version: int | None,
    ) -> LoadedTable:
        return await self._call(
            UnityCommitService.update_table,
            self._token,
            full_name,
            table_uuid=table_uuid,
            etag=etag,
            commit_info=commit_info,
            latest_backfilled_version=latest_backfilled_version,
        )

    # --- credentials -------------------------------------------------------------------

    async def table_credentials(self, table_id: str, operation: str) -> TemporaryCredentials:
        return await self._call(
            CredentialService.table_credentials, self._token, table_id, operation
        )

    async def table_credentials_by_name(
        self, full_name: str, operation: str
    ) -> TemporaryCredentials:
        return await self._call(
            CredentialService.table_credentials_by_name, self._token, full_name, operation
        )

    async def path_credentials(self, url: str, operation: str) -> TemporaryCredentials:
        return await self._call(CredentialService.path_credentials, self._token, url, operation)

    # --- external locations ------------------------------------------------------------

    async def create_external_location(
        self,
        name: str,
        url: str,
        *,
        credential_name: str | None,
        comment: str | None,
        read_only: bool,
    ) -> ExternalLocationInfo:
        return await self._call(
            CatalogLocations.create_external_location,
            self._token,
            name,
            url,
            credential_name=credential_name,
            comment=comment,
            read_only=read_only,
        )

    async def external_locations(self) -> list[ExternalLocationInfo]:
        return await self._call(CatalogLocations.external_locations, self._token)

    async def external_location(self, name: str) -> ExternalLocationInfo:
        (info,) = await self._call(CatalogLocations.external_locations, self._token, name)
        return info

    async def update_external_location(
        self,
        name: str,
        *,
        new_name: str | None,
        url: str | None,
        comment: str | None,
        credential_name: str | None,
        read_only: bool | None,
    ) -> ExternalLocationInfo:
        return await self._call(
            CatalogLocations.update_external_location,
            self._token,
            name,
            new_name=new_name,
            url=url,
            comment=comment,
            credential_name=credential_name,
            read_only=read_only,
        )

    async def delete_external_location(self, name: str, *, force: bool) -> None:
        await self._call(CatalogLocations.delete_external_location, self._token, name, force)

    # --- permissions and principals ----------------------------------------------------

    async def permissions(
        self, securable_type: str, full_name: str, principal: str | None, naming: Naming
    ) -> PermissionsList:
        return await self._call(
            PermissionService.permissions,
            self._token,
            securable_type,
            full_name,
            principal,
            naming,
        )

    async def update_permissions(
        self,
        securable_type: str,
        full_name: str,
        changes: Sequence[PermissionsChange],
        naming: Naming,
    ) -> PermissionsList:
        return await self._call(
            PermissionService.update_permissions,
            self._token,
            securable_type,
            full_name,
            changes,
            naming,
        )

    async def principals(self) -> list[str]:
        return await self._call(PermissionService.principals, self._token)

    async def create_principal(self, name: str) -> str:
        return await self._call(PermissionService.create_principal, self._token, name)

    async def rotate_token(self, name: str) -> str:
        return await self._call(PermissionService.rotate_token, self._token, name)

    async def delete_principal(self, name: str) -> None:
        await self._call(PermissionService.delete_principal, self._token, name)


__all__ = ["UnityCatalogClient", "await_ref"]
