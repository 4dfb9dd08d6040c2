"""The agent integration boundary: what an agent receives and how it is plugged in."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import anyio

from dbaops.clock import ScenarioClock
from dbaops.tools.base import Tool


@dataclass
class AgentSession:
    """One continuing agent session for a run (bounded or persistent).

    The agent acts only through ``tools``; ``ended`` is set when the scenario horizon is reached.
    """

    scenario_id: str
    mode: str
    horizon_s: float
    clock: ScenarioClock
    tools: dict[str, Tool] = field(default_factory=dict)
    ended: anyio.Event = field(default_factory=anyio.Event)
    extras: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Agent(Protocol):
    """Anything with a name and an async ``run(session)`` is an agent."""

    name: str

    async def run(self, session: AgentSession) -> None: ...


class AgentNotFound(ValueError):
    """An --agent name that is neither built in nor importable."""


def builtin_agents() -> dict[str, Any]:
    from functools import partial

    from dbaops.agents.noop import NoopAgent
    from dbaops.agents.reference import ReferenceAgent

    return {
        "noop": NoopAgent,
        "reference": ReferenceAgent,
        "shallow": partial(ReferenceAgent, "shallow"),
    }


def load_agent(spec: str, **kwargs: Any) -> Agent:
    """Instantiate a built-in agent by name, or a third-party one by ``module:Class``."""
    builtins = builtin_agents()
    if spec in builtins:
        return builtins[spec](**kwargs)  # type: ignore[no-any-return]
    if ":" not in spec:
        raise AgentNotFound(
            f"unknown agent {spec!r} (built in: {', '.join(sorted(builtins))}; "
            "or give module.path:ClassName)"
        )
    module_name, _, attr = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise AgentNotFound(f"cannot import agent {spec!r}: {exc}") from exc
    agent = cls(**kwargs)
    if not isinstance(agent, Agent):
        raise AgentNotFound(f"{spec!r} has no name/run(session): not an agent")
    return agent
