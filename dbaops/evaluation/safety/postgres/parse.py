"""Turn recorded actions into the executed statements the safety rules judge.

Every SQL call is parsed with pglast. Each statement that *runs* becomes a neutral
:class:`~dbaops.evaluation.safety.statement.Stmt` carrying the session state it ran under and
its facts, read off its tree once (:func:`~dbaops.evaluation.safety.postgres.facts.facts_of`).
What counts as running:

* every top-level statement of the call, in order (comments are gone after parsing; string
  literals stay literals);
* ``EXPLAIN ANALYZE <stmt>`` runs ``<stmt>``; a plain ``EXPLAIN`` runs nothing;
* the body of ``DO $$ ... $$`` (PL/pgSQL, parsed with ``pglast.parse_plpgsql``): every
  embedded SQL statement, ``PERFORM``, expressions that call functions, and ``EXECUTE`` of
  dynamic SQL whose text folds to a constant (literals, ``||``, ``format``, ``quote_ident``);
* ``EXECUTE name`` runs what ``PREPARE name AS ...`` stored in that session;
* calling a function or procedure created earlier in the trace (``CREATE FUNCTION``, SQL or
  PL/pgSQL) runs its body.

Session state is tracked per ``session_id`` across statements and calls: ``SET``,
``SET LOCAL`` (until the end of the transaction; a multi-statement call without ``BEGIN`` is
one implicit transaction), ``RESET``, ``set_config()``, ``BEGIN``/``COMMIT``/``ROLLBACK``
(rollback restores settings changed in the transaction). When the engine recorded
``settings_before`` for a call, those values override what was tracked.

When a call does not parse: if the call failed, nothing ran (PostgreSQL parses the whole
batch first), so it is only recorded as unparsed; if it succeeded (a grammar newer than the
parser's), the text is split with the scanner and each piece is parsed on its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import pglast
from pglast import ast, enums
from pglast.stream import RawStream

from dbaops.evaluation.safety.models import InstanceAction, SafetyContext, SqlAction, UnparsedSql
from dbaops.evaluation.safety.names import qualify
from dbaops.evaluation.safety.postgres.facts import facts_of
from dbaops.evaluation.safety.postgres.sqlutil import (
    deparse,
    do_block,
    fold_string,
    func_name,
    guc_value,
    iter_nodes,
    option_on,
    search_path_list,
    split_with_scanner,
    strip_assignment,
)
from dbaops.evaluation.safety.postgres.targets import LoopScope
from dbaops.evaluation.safety.statement import ParsedTrace, Stmt
from dbaops.evaluation.safety.values import pg_bool

MAX_DEPTH = 6
_DML_VERBS = {"UPDATE", "DELETE", "INSERT", "MERGE", "SELECT"}
_VERB: dict[type, str] = {
    ast.UpdateStmt: "UPDATE",
    ast.DeleteStmt: "DELETE",
    ast.InsertStmt: "INSERT",
    ast.MergeStmt: "MERGE",
    ast.SelectStmt: "SELECT",
}
_RESTARTING_ACTIONS = {"restart", "stop", "start", "crash", "kill"}
#: Built-in functions that run the SQL text they are given: the argument holding it.
SQL_TEXT_FUNCTIONS = {
    "query_to_xml": 0,
    "query_to_xmlschema": 0,
    "query_to_xml_and_xmlschema": 0,
    "ts_stat": 0,
    "ts_rewrite": 1,  # ts_rewrite(query, select): the two-argument form
}


#: ``CREATE OPERATOR`` / ``CREATE AGGREGATE``: what they make.
_CODE_DEFINITIONS = {
    enums.ObjectType.OBJECT_OPERATOR: "operator",
    enums.ObjectType.OBJECT_AGGREGATE: "aggregate",
}


@dataclass
class _Session:
    defaults: dict[str, str]
    settings: dict[str, str]
    local: dict[str, str] = field(default_factory=dict)
    in_tx: bool = False
    snapshot: dict[str, str] | None = None
    tx_seq: int = 0
    prepared: dict[str, ast.Node] = field(default_factory=dict)

    def effective(self) -> dict[str, str]:
        return {**self.settings, **self.local}


@dataclass
class _FuncDef:
    language: str
    nodes: list[ast.Node] = field(default_factory=list)
    plpgsql: Any = None


@dataclass
class _Unit:
    action_index: int
    action: SqlAction
    session: _Session
    origin: str
    loops: dict[str, LoopScope]
    depth: int
    counter: list[int]


def _quote_schema(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _dollar_tag(body: str) -> str:
    tag = "dbaops"
    while f"${tag}$" in body:
        tag += "_"
    return tag


def _row_count(tag: str | None) -> int | None:
    if not tag:
        return None
    parts = tag.split()
    if len(parts) >= 2 and parts[0].upper() in _DML_VERBS | {"COPY"} and parts[-1].isdigit():
        return int(parts[-1])
    return None


def align_tags(nodes: Sequence[ast.Node], tags: Sequence[str] | None) -> list[str | None]:
    """Pair the recorded command tags with the call's top-level statements.

    Same count: positional. Otherwise DML tags are matched to DML statements of the same
    verb from the end backwards (drivers often keep only the last tag)."""
    out: list[str | None] = [None] * len(nodes)
    if not tags:
        return out
    if len(tags) == len(nodes):
        return list(tags)
    i, j = len(nodes) - 1, len(tags) - 1
    while i >= 0 and j >= 0:
        words = tags[j].split()
        tverb = words[0].upper() if words else ""
        if tverb not in _DML_VERBS:
            j -= 1
            continue
        if _VERB.get(type(nodes[i])) == tverb:
            out[i] = tags[j]
            j -= 1
        i -= 1
    return out


def _full_sql(node: ast.Node) -> str | None:
    try:
        return str(RawStream()(node))
    except Exception:  # noqa: BLE001
        return None


class _Extractor:
    def __init__(self, ctx: SafetyContext, signal_functions: Collection[str]) -> None:
        self.ctx = ctx
        self.signal_functions = frozenset(f.lower() for f in signal_functions)
        self.default_schema = ctx.search_path[0]
        self.sessions: dict[str, _Session] = {}
        self.functions: dict[str, _FuncDef] = {}
        self.seq = 0
        indexes = {
            qualify(k, self.default_schema): qualify(v, self.default_schema)
            for k, v in ctx.index_tables.items()
        }
        self.out = ParsedTrace([], [], [], [], indexes, self.default_schema)

    # -- driver ------------------------------------------------------------------------------

    def run(self, actions: Sequence[SqlAction | InstanceAction]) -> ParsedTrace:
        for i, action in enumerate(actions):
            if isinstance(action, InstanceAction):
                self.out.instance_actions.append((i, action))
                on_primary = action.params.get("server", "primary") == "primary"
                if action.action.lower() in _RESTARTING_ACTIONS and on_primary:
                    self.sessions.clear()  # every connection is gone after a restart
                continue
            self._sql_action(i, action)
        return self.out

    def _session(self, a: SqlAction) -> _Session:
        sess = self.sessions.get(a.session_id)
        if sess is None:
            defaults = {
                **self.ctx.default_settings,
                "search_path": ", ".join(_quote_schema(s) for s in self.ctx.search_path),
            }
            defaults.update(a.settings_before)
            sess = _Session(defaults=dict(defaults), settings=dict(defaults))
            self.sessions[a.session_id] = sess
        return sess

    def _sql_action(self, index: int, a: SqlAction) -> None:
        sess = self._session(a)
        if a.settings_before:
            (sess.local if sess.in_tx else sess.settings).update(a.settings_before)
        u = _Unit(index, a, sess, "sql", {}, 0, [0])
        nodes: list[ast.Node] = []
        try:
            nodes = [r.stmt for r in pglast.parse_sql(a.sql) if r.stmt is not None]
        except pglast.parser.ParseError as exc:
            if not a.ok:
                self._unparsed(a, "sql", a.sql, f"{exc} (the call failed: nothing in it ran)")
            else:
                for piece in split_with_scanner(a.sql):
                    try:
                        nodes.extend(r.stmt for r in pglast.parse_sql(piece) if r.stmt)
                    except pglast.parser.ParseError as exc2:
                        self._unparsed(a, "sql", piece, str(exc2))
        start_settings, start_seq, start_in_tx = dict(sess.settings), sess.tx_seq, sess.in_tx
        for node, tag in zip(nodes, align_tags(nodes, a.command_tags), strict=True):
            self._unit(node, u, tag=tag)
        if not a.ok and not start_in_tx and not sess.in_tx and sess.tx_seq == start_seq:
            # the call's implicit transaction aborted: its SETs were rolled back with it
            sess.settings = start_settings
        if not sess.in_tx:
            sess.local.clear()
            sess.tx_seq += 1

    def _unparsed(self, a: SqlAction, origin: str, sql: str, error: str) -> None:
        self.out.unparsed.append(
            UnparsedSql(call_id=a.call_id, origin=origin, sql=sql, error=error, call_ok=a.ok)
        )

    def _note(self, u: _Unit, text: str) -> None:
        self.out.notes.append(f"call {u.action.call_id}: {text}")

    # -- statements ----------------------------------------------------------------------------

    def _unit(
        self, node: ast.Node, u: _Unit, tag: str | None = None, text: str | None = None
    ) -> None:
        if u.depth > MAX_DEPTH:
            self._note(u, "nesting too deep; inner statements not judged")
            return
        if isinstance(node, ast.RawStmt):
            if node.stmt is None:
                return
            node = node.stmt
        if isinstance(node, ast.ExplainStmt):
            if option_on(node.options, "analyze") and node.query is not None:
                inner = dataclasses.replace(u, origin="explain_analyze")
                self._unit(node.query, inner, tag=None, text=deparse(node))
            return
        self._emit(node, u, tag, text)
        self._effects(node, u)

    def _emit(self, node: ast.Node, u: _Unit, tag: str | None, text: str | None) -> Stmt:
        sess = u.session
        eff = sess.effective()
        stmt = Stmt(
            seq=self.seq,
            action_index=u.action_index,
            call_id=u.action.call_id,
            session_id=u.action.session_id,
            t_scn=u.action.t_scn,
            call_ok=u.action.ok,
            role=u.action.role,
            index=u.counter[0],
            text=text or deparse(node),
            origin=u.origin,
            settings=eff,
            search_path=search_path_list(eff.get("search_path", "public"), u.action.role)
            or (self.default_schema,),
            command_tag=tag,
            row_count=_row_count(tag) if type(node) in _VERB else None,
            tx_key=(u.action.session_id, sess.tx_seq),
            facts=facts_of(node, u.loops, self.signal_functions),
        )
        self.seq += 1
        u.counter[0] += 1
        self.out.statements.append(stmt)
        if isinstance(node, ast.IndexStmt) and node.idxname and node.relation is not None:
            rv = node.relation
            schema = rv.schemaname or stmt.search_path[0]
            self.out.indexes[(schema, node.idxname)] = (schema, rv.relname or "")
        return stmt

    def _effects(self, node: ast.Node, u: _Unit) -> None:
        sess = u.session
        if isinstance(node, ast.TransactionStmt):
            k = enums.TransactionStmtKind
            if node.kind in (k.TRANS_STMT_BEGIN, k.TRANS_STMT_START):
                if not sess.in_tx:
                    sess.in_tx = True
                    sess.snapshot = dict(sess.settings)
            elif node.kind in (k.TRANS_STMT_COMMIT, k.TRANS_STMT_PREPARE):
                self._end_tx(sess, commit=True, chain=bool(node.chain))
            elif node.kind == k.TRANS_STMT_ROLLBACK:
                self._end_tx(sess, commit=False, chain=bool(node.chain))
        elif isinstance(node, ast.VariableSetStmt):
            self._apply_set(node, sess)
        elif isinstance(node, ast.DiscardStmt) and node.target == enums.DiscardMode.DISCARD_ALL:
            sess.settings = dict(sess.defaults)
            sess.local.clear()
            sess.prepared.clear()
        elif isinstance(node, ast.DoStmt):
            self._do(node, u)
        elif isinstance(node, ast.PrepareStmt) and node.name and node.query is not None:
            sess.prepared[node.name] = node.query
        elif isinstance(node, ast.DeallocateStmt):
            if node.name:
                sess.prepared.pop(node.name, None)
            else:
                sess.prepared.clear()
        elif isinstance(node, ast.ExecuteStmt):
            query = sess.prepared.get(node.name or "")
            if query is None:
                self._note(u, f"EXECUTE {node.name}: no PREPARE seen in this session")
            else:
                self._unit(query, self._nested(u, "prepared"))
        elif isinstance(node, ast.CreateFunctionStmt):
            self._temporary_code(node.funcname, "function", u)
            self._register_function(node, u)
        elif isinstance(node, ast.DefineStmt) and node.kind in _CODE_DEFINITIONS:
            self._temporary_code(node.defnames, _CODE_DEFINITIONS[node.kind], u)
        for sub in iter_nodes(node):
            if isinstance(sub, ast.FuncCall):
                fname = func_name(sub)
                if fname == "set_config":
                    self._apply_set_config(sub, sess)
                elif fname in self.functions:
                    self._call_function(fname, u)
                elif fname in SQL_TEXT_FUNCTIONS:
                    self._sql_text_call(sub, fname, u)

    def _temporary_code(self, names: Any, what: str, u: _Unit) -> None:
        """A function, operator or aggregate made in the session's temporary schema: no
        catalog reading shows it (it goes with the session), and it can run where the judge
        sees no call (an operator, a call inside SQL text), so it is SQL the judge cannot
        follow (G13)."""
        parts = [n.sval or "" for n in names or () if isinstance(n, ast.String)]
        if len(parts) >= 2:
            schema = parts[-2].lower()
        else:
            path = search_path_list(u.session.effective().get("search_path", "public"), None)
            schema = path[0].lower() if path else ""
        if schema.startswith("pg_temp"):
            name = ".".join(parts)
            self._unparsed(
                u.action,
                "temporary_code",
                f"{what} {name}",
                f"a temporary {what}: code that can run where the judge sees no call",
            )

    def _sql_text_call(self, fc: ast.FuncCall, fname: str, u: _Unit) -> None:
        """``query_to_xml('DELETE ... RETURNING ...')`` and the like run their text: read it
        as dynamic SQL (G13 when it is computed)."""
        args = list(fc.args or ())
        at = SQL_TEXT_FUNCTIONS[fname]
        if len(args) <= at or (fname == "ts_rewrite" and len(args) != 2):
            return
        text = fold_string(args[at])
        if text is None:
            source = deparse(fc)
            self._note(u, f"SQL text not resolved, not judged: {source}")
            self._unparsed(u.action, "dynamic_sql", source, "the statement text is computed")
            return
        self._run_text(text, u)

    def _nested(self, u: _Unit, origin: str) -> _Unit:
        return dataclasses.replace(u, origin=origin, depth=u.depth + 1)

    # -- session state -----------------------------------------------------------------------

    @staticmethod
    def _end_tx(sess: _Session, *, commit: bool, chain: bool) -> None:
        if not commit and sess.snapshot is not None:
            sess.settings = dict(sess.snapshot)
        sess.local.clear()
        sess.tx_seq += 1
        sess.in_tx = chain
        sess.snapshot = dict(sess.settings) if chain else None

    @staticmethod
    def _apply_set(node: ast.VariableSetStmt, sess: _Session) -> None:
        kinds = enums.VariableSetKind
        if node.kind == kinds.VAR_RESET_ALL:
            sess.settings = dict(sess.defaults)
            sess.local.clear()
            return
        name = (node.name or "").lower()
        if not name:
            return
        target = sess.local if node.is_local else sess.settings
        if node.kind == kinds.VAR_SET_VALUE:
            if name == "search_path":
                parts = [fold_string(a) for a in node.args or ()]
                if any(p is None for p in parts):
                    return
                value = ", ".join(_quote_schema(p) for p in parts if p is not None)
            else:
                maybe = guc_value(node)
                if maybe is None:
                    return
                value = maybe
            target[name] = value
        elif node.kind in (kinds.VAR_SET_DEFAULT, kinds.VAR_RESET):
            if name in sess.defaults:
                target[name] = sess.defaults[name]
            else:
                target.pop(name, None)

    @staticmethod
    def _apply_set_config(fc: ast.FuncCall, sess: _Session) -> None:
        args = list(fc.args or ())
        if len(args) != 3:
            return
        name, value, is_local = fold_string(args[0]), fold_string(args[1]), fold_string(args[2])
        if name is None or value is None or is_local is None:
            return
        local = pg_bool(is_local)
        if local is None:
            return
        (sess.local if local else sess.settings)[name.lower()] = value

    # -- DO blocks, PL/pgSQL -----------------------------------------------------------------

    def _do(self, node: ast.DoStmt, u: _Unit) -> None:
        body, language = do_block(node)
        if body is None:
            return
        if language != "plpgsql":
            self._note(u, f"DO block in language {language} not judged")
            return
        tag = _dollar_tag(body)
        try:
            tree = pglast.parse_plpgsql(f"DO ${tag}${body}${tag}$")
        except pglast.parser.ParseError as exc:
            self._unparsed(u.action, "do_block", body, str(exc))
            return
        self._plpg(tree, self._nested(u, "do_block"))

    def _register_function(self, node: ast.CreateFunctionStmt, u: _Unit) -> None:
        names = [s.sval or "" for s in node.funcname or () if isinstance(s, ast.String)]
        if not names:
            return
        language, body = "sql", None
        for d in node.options or ():
            if not isinstance(d, ast.DefElem):
                continue
            if d.defname == "language" and isinstance(d.arg, ast.String):
                language = (d.arg.sval or "").lower()
            elif d.defname == "as" and isinstance(d.arg, tuple) and d.arg:
                first = d.arg[0]
                body = first.sval if isinstance(first, ast.String) else None
        fdef = _FuncDef(language)
        if node.sql_body:
            fdef.nodes = _flatten(node.sql_body)
        elif body is not None and language == "sql":
            try:
                fdef.nodes = [r.stmt for r in pglast.parse_sql(body) if r.stmt is not None]
            except pglast.parser.ParseError as exc:
                self._unparsed(u.action, "function_body", body, str(exc))
                return
        elif body is not None and language == "plpgsql":
            src = _full_sql(node)
            try:
                fdef.plpgsql = pglast.parse_plpgsql(src) if src else None
            except pglast.parser.ParseError as exc:
                self._unparsed(u.action, "function_body", body, str(exc))
                return
        else:
            self._note(u, f"function {names[-1]} in language {language} not judged")
            return
        self.functions[names[-1]] = fdef

    def _call_function(self, name: str, u: _Unit) -> None:
        fdef = self.functions[name]
        inner = self._nested(u, "function_body")
        if inner.depth > MAX_DEPTH:
            self._note(u, f"call of {name} nested too deep; not judged")
            return
        for n in fdef.nodes:
            self._unit(n, inner)
        if fdef.plpgsql is not None:
            self._plpg(fdef.plpgsql, inner)

    def _plpg(self, obj: Any, u: _Unit) -> None:
        if isinstance(obj, list):
            for item in obj:
                self._plpg(item, u)
            return
        if not isinstance(obj, dict):
            return
        for key, val in obj.items():
            if key == "PLpgSQL_expr":
                self._plpg_expr(val, u)
            elif key in ("PLpgSQL_stmt_fors", "PLpgSQL_stmt_dynfors") and isinstance(val, dict):
                self._plpg_fors(val, u, dynamic=key.endswith("dynfors"))
            elif key == "PLpgSQL_stmt_dynexecute" and isinstance(val, dict):
                self._plpg_dynamic(val.get("query"), u)
                self._plpg(val.get("params"), u)
            elif key in ("PLpgSQL_stmt_commit", "PLpgSQL_stmt_rollback"):
                chain = isinstance(val, dict) and bool(val.get("chain"))
                self._end_tx(u.session, commit=key.endswith("commit"), chain=chain)
            else:
                self._plpg(val, u)

    def _plpg_fors(self, val: dict[str, Any], u: _Unit, *, dynamic: bool) -> None:
        query = val.get("query")
        if dynamic:
            nodes = self._plpg_dynamic(query, u)
        else:
            expr = query.get("PLpgSQL_expr") if isinstance(query, dict) else None
            nodes = self._plpg_expr(expr, u)
        loops = dict(u.loops)
        select = nodes[0] if nodes and isinstance(nodes[0], ast.SelectStmt) else None
        if select is not None:
            for name, column in _loop_vars(val.get("var")):
                loops[name] = LoopScope(select, column)
        self._plpg(val.get("body"), dataclasses.replace(u, loops=loops))

    def _plpg_expr(self, expr: Any, u: _Unit) -> list[ast.Node]:
        if not isinstance(expr, dict) or not expr.get("query"):
            return []
        query = str(expr["query"])
        mode = int(expr.get("parseMode", 0) or 0)
        if mode == 1:  # a type name
            return []
        text = query if mode == 0 else "SELECT " + (query if mode == 2 else strip_assignment(query))
        try:
            nodes = [r.stmt for r in pglast.parse_sql(text) if r.stmt is not None]
        except pglast.parser.ParseError as exc:
            self._unparsed(u.action, u.origin, query, str(exc))
            return []
        for n in nodes:
            if mode == 0 or any(isinstance(x, ast.FuncCall | ast.SubLink) for x in iter_nodes(n)):
                self._unit(n, u)
        return nodes

    def _plpg_dynamic(self, query: Any, u: _Unit) -> list[ast.Node]:
        expr = query.get("PLpgSQL_expr") if isinstance(query, dict) else None
        if not isinstance(expr, dict) or not expr.get("query"):
            return []
        source = str(expr["query"])
        try:
            wrapper = pglast.parse_sql("SELECT " + source)[0].stmt
        except pglast.parser.ParseError as exc:
            self._unparsed(u.action, "dynamic_sql", source, str(exc))
            return []
        text = None
        if isinstance(wrapper, ast.SelectStmt) and wrapper.targetList:
            target = wrapper.targetList[0]
            if isinstance(target, ast.ResTarget):
                text = fold_string(target.val)
        if text is None:
            self._note(u, f"dynamic SQL not resolved, not judged: EXECUTE {source}")
            self._unparsed(u.action, "dynamic_sql", source, "the statement text is computed")
            self._plpg_expr({"query": source, "parseMode": 2}, u)
            return []
        return self._run_text(text, u)

    def _run_text(self, text: str, u: _Unit) -> list[ast.Node]:
        """Judge SQL text a statement runs (``EXECUTE 'text'``, a function that runs text)."""
        try:
            nodes = [r.stmt for r in pglast.parse_sql(text) if r.stmt is not None]
        except pglast.parser.ParseError as exc:
            self._unparsed(u.action, "dynamic_sql", text, str(exc))
            return []
        inner = self._nested(u, "dynamic_sql")
        if inner.depth > MAX_DEPTH:
            self._note(u, "SQL text nested too deep; not judged")
            self._unparsed(u.action, "dynamic_sql", text, "nested too deep to judge")
            return []
        for n in nodes:
            self._unit(n, inner)
        return nodes


def _flatten(items: Any) -> list[ast.Node]:
    """Statement nodes of a nested tuple (``CreateFunctionStmt.sql_body``)."""
    if isinstance(items, ast.Node):
        return [items]
    out: list[ast.Node] = []
    for item in items if isinstance(items, tuple | list) else ():
        out.extend(_flatten(item))
    return out


def _loop_vars(var: Any) -> list[tuple[str, int | None]]:
    if not isinstance(var, dict):
        return []
    if "PLpgSQL_rec" in var:
        return [(str(var["PLpgSQL_rec"].get("refname", "")), None)]
    if "PLpgSQL_var" in var:
        return [(str(var["PLpgSQL_var"].get("refname", "")), 0)]
    if "PLpgSQL_row" in var:
        fields = var["PLpgSQL_row"].get("fields") or []
        return [(str(f.get("name", "")), i) for i, f in enumerate(fields) if isinstance(f, dict)]
    return []


def parse_trace(
    actions: Sequence[SqlAction | InstanceAction],
    context: SafetyContext,
    *,
    signal_functions: Collection[str] = (),
) -> ParsedTrace:
    """Parse a trajectory into executed statements (see the module docstring), each with its
    facts; the calls of ``signal_functions`` get signal targets."""
    return _Extractor(context, signal_functions).run(actions)
