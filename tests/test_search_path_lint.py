"""Harness SQL must name business objects with their schema: what the lint finds and fixes."""

from __future__ import annotations

from pathlib import Path

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
        ("SELECT sum((pgstattuple(c.oid)).tuple_count) FROM pg_class c", "pgstattuple"),
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


@pytest.mark.parametrize(
    "sql,found",
    [
        ("UPDATE public.orders SET amount = 1 WHERE id = 1", "UPDATE"),
        ("SELECT pg_catalog.count(*) FROM public.orders", "relation public.orders"),
        ("SELECT public.room_for(4)", "routine public.room_for"),
        ("DO $$ BEGIN PERFORM 1; END $$", "a DO block"),
        ("COPY public.audit_log FROM STDIN", "COPY"),
    ],
)
def test_superuser_sql_that_could_run_the_agents_code_is_found(sql: str, found: str) -> None:
    """A superuser statement run while the agent works must not touch what the agent could
    have planted a trigger, rule, default, view or policy in."""
    from dbaops.dbms.postgres.superuser_reach import agent_reachable

    assert found in agent_reachable(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "COMMENT ON ROLE dashboard IS 'released'",
        "ALTER ROLE bi SET work_mem = '1MB'",
        "SELECT pg_catalog.pg_sleep(1), count(*) FROM pg_stat_activity",
        "REFRESH MATERIALIZED VIEW public.order_totals",  # runs as the view's owner
        "VACUUM ANALYZE public.orders",
    ],
)
def test_superuser_sql_that_reaches_nothing_of_the_agents_passes(sql: str) -> None:
    from dbaops.dbms.postgres.superuser_reach import agent_reachable

    assert agent_reachable(sql) == []


def test_check_rejects_a_superuser_fault_on_business_tables_while_the_agent_works(
    tmp_path: Path,
) -> None:
    """``dbaops check``: a superuser fault after t = 0 that writes a business table is
    rejected (a fixture role's is not, nor the same fault before the agent starts)."""
    import yaml

    from dbaops.scenario.loader import ScenarioError, check_scenario

    source = Path(__file__).parent / "scenarios" / "t-olap.yaml"
    data = yaml.safe_load(source.read_text())
    fault = data["events"][0]["fault"]
    assert fault["role"] == "migrator"
    path = tmp_path / "t-olap.yaml"
    path.write_text(yaml.safe_dump(data))
    check_scenario(path)
    del fault["role"]  # the superuser, by default
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match="runs as the superuser 'postgres' while the agent"):
        check_scenario(path)
    data["events"][0]["at"] = 0
    path.write_text(yaml.safe_dump(data))
    check_scenario(path)
