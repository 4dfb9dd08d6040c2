"""The floor: an agent that reads the mailbox, waits for the end and reports nothing."""

from __future__ import annotations

from dbaops.agents.base import AgentSession


class NoopAgent:
    """Reads the mailbox, suspends until the scenario ends, submits an empty report.

    Every scenario must fail Outcome Pass with it (a verifier it passes cannot fail).
    """

    name = "noop"

    async def run(self, session: AgentSession) -> None:
        tools = session.tools
        if "read_mailbox" not in tools:  # bare sessions (no tool catalog): just wait
            await session.ended.wait()
            return
        await tools["read_mailbox"].handler({})
        while True:
            wake = await tools["suspend"].handler({})
            if wake.detail.get("closed"):
                break
        await tools["submit_report"].handler({"summary": ""})
