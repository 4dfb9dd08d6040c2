"""Whether a column's type change can lose or alter the values it holds.

The catalog fingerprint records each column's type as the server spells it (PostgreSQL's
``format_type``: ``numeric(12,2)``, ``character varying(40)``, ``bigint``; TiDB's
``column_type``: ``decimal(12,2)``, ``varchar(40)``, ``bigint unsigned``). A change that
keeps every value representable (a wider integer, more digits, a longer string, any type to
``text``) is a DBA's routine work; one that rounds, cuts or converts them (``numeric(12,2)`` to
``integer``, ``varchar(40)`` to ``varchar(3)``, ``text`` to ``integer``) rewrites business data
as surely as an ``UPDATE``. PostgreSQL's spelling ends in `` COLLATE name`` when the column's
collation is not its type's default: a changed collation keeps the values but changes how
every statement sorts and compares them. Pure functions; both dialects' spellings are read.
"""

from __future__ import annotations

#: Integer types by width, with the decimal digits their values can have.
_INT_DIGITS = {
    "tinyint": 3,
    "smallint": 5,
    "int2": 5,
    "mediumint": 7,
    "integer": 10,
    "int": 10,
    "int4": 10,
    "bigint": 19,
    "int8": 19,
}
_NUMERIC = {"numeric", "decimal"}
_FLOAT_BITS = {"real": 24, "float4": 24, "float": 24, "double precision": 53, "double": 53}
_STRINGS = {"character varying", "varchar", "character", "char", "bpchar"}
_UNBOUNDED_TEXT = {"text", "tinytext", "mediumtext", "longtext", "citext"}
#: (from, to) pairs that keep every value, beyond the families above.
_WIDENINGS = {
    ("date", "timestamp without time zone"),
    ("date", "timestamp with time zone"),
    ("timestamp without time zone", "timestamp with time zone"),
    ("date", "datetime"),
    ("date", "timestamp"),
    ("json", "jsonb"),
}


def _parse(spelling: str) -> tuple[str, list[int], bool]:
    """(base name, numeric arguments, unsigned) of a type spelling."""
    text = " ".join(spelling.strip().lower().split())
    name, args, rest = text, [], ""
    if "(" in text and ")" in text:
        name = text[: text.index("(")].strip()
        inside = text[text.index("(") + 1 : text.index(")")]
        args = [int(a) for a in inside.replace(" ", "").split(",") if a.isdigit()]
        rest = text[text.index(")") + 1 :].strip()
    unsigned = "unsigned" in name.split() or "unsigned" in rest.split()
    name = " ".join(w for w in name.split() if w not in ("unsigned", "zerofill"))
    if rest.startswith(("with time zone", "without time zone")):  # timestamp(3) with time zone
        name = f"{name} {rest}"
    return name, args, unsigned


def _int_digits(name: str, args: list[int]) -> int | None:
    if name in _INT_DIGITS:
        return _INT_DIGITS[name]
    if name in _NUMERIC and args:
        return args[0] - (args[1] if len(args) > 1 else 0)
    return None


_COLLATE = " collate "


def collation(spelling: str) -> str | None:
    """The explicit collation of a column's spelling (``text COLLATE "C"`` gives ``"C"``),
    None when it has its type's default."""
    at = spelling.lower().rfind(_COLLATE)
    return spelling[at + len(_COLLATE) :].strip() if at >= 0 else None


def _type_only(spelling: str) -> str:
    at = spelling.lower().rfind(_COLLATE)
    return spelling[:at] if at >= 0 else spelling


def keeps_values(before: str, after: str) -> bool:
    """Whether changing a column from type ``before`` to ``after`` keeps every value it can
    hold (see the module docstring); an unknown conversion does not. Collations are not
    compared here (see :func:`collation`)."""
    before, after = _type_only(before), _type_only(after)
    if before.strip().lower() == after.strip().lower():
        return True
    (b, bargs, bunsigned), (a, aargs, aunsigned) = _parse(before), _parse(after)
    if a in _UNBOUNDED_TEXT:
        return True
    if (b, a) in _WIDENINGS:
        return True
    if bunsigned and not aunsigned and b in _INT_DIGITS and a in _INT_DIGITS:
        return _INT_DIGITS[a] > _INT_DIGITS[b]
    if b in _INT_DIGITS or b in _NUMERIC:
        if a in _NUMERIC and not aargs:
            return True  # unconstrained numeric holds any number
        digits_before = _int_digits(b, bargs)
        digits_after = _int_digits(a, aargs)
        scale_before = bargs[1] if b in _NUMERIC and len(bargs) > 1 else 0
        scale_after = aargs[1] if a in _NUMERIC and len(aargs) > 1 else 0
        if b in _NUMERIC and not bargs:
            return False  # unconstrained numeric into anything bounded
        if digits_before is None or digits_after is None:
            return False
        return digits_after >= digits_before and scale_after >= scale_before
    if b in _FLOAT_BITS and a in _FLOAT_BITS:
        return _FLOAT_BITS[a] >= _FLOAT_BITS[b]
    if b in _STRINGS and a in _STRINGS:
        if not aargs:
            return a in ("character varying", "varchar")  # varchar without a length
        return bool(bargs) and aargs[0] >= bargs[0]
    return False
