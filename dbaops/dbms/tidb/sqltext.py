"""MySQL-dialect SQL text helpers for TiDB, free of any driver: quoting, splitting, filling
placeholders and checking that SQL parses (sqlglot, loaded on first use).

The safety judge's MySQL front end reaches them through TiDB's dialect
(:mod:`dbaops.dbms.tidb.dialect`), the harness through its own modules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

#: A quoted literal or identifier, a comment, or a ``$n`` placeholder (MySQL's quoting:
#: backslash escapes in strings, backquoted identifiers, ``#`` comments).
_TOKENS = re.compile(
    r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`(?:[^`]|``)*`|--[^\n]*|#[^\n]*"
    r"|/\*.*?\*/|\$(\d+)",
    re.S,
)
#: Statements sqlglot does not know all of TiDB's grammar for (partitions, placement policies,
#: resource groups, index visibility): TiDB itself checks them when they run.
_SERVER_CHECKED = {"ALTER", "CREATE", "DROP", "GRANT", "REVOKE", "ANALYZE", "ADMIN", "SHOW"}


def quote_ident(name: str) -> str:
    """``name`` as a MySQL identifier (backquoted)."""
    return "`" + name.replace("`", "``") + "`"


def quote_literal(value: str) -> str:
    """``value`` as a MySQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def split_statements(sql: str) -> list[str]:
    """Statements of ``sql`` as slices of the original text, split at the semicolons the
    MySQL tokenizer sees outside quotes and comments (the whole text when it cannot
    tokenize). The tokenizer (sqlglot) loads on first use: the dialect stays light."""
    from sqlglot.dialects.mysql import MySQL
    from sqlglot.errors import TokenError

    try:
        tokens = MySQL().tokenize(sql)
    except TokenError:
        return [sql.strip()] if sql.strip() else []
    out: list[str] = []
    start = 0
    for token in tokens:
        if token.token_type.name == "SEMICOLON":
            out.append(sql[start : token.start].strip())
            start = token.end + 1
    out.append(sql[start:].strip())
    return [s for s in out if s]


def fill_placeholders(sql: str, args: Sequence[Any], literal: Callable[[Any], str]) -> str:
    """``sql`` with each ``$n`` outside quotes and comments replaced by ``literal`` of its
    argument."""
    if not args:
        return sql

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return m.group(0)
        return literal(args[int(m.group(1)) - 1])

    return _TOKENS.sub(sub, sql)


def sql_problem(sql: str) -> str | None:
    """The parse error of ``sql`` in MySQL's grammar as sqlglot reads it for TiDB, or None
    (``$n`` placeholders are the runner's, filled before TiDB sees the text; statements whose
    TiDB grammar sqlglot does not know are left to the server)."""
    import logging

    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    quiet = logging.getLogger("sqlglot")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "falling back to parsing as a Command" is not a problem
    try:
        for statement in split_statements(fill_placeholders(sql, [0] * 32, str)):
            words = re.sub(r"/\*.*?\*/", " ", statement, flags=re.S).split(None, 1)
            if not words or words[0].upper() in _SERVER_CHECKED:
                continue
            sqlglot.parse(statement, read="mysql")
    except (ParseError, TokenError) as exc:
        return f"SQL does not parse (MySQL dialect): {str(exc).splitlines()[0][:300]}"
    finally:
        quiet.setLevel(level)
    return None
