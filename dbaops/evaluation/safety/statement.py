"""The neutral statement form the safety rules judge: executed statements with their session
state and facts (:class:`Stmt`), and a parsed trajectory (:class:`ParsedTrace`).

A front end (:mod:`dbaops.evaluation.safety.frontend`) builds them from the recorded SQL;
nothing here refers to a parse tree, so a front end for another dialect builds the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dbaops.evaluation.safety.facts import Facts
from dbaops.evaluation.safety.models import InstanceAction, StateEvidence, UnparsedSql
from dbaops.evaluation.safety.values import QualName

if TYPE_CHECKING:
    from dbaops.evaluation.safety.effects import CallObservation


@dataclass
class Stmt:
    """One executed statement with the session state it ran under.

    ``seq`` orders all statements of the trace, ``index`` those of one call (statements in
    DO blocks, prepared statements and function bodies included); ``text`` is the normalised
    statement and ``origin`` how it ran (``sql``, ``explain_analyze``, ``do_block``,
    ``dynamic_sql``, ``prepared``, ``function_body``). ``settings`` are the session settings
    in force, ``search_path`` the schemas they name; ``command_tag`` is the tag the server
    returned for it (when recorded), ``row_count`` the rows a DML tag counts, and
    ``tx_key`` names its transaction (session, ordinal)."""

    seq: int
    action_index: int
    call_id: str
    session_id: str
    t_scn: float | None
    call_ok: bool
    role: str | None
    index: int
    text: str
    origin: str
    settings: dict[str, str]
    search_path: tuple[str, ...]
    command_tag: str | None
    row_count: int | None
    tx_key: tuple[str, int]
    facts: Facts = field(default_factory=Facts)
    #: TiDB's ``BATCH … LIMIT n``: the rows each of its transactions changes at most
    batch_limit: int | None = None


@dataclass
class ParsedTrace:
    """All executed statements and instance actions of a trajectory, in order.

    ``indexes`` maps an index to its table (the context's ``index_tables`` and the
    ``CREATE INDEX`` statements of the trace). ``observations`` holds the signalling calls
    that recorded an activity snapshot, by call id, with the sessions they hit;
    ``signal_log`` says whether the server log was available, i.e. whether those calls can be
    judged by their effects.
    """

    statements: list[Stmt]
    instance_actions: list[tuple[int, InstanceAction]]
    unparsed: list[UnparsedSql]
    notes: list[str]
    indexes: dict[QualName, QualName]
    default_schema: str
    observations: dict[str, CallObservation] = field(default_factory=dict)
    signal_log: bool = False
    #: (scenario time, wall seconds since the run's start, sessions waiting on the agent's
    #: locks) per metric sample
    blocking: tuple[tuple[float, float, float], ...] = ()
    #: what changed in the catalog while the agent worked (None: no state was recorded)
    state: StateEvidence | None = None
    #: the SQL dialect the statements were read in (whose explainer reads them for G12/G14)
    dialect: str = "postgres"

    def judged_by_effects(self, call_id: str) -> CallObservation | None:
        """The call's observation when its signals are judged by their effects."""
        return self.observations.get(call_id) if self.signal_log else None

    def reached(
        self,
        schema: str | None,
        name: str,
        search_path: Sequence[str],
        kinds: frozenset[str],
    ) -> list[tuple[QualName, str]]:
        """The relations a statement on ``schema.name`` reaches behind it, through views
        (``kinds`` holding ``view``), partition or inheritance parents (``parent``) and the
        tables whose foreign keys reference it (``referrer``: a ``TRUNCATE … CASCADE``), as
        the trace's statements and the catalog readings define them; each with the way."""
        edges: dict[QualName, list[tuple[str, QualName]]] = {}
        for s in self.statements:
            home = s.search_path[0] if s.search_path else self.default_schema
            for src in s.facts.relation_sources:
                key = (src.relation[0] or home, src.relation[1])
                for sch, rel in src.sources:
                    edges.setdefault(key, []).append((src.kind, (sch or home, rel)))
            for op in s.facts.table_ops:
                if op.op == "add_fk" and op.relation is not None and op.referenced is not None:
                    ref = (op.referenced[0] or home, op.referenced[1])
                    referrer = (op.relation[0] or home, op.relation[1])
                    edges.setdefault(ref, []).append(("referrer", referrer))
                    if op.deletes_referrers:
                        edges[ref].append(("cascade", referrer))
                    if op.updates_referrers:
                        edges[ref].append(("update_cascade", referrer))
        if self.state is not None:
            from dbaops.evaluation.safety.names import parse_name

            for kind, found in (
                ("view", self.state.view_bases),
                ("parent", self.state.parents),
                ("referrer", self.state.referrers),
                ("cascade", self.state.cascaders),
                ("update_cascade", self.state.update_cascaders),
            ):
                for rel, targets in found.items():
                    key = _qualified(parse_name(rel), self.default_schema)
                    for t in targets:
                        edges.setdefault(key, []).append(
                            (kind, _qualified(parse_name(t), self.default_schema))
                        )
        starts = [(schema, name)] if schema else [(sch, name) for sch in search_path]
        start = next((q for q in starts if q in edges), None)
        if start is None:
            return []
        out: list[tuple[QualName, str]] = []
        seen = {start}
        todo: list[tuple[QualName, str]] = [(start, "")]
        while todo:
            node, way = todo.pop(0)
            for kind, target in edges.get(node, []):
                if kind not in kinds or target in seen:
                    continue
                seen.add(target)
                step = f"{way} {_THROUGH[kind]} {node[1]}"
                out.append((target, step.strip()))
                todo.append((target, step))
        return out

    def index_table(
        self, schema: str | None, name: str, search_path: Sequence[str]
    ) -> QualName | None:
        """Table of an index, from the context or a ``CREATE INDEX`` seen in the trace."""
        if schema:
            return self.indexes.get((schema, name))
        for s in search_path:
            if (s, name) in self.indexes:
                return self.indexes[(s, name)]
        return None


#: How a statement reaches a relation behind the one it names.
_THROUGH = {
    "view": "through view",
    "parent": "through partition",
    "referrer": "by a foreign key referencing",
    "cascade": "by a foreign key ON DELETE CASCADE referencing",
    "update_cascade": "by a foreign key ON UPDATE CASCADE referencing",
}


def _qualified(name: tuple[str | None, str], default_schema: str) -> QualName:
    return (name[0] or default_schema, name[1])
