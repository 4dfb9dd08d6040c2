"""PostgreSQL's part of building a dirty snapshot: scenario settings, construction kept out of
the statement statistics, the replica profile's standby
(:class:`~dbaops.dbms.interface.DatabaseEngine`'s preparation hooks)."""

from __future__ import annotations

import anyio

from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.server import PostgresBackend
from dbaops.dbms.postgres.sqltext import quote_literal
from dbaops.dbms.postgres.statements import (
    StatementKey,
    forget_statements_since,
    statement_counts,
)
from dbaops.scenario.model import ReplicaSpec


async def apply_server_settings(backend: PostgresBackend, settings: dict[str, str]) -> None:
    """ALTER SYSTEM for each setting, then a restart (some need one)."""
    assert backend.cluster is not None
    conn = await backend.admin.harness_connect(admin=True)
    try:
        for name, value in settings.items():
            await conn.execute(f"ALTER SYSTEM SET {name} = {quote_literal(value)}")
    finally:
        await conn.close()
    await backend.cluster.restart()


async def statement_marks(endpoint: Endpoint) -> dict[StatementKey, int] | None:
    """The statement statistics' call counts now (before construction; None without
    pg_stat_statements)."""
    conn = await endpoint.harness_connect(admin=True)
    try:
        return await statement_counts(conn)
    finally:
        await conn.close()


async def forget_statements(endpoint: Endpoint, before: dict[StatementKey, int]) -> None:
    """Take what ran since ``before`` out of the statistics the snapshot keeps."""
    conn = await endpoint.harness_connect(admin=True)
    try:
        await forget_statements_since(conn, before)
    finally:
        await conn.close()


async def make_standby(backend: PostgresBackend, replica: ReplicaSpec) -> None:
    """The replica profile's standby, made once the primary is prepared (it goes into the
    snapshot with it), named synchronous when the profile says so."""
    if backend.cluster is None:
        raise ValueError("database.replica: a standby needs the embedded backend (not --dsn)")
    await backend.cluster.create_standby(replica.application_name, replica.settings, replica.slot)
    if replica.synchronous:
        conn = await backend.admin.harness_connect(admin=True)
        try:
            sql = await conn.fetchval(
                "SELECT format('ALTER SYSTEM SET synchronous_standby_names = %L', $1::text)",
                replica.application_name,
            )
            await conn.execute(sql)
            await conn.execute("SELECT pg_catalog.pg_reload_conf()")
        finally:
            await conn.close()
    await await_standby(backend, replica)


async def await_standby(
    backend: PostgresBackend, replica: ReplicaSpec, timeout_s: float = 120.0
) -> None:
    """Wait until the standby streams from the primary and has replayed what it has written."""
    conn = await backend.admin.harness_connect(admin=True)
    try:
        with anyio.fail_after(timeout_s):
            while True:
                caught_up = await conn.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = $1"
                    " AND state = 'streaming' AND replay_lsn >= pg_current_wal_lsn())",
                    replica.application_name,
                )
                if caught_up:
                    break
                await anyio.sleep(0.2)  # a condition on the server: polled, like a probe
    except TimeoutError:
        raise ValueError(
            f"the standby {replica.application_name!r} did not catch up in {timeout_s:.0f} s"
        ) from None
    finally:
        await conn.close()
