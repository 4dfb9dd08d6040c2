"""The PostgreSQL front end object the judge asks (see the package docstring)."""

from __future__ import annotations

from dbaops.dbms.dialect import engine_dialect
from dbaops.evaluation.safety.models import SignalKind
from dbaops.evaluation.safety.postgres.parse import parse_trace
from dbaops.evaluation.safety.postgres.sqlutil import parse_name, quote_ident

#: PostgreSQL's offline face: its log stamp (no driver imported).
_POSTGRES = engine_dialect("postgres")

_SIGNAL_LINES: tuple[tuple[SignalKind, str], ...] = (
    ("terminate", "FATAL:  terminating connection due to administrator command"),
    ("cancel", "ERROR:  canceling statement due to user request"),
    ("timeout", "FATAL:  terminating connection due to idle-in-transaction timeout"),
    ("timeout", "FATAL:  terminating connection due to idle-session timeout"),
    ("timeout", "FATAL:  terminating connection due to transaction timeout"),
)


class PostgresFrontEnd:
    """:class:`~dbaops.evaluation.safety.frontend.SqlFrontEnd` for PostgreSQL; server log
    lines as the harness configures them (``log_line_prefix = '%m [%p] %u@%d %a '``)."""

    dialect = "postgres"
    log_prefix = _POSTGRES.log_prefix

    parse = staticmethod(parse_trace)
    parse_name = staticmethod(parse_name)
    quote_ident = staticmethod(quote_ident)
    log_line_stamp = staticmethod(_POSTGRES.log_line_stamp)

    def log_signal(self, line: str) -> SignalKind | None:
        """``terminate`` for ``FATAL:  terminating connection due to administrator
        command``, ``cancel`` for ``ERROR:  canceling statement due to user request``,
        ``timeout`` for a session ended on an idle-in-transaction, idle-session or
        transaction timeout."""
        return next((k for k, text in _SIGNAL_LINES if text in line), None)


FRONT_END = PostgresFrontEnd()
