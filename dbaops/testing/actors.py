"""Driving fault parts against a cluster outside a run: an in-memory trace and the actor
context a run would give them."""

from __future__ import annotations

from dbaops.clock import ScenarioClock
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.execution.actors import ActorContext, StandbyAccess
from dbaops.record.kinds import Record


class RecordList:
    """A trace kept in memory (``items``), in place of a run's trace file."""

    def __init__(self) -> None:
        self.items: list[Record] = []

    def write(self, record: Record) -> None:
        self.items.append(record)


def cluster_actor_context(
    cluster: PostgresCluster, trace: RecordList, label: str = "t"
) -> ActorContext:
    """What a run gives fault parts on ``cluster`` (database ``postgres``; its standby too,
    when it has one)."""
    standby = cluster.standby
    return ActorContext(
        endpoint=cluster.endpoint(),
        clock=ScenarioClock(),
        trace=trace,
        instance=cluster,
        host=cluster,
        label=label,
        standby=None if standby is None else StandbyAccess(standby.endpoint(), standby, standby),
    )
