"""The agent-side tool boundary: specs, results and the catalog an agent receives."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field


class ToolSpec(BaseModel):
    """What an agent sees of a tool: a name, a description and JSON-Schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}, "required": []}
    )
    read_only: bool = True


class ToolResult(BaseModel):
    """What a tool returns: text for the agent plus structured detail for the trace."""

    ok: bool = True
    observation: str = ""
    error: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


ToolHandler = Callable[[dict[str, Any]], Awaitable[ToolResult]]


class Tool(BaseModel):
    """A spec bound to its async handler."""

    model_config = {"arbitrary_types_allowed": True}

    spec: ToolSpec
    handler: ToolHandler
