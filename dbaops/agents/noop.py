"""The floor: an agent that reads the mailbox, waits for the end and reports nothing."""

from __future__ import annotations

from dbaops.agents.base import AgentSession


class NoopAgent:
    """Reads the mailbox, waits until the session ends (its time budget, or the horizon) and
    reports nothing.

    Every scenario must fail Outcome Pass with it (a verifier it passes cannot fail), and since
    it waits out the whole budget, a fault that heals by itself within the budget shows up too.
    With ``wait=False`` it ends once it has read its task: the run then verifies at once, for
    a bounded scenario whose environment cannot heal by itself (``evaluation.may_heal``
    false), where waiting would prove nothing more (see :func:`noop_waits`).
    """

    name = "noop"

    def __init__(self, wait: bool = True) -> None:
        self.wait = wait

    async def run(self, session: AgentSession) -> None:
        if "read_mailbox" in session.tools:
            await session.tools["read_mailbox"].handler({})
        if self.wait:
            await session.ended.wait()


#: From this time scale on (the speed of use), a bounded scenario's no-op waits out its
#: budget only where the environment could heal the fault by itself; under compression
#: (the CI scales) it always waits, which costs little.
QUICK_NOOP_SCALE = 0.5


def noop_waits(mode: str, may_heal: bool, time_scale: float) -> bool:
    """Whether the no-op waits out its budget: always for a persistent run (its events come
    over time) and under compression; at the speed of use only where the scenario says its
    environment may heal by itself."""
    return mode == "persistent" or may_heal or time_scale < QUICK_NOOP_SCALE
