"""``manage_instance`` on TiDB: status, ``SET GLOBAL`` with validated names, and (on the
embedded server) restart, stop and start.

Every statement runs on a connection of the agent's own user, so its privileges (and Security
Enhanced Mode) decide what it may do. ``set_variable`` looks the name up among the global
variables that user can see (an unknown or hidden name is refused; nothing the agent typed is
pasted into SQL: the value is sent as a quoted literal), and records the statement so the
safety judge reads it as SQL.
"""

from __future__ import annotations

from typing import Any, Protocol

import anyio
import pymysql

from dbaops.dbms.tidb.dialect import DIALECT
from dbaops.dbms.tidb.endpoint import CONNECTION_ERRORS, TidbEndpoint, execute, fetch_all
from dbaops.tools.base import Tool, ToolResult
from dbaops.tools.instance import change_state, manage_instance_spec
from dbaops.tools.recording import call_detail

ACTIONS = DIALECT.instance_actions
#: How long ``status`` waits for the server to answer.
STATUS_TIMEOUT_S = 10.0
#: The variables ``status`` shows (those the agent's user can read).
STATUS_VARIABLES = (
    "tidb_mem_quota_query",
    "tidb_server_memory_limit",
    "tidb_gc_life_time",
    "max_execution_time",
    "tidb_txn_mode",
)


class TidbInstance(Protocol):
    """Process control of the embedded server."""

    def process_alive(self) -> bool: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def restart(self) -> None: ...


class VariableRefused(ValueError):
    """set_variable named something that is not a global variable the agent can see."""


def _fail(msg: str, detail: dict[str, Any] | None = None) -> ToolResult:
    return ToolResult(ok=False, error=msg, observation=f"error: {msg}", detail=detail or {})


def tidb_instance_tool(
    endpoint: TidbEndpoint, instance: TidbInstance | None, user: str, password: str
) -> Tool:
    """The tool; without an instance (a user's own server), process control is unavailable."""

    async def connect() -> Any:
        return await endpoint.raw_connect(user, password, connect_timeout_s=STATUS_TIMEOUT_S)

    async def status() -> ToolResult:
        running = instance.process_alive() if instance is not None else None
        rows: dict[str, Any] | None = None
        problem = f"no answer in {STATUS_TIMEOUT_S:g} s"
        with anyio.move_on_after(STATUS_TIMEOUT_S):
            try:
                conn = await connect()
            except (*CONNECTION_ERRORS, pymysql.err.MySQLError) as exc:
                problem = str(exc)
            else:
                try:
                    rows = (
                        await fetch_all(
                            conn,
                            "SELECT VERSION() AS version, "
                            "(SELECT count(*) FROM information_schema.PROCESSLIST) AS sessions",
                        )
                    )[0]
                    names = ", ".join(f"'{v}'" for v in STATUS_VARIABLES)
                    rows["variables"] = await fetch_all(
                        conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"
                    )
                finally:
                    conn.close()
        shown = "unknown (not managed by dbaops)" if running is None else running
        if rows is None:
            text = f"server running: {shown}; not accepting connections ({problem})"
            return ToolResult(ok=True, observation=text, detail={"running": running})
        variables = "\n".join(f"  {r['Variable_name']} = {r['Value']}" for r in rows["variables"])
        text = (
            f"server running: {shown}\nversion: {rows['version']}\n"
            f"sessions: {rows['sessions']}\nglobal variables:\n{variables}"
        )
        return ToolResult(ok=True, observation=text, detail={"running": running})

    async def set_variable(name: str, value: str) -> ToolResult:
        detail = call_detail()
        detail.update(role=user, state_change="set_variable")
        conn = await connect()
        try:
            found = await fetch_all(conn, "SHOW GLOBAL VARIABLES LIKE %s", (name.lower(),))
            exact = [r for r in found if str(r["Variable_name"]) == name.lower()]
            if not exact:
                raise VariableRefused(f"unknown global variable {name[:100]!r}")
            canonical = str(exact[0]["Variable_name"])
            literal = conn.escape(value)
            detail["sql"] = f"SET GLOBAL {canonical} = {literal}"
            await execute(conn, detail["sql"])
            now = await fetch_all(conn, "SHOW GLOBAL VARIABLES LIKE %s", (canonical,))
        finally:
            conn.close()
        shown = now[0]["Value"] if now else value
        return ToolResult(
            ok=True, observation=f"set_variable: {canonical} = {shown}", detail=detail
        )

    async def handler(args: dict[str, Any]) -> ToolResult:
        action = str(args.get("action", "status"))
        if action not in ACTIONS:
            return _fail(f"unknown action {action!r}; actions: {', '.join(ACTIONS)}")
        try:
            if action == "status":
                return await status()
            if action == "set_variable":
                name, value = args.get("name"), args.get("value")
                if not name or value is None:
                    return _fail("set_variable needs name and value")
                return await set_variable(str(name), str(value))
            if instance is None:
                return _fail(f"{action} is unavailable: this server is not managed by dbaops")
            return await change_state(instance, action)
        except Exception as exc:  # noqa: BLE001 - reported to the agent as the observation
            return _fail(f"{action} failed: {type(exc).__name__}: {exc}", dict(call_detail()))

    spec = manage_instance_spec(
        "TiDB instance control. action: status | set_variable (SET GLOBAL name = value; the "
        "name must be a global variable you can see) | restart | stop | start.",
        ACTIONS,
        "variable",
    )
    return Tool(spec=spec, handler=handler)
