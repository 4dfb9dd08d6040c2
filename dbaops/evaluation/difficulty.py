"""Difficulty labels (paper §4.2): reference-path depth D_s and environmental complexity C_s.

A scenario declares its reference path ``π_s = ⟨σ_s, h_1, …, h_{D_s-1}, c_s⟩`` (the alert, the
evidence hops, the root cause), so ``D_s = |π_s| - 1``. Complexity is measured per observation
modality μ from the observations a reference run actually received: every observation unit
(a result row of ``execute_sql``, a log line of ``read_log``, a series point of
``query_metrics``) is causal when it matches the modality's declared causal pattern, competing
otherwise; ``C_{s,μ} = 1 - m/(m+n)`` with m causal and n competing units (0 with no competing
units), or a declared value where it cannot be measured. ``C_s`` is the mean over the
modalities the path requires. ``Hard`` iff ``D_s > D0 = 2`` and ``C_s >= C0 = 0.5``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dbaops.record.kinds import Record, ToolCallRecord

D0 = 2
C0 = 0.5

#: Which tool's observations belong to which modality.
MODALITY_TOOLS = {"sql": "execute_sql", "log": "read_log", "metric": "query_metrics"}


class ModalitySpec(BaseModel):
    """How to tell causal from competing observation units in one modality."""

    model_config = ConfigDict(extra="forbid")

    causal: str | None = Field(default=None, description="regex marking a causal unit")
    declared: float | None = Field(default=None, ge=0, le=1, description="C when unmeasurable")

    @model_validator(mode="after")
    def _one_of(self) -> ModalitySpec:
        if (self.causal is None) == (self.declared is None):
            raise ValueError("give exactly one of causal (a regex) or declared (a value)")
        if self.causal is not None:
            re.compile(self.causal)
        return self


class DifficultySpec(BaseModel):
    """``evaluation.difficulty`` in a scenario file."""

    model_config = ConfigDict(extra="forbid")

    path: list[str] = Field(min_length=2, description="alert, evidence hops..., root cause")
    modalities: dict[str, ModalitySpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_modalities(self) -> DifficultySpec:
        unknown = set(self.modalities) - set(MODALITY_TOOLS)
        if unknown:
            raise ValueError(
                f"unknown modalities {sorted(unknown)} (known: {sorted(MODALITY_TOOLS)})"
            )
        return self


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


def label_difficulty(spec: DifficultySpec, records: Iterable[Record]) -> DifficultyLabel:
    """D_s, C_s and the Easy/Hard label from a (reference) run's recorded observations."""
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
        m = n = 0
        for call in calls:
            if call.tool != MODALITY_TOOLS[modality]:
                continue
            for unit in observation_units(call.tool, call.observation):
                if rx.search(unit):
                    m += 1
                else:
                    n += 1
        c = 0.0 if n == 0 else 1.0 - m / (m + n)
        per.append(
            ModalityComplexity(modality=modality, causal_units=m, competing_units=n, complexity=c)
        )
    complexity = sum(p.complexity for p in per) / len(per) if per else 0.0
    depth = len(spec.path) - 1
    label = "hard" if depth > D0 and complexity >= C0 else "easy"
    return DifficultyLabel(depth=depth, complexity=complexity, modalities=per, label=label)
