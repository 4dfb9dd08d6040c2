"""The campaign manifest: every planned run and its state, rewritten atomically after each
change so that an interrupted campaign can be resumed from it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from dbaops.campaign.spec import CampaignSpec

MANIFEST_FILE = "manifest.json"
RUNS_DIR = "runs"
SUPERSEDED_DIR = "superseded"

#: pending: not run yet; running: started (interrupted if found on resume); done: the run
#: completed and was scored; infra_error: the harness, not the agent, failed (not manifested,
#: server or run error): re-run on resume, never counted for the agent; refused: the run
#: cannot be made with this configuration (an elevated agent on a backend that refuses it).
RunState = Literal["pending", "running", "done", "infra_error", "refused"]


class PlannedRun(BaseModel):
    """One run of the campaign: a scenario, an agent, a seed and a repeat number."""

    key: str
    scenario: str
    agent: str
    seed: int | None
    repeat: int
    time_scale: float | None = Field(default=None, description="None: the spec's time_scale")
    state: RunState = "pending"
    attempts: int = 0
    run_dir: str | None = Field(default=None, description="relative to the campaign directory")
    status: str | None = Field(default=None, description="the run's own status")
    reason: str | None = None
    outcome_pass: bool | None = None


class Manifest(BaseModel):
    """What a campaign directory holds: its spec and its planned runs."""

    format: int = 1
    spec: CampaignSpec
    runs: list[PlannedRun]

    def counts(self) -> dict[str, int]:
        out = {state: 0 for state in ("pending", "running", "done", "infra_error", "refused")}
        for run in self.runs:
            out[run.state] += 1
        return out

    def save(self, directory: Path) -> None:
        """Write the manifest atomically (a reader never sees half a file)."""
        path = directory / MANIFEST_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.model_dump_json(indent=1) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        return cls.model_validate_json((directory / MANIFEST_FILE).read_text())


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def scenario_agents(spec: CampaignSpec, scenario: str) -> list[str]:
    """The agents ``scenario`` runs with: the spec's, or (the validation preset) the
    scenario's own solutions that the spec names (``reference`` includes its alternatives,
    ``blunt`` every blunt fix)."""
    if spec.preset != "validation":
        return list(spec.agents)
    from dbaops.scenario.loader import load_scenario

    sc, _, _ = load_scenario(scenario)
    own = ["noop", *sc.solutions()]
    return [s for s in own if s in spec.agents or s.split(":")[0] in spec.agents]


def plan(spec: CampaignSpec) -> list[PlannedRun]:
    """Every run of ``spec``: scenarios × time scales × agents × seeds × repeats, in that
    order."""
    seeds: list[int | None] = list(spec.seeds) if spec.seeds else [None]
    scales: list[float | None] = list(spec.time_scales) if spec.time_scales else [None]
    out: list[PlannedRun] = []
    for scenario in spec.scenarios:
        name = _slug(Path(scenario).stem if scenario.endswith(".yaml") else scenario)
        for scale in scales:
            for agent in scenario_agents(spec, scenario):
                for seed in seeds:
                    for repeat in range(1, spec.repeats + 1):
                        parts = [
                            name,
                            *([] if scale is None else [f"x{scale:g}"]),
                            _slug(agent),
                            "seed-default" if seed is None else f"seed-{seed}",
                            f"r{repeat}",
                        ]
                        out.append(
                            PlannedRun(
                                key="/".join(parts),
                                scenario=scenario,
                                agent=agent,
                                seed=seed,
                                repeat=repeat,
                                time_scale=scale,
                            )
                        )
    return out
