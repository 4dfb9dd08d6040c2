"""Each engine's standard observation surface by engine name (light: plain SQL, no drivers)."""

from __future__ import annotations

from dbaops.dbms.postgres.survey import SURVEY_PROBES as _POSTGRES
from dbaops.dbms.tidb.survey import SURVEY_PROBES as _TIDB

_PROBES: dict[str, dict[str, str]] = {"postgres": _POSTGRES, "tidb": _TIDB}


def survey_probes(engine: str) -> dict[str, str]:
    """The named standard probes of ``engine`` (empty for an engine without any)."""
    return _PROBES.get(engine, {})
