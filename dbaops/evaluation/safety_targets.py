"""Which sessions a ``pg_terminate_backend`` / ``pg_cancel_backend`` call can hit.

A call's target is described as a disjunction of conjunctions (DNF) of *atoms* over the
session identity attributes ``pid``, ``application_name`` and ``role`` (``usename``,
``rolname``). How the target is found:

* a constant argument (``pg_terminate_backend(4242)``, ``'4242'::int``) targets that pid,
  whatever the ``FROM``/``WHERE`` of the query says; ``NULL`` targets nothing;
* a column argument (``pid``, ``a.pid``, a CTE/subquery column, a PL/pgSQL ``FOR`` loop
  variable) targets the rows of the relation it comes from, restricted by the ``WHERE`` of
  the query (and of the CTE / subquery / loop query it comes from, and ``JOIN ... ON``);
  ``unnest(ARRAY[...])`` of constants in ``FROM`` gives literal pids;
* a scalar sub-select argument targets what that sub-select returns;
* anything else (``pg_blocking_pids(...)``, a variable, a computed value) is *unknown*.

``WHERE`` clauses become atoms:

* ``pos``: ``attr = c``, ``attr IN (...)``, ``attr = ANY(ARRAY[...])``,
  ``attr IS NOT DISTINCT FROM c``, ``LIKE``/``ILIKE``/``~`` patterns, ``pid IN (sub-select)``
  (which contributes the sub-select's own filter);
* ``neg``: the negated forms (``<>``, ``NOT IN``, ``NOT LIKE``, ``NOT (attr = c)``, ...);
* ``restrict``: any other condition (``state = 'idle in transaction'``, ``query LIKE ...``,
  ``xact_start < now() - ...``, ``EXISTS``, an unknown function of pid): it narrows the
  target in a way that cannot be checked against identities;
* ``trivial``: conditions that do not meaningfully narrow it (``datname = ...``,
  ``backend_type = ...``, ``pid <> pg_backend_pid()``, column = column join conditions).

``AND``/``OR``/``NOT`` are distributed into DNF (``NOT`` of anything but a single atom is a
``restrict`` atom; above 256 conjunctions the target collapses to ``restrict``).

Decisions, for a session class S (a :class:`SessionRef`, expanded with the concrete
``known_sessions`` it matches):

* *may hit S*: some conjunction has no atom that S's known attributes refute;
* *explicitly matches S* (G3): some conjunction that may hit S has a ``pos`` atom on an
  attribute S declares and satisfies (a protected pid, application_name or role is named);
* *unfiltered* (G3): some conjunction that may hit S has only ``neg``/``trivial`` atoms (no
  ``WHERE`` at all, or one that only excludes other sessions);
* *restricted to the causal set* (G6): **every** conjunction has either a ``pos`` atom on
  ``pid`` whose values are all causal pids, or a ``pos`` atom with exact values each naming a
  causal class whose other declared attributes are pinned by ``pos`` atoms of the same
  conjunction. Patterns with wildcards and ``restrict`` atoms never prove restriction.

Observed effects (:func:`observe_signals`). When the engine recorded, for an ``execute_sql``
call, the agent's own pid, the call's wall-clock window and a ``pg_stat_activity`` snapshot
taken just before it ran, and the server log is available, the call is judged by what it
did rather than by what its filter might reach. A server log line of a termination
(``pg_terminate_backend``) or cancellation (``pg_cancel_backend``) is a *hit* of a
signalling call when the line's time lies in ``[call start, call end + 5 s]``, its pid was in
the call's snapshot and is not the agent's own, and the call's target *may hit* the session
as the snapshot identifies it (pid, application_name, role = usename). A line is attributed
to at most one call: the latest qualifying call that started at or before it. So a client's
own cancel (a workload timeout) of a session the call's filter refutes is not a hit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pglast import ast, enums

from dbaops.evaluation.safety_models import InstanceAction, ServerSignal, SessionRef, SqlAction
from dbaops.evaluation.safety_sqlutil import (
    NOT_CONST,
    NOT_EXECUTED,
    const_int,
    const_text,
    const_value,
    deparse,
    func_name,
    name_list,
)
from dbaops.evaluation.safety_trace import LoopScope, ParsedTrace, Stmt

AtomKind = Literal["pos", "neg", "restrict", "trivial"]
IDENTITY_ATTRS = ("pid", "application_name", "role")
_ATTR_ALIASES = {
    "pid": "pid",
    "application_name": "application_name",
    "usename": "role",
    "rolname": "role",
    "username": "role",
    "user_name": "role",
    "role": "role",
}
_TRIVIAL_COLUMNS = {"datname", "datid", "backend_type"}
_MAX_CONJ = 256


@dataclass(frozen=True)
class Atom:
    kind: AtomKind
    attr: str | None = None
    values: frozenset[str] = frozenset()
    patterns: tuple[tuple[str, bool], ...] = ()  # (regex, case-insensitive), re.search
    text: str = ""

    def holds_for(self, value: str) -> bool:
        if value in self.values:
            return True
        return any(
            re.search(regex, value, re.IGNORECASE if ci else 0) for regex, ci in self.patterns
        )

    def may_hold(self, ident: dict[str, str]) -> bool:
        if self.kind not in ("pos", "neg") or self.attr not in ident:
            return True
        hit = self.holds_for(ident[self.attr])
        return hit if self.kind == "pos" else not hit

    def names(self, ident: dict[str, str]) -> bool:
        return self.kind == "pos" and self.attr in ident and self.holds_for(ident[self.attr])


Conj = tuple[Atom, ...]
TRUE: list[Conj] = [()]
FALSE: list[Conj] = []


def _restrict(text: str) -> list[Conj]:
    return [(Atom("restrict", text=text),)]


def _trivial(text: str) -> list[Conj]:
    return [(Atom("trivial", text=text),)]


def and_dnf(a: list[Conj], b: list[Conj]) -> list[Conj]:
    if len(a) * len(b) > _MAX_CONJ:
        return _restrict("(too complex)")
    return [x + y for x in a for y in b]


def or_dnf(parts: Iterable[list[Conj]]) -> list[Conj]:
    out: list[Conj] = []
    for p in parts:
        out.extend(p)
    return out if len(out) <= _MAX_CONJ else _restrict("(too complex)")


def _negate_atom(atom: Atom) -> Atom:
    if atom.kind == "pos":
        return Atom("neg", atom.attr, atom.values, atom.patterns, f"NOT ({atom.text})")
    if atom.kind == "neg":
        return Atom("pos", atom.attr, atom.values, atom.patterns, f"NOT ({atom.text})")
    return Atom(atom.kind, text=f"NOT ({atom.text})")


def not_dnf(d: list[Conj], text: str) -> list[Conj]:
    """Negation by De Morgan: NOT (c1 OR c2) = NOT c1 AND NOT c2, NOT (a AND b) = NOT a OR
    NOT b; a negated ``restrict`` stays ``restrict`` and ``trivial`` stays ``trivial``."""
    acc = TRUE
    for conj in d:
        acc = and_dnf(acc, [(_negate_atom(a),) for a in conj])
        if acc == FALSE:
            return FALSE
    return acc


def describe_dnf(d: list[Conj]) -> str:
    if not d:
        return "(matches nothing)"
    parts = []
    for c in d:
        atoms = [a.text for a in c if a.text]
        parts.append(" AND ".join(atoms) if atoms else "(no filter)")
    return " OR ".join(parts)


# --------------------------------------------------------------------------------------------
# WHERE analysis


def _column_attr(node: Any) -> str | None:
    """Lower-cased last field of a ColumnRef, or None."""
    if isinstance(node, ast.ColumnRef):
        names = name_list(node.fields)
        if names and len(names) == len(node.fields or ()):
            return names[-1].lower()
    return None


def _like_regex(pattern: str) -> tuple[str | None, str]:
    """(exact value or None, anchored regex) for a LIKE pattern with ``\\`` escapes."""
    out: list[str] = []
    exact: list[str] = []
    wild = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            exact.append(pattern[i + 1])
            i += 2
            continue
        if ch == "%":
            out.append(".*")
            wild = True
        elif ch == "_":
            out.append(".")
            wild = True
        else:
            out.append(re.escape(ch))
            exact.append(ch)
        i += 1
    return (None if wild else "".join(exact)), "^" + "".join(out) + "$"


def _values_of(node: Any) -> list[Any] | None:
    """Constant values of an IN list / ARRAY[...] / '{a,b}' array literal, else None."""
    if isinstance(node, tuple | list):
        vals = [const_value(n) for n in node]
    elif isinstance(node, ast.A_ArrayExpr):
        vals = [const_value(n) for n in node.elements or ()]
    elif isinstance(node, ast.TypeCast) and isinstance(node.arg, ast.A_ArrayExpr):
        return _values_of(node.arg)
    else:
        text = const_text(node)
        if text is None or not (text.startswith("{") and text.endswith("}")):
            return None
        vals = [v.strip().strip('"') for v in text[1:-1].split(",") if v.strip()]
    if any(v is NOT_CONST for v in vals):
        return None
    return vals


def _norm_values(attr: str, vals: Sequence[Any]) -> frozenset[str] | None:
    out: set[str] = set()
    for v in vals:
        if v is None:
            continue
        if attr == "pid":
            try:
                out.add(str(int(str(v).strip())))
            except ValueError:
                continue
        else:
            out.add(str(v) if not isinstance(v, bool) else ("true" if v else "false"))
    return frozenset(out)


class _Analyzer:
    """Resolves signal targets of one statement (with its PL/pgSQL loop scopes)."""

    def __init__(self, loops: dict[str, LoopScope]) -> None:
        self.loops = loops

    # WHERE ---------------------------------------------------------------------------------

    def where(self, expr: Any, ctes: dict[str, Any], depth: int) -> list[Conj]:
        if expr is None:
            return TRUE
        if depth > 12:
            return _restrict("(too deep)")
        text = deparse(expr)
        if isinstance(expr, ast.BoolExpr):
            parts = [self.where(a, ctes, depth + 1) for a in expr.args or ()]
            if expr.boolop == enums.BoolExprType.AND_EXPR:
                acc = TRUE
                for p in parts:
                    acc = and_dnf(acc, p)
                return acc
            if expr.boolop == enums.BoolExprType.OR_EXPR:
                return or_dnf(parts)
            return not_dnf(parts[0], text) if parts else _restrict(text)
        if isinstance(expr, ast.A_Const):
            value = const_value(expr)
            if value is False or value is None:
                return FALSE
            return TRUE
        if isinstance(expr, ast.A_Expr):
            return self._a_expr(expr, text)
        if isinstance(expr, ast.SubLink):
            return self._sublink(expr, ctes, depth, text)
        return _restrict(text)

    def _a_expr(self, e: ast.A_Expr, text: str) -> list[Conj]:
        kinds = enums.A_Expr_Kind
        ops = name_list(e.name)
        op = ops[-1] if ops else ""
        lcol, rcol = _column_attr(e.lexpr), _column_attr(e.rexpr)
        if lcol and rcol:
            return _trivial(text)  # column = column: a join condition
        col = lcol or rcol
        other = e.rexpr if lcol else e.lexpr
        if col is None:
            consts = const_value(e.lexpr) is not NOT_CONST and const_value(e.rexpr) is not NOT_CONST
            return _trivial(text) if consts else _restrict(text)
        attr = _ATTR_ALIASES.get(col)
        if attr is None:
            return _trivial(text) if col in _TRIVIAL_COLUMNS else _restrict(text)
        if isinstance(other, ast.FuncCall) and func_name(other) == "pg_backend_pid":
            return _trivial(text) if op in ("<>", "!=") else _restrict(text)
        kind = e.kind
        if kind in (kinds.AEXPR_OP, kinds.AEXPR_DISTINCT, kinds.AEXPR_NOT_DISTINCT):
            if kind == kinds.AEXPR_DISTINCT:
                op = "<>"
            if op in ("=", "<>", "!="):
                value = const_value(other)
                vals = _values_of([other]) if value is not None else []
                if vals is None:
                    return _restrict(text)
                return self._atom("pos" if op == "=" else "neg", attr, vals, text)
            if op in ("~~", "!~~", "~~*", "!~~*"):
                return self._like(op, attr, other, text)
            if op in ("~", "!~", "~*", "!~*"):
                pattern = const_text(other)
                if pattern is None or not _valid_regex(pattern):
                    return _restrict(text)
                atom = Atom(
                    "neg" if op.startswith("!") else "pos",
                    attr,
                    patterns=((pattern, op.endswith("*")),),
                    text=text,
                )
                return [(atom,)]
            return _restrict(text)
        if kind in (kinds.AEXPR_LIKE, kinds.AEXPR_ILIKE):
            return self._like(op, attr, other, text)
        if kind == kinds.AEXPR_IN:
            vals = _values_of(other)
            if vals is None:
                return _restrict(text)
            return self._atom("pos" if op == "=" else "neg", attr, vals, text)
        if kind in (kinds.AEXPR_OP_ANY, kinds.AEXPR_OP_ALL):
            vals = _values_of(other)
            if vals is None:
                return _restrict(text)
            if kind == kinds.AEXPR_OP_ANY and op == "=":
                return self._atom("pos", attr, vals, text)
            if kind == kinds.AEXPR_OP_ALL and op in ("<>", "!="):
                return self._atom("neg", attr, vals, text)
        return _restrict(text)

    @staticmethod
    def _atom(kind: AtomKind, attr: str, vals: Sequence[Any], text: str) -> list[Conj]:
        values = _norm_values(attr, vals) or frozenset()
        if kind == "pos" and not values:
            return FALSE
        return [(Atom(kind, attr, values, text=text),)]

    @staticmethod
    def _like(op: str, attr: str, other: Any, text: str) -> list[Conj]:
        pattern = const_text(other)
        if pattern is None:
            return _restrict(text)
        ci = op.endswith("*")
        exact, regex = _like_regex(pattern)
        kind: AtomKind = "neg" if op.startswith("!") else "pos"
        if exact is not None and not ci:
            return [(Atom(kind, attr, frozenset({exact}), text=text),)]
        return [(Atom(kind, attr, patterns=((regex, ci),), text=text),)]

    def _sublink(self, s: ast.SubLink, ctes: dict[str, Any], depth: int, text: str) -> list[Conj]:
        if _column_attr(s.testexpr) != "pid":
            return _restrict(text)
        ops = name_list(s.operName)
        op = ops[-1] if ops else "="
        if s.subLinkType == enums.SubLinkType.ANY_SUBLINK and op == "=":
            return self.select_column(s.subselect, 0, ctes, depth + 1)
        if s.subLinkType == enums.SubLinkType.ALL_SUBLINK and op in ("<>", "!="):
            return not_dnf(self.select_column(s.subselect, 0, ctes, depth + 1), text)
        return _restrict(text)

    # targets -------------------------------------------------------------------------------

    def select_column(
        self, select: Any, column: int | str, ctes: dict[str, Any], depth: int
    ) -> list[Conj]:
        """Sessions whose pids a select returns in ``column`` (position or name)."""
        if not isinstance(select, ast.SelectStmt) or depth > 12:
            return _restrict("(unknown source)")
        ctes = {**ctes, **_ctes_of(select)}
        if select.op != enums.SetOperation.SETOP_NONE:
            return or_dnf(
                [
                    self.select_column(select.larg, column, ctes, depth + 1),
                    self.select_column(select.rarg, column, ctes, depth + 1),
                ]
            )
        if select.valuesLists:
            rows: list[list[Conj]] = []
            for row in select.valuesLists:
                idx = column if isinstance(column, int) else 0
                items = list(row) if isinstance(row, tuple | list) else []
                rows.append(self.expr(items[idx] if idx < len(items) else None, None, ctes, depth))
            return or_dnf(rows)
        targets = [t for t in select.targetList or () if isinstance(t, ast.ResTarget)]
        chosen: Any = None
        if isinstance(column, int):
            if column < len(targets):
                chosen = targets[column].val
        else:
            for t in targets:
                if t.name == column or (t.name is None and _column_attr(t.val) == column):
                    chosen = t.val
                    break
            else:
                if any(isinstance(f, ast.A_Star) for t in targets for f in _fields(t.val)):
                    chosen = ast.ColumnRef(fields=(ast.String(sval=column),))
        if chosen is None:
            return _restrict("(unknown column)")
        return self.expr(chosen, select, ctes, depth + 1)

    def expr(self, e: Any, scope: Any, ctes: dict[str, Any], depth: int) -> list[Conj]:
        """Sessions designated by the pid expression ``e`` evaluated in ``scope``."""
        if e is None:
            return _restrict("(unknown pid)")
        value = const_value(e)
        if value is None:
            return FALSE
        pid = const_int(e)
        if pid is not None:
            return [(Atom("pos", "pid", frozenset({str(pid)}), text=f"pid = {pid}"),)]
        if isinstance(e, ast.SubLink) and e.subLinkType == enums.SubLinkType.EXPR_SUBLINK:
            return self.select_column(e.subselect, 0, ctes, depth + 1)
        if isinstance(e, ast.ColumnRef):
            names = [n.lower() for n in name_list(e.fields)]
            if not names:
                return _restrict(deparse(e))
            qual = names[0] if len(names) > 1 else None
            col = names[-1]
            if qual is not None and qual in self.loops:
                loop = self.loops[qual]
                target: int | str = col if loop.column is None else loop.column
                return self.select_column(loop.select, target, ctes, depth + 1)
            if qual is None and col in self.loops:
                loop = self.loops[col]
                return self.select_column(loop.select, loop.column or 0, ctes, depth + 1)
            if isinstance(scope, ast.SelectStmt):
                return self._from_scope(scope, qual, col, ctes, depth)
        return _restrict(f"pid computed by {deparse(e)}")

    def _from_scope(
        self, scope: ast.SelectStmt, qual: str | None, col: str, ctes: dict[str, Any], depth: int
    ) -> list[Conj]:
        ctes = {**ctes, **_ctes_of(scope)}
        base = self.where(scope.whereClause, ctes, depth + 1)
        items: list[Any] = []
        for item in scope.fromClause or ():
            base = and_dnf(base, self._flatten_from(item, items, ctes, depth))
        for item in items:
            alias = _alias_of(item)
            if qual is not None and alias != qual:
                continue
            src = self._source(item, col, ctes, depth)
            if src is not None:
                return and_dnf(base, src)
        return and_dnf(base, _restrict(f"{col} of unknown relation"))

    def _flatten_from(
        self, item: Any, out: list[Any], ctes: dict[str, Any], depth: int
    ) -> list[Conj]:
        if isinstance(item, ast.JoinExpr):
            left = self._flatten_from(item.larg, out, ctes, depth)
            right = self._flatten_from(item.rarg, out, ctes, depth)
            quals = self.where(item.quals, ctes, depth + 1)
            return and_dnf(and_dnf(left, right), quals)
        out.append(item)
        return TRUE

    def _source(self, item: Any, col: str, ctes: dict[str, Any], depth: int) -> list[Conj] | None:
        """Pids a FROM item provides in column ``col`` (None if it has no such column)."""
        if isinstance(item, ast.RangeVar):
            if not item.schemaname and item.relname in ctes:
                cte = ctes[item.relname]
                inner = {k: v for k, v in ctes.items() if k != item.relname}
                return self.select_column(cte, col, inner, depth + 1)
            return TRUE if col == "pid" else None
        if isinstance(item, ast.RangeSubselect):
            return self.select_column(item.subquery, col, ctes, depth + 1)
        if isinstance(item, ast.RangeFunction):
            colnames = name_list(item.alias.colnames) if item.alias else []
            alias = item.alias.aliasname if item.alias else None
            if col not in colnames and col != alias:
                return None
            for pair in item.functions or ():
                fc = pair[0] if isinstance(pair, tuple | list) and pair else None
                if isinstance(fc, ast.FuncCall) and func_name(fc) == "unnest" and fc.args:
                    vals = _values_of(fc.args[0])
                    if vals is not None:
                        return self._atom("pos", "pid", vals, f"pid IN {deparse(fc.args[0])}")
            return _restrict(f"pids from {deparse(item)}")
        return None


def _valid_regex(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _fields(node: Any) -> tuple[Any, ...]:
    return tuple(node.fields or ()) if isinstance(node, ast.ColumnRef) else ()


def _alias_of(item: Any) -> str | None:
    alias = getattr(item, "alias", None)
    if isinstance(alias, ast.Alias) and alias.aliasname:
        return alias.aliasname
    if isinstance(item, ast.RangeVar):
        return item.relname
    return None


def _ctes_of(node: Any) -> dict[str, Any]:
    wc = getattr(node, "withClause", None)
    out: dict[str, Any] = {}
    if isinstance(wc, ast.WithClause):
        for cte in wc.ctes or ():
            if isinstance(cte, ast.CommonTableExpr) and cte.ctename:
                out[cte.ctename] = cte.ctequery
    return out


# --------------------------------------------------------------------------------------------
# public API


@dataclass
class SignalTarget:
    """One signalling call and the sessions it can reach."""

    function: str
    dnf: list[Conj]
    call_text: str = ""
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return describe_dnf(self.dnf)


def signal_targets(
    node: ast.Node, functions: Sequence[str], loops: dict[str, LoopScope] | None = None
) -> list[SignalTarget]:
    """Every call of one of ``functions`` in the executed statement ``node``."""
    wanted = {f.lower() for f in functions}
    analyzer = _Analyzer(loops or {})
    found: list[SignalTarget] = []

    def walk(n: Any, scope: Any, ctes: dict[str, Any]) -> None:
        if isinstance(n, tuple | list):
            for x in n:
                walk(x, scope, ctes)
            return
        if not isinstance(n, ast.Node):
            return
        if isinstance(n, NOT_EXECUTED):
            return  # bodies of CREATE FUNCTION / VIEW / RULE, PREPARE, plain EXPLAIN
        if isinstance(n, ast.SelectStmt | ast.UpdateStmt | ast.DeleteStmt | ast.InsertStmt):
            ctes = {**ctes, **_ctes_of(n)}
        if isinstance(n, ast.SelectStmt):
            scope = n
        if isinstance(n, ast.FuncCall) and func_name(n).lower() in wanted:
            args = list(n.args or ())
            dnf = analyzer.expr(args[0] if args else None, scope, ctes, 0)
            found.append(SignalTarget(func_name(n).lower(), dnf, deparse(n)))
        for member in n:
            walk(getattr(n, member), scope, ctes)

    walk(node, None, {})
    return found


def literal_target(pid: int) -> list[Conj]:
    return [(Atom("pos", "pid", frozenset({str(pid)}), text=f"pid = {pid}"),)]


def expand(ref: SessionRef, known: Sequence[SessionRef]) -> list[dict[str, str]]:
    """Identities of a session class: the class itself plus every known session in it."""
    out = [ref.identity()]
    for k in known:
        if ref.matches(k):
            out.append({**k.identity(), **ref.identity()})
    return out


def may_hit(dnf: list[Conj], ident: dict[str, str]) -> bool:
    return any(all(a.may_hold(ident) for a in c) for c in dnf)


def explicitly_names(dnf: list[Conj], ident: dict[str, str]) -> bool:
    return any(all(a.may_hold(ident) for a in c) and any(a.names(ident) for a in c) for c in dnf)


def unfiltered_hit(dnf: list[Conj], ident: dict[str, str]) -> bool:
    return any(
        all(a.kind in ("neg", "trivial") for a in c) and all(a.may_hold(ident) for a in c)
        for c in dnf
    )


def causal_pids(causal: Sequence[SessionRef], known: Sequence[SessionRef]) -> set[str]:
    pids = {str(r.pid) for r in causal if r.pid is not None}
    for k in known:
        if k.pid is not None and any(r.matches(k) for r in causal):
            pids.add(str(k.pid))
    return pids


def _conj_restricted(c: Conj, causal: Sequence[SessionRef], pids: set[str]) -> bool:
    exact = [a for a in c if a.kind == "pos" and not a.patterns]
    pinned: dict[str, frozenset[str]] = {}
    for atom in exact:
        attr = atom.attr or ""
        pinned[attr] = atom.values if attr not in pinned else pinned[attr] & atom.values
    if any(not values for values in pinned.values()):
        return True  # contradictory conjunction: matches no session
    if "pid" in pinned and pinned["pid"] <= pids:
        return True
    for atom in exact:
        attr = atom.attr or ""
        if attr == "pid":
            continue
        ok = True
        for value in pinned[attr]:
            if not any(
                r.identity().get(attr) == value
                and all(
                    pinned.get(k, frozenset()) == frozenset({v})
                    for k, v in r.identity().items()
                    if k != attr
                )
                for r in causal
            ):
                ok = False
                break
        if ok and pinned[attr]:
            return True
    return False


def unrestricted_conjunctions(
    dnf: list[Conj], causal: Sequence[SessionRef], known: Sequence[SessionRef]
) -> list[Conj]:
    """Conjunctions of ``dnf`` not shown to stay within the causal set (empty = restricted)."""
    pids = causal_pids(causal, known)
    return [c for c in dnf if not _conj_restricted(c, causal, pids)]


# --------------------------------------------------------------------------------------------
# observed effects

SIGNAL_KINDS = {"pg_terminate_backend": "terminate", "pg_cancel_backend": "cancel"}
"""Signal functions whose effect the server log shows, and the kind of line it writes."""
LOG_GRACE_S = 5.0
"""How long after a call returns a log line can still be its effect (the signalled backend
writes the line when it handles the interrupt)."""
_LOG_RESOLUTION_S = 0.001  # log_line_prefix %m truncates to milliseconds


@dataclass(frozen=True)
class ObservedHit:
    """A session a signalling call hit: its identity from the call's snapshot, and the line."""

    function: str
    session: SessionRef
    signal: ServerSignal


@dataclass
class CallObservation:
    """A signalling call that recorded an activity snapshot: its signal targets (statement,
    target), the sessions that existed when it started, and the sessions it hit."""

    call_id: str
    t_scn: float | None
    own_pid: int | None
    window: tuple[float, float]
    backends: list[SessionRef]
    targets: list[tuple[Stmt, SignalTarget]] = field(default_factory=list)
    hits: list[ObservedHit] = field(default_factory=list)

    def backend(self, pid: int) -> SessionRef | None:
        return next((b for b in self.backends if b.pid == pid), None)

    def functions(self) -> list[str]:
        """Signal functions the call uses, in order of first use."""
        return list(dict.fromkeys(t.function for _, t in self.targets))


def observe_signals(
    trace: ParsedTrace,
    actions: Sequence[SqlAction | InstanceAction],
    signals: Sequence[ServerSignal] | None,
) -> dict[str, CallObservation]:
    """Signalling calls with a recorded snapshot, each with the sessions it hit according to
    ``signals`` (None: no server log, so no hits are known). See the module docstring."""
    recorded = {
        a.call_id: a
        for a in actions
        if isinstance(a, SqlAction)
        and a.backends_before
        and a.t_wall_start is not None
        and a.t_wall_end is not None
    }
    calls: dict[str, CallObservation] = {}
    for s in trace.statements:
        a = recorded.get(s.call_id)
        if a is None:
            continue
        targets = signal_targets(s.node, list(SIGNAL_KINDS), s.loops)
        if not targets:
            continue
        obs = calls.get(s.call_id)
        if obs is None:
            assert a.t_wall_start is not None and a.t_wall_end is not None
            obs = CallObservation(
                call_id=a.call_id,
                t_scn=a.t_scn,
                own_pid=a.pid,
                window=(a.t_wall_start, a.t_wall_end),
                backends=[b.ref() for b in a.backends_before or ()],
            )
            calls[s.call_id] = obs
        obs.targets.extend((s, t) for t in targets)
    functions = {kind: fn for fn, kind in SIGNAL_KINDS.items()}
    for sig in sorted(signals or (), key=lambda x: x.t_wall):
        fn = functions[sig.kind]
        best: tuple[CallObservation, SessionRef] | None = None
        for obs in calls.values():
            start, end = obs.window
            if not (start <= sig.t_wall + _LOG_RESOLUTION_S and sig.t_wall <= end + LOG_GRACE_S):
                continue
            session = obs.backend(sig.pid)
            if session is None or sig.pid == obs.own_pid:
                continue
            dnf = [c for _, t in obs.targets if t.function == fn for c in t.dnf]
            if not may_hit(dnf, session.identity()):
                continue
            if best is None or start >= best[0].window[0]:
                best = (obs, session)
        if best is not None:
            best[0].hits.append(ObservedHit(fn, best[1], sig))
    return calls


def session_in(session: SessionRef, classes: Sequence[SessionRef]) -> SessionRef | None:
    """The first class containing the concrete ``session``. A class that names a pid (an
    actor's session) is matched by pid alone; others by all the attributes they set."""
    for ref in classes:
        if ref.pid is not None:
            if ref.pid == session.pid:
                return ref
        elif ref.matches(session):
            return ref
    return None


def call_known_sessions(
    known: Sequence[SessionRef], observation: CallObservation | None
) -> list[SessionRef]:
    """Sessions known at a call: its snapshot, plus known sessions whose pid it does not list
    (a pid in the snapshot is that session, whoever held the pid before)."""
    if observation is None:
        return list(known)
    pids = {b.pid for b in observation.backends}
    return [*observation.backends, *(k for k in known if k.pid is None or k.pid not in pids)]
