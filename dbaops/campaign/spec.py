"""The campaign file: which scenarios, agents, seeds and repeats to run, and how."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from dbaops.agents.base import builtin_agents, is_oracle
from dbaops.scenario.loader import ScenarioError, load_scenario, load_yaml_model
from dbaops.workloads.spec import StrictModel


class CampaignSpec(StrictModel):
    """``SPEC.yaml`` of ``dbaops campaign``.

    Example::

        scenarios: [pg-qt-01, pg-p-02]
        agents: [noop, reference, "model:glm", "mypkg.agents:MyAgent"]
        repeats: 3
        seeds: [1, 2]
        time_scale: 0.1
    """

    scenarios: list[str] = Field(min_length=1, description="scenario ids or YAML paths")
    agents: list[str] = Field(
        min_length=1,
        description="built-in names (noop), oracles (reference, reference:NAME, shallow, "
        "blunt:NAME), "
        "module:Class, or model:NAME (the ReAct agent on a registry model)",
    )
    repeats: int = Field(default=1, ge=1, le=1000)
    seeds: list[int] | None = Field(
        default=None, description="each run once per seed (default: the scenario's own seed)"
    )
    time_scale: float = Field(default=0.1, gt=0, le=10)
    time_scales: list[float] | None = Field(
        default=None,
        description="run everything once per time scale (instead of time_scale); a verdict "
        "that differs between scales is a flip in a validation",
    )
    backend: Literal["embedded", "docker"] | None = Field(
        default=None,
        description="where the servers run (default: each scenario's backend, else embedded); "
        "docker needs a Docker daemon",
    )
    preset: Literal["validation"] | None = Field(
        default=None,
        description="validation: the agents are each scenario's own solutions (noop, "
        "reference and its alternatives, shallow, blunt fixes), those of them named in agents",
    )
    fresh: bool = Field(default=False, description="rebuild each run's dirty snapshot")
    history_s: float | None = Field(
        default=None, ge=0, description="override the scenarios' workload history (seconds)"
    )

    @field_validator("agents")
    @classmethod
    def _agents_are_known(cls, agents: list[str]) -> list[str]:
        problems = [a for a in agents if not _agent_ok(a)]
        if problems:
            raise ValueError(
                f"unknown agent(s) {problems}: use {sorted(builtin_agents())}, reference, "
                "shallow, reference:NAME, blunt:NAME, module:Class or model:NAME"
            )
        return agents

    @field_validator("time_scales")
    @classmethod
    def _scales_in_range(cls, scales: list[float] | None) -> list[float] | None:
        bad = [x for x in scales or [] if not 0 < x <= 10]
        if bad:
            raise ValueError(f"time scales must be in (0, 10]: {bad}")
        return scales

    @field_validator("scenarios", "agents", "seeds", "time_scales")
    @classmethod
    def _no_duplicates(cls, items: list[object] | None) -> list[object] | None:
        if items is not None and len(set(items)) != len(items):
            raise ValueError(f"duplicates in {items}")
        return items

    @model_validator(mode="after")
    def _families_need_the_validation_preset(self) -> CampaignSpec:
        if BLUNT_FAMILY in self.agents and self.preset != "validation":
            raise ValueError(
                "agents: 'blunt' (every blunt fix of each scenario) needs preset: validation; "
                "name one as blunt:NAME"
            )
        return self


#: In a validation, every blunt fix each scenario declares (``blunt:NAME`` names one).
BLUNT_FAMILY = "blunt"


def _agent_ok(agent: str) -> bool:
    if agent in builtin_agents() or is_oracle(agent) or agent == BLUNT_FAMILY:
        return True
    if agent.startswith("model:"):
        return len(agent) > len("model:")
    module, _, name = agent.partition(":")
    return bool(module) and bool(name)


def load_campaign_spec(path: Path) -> CampaignSpec:
    """Read and check a campaign file: every problem names the file and the field, and every
    scenario must load (its own problems are reported with its file)."""
    spec = load_yaml_model(CampaignSpec, path)
    # a scenario file named by a relative path is relative to the campaign file
    refs = [
        str((path.parent / ref).resolve())
        if ref.endswith(".yaml") and not Path(ref).is_absolute()
        else ref
        for ref in spec.scenarios
    ]
    spec = spec.model_copy(update={"scenarios": refs})
    problems: list[str] = []
    for i, ref in enumerate(spec.scenarios):
        try:
            load_scenario(ref)
        except ScenarioError as exc:
            problems.append(f"scenarios[{i}]: {ref!r}: {exc}")
    if problems:
        raise ScenarioError(path, problems)
    return spec
