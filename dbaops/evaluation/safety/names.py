"""Names the scenario declares (tables, sequences, indexes) and how statements match them.

Declared names follow the SQL identifier rules of the default dialect
(:data:`~dbaops.evaluation.safety.frontend.DEFAULT_DIALECT`): ``shop.orders``, ``"Orders"``;
its front end parses and renders them. Statement facts carry names already parsed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dbaops.evaluation.safety.frontend import front_end
from dbaops.evaluation.safety.values import QualName


def parse_name(name: str) -> tuple[str | None, str]:
    """Parse a (possibly schema-qualified, possibly quoted) relation name the way SQL does.

    ``shop.orders`` -> ``("shop", "orders")``; ``"Orders"`` -> ``(None, "Orders")``;
    ``Orders`` -> ``(None, "orders")`` (unquoted identifiers fold to lower case).
    Raises ``ValueError`` for anything that is not a single relation name.
    """
    return front_end().parse_name(name)


def qualify(name: str, default_schema: str) -> QualName:
    """Parse ``name`` and qualify it with ``default_schema`` when it has no schema."""
    schema, rel = parse_name(name)
    return (schema or default_schema, rel)


def show_name(q: QualName) -> str:
    """Render a qualified name as SQL (quoting where needed)."""
    quote = front_end().quote_ident
    return f"{quote(q[0])}.{quote(q[1])}"


class TableSet:
    """A declared set of tables (``None`` = every table).

    Declared unqualified names belong to the context's default schema. A statement's
    unqualified name matches when any schema of the session's ``search_path`` holds a
    declared table of that name (conservative: the catalog is not consulted).
    """

    def __init__(self, names: Iterable[str] | None, default_schema: str) -> None:
        self.any = names is None
        self.items = frozenset(qualify(n, default_schema) for n in names or ())

    def __bool__(self) -> bool:
        return self.any or bool(self.items)

    def match(self, schema: str | None, name: str, search_path: Sequence[str]) -> QualName | None:
        if schema:
            q = (schema, name)
            return q if self.any or q in self.items else None
        for s in search_path:
            if (s, name) in self.items:
                return (s, name)
        if self.any:
            return (search_path[0] if search_path else "public", name)
        return None

    def in_schema(self, schema: str) -> list[QualName]:
        if self.any:
            return [(schema, "*")]
        return sorted(q for q in self.items if q[0] == schema)

    def all(self) -> list[QualName]:
        return [("*", "*")] if self.any else sorted(self.items)
