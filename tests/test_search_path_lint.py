"""Harness SQL must name business objects with their schema: what the lint finds and fixes."""

from __future__ import annotations

import pytest

from dbaops.dbms.postgres.search_path import canonical_sql, qualify, search_path_problems


@pytest.mark.parametrize(
    "sql,name",
    [
        ("SELECT count(*) FROM orders", "orders"),
        ("SELECT 1 FROM pg_class WHERE oid = 'orders'::regclass", "orders"),
        ("SELECT pg_relation_size('orders')", "orders"),
        ("SELECT has_table_privilege('reporting', 'orders', 'SELECT')", "orders"),
        ("DROP INDEX orders_idx", "orders_idx"),
        ("SELECT public.room_for(4)", "public.room_for"),
        ("SELECT 1 OPERATOR(public.<) 2", "public.<"),
        ("DO $$ BEGIN INSERT INTO audit_log (note) VALUES ('x'); END $$", "audit_log"),
    ],
)
def test_a_name_the_search_path_would_resolve_is_found(sql: str, name: str) -> None:
    assert name in [p.name for p in search_path_problems(sql)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM public.orders o JOIN pg_stat_activity a ON true",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "SELECT 'public.orders'::regclass, pg_catalog.now(), 'pg_class'::regclass",
        "DO $$ BEGIN PERFORM pg_switch_wal(); END $$",
    ],
)
def test_qualified_and_catalog_names_pass(sql: str) -> None:
    assert search_path_problems(sql) == []


def test_a_routine_the_construction_made_may_be_called() -> None:
    assert search_path_problems("SELECT public.room_for(4)", frozenset({"public.room_for"})) == []


def test_qualify_writes_the_schema_and_the_canonical_form_takes_it_out() -> None:
    sql = "SELECT count(*) FROM orders WHERE oid = 'orders'::regclass"
    fixed = qualify(sql)
    assert fixed == "SELECT count(*) FROM public.orders WHERE oid = 'public.orders'::regclass"
    assert search_path_problems(fixed) == []
    assert canonical_sql(fixed) == sql
