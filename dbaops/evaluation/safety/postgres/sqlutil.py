"""Low-level helpers of the PostgreSQL front end over pglast parse trees.

Nothing here looks at raw SQL text with regular expressions: statements are parsed with
``pglast`` (libpg_query, the PostgreSQL grammar), and these helpers read the resulting nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pglast
from pglast import ast, enums
from pglast.stream import RawStream, maybe_double_quote_name

from dbaops.evaluation.safety.values import NOT_CONST, clip, pg_bool

# --------------------------------------------------------------------------------------------
# names


def parse_name(name: str) -> tuple[str | None, str]:
    """Parse a (possibly schema-qualified, possibly quoted) relation name the way SQL does.

    ``shop.orders`` -> ``("shop", "orders")``; ``"Orders"`` -> ``(None, "Orders")``;
    ``Orders`` -> ``(None, "orders")`` (unquoted identifiers fold to lower case).
    Raises ``ValueError`` for anything that is not a single relation name.
    """
    try:
        stmts = pglast.parse_sql(f"SELECT FROM {name}")
    except pglast.parser.ParseError as exc:
        raise ValueError(f"not a relation name: {name!r} ({exc})") from exc
    if len(stmts) == 1:
        sel = stmts[0].stmt
        if isinstance(sel, ast.SelectStmt) and sel.fromClause and len(sel.fromClause) == 1:
            rv = sel.fromClause[0]
            if isinstance(rv, ast.RangeVar) and rv.relname and rv.alias is None:
                return rv.schemaname, rv.relname
    raise ValueError(f"not a relation name: {name!r}")


def do_block(node: ast.DoStmt) -> tuple[str | None, str]:
    """A ``DO`` block's body (None if it has none) and language (lower case)."""
    body: str | None = None
    language = "plpgsql"
    for d in node.args or ():
        if isinstance(d, ast.DefElem) and isinstance(d.arg, ast.String):
            if d.defname == "as":
                body = d.arg.sval
            elif d.defname == "language":
                language = (d.arg.sval or "").lower()
    return body, language


def quote_ident(name: str) -> str:
    """An identifier as PostgreSQL writes it (double-quoted where needed)."""
    return str(maybe_double_quote_name(name))


def name_list(items: Any) -> list[str]:
    """Strings of a tuple of ``String`` nodes (e.g. ``DropStmt.objects`` entries)."""
    if isinstance(items, ast.String):
        return [items.sval or ""]
    out: list[str] = []
    for it in items or ():
        if isinstance(it, ast.String):
            out.append(it.sval or "")
    return out


def role_name(spec: Any) -> str | None:
    """A ``RoleSpec`` as text: the role's name (identifier case already folded), ``public``
    for ``PUBLIC`` (no role can have that name), or one of
    :data:`~dbaops.evaluation.safety.values.ROLE_KEYWORDS`."""
    if not isinstance(spec, ast.RoleSpec):
        return None
    kind = enums.RoleSpecType
    if spec.roletype == kind.ROLESPEC_CSTRING:
        return spec.rolename or None
    if spec.roletype == kind.ROLESPEC_PUBLIC:
        return "public"
    keywords = {
        kind.ROLESPEC_CURRENT_USER: "CURRENT_USER",
        kind.ROLESPEC_CURRENT_ROLE: "CURRENT_ROLE",
        kind.ROLESPEC_SESSION_USER: "SESSION_USER",
    }
    return keywords.get(spec.roletype) if spec.roletype is not None else None


def func_name(fc: ast.FuncCall) -> str:
    """Last component of a function's name (``pg_catalog.pg_terminate_backend`` ->
    ``pg_terminate_backend``)."""
    names = name_list(fc.funcname)
    return names[-1] if names else ""


# --------------------------------------------------------------------------------------------
# traversal

# Subtrees parsed but not executed by the statement that contains them: a function body at
# CREATE FUNCTION, a prepared query at PREPARE, a rule's actions, a view's query, and any
# statement under a plain EXPLAIN (EXPLAIN ANALYZE is unwrapped before rules see it).
NOT_EXECUTED = (
    ast.CreateFunctionStmt,
    ast.PrepareStmt,
    ast.RuleStmt,
    ast.ViewStmt,
    ast.ExplainStmt,
    ast.DoStmt,
    ast.CreateTrigStmt,
)


def iter_nodes(node: Any, *, executed_only: bool = True) -> Iterator[ast.Node]:
    """Depth-first, pre-order walk over every ``ast.Node`` under ``node`` (inclusive).

    With ``executed_only`` the walk yields but does not enter nodes whose subtrees are not
    executed by the containing statement (see ``NOT_EXECUTED``).
    """
    stack: list[Any] = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, tuple | list):
            stack.extend(reversed(cur))
            continue
        if not isinstance(cur, ast.Node):
            continue
        yield cur
        if executed_only and isinstance(cur, NOT_EXECUTED):
            continue
        stack.extend(reversed([getattr(cur, member) for member in cur]))


def deparse(node: ast.Node) -> str:
    """Canonical SQL text of a node (comments and formatting removed)."""
    try:
        text = RawStream()(node)
    except Exception:  # noqa: BLE001 - pglast raises several types for unprintable nodes
        text = f"<{type(node).__name__}>"
    return clip(text)


# --------------------------------------------------------------------------------------------
# constants


def const_value(node: Any) -> Any:
    """Python value of a constant expression or ``NOT_CONST``.

    Handles ``A_Const`` (string, integer, float, boolean, NULL) and the bare number nodes of
    option lists (``RESTART WITH 9000000000``), casts of constants (``'123'::int``) and unary
    minus of a numeric constant. A whole number beyond int4 (a ``Float`` node) stays exact.
    """
    if isinstance(node, ast.A_Const):
        return None if node.isnull else _scalar(node.val)
    if isinstance(node, ast.Integer | ast.Float):
        return _scalar(node)
    if isinstance(node, ast.TypeCast):
        return const_value(node.arg)
    if (
        isinstance(node, ast.A_Expr)
        and node.kind == enums.A_Expr_Kind.AEXPR_OP
        and node.lexpr is None
        and name_list(node.name) == ["-"]
    ):
        inner = const_value(node.rexpr)
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return -inner
    return NOT_CONST


def _scalar(val: Any) -> Any:
    if isinstance(val, ast.String):
        return val.sval
    if isinstance(val, ast.Integer):
        return val.ival
    if isinstance(val, ast.Float):
        text = val.fval or "nan"
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return NOT_CONST
    if isinstance(val, ast.Boolean):
        return bool(val.boolval)
    if isinstance(val, ast.BitString):
        return val.bsval
    return NOT_CONST


def const_int(node: Any) -> int | None:
    """Integer value of a constant expression (``123``, ``'123'``, ``'123'::int``) or None."""
    value = const_value(node)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def numeric_int(node: Any) -> int | None:
    """A whole-number literal of any size (``A_Const`` or a bare number node, a cast of one or
    its negation); None for anything else, fractions and strings included."""
    value = const_value(node)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def const_text(node: Any) -> str | None:
    """Text of a constant (numbers rendered as text) or None."""
    value = const_value(node)
    if value is NOT_CONST or value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _format(fmt: str, args: list[str]) -> str | None:
    """A subset of PostgreSQL ``format()``: ``%s``, ``%I``, ``%L``, ``%%``."""
    out: list[str] = []
    i = 0
    argi = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(fmt):
            return None
        spec = fmt[i + 1]
        i += 2
        if spec == "%":
            out.append("%")
            continue
        if spec not in "sIL" or argi >= len(args):
            return None
        arg = args[argi]
        argi += 1
        out.append(arg if spec == "s" else quote_ident(arg) if spec == "I" else _quote_literal(arg))
    return "".join(out)


def fold_string(node: Any) -> str | None:
    """Fold a constant string expression, or return None when it depends on run-time data.

    Understands literals, casts, ``||`` concatenation, ``concat()``, ``format()`` (``%s``,
    ``%I``, ``%L``), ``quote_ident()``, ``quote_literal()``, ``lower()`` and ``upper()``.
    """
    if isinstance(node, ast.A_Const | ast.TypeCast):
        if isinstance(node, ast.TypeCast) and not isinstance(node.arg, ast.A_Const):
            return fold_string(node.arg)
        return const_text(node)
    if isinstance(node, ast.A_Expr) and name_list(node.name) == ["||"]:
        left, right = fold_string(node.lexpr), fold_string(node.rexpr)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.FuncCall):
        fname = func_name(node)
        args = [fold_string(a) for a in node.args or ()]
        if any(a is None for a in args):
            return None
        sargs = [a for a in args if a is not None]
        if fname == "concat":
            return "".join(sargs)
        if fname == "format" and sargs:
            return _format(sargs[0], sargs[1:])
        if fname == "quote_ident" and len(sargs) == 1:
            return quote_ident(sargs[0])
        if fname == "quote_literal" and len(sargs) == 1:
            return _quote_literal(sargs[0])
        if fname == "lower" and len(sargs) == 1:
            return sargs[0].lower()
        if fname == "upper" and len(sargs) == 1:
            return sargs[0].upper()
    return None


def defelem_true(d: ast.DefElem) -> bool:
    """Whether an option such as ``ANALYZE`` / ``FULL`` / ``CONCURRENTLY`` is switched on."""
    if d.arg is None:
        return True
    if isinstance(d.arg, ast.Boolean):
        return bool(d.arg.boolval)
    if isinstance(d.arg, ast.Integer):
        return bool(d.arg.ival)
    if isinstance(d.arg, ast.String):
        parsed = pg_bool(d.arg.sval or "")
        return True if parsed is None else parsed
    return True


def option_on(options: Any, name: str) -> bool:
    """Whether the option list (tuple of DefElem) switches ``name`` on."""
    for d in options or ():
        if isinstance(d, ast.DefElem) and (d.defname or "").lower() == name:
            return defelem_true(d)
    return False


# --------------------------------------------------------------------------------------------
# GUC values


def guc_value(stmt: ast.VariableSetStmt) -> str | None:
    """Value text of ``SET name = v1, v2`` (comma-joined), None when not a plain value."""
    if stmt.kind != enums.VariableSetKind.VAR_SET_VALUE:
        return None
    parts = [const_text(a) for a in stmt.args or ()]
    if any(p is None for p in parts):
        return None
    return ", ".join(p for p in parts if p is not None)


def search_path_list(value: str, role: str | None = None) -> tuple[str, ...]:
    """Schemas of a ``search_path`` value (``'"Shop", public'`` -> ``("Shop", "public")``)."""
    out: list[str] = []
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue
        if len(item) >= 2 and item[0] == '"' and item[-1] == '"':
            name = item[1:-1].replace('""', '"')
        else:
            name = item.lower()
        if name == "$user":
            if role:
                out.append(role)
            continue
        out.append(name)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# splitting


def split_with_scanner(sql: str) -> list[str]:
    """Split ``sql`` at top-level semicolons using the PostgreSQL *scanner* (so quotes,
    dollar quotes and comments are respected) even when the text does not parse."""
    try:
        tokens = pglast.parser.scan(sql)
    except pglast.parser.ParseError:
        return [sql]
    pieces: list[str] = []
    start = 0
    depth = 0
    for tok in tokens:
        if tok.name == "ASCII_40":
            depth += 1
        elif tok.name == "ASCII_41":
            depth = max(0, depth - 1)
        elif tok.name == "ASCII_59" and depth == 0:
            pieces.append(sql[start : tok.start])
            start = tok.end + 1
    pieces.append(sql[start:])
    return [p for p in (p.strip() for p in pieces) if p]


def strip_assignment(expr: str) -> str:
    """Right-hand side of a PL/pgSQL assignment ``target := expr`` (scanner based)."""
    try:
        tokens = pglast.parser.scan(expr)
    except pglast.parser.ParseError:
        return expr
    depth = 0
    for tok in tokens:
        if tok.name in ("ASCII_40", "ASCII_91"):
            depth += 1
        elif tok.name in ("ASCII_41", "ASCII_93"):
            depth -= 1
        elif depth == 0 and tok.name in ("COLON_EQUALS", "ASCII_61"):
            return expr[tok.end + 1 :]
    return expr
