"""The PostgreSQL tool catalog an agent receives: the five protocol roles plus mailbox tools.

Roles (paper §3.3.2): ``query_metrics`` (metric), ``execute_sql`` (sql), ``manage_instance``
(control), ``read_log`` (log), ``query_knowledge_base`` (kb). Metric, log and knowledge tools
are read-only by contract; only SQL and instance control change the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dbaops.clock import ScenarioClock
from dbaops.dbms.dialect import engine_dialect
from dbaops.dbms.interface import InstanceController, Observations
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.instance_tool import instance_tool
from dbaops.dbms.postgres.sql_tool import SqlSession, sql_tool
from dbaops.mailbox import Mailbox
from dbaops.tools.base import Tool, ToolResult
from dbaops.tools.knowledge import knowledge_tool
from dbaops.tools.logs import ServerLogSource, log_tool
from dbaops.tools.mailbox_tools import mailbox_tools
from dbaops.tools.metrics_tool import metrics_tool
from dbaops.tools.names import AGENT_TOOLS as AGENT_TOOLS
from dbaops.tools.recording import ToolRecorder


#: The catalog's tool names (a scenario's reference steps may name only these).
@dataclass
class StandbyToolEnvironment:
    """The replica profile's standby, as the agent's tools reach it (``server: standby``)."""

    endpoint: Endpoint
    instance: InstanceController | None
    sql: SqlSession


def on_either_server(primary: Tool, standby: Tool) -> Tool:
    """One tool for both servers: an optional ``server`` argument (``primary`` by default)
    sends the call to the standby's tool."""
    params = dict(primary.spec.parameters)
    params["properties"] = {
        **params.get("properties", {}),
        "server": {
            "type": "string",
            "enum": ["primary", "standby"],
            "description": "which server (default primary; the standby is a streaming replica)",
        },
    }
    spec = primary.spec.model_copy(
        update={
            "parameters": params,
            "description": primary.spec.description
            + " This deployment has a primary and a streaming standby: give server='standby' "
            "to act on the standby.",
        }
    )

    async def handler(args: dict[str, Any]) -> ToolResult:
        server = args.get("server", "primary")
        if server not in ("primary", "standby"):
            msg = f"unknown server {server!r} (primary or standby)"
            return ToolResult(ok=False, error=msg, observation=f"error: {msg}")
        rest = {k: v for k, v in args.items() if k != "server"}
        return await (standby if server == "standby" else primary).handler(rest)

    return Tool(spec=spec, handler=handler)


@dataclass
class PostgresToolEnvironment:
    """Everything the PostgreSQL tools act on during one run."""

    endpoint: Endpoint
    clock: ScenarioClock
    observations: Observations
    log_line_stamp: Callable[[str], tuple[float, int] | None]
    instance: InstanceController | None
    mailbox: Mailbox
    sql: SqlSession
    standby: StandbyToolEnvironment | None = None


def build_tool_catalog(env: PostgresToolEnvironment, recorder: ToolRecorder) -> dict[str, Tool]:
    """All tools, each wrapped so that its calls are recorded in the trace."""
    obs = env.observations
    sql = sql_tool(env.sql)
    instance = instance_tool(env.endpoint, env.instance, env.sql.role)
    log = log_tool(_postgresql_log(obs, "primary", env), obs.samples, env.clock)
    if env.standby is not None:
        sb = env.standby
        sql = on_either_server(sql, sql_tool(sb.sql))
        instance = on_either_server(instance, instance_tool(sb.endpoint, sb.instance, sb.sql.role))
        standby_log = log_tool(_postgresql_log(obs, "standby", env), obs.samples, env.clock)
        log = on_either_server(log, standby_log)
    tools: list[Tool] = [
        sql,
        metrics_tool(obs.metrics, obs.samples, env.clock, dialect=engine_dialect("postgres")),
        instance,
        log,
        knowledge_tool(),
        *mailbox_tools(env.mailbox),
    ]
    catalog = {t.spec.name: recorder.wrap(t) for t in tools}
    if set(catalog) != set(AGENT_TOOLS):
        raise RuntimeError(f"the tool catalog {sorted(catalog)} differs from AGENT_TOOLS")
    return catalog


def _postgresql_log(
    obs: Observations, server: str, env: PostgresToolEnvironment
) -> dict[str, ServerLogSource]:
    """The ``postgresql`` source of one server's ``read_log`` (no lines when the engine cannot
    reach its log)."""
    lines: Callable[[], list[str]] = obs.server_logs.get(server, list)
    about = "the server log: errors, lock waits, checkpoints, autovacuum"
    return {"postgresql": ServerLogSource(lines, env.log_line_stamp, about)}
