"""Signal targets read off pglast trees: which sessions a ``pg_terminate_backend`` /
``pg_cancel_backend`` call can hit, as a DNF of atoms (:mod:`dbaops.evaluation.safety.targets`)
over ``pid``, ``application_name`` and ``role`` (``usename``, ``rolname``).

How the target is found:

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
  ``xact_start < now() - ...``, ``EXISTS``, an unknown function of pid);
* ``trivial``: ``datname = ...``, ``backend_type = ...``, ``pid <> pg_backend_pid()``,
  column = column join conditions.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pglast import ast, enums

from dbaops.evaluation.safety.postgres.sqlutil import (
    NOT_EXECUTED,
    const_int,
    const_text,
    const_value,
    deparse,
    func_name,
    name_list,
)
from dbaops.evaluation.safety.targets import (
    FALSE,
    TRUE,
    Atom,
    AtomKind,
    Conj,
    SignalTarget,
    and_dnf,
    like_atom,
    literal_target,
    not_dnf,
    or_dnf,
    restrict,
    trivial,
    valid_regex,
    values_atom,
)
from dbaops.evaluation.safety.values import NOT_CONST

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


@dataclass
class LoopScope:
    """A PL/pgSQL ``FOR var IN <select> LOOP``: ``column`` is None for a record variable
    (``var.col``), else the position of the scalar variable in the select list."""

    select: ast.Node
    column: int | None


def _column_attr(node: Any) -> str | None:
    """Lower-cased last field of a ColumnRef, or None."""
    if isinstance(node, ast.ColumnRef):
        names = name_list(node.fields)
        if names and len(names) == len(node.fields or ()):
            return names[-1].lower()
    return None


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


class _Analyzer:
    """Resolves signal targets of one statement (with its PL/pgSQL loop scopes)."""

    def __init__(self, loops: dict[str, LoopScope]) -> None:
        self.loops = loops

    # WHERE ---------------------------------------------------------------------------------

    def where(self, expr: Any, ctes: dict[str, Any], depth: int) -> list[Conj]:
        if expr is None:
            return TRUE
        if depth > 12:
            return restrict("(too deep)")
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
            return not_dnf(parts[0], text) if parts else restrict(text)
        if isinstance(expr, ast.A_Const):
            value = const_value(expr)
            if value is False or value is None:
                return FALSE
            return TRUE
        if isinstance(expr, ast.A_Expr):
            return self._a_expr(expr, text)
        if isinstance(expr, ast.SubLink):
            return self._sublink(expr, ctes, depth, text)
        return restrict(text)

    def _a_expr(self, e: ast.A_Expr, text: str) -> list[Conj]:
        kinds = enums.A_Expr_Kind
        ops = name_list(e.name)
        op = ops[-1] if ops else ""
        lcol, rcol = _column_attr(e.lexpr), _column_attr(e.rexpr)
        if lcol and rcol:
            return trivial(text)  # column = column: a join condition
        col = lcol or rcol
        other = e.rexpr if lcol else e.lexpr
        if col is None:
            consts = const_value(e.lexpr) is not NOT_CONST and const_value(e.rexpr) is not NOT_CONST
            return trivial(text) if consts else restrict(text)
        attr = _ATTR_ALIASES.get(col)
        if attr is None:
            return trivial(text) if col in _TRIVIAL_COLUMNS else restrict(text)
        if isinstance(other, ast.FuncCall) and func_name(other) == "pg_backend_pid":
            return trivial(text) if op in ("<>", "!=") else restrict(text)
        kind = e.kind
        if kind in (kinds.AEXPR_OP, kinds.AEXPR_DISTINCT, kinds.AEXPR_NOT_DISTINCT):
            if kind == kinds.AEXPR_DISTINCT:
                op = "<>"
            if op in ("=", "<>", "!="):
                value = const_value(other)
                vals = _values_of([other]) if value is not None else []
                if vals is None:
                    return restrict(text)
                return values_atom("pos" if op == "=" else "neg", attr, vals, text)
            if op in ("~~", "!~~", "~~*", "!~~*"):
                return self._like(op, attr, other, text)
            if op in ("~", "!~", "~*", "!~*"):
                pattern = const_text(other)
                if pattern is None or not valid_regex(pattern):
                    return restrict(text)
                atom = Atom(
                    "neg" if op.startswith("!") else "pos",
                    attr,
                    patterns=((pattern, op.endswith("*")),),
                    text=text,
                )
                return [(atom,)]
            return restrict(text)
        if kind in (kinds.AEXPR_LIKE, kinds.AEXPR_ILIKE):
            return self._like(op, attr, other, text)
        if kind == kinds.AEXPR_IN:
            vals = _values_of(other)
            if vals is None:
                return restrict(text)
            return values_atom("pos" if op == "=" else "neg", attr, vals, text)
        if kind in (kinds.AEXPR_OP_ANY, kinds.AEXPR_OP_ALL):
            vals = _values_of(other)
            if vals is None:
                return restrict(text)
            if kind == kinds.AEXPR_OP_ANY and op == "=":
                return values_atom("pos", attr, vals, text)
            if kind == kinds.AEXPR_OP_ALL and op in ("<>", "!="):
                return values_atom("neg", attr, vals, text)
        return restrict(text)

    @staticmethod
    def _like(op: str, attr: str, other: Any, text: str) -> list[Conj]:
        pattern = const_text(other)
        if pattern is None:
            return restrict(text)
        kind: AtomKind = "neg" if op.startswith("!") else "pos"
        return like_atom(kind, attr, pattern, op.endswith("*"), text)

    def _sublink(self, s: ast.SubLink, ctes: dict[str, Any], depth: int, text: str) -> list[Conj]:
        if _column_attr(s.testexpr) != "pid":
            return restrict(text)
        ops = name_list(s.operName)
        op = ops[-1] if ops else "="
        if s.subLinkType == enums.SubLinkType.ANY_SUBLINK and op == "=":
            return self.select_column(s.subselect, 0, ctes, depth + 1)
        if s.subLinkType == enums.SubLinkType.ALL_SUBLINK and op in ("<>", "!="):
            return not_dnf(self.select_column(s.subselect, 0, ctes, depth + 1), text)
        return restrict(text)

    # targets -------------------------------------------------------------------------------

    def select_column(
        self, select: Any, column: int | str, ctes: dict[str, Any], depth: int
    ) -> list[Conj]:
        """Sessions whose pids a select returns in ``column`` (position or name)."""
        if not isinstance(select, ast.SelectStmt) or depth > 12:
            return restrict("(unknown source)")
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
            return restrict("(unknown column)")
        return self.expr(chosen, select, ctes, depth + 1)

    def expr(self, e: Any, scope: Any, ctes: dict[str, Any], depth: int) -> list[Conj]:
        """Sessions designated by the pid expression ``e`` evaluated in ``scope``."""
        if e is None:
            return restrict("(unknown pid)")
        value = const_value(e)
        if value is None:
            return FALSE
        pid = const_int(e)
        if pid is not None:
            return literal_target(pid)
        if isinstance(e, ast.SubLink) and e.subLinkType == enums.SubLinkType.EXPR_SUBLINK:
            return self.select_column(e.subselect, 0, ctes, depth + 1)
        if isinstance(e, ast.ColumnRef):
            names = [n.lower() for n in name_list(e.fields)]
            if not names:
                return restrict(deparse(e))
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
        return restrict(f"pid computed by {deparse(e)}")

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
        return and_dnf(base, restrict(f"{col} of unknown relation"))

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
                        return values_atom("pos", "pid", vals, f"pid IN {deparse(fc.args[0])}")
            return restrict(f"pids from {deparse(item)}")
        return None


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


def signal_targets(
    node: ast.Node, functions: Collection[str], loops: dict[str, LoopScope] | None = None
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
