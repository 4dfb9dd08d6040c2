"""What an engine can run, declared once: the scenario validator, the runner and the tests ask
an engine's :class:`EngineCapabilities` (through its dialect, without its driver) instead of
asking which engine it is."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineCapabilities:
    """The scenario features an engine supports; what it does not declare, a scenario on it
    cannot use (refused at load time, naming the field)."""

    #: The fault kinds (``kind:`` of a construction, activation or event fault) it applies.
    fault_kinds: frozenset[str]
    #: The check kinds (``check:``) it evaluates.
    check_kinds: frozenset[str]
    #: The server backends it runs on (``embedded``: a local process; ``docker``: a container).
    backends: frozenset[str] = frozenset({"embedded"})
    #: The topologies a scenario may ask for (``standalone``; ``cluster``: a user's cluster).
    topologies: frozenset[str] = frozenset({"standalone"})
    #: A streaming standby of the primary (``database.replica``, ``server: standby``).
    replica: bool = False
    #: A workload history before the incident (``preparation.history``).
    history: bool = False
    #: Server timers written into the server's configuration scaled by the time scale
    #: (``database.scaled_settings``).
    scaled_settings: bool = False
