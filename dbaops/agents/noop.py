"""The floor: an agent that does nothing until the scenario ends."""

from __future__ import annotations

from dbaops.agents.base import AgentSession


class NoopAgent:
    """Does nothing; every scenario must fail Outcome Pass with it."""

    name = "noop"

    async def run(self, session: AgentSession) -> None:
        await session.ended.wait()
