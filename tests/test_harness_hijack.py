"""Harness sessions cannot run the agent's code (the CVE-2018-1058 pattern), on every major.

The agent (a member of the schema's owner role, so it may create in ``public``) plants the
same-name overloads a real attacker would: an aggregate ``count(integer)``, functions
``format(text, text, text)``, ``lower(name)`` and ``has_table_privilege(text, text,
text)``, an operator ``< (real, numeric)``, each an exact type match that beats the coercing
or variadic one in ``pg_catalog`` whatever the order of the search path. Each records its call
in a log through a security-definer function of the agent's own and forges its answer. Then
every kind of session the harness opens while or after the agent acts runs the statement that
would reach the overload: none of them does, and each still gets the true answer. The same
statements in an ordinary session (the agent's own search path) do reach every overload, so
the test fails if the harness's defence is removed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from dbaops.clock import ScenarioClock
from dbaops.dbms.postgres.binaries import installed_majors
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.harness_role import HARNESS_ROLE
from dbaops.dbms.postgres.instance_tool import instance_tool
from dbaops.dbms.postgres.sampler import MetricSampler
from dbaops.testing.shop import small_shop

pytestmark = pytest.mark.anyio

#: What the agent plants, as itself, through nothing but SQL.
PLANTS = (
    "CREATE TABLE public.hijack_log (what text, by_user text)",
    "CREATE FUNCTION public.mark(what text) RETURNS void LANGUAGE sql SECURITY DEFINER "
    "AS $$ INSERT INTO public.hijack_log VALUES (what, session_user) $$",
    "GRANT EXECUTE ON FUNCTION public.mark(text) TO PUBLIC",
    "CREATE FUNCTION public.count_int(bigint, integer) RETURNS bigint LANGUAGE sql "
    "AS $$ SELECT public.mark('count(integer)'); SELECT 424242::bigint $$",
    "CREATE AGGREGATE public.count(integer) "
    "(sfunc = public.count_int, stype = bigint, initcond = '0')",
    "CREATE FUNCTION public.format(text, text, text) RETURNS text LANGUAGE sql "
    "AS $$ SELECT public.mark('format'); SELECT 'SELECT 1' $$",
    "CREATE FUNCTION public.lower(name) RETURNS text LANGUAGE sql "
    "AS $$ SELECT public.mark('lower(name)'); SELECT 'etl_nightly' $$",
    "CREATE FUNCTION public.has_table_privilege(text, text, text) RETURNS boolean "
    "LANGUAGE sql AS $$ SELECT public.mark('has_table_privilege'); SELECT true $$",
    "CREATE FUNCTION public.lt_forged(real, numeric) RETURNS boolean LANGUAGE sql "
    "AS $$ SELECT public.mark('<'); SELECT true $$",
    "CREATE OPERATOR public.< (leftarg = real, rightarg = numeric, function = public.lt_forged)",
)

#: (the overload it would reach, the harness statement, its true answer)
PROBES: tuple[tuple[str, str, Any], ...] = (
    ("count(integer)", "SELECT count(x) FROM (VALUES (1), (2), (3)) AS v(x)", 3),
    (
        "format",
        "SELECT format('SET %I = %L', 'work_mem'::text, '8MB'::text)",
        "SET work_mem = '8MB'",
    ),
    ("lower(name)", "SELECT lower('DBA'::name)", "dba"),
    (
        "has_table_privilege",
        "SELECT has_table_privilege('analyst'::text, 'public.hijack_log'::text, 'DELETE'::text)",
        False,
    ),
    ("<", "SELECT 5::real < 2::numeric", False),
)


@pytest.fixture(params=sorted(installed_majors()), ids=lambda m: f"pg{m}")
async def shop(request: pytest.FixtureRequest) -> AsyncIterator[Endpoint]:
    """The shop fixture on each installed major, with the agent's plants in it."""
    binaries = installed_majors()[request.param]
    async with small_shop(f"t-hijack-pg{binaries.major}", binaries) as shop:
        endpoint = shop.model_copy(update={"monitor_user": HARNESS_ROLE, "hide_harness": True})
        agent = await endpoint.connect("dba_agent", "dba_agent")
        try:
            for sql in PLANTS:
                await agent.execute(sql)
        finally:
            await agent.close()
        yield endpoint


async def _reached(endpoint: Endpoint) -> list[str]:
    conn = await endpoint.harness_connect(admin=True)
    try:
        rows = await conn.fetch("SELECT what FROM public.hijack_log")
        await conn.execute("TRUNCATE public.hijack_log")
    finally:
        await conn.close()
    return [r["what"] for r in rows]


async def _answers(connect: Callable[[], Awaitable[asyncpg.Connection]]) -> list[Any]:
    conn = await connect()
    try:
        return [await conn.fetchval(sql) for _, sql, _ in PROBES]
    finally:
        await conn.close()


async def test_an_ordinary_session_reaches_every_plant(shop: Endpoint) -> None:
    """The control: with a role's own search path each statement runs the agent's code."""
    answers = await _answers(lambda: shop.connect("app_rw", "order-service"))
    assert set(await _reached(shop)) == {name for name, _, _ in PROBES}
    assert answers != [truth for _, _, truth in PROBES]


async def test_no_harness_session_reaches_a_plant(shop: Endpoint) -> None:
    sessions: dict[str, Callable[[], Awaitable[asyncpg.Connection]]] = {
        "monitor": lambda: shop.harness_connect(),
        "probe": lambda: shop.harness_connect(probe=True),
        "superuser": lambda: shop.harness_connect(admin=True),
        "control plane (SET ROLE)": lambda: shop.harness_connect(admin=True, role="dba_agent"),
        "check as a role": lambda: shop.probe_session("app_rw"),
        "check as the agent's role": lambda: shop.probe_session("dba_agent"),
        "check as the admin": lambda: shop.probe_session("postgres"),
        "actor as the superuser": lambda: shop.actor_session("postgres", "psql"),
        "actor as a role": lambda: shop.actor_session("batch", "price_sync"),
    }
    for name, connect in sessions.items():
        answers = await _answers(connect)
        assert await _reached(shop) == [], name
        assert answers == [truth for _, _, truth in PROBES], name


async def test_probes_log_in_as_the_monitoring_role_or_their_own(shop: Endpoint) -> None:
    users = {}
    for name, conn in (
        ("monitor", await shop.harness_connect()),
        ("role", await shop.probe_session("app_rw")),
    ):
        try:
            users[name] = await conn.fetchrow(
                "SELECT session_user::text AS s, current_user::text AS c, "
                "current_setting('search_path') AS path, "
                "(SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = session_user) AS su"
            )
        finally:
            await conn.close()
    assert tuple(users["monitor"]) == (HARNESS_ROLE, HARNESS_ROLE, "pg_catalog, pg_temp", False)
    assert tuple(users["role"]) == ("app_rw", "app_rw", "pg_catalog, pg_temp", False)


async def test_the_sampler_and_the_control_plane_run_no_plant(shop: Endpoint) -> None:
    sampler = MetricSampler(shop.harness_connect, ScenarioClock(), None, database=shop.database)
    assert await sampler.sample_once()
    await sampler.flush()
    tool = instance_tool(shop, None, role="dba_agent")
    result = await tool.handler({"action": "set_parameter", "name": "work_mem", "value": "8MB"})
    assert result.ok, result.observation
    assert result.detail["sql"] == "ALTER SYSTEM SET work_mem = '8MB'"
    assert await _reached(shop) == []
    conn = await shop.harness_connect(admin=True)
    try:
        await conn.execute("ALTER SYSTEM RESET work_mem")
    finally:
        await conn.close()
