"""Value helpers of the safety judge that need no SQL parser.

Constants as a front end reads them (:data:`NOT_CONST` marks what is not one), evidence text
(:func:`clip`), and configuration values: booleans (:func:`pg_bool`) and quantities with
units (:func:`quantity`, :data:`KNOWN_GUC_UNITS`). Regular expressions here apply to values,
never to SQL.
"""

from __future__ import annotations

import re

QualName = tuple[str, str]
"""A schema-qualified object name ``(schema, name)`` with identifier case already folded."""

ObjName = tuple[str | None, str]
"""An object name as a statement writes it: ``(schema or None, name)``, case folded."""

MAX_TEXT = 600


class NotConst:
    """Marker for expressions that are not compile-time constants."""


NOT_CONST = NotConst()

Value = str | int | float | bool | None | NotConst
"""A constant as a front end reads it (None is SQL NULL) or :data:`NOT_CONST`."""

ROLE_KEYWORDS = ("CURRENT_USER", "CURRENT_ROLE", "SESSION_USER")
"""How front ends render the role specifications that name the session's own role."""


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` on one line (runs of white space as one space), cut to ``limit``."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# GUC values


def pg_bool(value: str) -> bool | None:
    """PostgreSQL boolean parsing (``parse_bool``): on/off, true/false, yes/no, 1/0 and
    unambiguous prefixes; None if it is not a boolean."""
    v = value.strip().lower()
    if not v:
        return None
    if v in ("1",):
        return True
    if v in ("0",):
        return False
    if v in ("on",):
        return True
    if v in ("of", "off"):
        return False
    if "true".startswith(v) or "yes".startswith(v):
        return True
    if "false".startswith(v) or "no".startswith(v):
        return False
    return None


_TIME_MS = {
    "us": 0.001,
    "ms": 1.0,
    "s": 1000.0,
    "min": 60000.0,
    "h": 3_600_000.0,
    "d": 86_400_000.0,
}
_MEM_B = {"b": 1.0, "kb": 1024.0, "mb": 1024.0**2, "gb": 1024.0**3, "tb": 1024.0**4, "8kb": 8192.0}

KNOWN_GUC_UNITS: dict[str, str] = {
    "lock_timeout": "ms",
    "statement_timeout": "ms",
    "idle_in_transaction_session_timeout": "ms",
    "idle_session_timeout": "ms",
    "transaction_timeout": "ms",
    "deadlock_timeout": "ms",
    "log_min_duration_statement": "ms",
    "log_autovacuum_min_duration": "ms",
    "wal_writer_delay": "ms",
    "vacuum_cost_delay": "ms",
    "autovacuum_vacuum_cost_delay": "ms",
    "checkpoint_timeout": "s",
    "checkpoint_warning": "s",
    "autovacuum_naptime": "s",
    "wal_sender_timeout": "ms",
    "work_mem": "kB",
    "maintenance_work_mem": "kB",
    "autovacuum_work_mem": "kB",
    "logical_decoding_work_mem": "kB",
    "shared_buffers": "8kB",
    "effective_cache_size": "8kB",
    "temp_buffers": "8kB",
    "wal_buffers": "8kB",
    "max_wal_size": "MB",
    "min_wal_size": "MB",
}

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z0-9]*)\s*$")


_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_GO_MS = {"h": 3_600_000.0, "m": 60_000.0, "s": 1000.0, "ms": 1.0, "us": 1e-3, "µs": 1e-3,
          "ns": 1e-6}  # fmt: skip


def _go_duration_ms(text: str) -> float | None:
    """A Go duration (``10m0s``, ``1h30m``: TiDB's time variables such as
    ``tidb_gc_life_time``) in milliseconds, or None."""
    text = text.strip()
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _GO_MS[u] for n, u in parts)


def quantity(value: str | float | int, base_unit: str | None) -> float | None:
    """Canonical magnitude of a GUC value: milliseconds for time units, bytes for memory
    units, the plain number when the GUC has no unit. ``base_unit`` is the unit a bare number
    is expressed in (``'ms'``, ``'s'``, ``'min'``, ``'kB'``, ``'8kB'``, ``'MB'``, ...)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number, unit = float(value), ""
    else:
        m = _QUANTITY.match(value)
        if not m:
            go = _go_duration_ms(value)
            return go if go is not None and (base_unit or "").lower() in _TIME_MS else None
        number, unit = float(m.group(1)), m.group(2)
    base = (base_unit or "").lower()
    if base in _TIME_MS:
        if unit:
            factor = _TIME_MS.get(unit)
            if factor is None and isinstance(value, str):
                return _go_duration_ms(value)
            return None if factor is None else number * factor
        return number * _TIME_MS[base]
    if base in _MEM_B:
        if unit:
            factor = _MEM_B.get(unit.lower())
            return None if factor is None else number * factor
        return number * _MEM_B[base]
    return None if unit else number
