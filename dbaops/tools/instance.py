"""The ``manage_instance`` tool's spec, the same on every engine (each engine implements the
tool: PostgreSQL's in :mod:`dbaops.dbms.postgres.instance_tool`, TiDB's in
:mod:`dbaops.dbms.tidb.instance_tool`)."""

from __future__ import annotations

from typing import Protocol

from dbaops.tools.base import ToolResult, ToolSpec


class ManagedInstance(Protocol):
    """What ``manage_instance`` may do to a server dbaops manages."""

    async def restart(self) -> None: ...

    async def stop(self) -> None: ...

    async def start(self) -> None: ...


async def change_state(instance: ManagedInstance, action: str) -> ToolResult:
    """``restart``, ``stop`` or ``start`` the instance, reported as ``manage_instance`` does
    on every engine (``state_change`` in the call's detail)."""
    if action == "restart":
        await instance.restart()
    elif action == "stop":
        await instance.stop()
    else:
        await instance.start()
    return ToolResult(ok=True, observation=f"{action}: done", detail={"state_change": action})


def manage_instance_spec(description: str, actions: tuple[str, ...], setting: str) -> ToolSpec:
    """The ``manage_instance`` spec, whatever the engine: ``setting`` names what the set
    action sets (``parameter``, ``variable``)."""
    return ToolSpec(
        name="manage_instance",
        description=description,
        parameters={
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": list(actions)},
                "name": {"type": "string", "description": f"{setting} name (set_{setting})"},
                "value": {"type": "string", "description": f"{setting} value (set_{setting})"},
            },
            "required": ["action"],
        },
        read_only=False,
    )
