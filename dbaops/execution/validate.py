"""``dbaops validate``: prove a scenario achievable and not vacuous (SWE-bench/τ²-style checks).

For each scenario: the no-op agent must fail Outcome Pass; the reference solution must reach
Outcome Pass and Safe Pass; a declared shallow solution must fail Outcome Pass, and each
declared blunt fix must fail Safe Pass (fail Outcome, or break a safety rule). A validation is
a campaign preset (:func:`validation_campaign`): its runs have a manifest, run on several
workers and resume after an interruption like any campaign. Every run restores the same dirty
snapshot. With repeats, any verdict that flips is reported; with
several time scales, so is any verdict that differs between them (``--time-scale`` must never
change a verdict silently).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from dbaops.campaign.executor import run_campaign
from dbaops.campaign.manifest import Manifest, PlannedRun
from dbaops.campaign.spec import CampaignSpec
from dbaops.dbms.dialect import engine_dialect, engine_packages
from dbaops.evaluation.difficulty import DifficultyLabel, label_difficulty
from dbaops.execution.runner import RunOptions
from dbaops.record.kinds import Record, SurveyRecord
from dbaops.record.load import load_run
from dbaops.scenario.loader import ScenarioError, definition_key, load_scenario
from dbaops.scenario.model import Scenario


class ValidationRow(BaseModel):
    """One validation run and whether it met its expectation."""

    scenario: str
    solution: str  # noop | reference[:NAME] | shallow | blunt:NAME
    time_scale: float = 1.0
    repeat: int
    expectation: str
    status: str
    outcome_pass: bool | None
    safe_pass: bool | None
    ok: bool
    reason: str = ""
    run_dir: Path
    engine: str = "postgres"
    server_version: str | None = None
    backend: str = Field(default="embedded", description="where the server ran")
    duration_s: float | None = Field(default=None, description="wall seconds of the run")
    difficulty: DifficultyLabel | None = Field(
        default=None, description="reference runs: the label measured from the run (§4.2)"
    )


class ValidationSummary(BaseModel):
    rows: list[ValidationRow]
    flips: list[str]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows) and not self.flips

    def markdown(self) -> str:
        """The summary as a Markdown table (for a committed validation report)."""
        lines = [
            "| scenario | solution | scale | # | expected | status | outcome | safe | ok "
            "| reason |",
            "| --- " * 10 + "|",
        ]
        for r in self.rows:
            lines.append(
                f"| {r.scenario} | {r.solution} | {r.time_scale:g} | {r.repeat} | "
                f"{r.expectation} | {r.status} | {r.outcome_pass} | {r.safe_pass} | "
                f"{'ok' if r.ok else 'FAIL'} | {r.reason[:120]} |"
            )
        lines.append("")
        lines += [f"- flip: {f}" for f in self.flips] or ["- no verdict flips"]
        lines.append(f"- verdict: {'valid' if self.ok else 'NOT valid'}")
        return "\n".join(lines) + "\n"


_EXPECT = {
    "noop": "fails Outcome Pass",
    "reference": "Outcome Pass and Safe Pass",
    "shallow": "fails Outcome Pass",
    "blunt": "fails Safe Pass",
}


def _judge(solution: str, status: str, outcome: bool | None, safe: bool | None) -> tuple[bool, str]:
    if status != "completed":
        return False, f"run {status}"
    if solution.startswith("reference"):
        if not outcome:
            return False, f"{solution} did not reach Outcome Pass"
        if not safe:
            return False, f"{solution} is not Safe Pass"
        return True, ""
    if solution.startswith("blunt:"):
        if safe is None:
            return False, "no Safe Pass verdict"
        if safe:
            return False, f"{solution} reached Safe Pass: the ticket's constraint is unenforced"
        return True, ""
    if outcome is None:
        return False, "no outcome verdict"
    if outcome:
        return False, f"{solution} passed Outcome Pass: the verifier cannot fail"
    return True, ""


def validation_campaign(
    refs: list[str],
    options: RunOptions,
    repeat: int = 1,
    scales: list[float] | None = None,
    only: list[str] | None = None,
) -> CampaignSpec:
    """The campaign preset of a validation: each scenario's own solutions (``only``: those
    named; ``reference`` includes its alternatives) at each time scale, ``repeat`` times."""
    for ref in refs:
        sc, _, _ = load_scenario(ref)
        if sc.reference is None:
            raise ValueError(f"{sc.id} declares no reference solution: it cannot be validated")
    return CampaignSpec(
        scenarios=list(dict.fromkeys(refs)),
        agents=only or ["noop", "reference", "shallow", "blunt"],
        preset="validation",
        repeats=repeat,
        time_scale=options.time_scale,
        time_scales=scales if scales and len(scales) > 1 else None,
        fresh=options.fresh,
        history_s=options.history_s,
        backend=options.backend,
    )


async def validate(
    refs: list[str],
    options: RunOptions,
    repeat: int = 1,
    scales: list[float] | None = None,
    only: list[str] | None = None,
    *,
    out: Path | None = None,
    workers: int = 1,
    resume: bool = False,
    on_change: Callable[[Manifest], None] | None = None,
) -> ValidationSummary:
    """Validate ``refs`` at each of ``scales`` as a campaign in ``out`` (default: a new
    directory under ``options.runs_dir``); ``only`` restricts the solutions run (to run long
    validations side by side, each in its own ``DBAOPS_HOME``)."""
    spec, out = validation_plan(refs, options, repeat, scales, only, out=out)
    manifest = await run_campaign(spec, out, workers=workers, resume=resume, on_change=on_change)
    return summarize_validation(spec, out, manifest)


def validation_plan(
    refs: list[str],
    options: RunOptions,
    repeat: int = 1,
    scales: list[float] | None = None,
    only: list[str] | None = None,
    *,
    out: Path | None = None,
) -> tuple[CampaignSpec, Path]:
    """The validation's campaign and its directory (default: a new one under
    ``options.runs_dir/validations``), for any executor."""
    if scales:
        options = options.model_copy(update={"time_scale": scales[0]})
    spec = validation_campaign(refs, options, repeat, scales, only)
    if out is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        out = options.runs_dir / "validations" / f"{stamp}-{secrets.token_hex(2)}"
    return spec, out


def summarize_validation(spec: CampaignSpec, out: Path, manifest: Manifest) -> ValidationSummary:
    """Each run of a finished validation campaign judged against its expectation."""
    loaded = {ref: load_scenario(ref) for ref in spec.scenarios}
    scenarios = {ref: sc for ref, (sc, _, _) in loaded.items()}
    keys = {ref: definition_key(sc, lib) for ref, (sc, lib, _) in loaded.items()}
    rows = [
        _row(spec, scenarios[run.scenario], out, run, keys[run.scenario]) for run in manifest.runs
    ]
    return ValidationSummary(rows=rows, flips=_flips(rows))


def _difficulty_verdict(
    sc: Scenario, records: list[Record]
) -> tuple[DifficultyLabel | None, str | None]:
    """The label measured from a reference run, and why it disqualifies the scenario if so."""
    if sc.mode == "persistent":  # Hard at the corpus level, not by the bounded rule (§4.2)
        return None, None
    spec = sc.evaluation.difficulty
    if spec is None:
        if sc.difficulty is not None:
            return None, (
                f"declares difficulty {sc.difficulty} but no evaluation.difficulty path to "
                "measure it from"
            )
        return None, None
    if not spec.modalities:
        return None, (
            "evaluation.difficulty declares no observation modalities: C_s would be 0 "
            "whatever the environment shows"
        )
    label = label_difficulty(spec, records)
    if label.basis != "surface":
        return label, "the reference run recorded no survey of the observation surface"
    survey = next(r for r in records if isinstance(r, SurveyRecord))
    sql = spec.modalities.get("sql")
    failed = {n: p.error for n, p in survey.sql.items() if p.error}
    if sql is not None and sql.declared is None and failed:
        name, error = next(iter(failed.items()))
        return label, (
            f"{len(failed)} probe(s) of the surveyed sql surface failed ({name}: {error}): "
            "the surface is not what the scenario declares"
        )
    blind = [m.modality for m in label.modalities if not m.declared and m.causal_units == 0]
    if blind:
        return label, (
            f"the surveyed surface shows no causal unit in {', '.join(blind)}: the evidence "
            "is not where the scenario says it is (declare the probe or query that shows it)"
        )
    if sc.difficulty is not None and label.label != sc.difficulty:
        return label, (
            f"declared {sc.difficulty}, measured {label.label} (D={label.depth}, "
            f"C={label.complexity:.2f}; hard needs D>2 and C>=0.5)"
        )
    return label, None


def _row(
    spec: CampaignSpec, sc: Scenario, out: Path, run: PlannedRun, key: str | None = None
) -> ValidationRow:
    """One planned run of scenario ``sc`` (definition ``key`` now) in the validation
    campaign, judged against its expectation."""
    solution = run.agent
    common = {
        "scenario": sc.id,
        "solution": solution,
        "time_scale": run.time_scale or spec.time_scale,
        "repeat": run.repeat,
        "expectation": _EXPECT[solution.split(":")[0]],
    }
    if run.run_dir is None:
        return ValidationRow(**common, status=run.status or run.state, outcome_pass=None,
                             safe_pass=None, ok=False, reason=run.reason or "not run",
                             run_dir=Path("-"))  # fmt: skip
    data = load_run(out / run.run_dir)
    verdict = data.verdict or {}
    status = data.end.status if data.end else (run.status or "incomplete")
    outcome, safe = verdict.get("outcome_pass"), verdict.get("safe_pass")
    ok, reason = _judge(solution, status, outcome, safe)
    changed = _changed_since_run(key, out / run.run_dir) if key is not None else None
    if changed:
        ok, reason = False, "; ".join(x for x in (reason, changed) if x)
    if status != "completed" and run.reason:
        reason = f"{reason}: {run.reason}"
    unapplied = [e.event_id for e in data.events if e.status == "failed"]
    if solution.startswith("reference") and unapplied:
        # the scenario's own program broke in a run that did everything right
        ok = False
        reason = "; ".join(x for x in (reason, f"events not applied: {unapplied}") if x)
    label = None
    if solution == "reference" and status == "completed":
        label, problem = _difficulty_verdict(sc, data.records)
        if problem is not None:
            ok, reason = False, "; ".join(x for x in (reason, problem) if x)
    header = data.header
    engine = str((header.backend if header else {}).get("engine") or sc.engine)
    duration = data.end.t_wall - header.t_wall if header and data.end else None
    return ValidationRow(
        **common,
        status=status,
        outcome_pass=outcome,
        safe_pass=safe,
        ok=ok,
        reason=reason,
        run_dir=data.path,
        engine=engine,
        server_version=_server_version(engine, header.versions.get(engine) if header else None),
        backend=str((header.backend if header else {}).get("kind", "embedded")),
        duration_s=duration,
        difficulty=label,
    )


def _changed_since_run(key: str, run_dir: Path) -> str | None:
    """Why the run does not prove the scenario as it is now (definition ``key``): its own
    copy of the scenario has another definition (the file changed during the validation)."""
    copy = run_dir / "scenario.yaml"
    if not copy.exists():
        return None  # (runs recorded before copies existed)
    try:
        ran, ran_lib, _ = load_scenario(copy)
    except ScenarioError as exc:
        return f"the run's scenario copy cannot be read: {exc}"[:300]
    if definition_key(ran, ran_lib) != key:
        return "the scenario changed during the validation (the run used another definition)"
    return None


def _server_version(engine: str, version: str | None) -> str | None:
    """The server's version as the report lists it (the engine's release: TiDB's
    ``VERSION()`` says ``8.0.11-TiDB-v9.0.0-…``, a MySQL version first)."""
    if not version or engine not in engine_packages():
        return version
    return engine_dialect(engine).release(version)


def _flips(rows: list[ValidationRow]) -> list[str]:
    """Verdicts of one scenario and solution that differ across repeats or time scales."""
    flips: list[str] = []
    keys = {(r.scenario, r.solution) for r in rows}
    for scenario, solution in sorted(keys):
        mine = [r for r in rows if r.scenario == scenario and r.solution == solution]
        seen = {(r.outcome_pass, r.safe_pass) for r in mine}
        if len(seen) > 1:
            by_scale = {
                f"{r.time_scale:g}x#{r.repeat}": (r.outcome_pass, r.safe_pass) for r in mine
            }
            flips.append(
                f"{scenario}/{solution}: verdicts differ across repeats or scales {by_scale}"
            )
    return flips
