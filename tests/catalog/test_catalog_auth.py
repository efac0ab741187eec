"""Authorization: tokens, grants, and commits judged by their content."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import raydelta
import raydelta.errors
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


def test_security_settings_are_refused_without_authorization(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    catalog.create_table("t", SCHEMA, partition_by=["date"])
    for attempt in (
        lambda: catalog.create_principal("writer"),
        lambda: catalog.grant("writer", "t", ["write"]),
        lambda: catalog.revoke("writer", "t", ["alter"]),
        lambda: catalog.principals(),
    ):
        with pytest.raises(
            raydelta.errors.AuthorizationDisabledError, match="without authorization"
        ):
            attempt()
    assert catalog.authorization is False


def test_enabling_authorization_is_explicit_and_stays(
    new_catalog: NewCatalog, tmp_path: Path
) -> None:
    import ray

    root = str(tmp_path / "secured-later")
    catalog = new_catalog(root=root)
    table = catalog.create_table("t", SCHEMA, partition_by=["date"])
    assert append(table, "open") == 1
    token = catalog.enable_authorization()
    assert token.startswith("catalog-admin.") and catalog.token == token
    assert catalog.authorization is True
    with pytest.raises(raydelta.InvalidArgumentError, match="on already"):
        catalog.enable_authorization()
    # callers without a token are refused now; the admin grants as usual
    with pytest.raises(raydelta.errors.UnauthenticatedError):
        append(table, "anonymous")  # opened before, without a token
    writer = catalog.create_principal("writer")
    catalog.grant("writer", "t", ["read", "write"])
    assert append(catalog.open_table("t", token=writer), "granted") == 2
    # a restarted actor (its settings still say authorization=False) keeps it on
    ray.kill(catalog.actor, no_restart=False)
    assert catalog.authorization is True
    with pytest.raises(raydelta.PermissionDeniedError):
        alter(catalog.open_table("t", token=writer))


def test_starting_an_existing_catalog_with_authorization_turns_it_on(
    new_catalog: NewCatalog, tmp_path: Path
) -> None:
    from raydelta.actors.catalog.actor import catalog_actor_name
    from raydelta.actors.catalog.auth import Authorizer
    from raydelta.storage.table_location import normalize_uri
    from tests.catalog.conftest import kill_actor

    root = str(tmp_path / "reopened")
    first = new_catalog(root=root)
    first.create_table("t", SCHEMA, partition_by=["date"])
    assert Authorizer.recorded(normalize_uri(root)) is False  # what `catalog serve` reads
    kill_actor(catalog_actor_name(first.name))
    secured = new_catalog(root=root, authorization=True)  # `catalog serve --authorization`
    assert secured.token is not None and secured.authorization is True
    assert secured.resolve("t").catalog_managed  # the same catalog, now secured
    assert Authorizer.recorded(normalize_uri(root)) is True
    kill_actor(catalog_actor_name(secured.name))
    again = new_catalog(root=root)  # authorization=False asked: it stays on
    assert again.token is None and again.authorization is True
    with pytest.raises(raydelta.errors.UnauthenticatedError):
        again.resolve("t")
