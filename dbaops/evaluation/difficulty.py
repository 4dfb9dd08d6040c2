"""Difficulty labels (paper §4.2): reference-path depth D_s and environmental complexity C_s.

A scenario declares its reference path ``π_s = ⟨σ_s, h_1, …, h_{D_s-1}, c_s⟩`` (the alert, the
evidence hops, the root cause), so ``D_s = |π_s| - 1``. Complexity is measured per observation
modality μ over the **observation surface** the scenario declares, as the harness read it when
the agent started (:class:`~dbaops.record.kinds.SurveyRecord`): the rows of the SQL probes (the
engine's standard first look, or the probes and queries the scenario names), every server-log
line so far, every metric series point. A unit is causal when it matches the modality's
declared causal pattern (a metric point also only when it belongs to the incident, not to the
workload history), competing otherwise; ``C_{s,μ} = 1 - m/(m+n)`` with m causal and n
competing units (0 with no competing units), or a declared value where it cannot be measured.
``C_s`` is the mean over the declared modalities. ``Hard`` iff ``D_s > D0 = 2`` and
``C_s >= C0 = 0.5``. So C_s measures the environment, whatever a run then reads; a run recorded
before surveys existed is measured from its own observations instead (``basis: observed``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel

from dbaops.record.kinds import Record, SurveyRecord, ToolCallRecord
from dbaops.scenario.specs import (
    MODALITY_TOOLS,
    DifficultySpec,
)

D0 = 2
C0 = 0.5


class ModalityComplexity(BaseModel):
    modality: str
    causal_units: int = 0
    competing_units: int = 0
    complexity: float
    declared: bool = False


class DifficultyLabel(BaseModel):
    depth: int
    complexity: float
    modalities: list[ModalityComplexity]
    label: str  # "hard" | "easy"
    #: ``surface``: counted over the harness's survey; ``observed``: over what the run's own
    #: tool calls returned (runs recorded before surveys existed).
    basis: str = "surface"


_TAG_WORDS = {
    "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "ALTER", "DROP", "VACUUM",
    "ANALYZE", "SET", "RESET", "BEGIN", "COMMIT", "ROLLBACK", "GRANT", "REVOKE", "TRUNCATE",
    "COPY", "DO", "CALL", "CHECKPOINT", "CLUSTER", "REINDEX", "COMMENT", "LOCK", "DISCARD",
    "PREPARE", "EXECUTE", "DEALLOCATE", "NOTIFY", "LISTEN", "SAVEPOINT", "RELEASE", "START",
    "REFRESH", "SECURITY", "IMPORT", "LOAD",
}  # fmt: skip


def _is_command_tag(line: str) -> bool:
    words = line.strip().split()
    return bool(words) and words[0] in _TAG_WORDS and all(w.isupper() or w.isdigit() for w in words)


def observation_units(tool: str, observation: str) -> list[str]:
    """Split an observation into units: result rows, log lines or series points."""
    lines = [ln for ln in observation.splitlines() if ln.strip()]
    if tool == "execute_sql":
        # header line of each result, then rows; drop tags and "(n rows)" footers
        out: list[str] = []
        header_next = True
        for ln in lines:
            if re.fullmatch(r"\((\d+ rows?|0 rows|truncated: .*)\)", ln.strip()):
                header_next = True
                continue
            if " | " in ln or not _is_command_tag(ln):
                if header_next:
                    header_next = False
                    continue
                out.append(ln)
        return out
    if tool == "read_log":
        return lines[1:]  # first line is the "N matching line(s)" summary
    if tool == "query_metrics":
        return [
            p
            for ln in lines
            if not ln.startswith(("window", "#"))
            for p in ln.split()
            if re.fullmatch(r"-?\d+(\.\d+)?:[-\d.eE+naif]+", p)
        ]
    return lines


def _surface_units(modality: str, survey: SurveyRecord) -> list[tuple[str, bool]]:
    """The units of one modality in a survey, each with whether it may count as causal (a
    metric point of the workload history never does)."""
    if modality == "sql":
        return [(row, True) for probe in survey.sql.values() for row in probe.rows]
    if modality == "log":
        return [(line, True) for line in survey.log_lines]
    units: list[tuple[str, bool]] = []
    for s in survey.metric_series:
        units += [(s.series, True)] * s.incident_points + [(s.series, False)] * s.history_points
    return units


def _observed_units(modality: str, calls: list[ToolCallRecord]) -> list[tuple[str, bool]]:
    """The units of one modality the run's own tool calls returned."""
    return [
        (unit, True)
        for call in calls
        if call.tool == MODALITY_TOOLS[modality]
        for unit in observation_units(call.tool, call.observation)
    ]


def label_difficulty(spec: DifficultySpec, records: Iterable[Record]) -> DifficultyLabel:
    """D_s, C_s and the Easy/Hard label of a run: over its survey of the observation surface
    (any run of the scenario has one), else over its own observations (older runs)."""
    records = list(records)
    survey = next((r for r in records if isinstance(r, SurveyRecord)), None)
    calls = [r for r in records if isinstance(r, ToolCallRecord) and r.ok]
    per: list[ModalityComplexity] = []
    for modality, mspec in spec.modalities.items():
        if mspec.declared is not None:
            per.append(
                ModalityComplexity(modality=modality, complexity=mspec.declared, declared=True)
            )
            continue
        assert mspec.causal is not None
        rx = re.compile(mspec.causal, re.IGNORECASE)
        units = (
            _surface_units(modality, survey)
            if survey is not None
            else _observed_units(modality, calls)
        )
        m = sum(1 for unit, may in units if may and rx.search(unit))
        n = len(units) - m
        c = 0.0 if n == 0 else 1.0 - m / (m + n)
        per.append(
            ModalityComplexity(modality=modality, causal_units=m, competing_units=n, complexity=c)
        )
    complexity = sum(p.complexity for p in per) / len(per) if per else 0.0
    depth = len(spec.path) - 1
    label = "hard" if depth > D0 and complexity >= C0 else "easy"
    return DifficultyLabel(
        depth=depth,
        complexity=complexity,
        modalities=per,
        label=label,
        basis="surface" if survey is not None else "observed",
    )
