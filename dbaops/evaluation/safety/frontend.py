"""SQL front ends of the safety judge: what is dialect-specific, and a registry by dialect.

A front end turns a trajectory's SQL into the neutral statement form
(:mod:`dbaops.evaluation.safety.statement`) that the rules read, knows how its dialect writes
names, and reads its server's log lines. ``postgres`` (the PostgreSQL front end,
:mod:`dbaops.evaluation.safety.postgres`) is registered and is the default; ``mysql`` (TiDB,
:mod:`dbaops.evaluation.safety.mysql`) is the other. Each is imported on first use, so the
neutral core loads without a SQL parser.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dbaops.evaluation.safety.models import (
        InstanceAction,
        SafetyContext,
        SignalKind,
        SqlAction,
    )
    from dbaops.evaluation.safety.statement import ParsedTrace

DEFAULT_DIALECT = "postgres"
"""The dialect of the scenarios' declared names and of traces judged without a dialect."""


class SqlFrontEnd(Protocol):
    """What the neutral judge needs from one SQL dialect."""

    @property
    def dialect(self) -> str:
        """The registry name (``postgres``)."""
        ...

    @property
    def log_prefix(self) -> str:
        """How a readable server log line starts, for the verdict's note when none does."""
        ...

    def parse(
        self,
        actions: Sequence[SqlAction | InstanceAction],
        context: SafetyContext,
        *,
        signal_functions: Collection[str],
    ) -> ParsedTrace:
        """The executed statements of a trajectory, each with its session state and facts;
        ``signal_functions`` (lower-case) are the functions whose calls get signal targets."""
        ...

    def parse_name(self, name: str) -> tuple[str | None, str]:
        """A (possibly qualified, possibly quoted) object name as ``(schema or None, name)``
        with identifier case folded; ``ValueError`` for anything that is not one name."""
        ...

    def quote_ident(self, name: str) -> str:
        """An identifier as SQL writes it (quoted where needed)."""
        ...

    def log_line_stamp(self, line: str) -> tuple[float, int] | None:
        """Wall time (Unix) and pid of a server log line; None for a line without them."""
        ...

    def log_signal(self, line: str) -> SignalKind | None:
        """Whether the server wrote the line for a session it terminated or a statement it
        cancelled on a signal."""
        ...


_LOADERS: dict[str, Callable[[], SqlFrontEnd]] = {}
_LOADED: dict[str, SqlFrontEnd] = {}


def register(dialect: str, loader: Callable[[], SqlFrontEnd]) -> None:
    """Register a front end under ``dialect``; ``loader`` builds it on first use."""
    _LOADERS[dialect] = loader
    _LOADED.pop(dialect, None)


def dialects() -> list[str]:
    """The registered dialect names, sorted."""
    return sorted(_LOADERS)


def front_end(dialect: str = DEFAULT_DIALECT) -> SqlFrontEnd:
    """The front end registered for ``dialect``; ``ValueError`` for an unknown one."""
    found = _LOADED.get(dialect)
    if found is None:
        loader = _LOADERS.get(dialect)
        if loader is None:
            raise ValueError(f"no SQL front end for dialect {dialect!r} (have {dialects()})")
        found = _LOADED[dialect] = loader()
    return found


def _postgres() -> SqlFrontEnd:
    from dbaops.evaluation.safety.postgres.front_end import FRONT_END

    return FRONT_END


def _mysql() -> SqlFrontEnd:
    from dbaops.evaluation.safety.mysql import FRONT_END

    return FRONT_END


register("postgres", _postgres)
register("mysql", _mysql)
