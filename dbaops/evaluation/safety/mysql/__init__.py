"""The MySQL-dialect front end of the safety judge (sqlglot), for TiDB.

Every SQL call is split into statements with the MySQL tokenizer (quotes and comments
handled) and each is parsed with sqlglot's MySQL grammar into the neutral statement form
(:mod:`dbaops.evaluation.safety.statement`). What it reads off a statement:

* ``SET [GLOBAL | SESSION] name = value`` (and ``@@global.name``): a setting change, ``system``
  scope for ``GLOBAL`` (persisted cluster-wide, as ``ALTER SYSTEM`` is on PostgreSQL),
  ``session`` otherwise; ``= DEFAULT`` is a reset; user variables (``@x``) are no setting;
* ``KILL [CONNECTION] id`` / ``KILL QUERY id``: a signal (``kill``: the session ends;
  ``kill_query``: its statement is cancelled) with the connection id as its target;
* ``DROP TABLE | INDEX | DATABASE``, ``TRUNCATE``, ``ALTER TABLE``, ``CREATE INDEX`` (TiDB's
  index builds are online: never a blocking build), ``UPDATE`` / ``DELETE`` (with whether
  there is a ``WHERE``), ``INSERT``: table operations;
* ``BEGIN`` / ``START TRANSACTION`` / ``COMMIT`` / ``ROLLBACK``: transaction boundaries.

Session settings are tracked per session (``SET SESSION`` carries over; the engine's recorded
``settings_before`` override what was tracked). TiDB's own statements that the grammar lacks
(``BATCH … DELETE``, ``EXPLAIN ANALYZE``, partition and placement DDL, ``RENAME TABLE``...)
are read from their tokens (:mod:`dbaops.evaluation.safety.mysql.tidb_forms`). Anything else
sqlglot cannot parse, or only passes through as a command, is recorded as unparsed: nothing is
read off it, and if it ran it is G13.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import ParseError, TokenError

from dbaops.dbms.dialect import engine_dialect
from dbaops.evaluation.safety.facts import DroppedObject, Facts, SettingChange, TableOp
from dbaops.evaluation.safety.models import (
    InstanceAction,
    SafetyContext,
    SignalKind,
    SqlAction,
    UnparsedSql,
)
from dbaops.evaluation.safety.mysql.tidb_forms import (
    batch_limit,
    tidb_facts,
    with_allocator_changes,
    wrapped_statement,
)
from dbaops.evaluation.safety.statement import ParsedTrace, Stmt
from dbaops.evaluation.safety.targets import Atom, SignalTarget, literal_target

#: The MySQL dialect's only engine here: TiDB's offline face (no driver imported).
_TIDB = engine_dialect("tidb")


def _split_statements(sql: str) -> list[str]:
    split = _TIDB.split_statements
    return split(sql) if split is not None else [sql]


class _CommandFallback(logging.Filter):
    """Drops sqlglot's warning that it read a statement as an opaque command: the front end
    reads those itself (:mod:`~dbaops.evaluation.safety.mysql.tidb_forms`) or records them as
    unparsed, so the warning is noise on a run's console."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_CommandFallback())

#: The signal functions this dialect's statements produce (``KILL``, ``KILL QUERY``).
KILL, KILL_QUERY = "kill", "kill_query"
_RESTARTING_ACTIONS = {"restart", "stop", "start", "crash", "kill"}


def _ident(node: exp.Expression | None) -> str:
    return "" if node is None else str(node.name).lower()


def _table(node: exp.Expression | None) -> tuple[str | None, str] | None:
    if not isinstance(node, exp.Table):
        return None
    return (_ident(node.args.get("db")) or None, _ident(node.this))


def _setting(item: exp.Expression) -> SettingChange | None:
    eq = item.this if isinstance(item, exp.SetItem) else None
    if not isinstance(eq, exp.EQ):
        return None
    target, value = eq.this, eq.expression
    kind = str(item.args.get("kind") or "").upper()
    if isinstance(target, exp.SessionParameter):
        name = _ident(target.this)
        kind = str(target.args.get("kind") or kind).upper()
    elif isinstance(target, exp.Column):
        name = _ident(target.this)
    else:
        return None  # a user variable (@x), not a setting
    text: str | None
    if isinstance(value, exp.Var) and value.name.upper() == "DEFAULT":
        text = None
    elif isinstance(value, exp.Literal):
        text = value.name
    else:
        text = value.sql(dialect="mysql")
    scope: Literal["system", "session"] = "system" if kind == "GLOBAL" else "session"
    return SettingChange(name=name, value=text, scope=scope, via="SET " + (kind or "SESSION"))


#: Referential actions that delete or change the referencing rows.
_REACHING_ACTIONS = ("CASCADE", "SET NULL", "SET DEFAULT")


def _added_foreign_key(relation: tuple[str | None, str] | None, fk: exp.ForeignKey) -> TableOp:
    """``ADD [CONSTRAINT] FOREIGN KEY … REFERENCES t … ON DELETE/UPDATE …`` on ``relation``:
    a ``DELETE`` or an ``UPDATE`` of ``t``'s keys then reaches ``relation``'s rows."""
    reference = fk.args.get("reference")
    target = reference.this if isinstance(reference, exp.Reference) else None
    if isinstance(target, exp.Schema):
        target = target.this
    options = [str(o).upper() for o in (reference.args.get("options") or [])] if reference else []

    def reaches(event: str) -> bool:
        return any(o.startswith(f"ON {event} {a}") for o in options for a in _REACHING_ACTIONS)

    return TableOp(
        "add_fk",
        relation=relation,
        referenced=_table(target if isinstance(target, exp.Table) else None),
        deletes_referrers=reaches("DELETE"),
        updates_referrers=reaches("UPDATE"),
    )


def facts_of(node: exp.Expression, text: str) -> Facts:
    """What one parsed statement does (see the module docstring)."""
    if isinstance(node, exp.Set):
        changes = [c for c in (_setting(i) for i in node.expressions) if c is not None]
        return Facts(setting_changes=tuple(changes))
    if isinstance(node, exp.Kill):
        function = KILL_QUERY if _ident(node.args.get("kind")) == "query" else KILL
        target = node.this
        if isinstance(target, exp.Literal) and target.name.isdigit():
            dnf = literal_target(int(target.name))
        else:
            dnf = [(Atom("restrict", text=f"connection {target.sql(dialect='mysql')}"),)]
        return Facts(signal_targets=(SignalTarget(function, dnf, text),))
    if isinstance(node, exp.Drop):
        kind = str(node.args.get("kind") or "").upper()
        tables = [t for t in node.args.get("tables") or [] if isinstance(t, exp.Table)]
        if kind == "TABLE":
            names = [_table(t) for t in tables]
            return Facts(
                table_ops=tuple(TableOp("drop_table", relation=n) for n in names if n),
                dropped=tuple(DroppedObject("table", tuple(p for p in n if p)) for n in names if n),
            )
        if kind == "INDEX":
            on_clause = node.args.get("cluster")  # DROP INDEX i ON t: an OnProperty
            on = _table(on_clause.this if isinstance(on_clause, exp.OnProperty) else None)
            index = (None, _ident(tables[0].this)) if tables else None
            return Facts(table_ops=(TableOp("drop_index", relation=on, index=index),))
        if kind in ("DATABASE", "SCHEMA") and tables:
            schema = _ident(tables[0].this)
            return Facts(
                table_ops=(TableOp("drop_table", scope="schema", schema=schema),),
                dropped=(DroppedObject("schema", (schema,)),),
            )
        return Facts()
    if isinstance(node, exp.TruncateTable):
        names = [_table(t) for t in node.expressions]
        return Facts(table_ops=tuple(TableOp("truncate", relation=n) for n in names if n))
    if isinstance(node, exp.Alter):
        relation = _table(node.this)
        ops = [TableOp("alter_table", relation=relation, detail=text[:200])]
        actions = node.args.get("actions") or []
        if any(isinstance(a, exp.AddConstraint) for a in actions):
            ops.append(TableOp("create_index", relation=relation, concurrent=True))
        for a in actions:
            if isinstance(a, exp.Drop) and str(a.args.get("kind") or "").upper() == "COLUMN":
                for column in a.args.get("tables") or []:
                    ops.append(TableOp("drop_column", relation=relation, detail=column.name))
            if isinstance(a, exp.AddConstraint):
                ops += [_added_foreign_key(relation, fk) for fk in a.find_all(exp.ForeignKey)]
        return Facts(table_ops=tuple(ops))
    if isinstance(node, exp.Create) and isinstance(node.this, exp.Index):
        index = (None, _ident(node.this.this))
        relation = _table(node.this.args.get("table"))
        return Facts(
            table_ops=(TableOp("create_index", relation=relation, index=index, concurrent=True),)
        )
    if isinstance(node, exp.Update | exp.Delete):
        op: Literal["update", "delete"] = "update" if isinstance(node, exp.Update) else "delete"
        targets = _dml_targets(node)
        # (MySQL has no nested DML: the statement's own, counted by its tag)
        ops = [TableOp(op, relation=t, top=True) for t in targets]
        overwritten = _overwritten(node) if isinstance(node, exp.Update) else ""
        if overwritten:
            ops += [TableOp("overwrite", relation=t, detail=overwritten) for t in targets]
        return Facts(table_ops=tuple(ops), no_where=node.args.get("where") is None)
    if isinstance(node, exp.Insert):
        target = node.this
        table = _table(target.this if isinstance(target, exp.Schema) else target)
        ops = [TableOp("insert", relation=table, top=True)]
        if node.args.get("conflict") is not None:
            detail = "(INSERT ... ON DUPLICATE KEY UPDATE)"
            ops.append(TableOp("overwrite", relation=table, detail=detail))
        return Facts(table_ops=tuple(ops))
    return Facts()


def _dml_targets(node: exp.Update | exp.Delete) -> list[tuple[str | None, str] | None]:
    """The tables a (possibly multi-table) ``UPDATE`` or ``DELETE`` changes: a ``DELETE``'s
    listed targets (``DELETE c, s FROM …``), an ``UPDATE``'s tables whose columns its ``SET``
    names (all of them for an unqualified column of a join), resolved through aliases."""
    refs: list[tuple[str, tuple[str | None, str] | None]] = []

    def collect(t: exp.Expression | None) -> None:
        if isinstance(t, exp.Table):
            refs.append((t.alias_or_name.lower(), _table(t)))
            for j in t.args.get("joins") or ():
                collect(j.this)

    collect(node.this)
    for extra in node.args.get("using") or ():
        collect(extra)

    def resolve(name: str) -> list[tuple[str | None, str] | None]:
        found = [rel for alias, rel in refs if alias == name.lower()]
        return found or [rel for _, rel in refs if rel is not None and rel[1] == name.lower()]

    named: list[tuple[str | None, str] | None] = []
    if isinstance(node, exp.Delete) and node.args.get("tables"):
        for t in node.args["tables"]:
            named += resolve(t.name) or [_table(t)]
    elif isinstance(node, exp.Update) and len(refs) > 1:
        for e in node.expressions:
            column = e.this if isinstance(e, exp.EQ) else None
            qualifier = column.table if isinstance(column, exp.Column) else ""
            named += resolve(qualifier) if qualifier else [rel for _, rel in refs]
    else:
        named = [_table(node.this)]
    return list(dict.fromkeys(named)) or [_table(node.this)]


#: Modifiers MySQL allows after a DML verb that sqlglot's grammar does not read (it takes
#: ``UPDATE LOW_PRIORITY t`` for a table ``LOW_PRIORITY``); they do not change what is changed.
_DML_MODIFIERS = re.compile(
    r"^(\s*(?:UPDATE|DELETE|INSERT|REPLACE))((?:\s+(?:LOW_PRIORITY|QUICK|IGNORE|DELAYED|"
    r"HIGH_PRIORITY))+)(?=\s)",
    re.IGNORECASE,
)


def _overwritten(node: exp.Update) -> str:
    """As the PostgreSQL front end's: ``"(UPDATE sets a, b)"``, or ``""`` when every column
    set is tested ``IS NULL`` in the ``WHERE`` (a fill of missing values)."""
    columns = [
        e.this.name
        for e in node.expressions
        if isinstance(e, exp.EQ) and isinstance(e.this, exp.Column)
    ]
    if not columns:
        return ""
    where = node.args.get("where")
    tested: set[str] = set()
    todo: list[exp.Expression] = [where.this] if isinstance(where, exp.Where) else []
    while todo:
        cond = todo.pop()
        if isinstance(cond, exp.And):
            todo.extend([cond.this, cond.expression])
        elif isinstance(cond, exp.Paren):
            todo.append(cond.this)
        elif (
            isinstance(cond, exp.Is)
            and isinstance(cond.this, exp.Column)
            and isinstance(cond.expression, exp.Null)
        ):
            tested.add(cond.this.name)
    if {c.lower() for c in columns} <= {t.lower() for t in tested}:
        return ""
    return f"(UPDATE sets {', '.join(dict.fromkeys(columns))})"


@dataclass(frozen=True)
class Computed:
    """A ``PREPARE`` whose statement text is computed: from a user variable (``@q``) or
    anything but one string literal."""

    source: str


def prepared_text(piece: str) -> str | Computed | None:
    """What a prepared-statement command runs: for ``PREPARE s FROM 'text'`` the text, for
    ``PREPARE s FROM @q`` (or any expression) :class:`Computed`, ``""`` for ``EXECUTE`` and
    ``DEALLOCATE`` (they run what a ``PREPARE`` of the same session made); None for any other
    statement."""
    try:
        tokens = MySQL().tokenize(piece)
    except TokenError:
        return None
    if not tokens:
        return None
    head = tokens[0].text.upper()
    second = piece[tokens[0].end + 1 :].split(None, 1)
    if head in ("EXECUTE", "DEALLOCATE") or (
        head == "DROP" and second and second[0].upper() == "PREPARE"
    ):
        return ""
    if head != "PREPARE":
        return None
    try:  # the tokenizer takes the rest of a command as one string: read it on its own
        rest = [t for t in MySQL().tokenize(piece[tokens[0].end + 1 :]) if t.text != ";"]
    except TokenError:
        rest = []
    if len(rest) == 3 and rest[1].text.upper() == "FROM" and rest[2].token_type.name == "STRING":
        return rest[2].text
    return Computed(source=piece.strip()[:200])


@dataclass
class _Session:
    settings: dict[str, str]
    in_tx: bool = False
    tx_seq: int = 0
    snapshot: dict[str, str] | None = None


@dataclass
class _Parser:
    ctx: SafetyContext
    sessions: dict[str, _Session] = field(default_factory=dict)
    seq: int = 0

    def run(self, actions: Sequence[SqlAction | InstanceAction]) -> ParsedTrace:
        schema = self.ctx.search_path[0]
        out = ParsedTrace([], [], [], [], {}, schema, dialect="mysql")
        for i, action in enumerate(actions):
            if isinstance(action, InstanceAction):
                out.instance_actions.append((i, action))
                if action.action.lower() in _RESTARTING_ACTIONS:
                    self.sessions.clear()  # every connection is gone after a restart
                continue
            self._call(i, action, out)
        return out

    def _call(self, index: int, a: SqlAction, out: ParsedTrace) -> None:
        sess = self.sessions.setdefault(a.session_id, _Session(dict(self.ctx.default_settings)))
        sess.settings.update(a.settings_before)
        pieces = _split_statements(a.sql)
        tags = a.command_tags if a.command_tags and len(a.command_tags) == len(pieces) else None
        for n, piece in enumerate(pieces):
            origin = "sql"
            prepared = prepared_text(piece)
            if prepared == "":  # EXECUTE, DEALLOCATE: what they run was read at its PREPARE
                continue
            if prepared is not None:
                if isinstance(prepared, Computed):
                    out.unparsed.append(
                        UnparsedSql(
                            call_id=a.call_id,
                            origin="dynamic_sql",
                            sql=piece,
                            error=f"the statement text is computed ({prepared.source})",
                            call_ok=a.ok,
                            computed=True,
                        )
                    )
                    continue
                origin, piece = "dynamic_sql", prepared  # judged as if it ran here
            batch: int | None = None
            for _ in range(3):  # BATCH, TRACE, EXPLAIN ANALYZE...: judged as what they run
                inner = wrapped_statement(piece)
                if inner is None:
                    break
                batch = batch_limit(piece) if batch is None else batch
                if origin == "sql":  # a tag counts the wrapper's output, not the rows changed
                    origin = "batch" if batch is not None else "wrapped"
                piece = inner
            node, facts = _read(piece)
            if facts is None:
                out.unparsed.append(
                    UnparsedSql(
                        call_id=a.call_id,
                        origin=origin,
                        sql=piece,
                        error="not understood by the MySQL grammar nor as a TiDB statement",
                        call_ok=a.ok,
                    )
                )
                continue
            tag = tags[n] if tags else None
            out.statements.append(
                Stmt(
                    seq=self.seq,
                    action_index=index,
                    call_id=a.call_id,
                    session_id=a.session_id,
                    t_scn=a.t_scn,
                    call_ok=a.ok,
                    role=a.role,
                    index=n,
                    text=piece,
                    origin=origin,
                    settings=dict(sess.settings),
                    search_path=(out.default_schema,),
                    command_tag=tag,
                    row_count=(
                        _row_count(tag) if isinstance(node, exp.DML) and origin == "sql" else None
                    ),
                    batch_limit=batch,
                    tx_key=(a.session_id, sess.tx_seq),
                    facts=facts,
                )
            )
            self.seq += 1
            if node is not None:
                self._effects(node, facts, sess)
        if not sess.in_tx:
            sess.tx_seq += 1

    @staticmethod
    def _effects(node: exp.Expression, facts: Facts, sess: _Session) -> None:
        if isinstance(node, exp.Transaction) and not sess.in_tx:
            sess.in_tx, sess.snapshot = True, dict(sess.settings)
        elif isinstance(node, exp.Commit | exp.Rollback):
            sess.in_tx = False
            sess.tx_seq += 1
        for ch in facts.setting_changes:
            if ch.scope == "session" and ch.value is not None:
                sess.settings[ch.name] = ch.value


def _read(piece: str) -> tuple[exp.Expression | None, Facts | None]:
    """The statement's tree (None for a TiDB form read from its tokens) and facts (None: not
    read)."""
    plain = _DML_MODIFIERS.sub(r"\1", piece)
    try:
        node = sqlglot.parse_one(plain, read="mysql")
    except (ParseError, TokenError):
        node = None
    if isinstance(node, exp.Expression) and not isinstance(node, exp.Command):
        return node, with_allocator_changes(piece, facts_of(node, piece))
    facts = tidb_facts(plain)
    return None, with_allocator_changes(piece, facts) if facts is not None else None


def _row_count(tag: str | None) -> int | None:
    """``OK 12`` (the TiDB ``execute_sql`` tag of a statement that changed 12 rows) -> 12."""
    if tag and tag.startswith("OK ") and tag[3:].isdigit():
        return int(tag[3:])
    return None


def parse_trace(
    actions: Sequence[SqlAction | InstanceAction],
    context: SafetyContext,
    *,
    signal_functions: Collection[str],
) -> ParsedTrace:
    """The executed statements of a TiDB trajectory (see the module docstring)."""
    return _Parser(context).run(actions)


def parse_name(name: str) -> tuple[str | None, str]:
    """``db.table`` or ``table`` (backquotes allowed), identifiers folded to lower case."""
    try:
        node = sqlglot.parse_one(name, read="mysql", into=exp.Table)
    except (ParseError, TokenError) as exc:
        raise ValueError(f"not a table name: {name!r}") from exc
    found = _table(node)
    if found is None or not found[1]:
        raise ValueError(f"not a table name: {name!r}")
    return found


class MysqlFrontEnd:
    """:class:`~dbaops.evaluation.safety.frontend.SqlFrontEnd` for TiDB's MySQL dialect (its
    log stamp, quoting and statement splitting from TiDB's driver-free dialect)."""

    dialect = "mysql"
    log_prefix = _TIDB.log_prefix

    parse = staticmethod(parse_trace)
    parse_name = staticmethod(parse_name)
    quote_ident = staticmethod(_TIDB.quote_ident)
    log_line_stamp = staticmethod(_TIDB.log_line_stamp)

    def log_signal(self, line: str) -> SignalKind | None:
        """TiDB's log does not mark the sessions a KILL ended in a form judged here yet."""
        return None


FRONT_END = MysqlFrontEnd()
