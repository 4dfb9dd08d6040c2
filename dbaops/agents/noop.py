"""The floor: an agent that reads the mailbox, waits for the end and reports nothing."""

from __future__ import annotations

from dbaops.agents.base import AgentSession


class NoopAgent:
    """Reads the mailbox, waits until the session ends (its time budget, or the horizon) and
    reports nothing.

    Every scenario must fail Outcome Pass with it (a verifier it passes cannot fail), and since
    it waits out the whole budget, a fault that heals by itself within the budget shows up too.
    """

    name = "noop"

    async def run(self, session: AgentSession) -> None:
        if "read_mailbox" in session.tools:
            await session.tools["read_mailbox"].handler({})
        await session.ended.wait()
