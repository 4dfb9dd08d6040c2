"""What a server's machine can suffer: the faults only a container backend can make real."""

from __future__ import annotations

from typing import Literal, Protocol

#: How a partition cuts a standby off its primary: ``drop`` loses their packets silently (each
#: side waits for its timeouts), ``disconnect`` takes the standby's network link away.
PartitionMode = Literal["drop", "disconnect"]


class ServerMachine(Protocol):
    """The container a server runs in (harness only; never given to an agent)."""

    async def freeze(self) -> None:
        """Stop scheduling every process of the server (``docker pause``)."""

    async def thaw(self) -> None:
        """Undo :meth:`freeze` (nothing when not frozen)."""

    async def crash(self) -> None:
        """Kill every process of the server at once; it stays down until started."""

    async def limit_cpus(self, cpus: float | None) -> None:
        """Change the CPU limit (None: the scenario's own) for the rest of the run."""

    async def partition(self, mode: PartitionMode) -> None:
        """Cut this standby off its primary."""

    async def heal(self) -> None:
        """Undo :meth:`partition`."""
