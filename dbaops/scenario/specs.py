"""The scenario format's evaluation specs: service objectives, diagnosis criteria and the
difficulty declaration (data only; :mod:`dbaops.evaluation` judges runs against them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# -- service objectives ----------------------------------------------------------------------


class ServiceObjective(BaseModel):
    """Service objective of one workload, as declared in scenario YAML.

    Example::

        service_objectives:
          checkout: {window_s: 10, on_time_target: 0.99, min_compliant_windows: 0.95,
                     window_floor: 0.90, grace_s: 60, from_s: 150}
          finance_report: {mode: every_unit}
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["windows", "every_unit"] = Field(
        default="windows",
        description="'windows': windowed on-time ratio with a failure budget; "
        "'every_unit': every unit (job) in the span must be on time and correct.",
    )
    window_s: float = Field(default=10.0, gt=0, description="Window length, scenario seconds.")
    on_time_target: float = Field(
        default=0.99,
        ge=0,
        le=1,
        description="Fraction of a window's units that must be good for it to be compliant.",
    )
    min_compliant_windows: float = Field(
        default=0.95,
        ge=0,
        le=1,
        description="Fraction of evaluated windows that must be compliant; the budget is "
        "floor((1 - x) * n_evaluated) failing windows.",
    )
    window_floor: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="If set, no evaluated window's on-time ratio may be below this.",
    )
    from_s: float = Field(default=0.0, ge=0, description="Evaluation start, scenario seconds.")
    until_s: float | None = Field(
        default=None, description="Evaluation end (exclusive); default the scenario horizon."
    )
    grace_s: float = Field(default=0.0, ge=0, description="Grace period skipped after from_s.")
    continuation_s: float | None = Field(
        default=None,
        gt=0,
        description="Final continuation span: every evaluated window overlapping "
        "[end - continuation_s, end) must be compliant.",
    )
    min_units: int = Field(
        default=1,
        ge=1,
        description="Windows with fewer units are 'insufficient' and excluded.",
    )

    @model_validator(mode="after")
    def _check_span(self) -> ServiceObjective:
        if self.until_s is not None and self.until_s <= self.from_s:
            raise ValueError(f"until_s ({self.until_s}) must be greater than from_s")
        return self


# -- diagnosis -------------------------------------------------------------------------------

ConditionKind = Literal["required", "contradictory"]


def normalize_condition(text: str) -> str:
    """The condition as judged and hashed: whitespace runs collapsed to one space, trimmed
    (YAML folding and indentation do not change the key)."""
    return " ".join(text.split())


class DiagnosisSpec(BaseModel):
    """Required (H) and contradictory (B) conditions of a scenario."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    required: list[str] = Field(default_factory=list)
    contradictory: list[str] = Field(default_factory=list)

    @field_validator("required", "contradictory")
    @classmethod
    def _clean(cls, v: list[str]) -> list[str]:
        out: list[str] = []
        for c in v:
            n = normalize_condition(c)
            if not n:
                raise ValueError("a diagnosis condition must not be empty")
            if n in out:
                raise ValueError(f"duplicate diagnosis condition {n!r}")
            out.append(n)
        return out

    @model_validator(mode="after")
    def _disjoint(self) -> DiagnosisSpec:
        both = sorted(set(self.required) & set(self.contradictory))
        if both:
            raise ValueError(f"condition(s) both required and contradictory: {both}")
        return self

    @property
    def applicable(self) -> bool:
        return bool(self.required or self.contradictory)

    def conditions(self) -> list[tuple[ConditionKind, str]]:
        """All conditions in judging order: required first, then contradictory."""
        out: list[tuple[ConditionKind, str]] = [("required", c) for c in self.required]
        out += [("contradictory", c) for c in self.contradictory]
        return out

    @classmethod
    def from_evaluation(cls, diagnosis: Mapping[str, Any] | None) -> DiagnosisSpec:
        """From a scenario's ``evaluation.diagnosis`` mapping (``{}`` or None: no criteria)."""
        return cls.model_validate(dict(diagnosis or {}))


# -- difficulty ------------------------------------------------------------------------------

#: Which tool's observations belong to which modality.
MODALITY_TOOLS = {"sql": "execute_sql", "log": "read_log", "metric": "query_metrics"}


class ModalitySpec(BaseModel):
    """How to tell causal from competing observation units in one modality."""

    model_config = ConfigDict(extra="forbid")

    causal: str | None = Field(default=None, description="regex marking a causal unit")
    declared: float | None = Field(default=None, ge=0, le=1, description="C when unmeasurable")
    surface: list[str] | None = Field(
        default=None,
        min_length=1,
        description="sql: what the survey reads, each a standard probe's name (the engine's "
        "first look: sessions, locks, tables, indexes, statements, settings, ...), "
        "'standard' (every one of them) or a read-only query of the scenario's own (an "
        "EXPLAIN of the slow statement), each read on the standby when prefixed 'standby:'; "
        "default: every standard probe",
    )

    @model_validator(mode="after")
    def _one_of(self) -> ModalitySpec:
        if (self.causal is None) == (self.declared is None):
            raise ValueError("give exactly one of causal (a regex) or declared (a value)")
        if self.causal is not None:
            re.compile(self.causal)
        return self


#: A ``surface`` entry standing for every standard probe of the engine.
STANDARD = "standard"
#: The prefix of a ``surface`` entry read on the replica profile's standby.
STANDBY_PREFIX = "standby:"


def split_server(entry: str) -> tuple[str, str]:
    """``(server, entry)`` of a ``surface`` entry (``standby:settings`` -> standby)."""
    if entry.startswith(STANDBY_PREFIX):
        return "standby", entry[len(STANDBY_PREFIX) :].strip()
    return "primary", entry


def is_probe_name(entry: str) -> bool:
    """Whether a ``surface`` entry names a standard probe (else it is a query)."""
    return re.fullmatch(r"[a-z_]+", entry) is not None


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
        for name, mspec in self.modalities.items():
            if name != "sql" and mspec.surface is not None:
                raise ValueError(f"modalities.{name}.surface: only the sql modality has probes")
        return self
