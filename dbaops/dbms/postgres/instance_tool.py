"""``manage_instance``: server status and control (embedded backend only for stop/start).

It is the control plane of a managed service: it reaches the server through the harness's
reserved (superuser) connection slots, so it works when the server's connections are
exhausted, but every statement runs under ``SET ROLE`` to the agent's own role, so the agent's
privileges decide what it may do. ``set_parameter`` looks the name up in the server's
``pg_settings`` (an unknown name is refused; nothing the agent typed is pasted into SQL), has
the server quote the statement, and records it so the safety judge reads it as SQL.
"""

from __future__ import annotations

from typing import Any

import anyio

from dbaops.dbms.interface import InstanceController
from dbaops.dbms.postgres.dialect import DIALECT
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.tools.base import Tool, ToolResult
from dbaops.tools.instance import change_state, manage_instance_spec
from dbaops.tools.recording import call_detail

ACTIONS = DIALECT.instance_actions


CONTROL_APPLICATION = "dba_agent_control"
#: How long ``status`` waits for the server to accept a connection (a frozen server never does).
STATUS_CONNECT_TIMEOUT_S = 10.0


class ParameterRefused(ValueError):
    """set_parameter named something that is not a server parameter."""


def instance_tool(
    endpoint: Endpoint, instance: InstanceController | None, role: str = "dba_agent"
) -> Tool:
    """Build the tool; without an InstanceController, process control is reported unavailable."""

    async def connect() -> Any:
        return await endpoint.harness_connect(
            admin=True, role=role, application_name=CONTROL_APPLICATION
        )

    async def status() -> ToolResult:
        running = await instance.is_running() if instance else None
        machine = await instance.machine_summary() if instance else None
        machine_line = f"\n{machine}" if machine else ""
        row = None
        problem = f"no answer in {STATUS_CONNECT_TIMEOUT_S:g} s"
        with anyio.move_on_after(STATUS_CONNECT_TIMEOUT_S):  # a frozen server never answers
            try:
                conn = await connect()
            except OSError as exc:
                problem = str(exc)
            else:
                try:
                    row = await conn.fetchrow(
                        "SELECT version() AS version, "
                        "pg_postmaster_start_time()::text AS started, "
                        "pg_is_in_recovery() AS in_recovery, "
                        "(SELECT count(*) FROM pg_stat_activity) AS sessions, "
                        "(SELECT string_agg(name, ', ') FROM pg_settings "
                        "WHERE pending_restart) AS pending"
                    )
                finally:
                    conn.terminate()
        if row is None:
            return ToolResult(
                ok=True,
                observation=f"server running: {running}; not accepting connections "
                f"({problem}){machine_line}",
                detail={"running": running},
            )
        text = (
            f"server running: {True if running is None else running}\n{row['version']}\n"
            f"started: {row['started']}\nin recovery: {row['in_recovery']}\n"
            f"sessions: {row['sessions']}\n"
            f"settings pending restart: {row['pending'] or 'none'}{machine_line}"
        )
        return ToolResult(ok=True, observation=text, detail={"running": running})

    async def reload() -> ToolResult:
        conn = await connect()
        try:
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()
        return ToolResult(ok=True, observation="reload: done", detail={"state_change": "reload"})

    async def set_parameter(name: str, value: str) -> ToolResult:
        detail = call_detail()
        detail.update(role=role, state_change="set_parameter")
        conn = await connect()
        try:
            canonical = await conn.fetchval(
                "SELECT name FROM pg_settings WHERE name = lower($1)", name
            )
            if canonical is None:
                raise ParameterRefused(f"unknown parameter {name[:100]!r}")
            sql = await conn.fetchval(
                "SELECT format('ALTER SYSTEM SET %I = %L', $1::text, $2::text)", canonical, value
            )
            detail["sql"] = sql
            await conn.execute(sql)
            await conn.execute("SELECT pg_reload_conf()")
            pending = await conn.fetchval(
                "SELECT string_agg(name, ', ') FROM pg_settings WHERE pending_restart"
            )
        finally:
            await conn.close()
        note = f"; pending restart: {pending}" if pending else ""
        return ToolResult(ok=True, observation=f"set_parameter: done{note}", detail=detail)

    async def handler(args: dict[str, Any]) -> ToolResult:
        action = str(args.get("action", "status"))
        if action not in ACTIONS:
            return ToolResult(
                ok=False,
                error=f"unknown action {action!r}",
                observation=f"error: unknown action {action!r}; actions: {', '.join(ACTIONS)}",
            )
        try:
            if action == "status":
                return await status()
            if action == "reload":
                return await reload()
            if action == "set_parameter":
                name, value = args.get("name"), args.get("value")
                if not name or value is None:
                    return ToolResult(
                        ok=False,
                        error="set_parameter needs name and value",
                        observation="error: set_parameter needs name and value",
                    )
                return await set_parameter(str(name), str(value))
            if instance is None:
                msg = f"{action} is unavailable: this server is not managed by dbaops (--dsn)"
                return ToolResult(ok=False, error=msg, observation=f"error: {msg}")
            return await change_state(instance, action)
        except Exception as exc:  # noqa: BLE001 - reported to the agent as the observation
            msg = f"{action} failed: {type(exc).__name__}: {exc}"
            return ToolResult(
                ok=False, error=msg, observation=f"error: {msg}", detail=dict(call_detail())
            )

    spec = manage_instance_spec(
        "Instance control. action: status | reload | set_parameter (ALTER SYSTEM SET name = "
        "value, then reload; reports when a restart is needed) | restart | stop | start.",
        ACTIONS,
        "parameter",
    )
    return Tool(spec=spec, handler=handler)
