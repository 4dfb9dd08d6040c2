"""The agent integration boundary: what an agent receives and how it is plugged in.

An agent sees the task, the mode, its budgets, the scenario clock and its tools, and nothing
else: no scenario object, no trace writer, no run directory, no paths. Every effect it has goes
through ``session.tools``, whose calls the harness records. (A Python agent runs in the
harness's interpreter; dbaops does not sandbox Python code, so an agent you do not trust
belongs behind a model endpoint, as ``--model`` runs it, not in-process.)
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import anyio

from dbaops.clock import ScenarioClock
from dbaops.tools.base import Tool


class SessionClock:
    """The scenario clock as an agent sees it: read it and sleep on it, nothing more."""

    __slots__ = ("_now", "_sleep", "_sleep_until")

    def __init__(self, clock: ScenarioClock) -> None:
        self._now = clock.now
        self._sleep = clock.sleep
        self._sleep_until = clock.sleep_until

    def now(self) -> float:
        """Current scenario time in seconds (the task arrives at t = 0)."""
        return self._now()

    async def sleep(self, scenario_seconds: float) -> None:
        await self._sleep(scenario_seconds)

    async def sleep_until(self, scenario_t: float) -> None:
        await self._sleep_until(scenario_t)


class EndSignal:
    """Set by the harness when the session is over (report submitted, budget or horizon
    reached); an agent can wait for it but not set it."""

    __slots__ = ("_event",)

    def __init__(self, event: anyio.Event) -> None:
        self._event = event

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


@dataclass(frozen=True)
class Budget:
    """What the agent may spend: model turns (its own accounting) and scenario time."""

    turns: int
    time_s: float


@dataclass(frozen=True, slots=True)
class AgentSession:
    """One continuing agent session for a run (bounded or persistent).

    ``task`` is the task as the mailbox states it (with the budgets); a persistent agent learns
    of later tasks through the mailbox tools. ``ended`` is set when the session is over.
    """

    task: str
    mode: str
    budget: Budget
    clock: SessionClock
    tools: Mapping[str, Tool]
    ended: EndSignal

    @classmethod
    def create(
        cls,
        *,
        task: str,
        mode: str,
        budget: Budget,
        clock: ScenarioClock,
        tools: Mapping[str, Tool],
        ended: anyio.Event,
    ) -> AgentSession:
        return cls(
            task=task,
            mode=mode,
            budget=budget,
            clock=SessionClock(clock),
            tools=MappingProxyType(dict(tools)),
            ended=EndSignal(ended),
        )


@runtime_checkable
class Agent(Protocol):
    """Anything with a name and an async ``run(session)`` is an agent."""

    name: str

    async def run(self, session: AgentSession) -> None: ...


class AgentNotFound(ValueError):
    """An --agent name that is neither built in nor importable."""


#: Scripted oracles: built by the harness from the scenario's declared solution (see
#: :func:`dbaops.agents.reference.oracle_agent`), recorded as oracles in the run header.
ORACLES = ("reference", "shallow")


def is_oracle(spec: str) -> bool:
    """``reference``, ``shallow``, ``reference:<alternative>`` or ``blunt:<fix>``: a scripted
    oracle's name."""
    return spec in ORACLES or spec.startswith(("reference:", "blunt:"))


def builtin_agents() -> dict[str, Any]:
    from dbaops.agents.noop import NoopAgent

    return {"noop": NoopAgent}


def load_agent(spec: str, **kwargs: Any) -> Agent:
    """Instantiate a built-in agent by name, or a third-party one by ``module:Class``.

    The oracles ``reference`` and ``shallow`` are not built here: they need the scenario's
    declared steps, which only the harness holds (``run_scenario(..., agent="reference")``).
    """
    builtins = builtin_agents()
    if is_oracle(spec):
        raise AgentNotFound(
            f"{spec!r} is a scripted oracle: the harness builds it from the scenario "
            "(pass agent name to RunOptions.agent or run_scenario)"
        )
    if spec in builtins:
        return builtins[spec](**kwargs)  # type: ignore[no-any-return]
    if ":" not in spec:
        raise AgentNotFound(
            f"unknown agent {spec!r} (built in: {', '.join(sorted([*builtins, *ORACLES]))}; "
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
