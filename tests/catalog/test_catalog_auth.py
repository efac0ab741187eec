"""Authorization: tokens, grants, and commits judged by their content."""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pytest

import raydelta
from raydelta.catalog import Catalog, CatalogTable
from raydelta.protocol.actions import AddFile

SCHEMA = pa.schema([("date", pa.string()), ("value", pa.int64())])
NewCatalog = Callable[..., Catalog]


def add(path: str) -> AddFile:
    return AddFile.model_validate(
        {
            "path": path,
            "partitionValues": {"date": "d"},
            "size": 1,
            "modificationTime": 0,
            "dataChange": True,
            "stats": json.dumps({"numRecords": 1}),
        }
    )


def append(table: CatalogTable, name: str) -> int:
    return table.transaction().add(add(f"date=d/{name}.parquet")).commit()


def alter(table: CatalogTable) -> int:
    return table.transaction().set_metadata(properties={"owner.note": "x"}).commit()


@pytest.fixture
def secured(new_catalog: NewCatalog) -> tuple[Catalog, dict[str, str]]:
    catalog = new_catalog(authorization=True)
    assert catalog.token is not None  # the creator's bootstrap token
    catalog.create_table("t", SCHEMA, partition_by=["date"])
    tokens = {name: catalog.create_principal(name) for name in ("reader", "writer", "alterer")}
    catalog.grant("reader", "t", [raydelta.Privilege.READ])
    catalog.grant("writer", "t", ["read", "write"])
    catalog.grant("alterer", "t", {raydelta.Privilege.READ, raydelta.Privilege.ALTER})
    return catalog, tokens


@pytest.mark.parametrize(
    ("principal", "can_append", "can_alter"),
    [("reader", False, False), ("writer", True, False), ("alterer", False, True)],
)
def test_matrix(
    secured: tuple[Catalog, dict[str, str]], principal: str, can_append: bool, can_alter: bool
) -> None:
    catalog, tokens = secured
    table = catalog.open_table("t", token=tokens[principal])
    before = table.version()
    assert table.snapshot().version == before  # everyone here may read
    if can_append:
        assert append(table, principal) == before + 1
    else:
        with pytest.raises(raydelta.PermissionDeniedError) as caught:
            append(table, principal)
        assert caught.value.missing == ("write",)
    after_append = table.version()
    if can_alter:
        assert alter(table) == after_append + 1
    else:
        with pytest.raises(raydelta.PermissionDeniedError) as caught:
            alter(table)
        assert "alter" in caught.value.missing
        assert table.version() == after_append  # unchanged
        assert "owner.note" not in table.snapshot().metadata.configuration


def test_owner_and_bootstrap(secured: tuple[Catalog, dict[str, str]]) -> None:
    catalog, tokens = secured
    owner = catalog.open_table("t")  # bootstrap token: owns everything
    assert alter(owner) == 1
    with pytest.raises(raydelta.PermissionDeniedError):
        catalog.grant("reader", "t", ["write"], token=tokens["writer"])  # not an owner
    catalog.grant("writer", "t", ["alter"])
    assert alter(catalog.open_table("t", token=tokens["writer"])) == 2
    catalog.revoke("writer", "t", ["write", "alter"])
    with pytest.raises(raydelta.PermissionDeniedError):
        append(catalog.open_table("t", token=tokens["writer"]), "late")


def test_unauthenticated_and_forged_tokens(secured: tuple[Catalog, dict[str, str]]) -> None:
    catalog, tokens = secured
    principal, _, secret = tokens["writer"].partition(".")
    forged = f"{principal}.{secret[:-2]}xx"
    for bad in (forged, "nobody.secret", "no-dot"):
        with pytest.raises(raydelta.UnauthenticatedError):
            catalog.open_table("t", token=bad)
    handle = catalog.open_table("t", token=tokens["writer"])
    handle.token = forged
    with pytest.raises(raydelta.UnauthenticatedError):
        append(handle, "forged")
    assert catalog.open_table("t").version() == 0
    with pytest.raises(raydelta.PermissionDeniedError):
        catalog.create_principal("intruder", token=tokens["writer"])


def test_tokens_survive_a_restart(secured: tuple[Catalog, dict[str, str]]) -> None:
    import ray

    catalog, tokens = secured
    ray.kill(catalog.actor, no_restart=False)  # Ray restarts it: state from disk
    table = catalog.open_table("t", token=tokens["writer"])
    assert append(table, "after-restart") == 1
    with pytest.raises(raydelta.PermissionDeniedError):
        alter(table)


def test_authorization_off_everyone_owns(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    assert catalog.token is None
    table = catalog.create_table("open", SCHEMA, partition_by=["date"])
    assert append(table, "a") == 1
    assert alter(table) == 2
