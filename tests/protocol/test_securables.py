"""protocol.securables: where privileges are granted and what creating a table needs."""

from __future__ import annotations

import pytest

from raydelta.protocol.privileges import Privilege, parse_privileges
from raydelta.protocol.securables import (
    Securable,
    SecurableType,
    check_applicable,
    held_on,
    parse_securable_type,
    table_creation_requirements,
)

P = Privilege
TABLE = Securable.table("main.sales.orders")
SCHEMA = Securable.schema("main.sales")
CATALOG = Securable.catalog("main")
META = Securable.metastore()


def test_ancestors() -> None:
    assert TABLE.ancestors() == (SCHEMA, CATALOG, META)
    assert SCHEMA.ancestors() == (CATALOG, META)
    assert CATALOG.ancestors() == (META,)
    assert Securable.table("flat").ancestors() == (META,)
    assert Securable.external_location("landing").ancestors() == (META,)
    assert META.ancestors() == ()
    assert Securable.table("*") == META  # the old catalog-wide table grant


def test_grants_flow_down_and_tables_keep_only_table_privileges() -> None:
    grants = {SCHEMA: {P.USE_SCHEMA, P.CREATE_TABLE, P.READ}, CATALOG: {P.USE_CATALOG}}
    assert held_on(TABLE, grants) == {P.READ}  # USE_* never make a table visible
    assert held_on(SCHEMA, grants) == {P.USE_SCHEMA, P.CREATE_TABLE, P.READ}
    assert held_on(CATALOG, grants) == {P.USE_CATALOG}
    assert held_on(Securable.table("main.other.t"), grants) == set()
    assert held_on(TABLE, {CATALOG: {P.OWN}}) == {P.READ, P.WRITE, P.ALTER, P.OWN}
    assert held_on(Securable.external_location("x"), {META: {P.CREATE_TABLE}}) == set()
    assert P.CREATE_EXTERNAL_TABLE in held_on(Securable.external_location("x"), {META: {P.OWN}})


def test_applicable_privileges() -> None:
    check_applicable(SCHEMA, [P.USE_SCHEMA, P.CREATE_TABLE])
    check_applicable(Securable.external_location("x"), [P.READ_FILES, P.CREATE_EXTERNAL_TABLE])
    with pytest.raises(ValueError, match="use_catalog cannot be granted on schema"):
        check_applicable(SCHEMA, [P.USE_CATALOG])
    with pytest.raises(ValueError, match="read_files cannot be granted on table"):
        check_applicable(TABLE, [P.READ_FILES])


def test_creation_requirements() -> None:
    assert table_creation_requirements("main.sales.orders") == [
        (CATALOG, {P.USE_CATALOG}),
        (SCHEMA, {P.USE_SCHEMA, P.CREATE_TABLE}),
    ]
    assert table_creation_requirements("flat") == [(META, {P.CREATE_TABLE})]


def test_names_parse_in_any_case() -> None:
    assert parse_securable_type("EXTERNAL_LOCATION") is SecurableType.EXTERNAL_LOCATION
    assert parse_privileges(["USE_CATALOG", "create_external_table"]) == {
        P.USE_CATALOG,
        P.CREATE_EXTERNAL_TABLE,
    }
    with pytest.raises(ValueError, match="unknown securable type"):
        parse_securable_type("volume")
