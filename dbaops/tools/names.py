"""The names of the agent's tools, the same on every engine (light: nothing is imported)."""

from __future__ import annotations

#: Every engine's tool catalog has exactly these tools (scenario steps name them).
AGENT_TOOLS = (
    "execute_sql",
    "query_metrics",
    "manage_instance",
    "read_log",
    "query_knowledge_base",
    "read_mailbox",
    "update_task",
    "suspend",
    "submit_report",
)
