"""``dbaops validate``: prove a scenario achievable and not vacuous (SWE-bench/τ²-style checks).

For each scenario: the no-op agent must fail Outcome Pass; the reference solution must reach
Outcome Pass and Safe Pass; a declared shallow solution must fail Outcome Pass. Every run
restores the same dirty snapshot. With repeats, any verdict that flips is reported; with
several time scales, so is any verdict that differs between them (``--time-scale`` must never
change a verdict silently).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from dbaops.engine.runner import RunMonitor, RunOptions, run_scenario
from dbaops.evaluation.difficulty import DifficultyLabel, label_difficulty
from dbaops.record.kinds import EventRecord, Record, RunEnd, RunHeader
from dbaops.record.trace import read_trace
from dbaops.scenario.loader import ScenarioError, load_scenario
from dbaops.scenario.model import Scenario


class ValidationRow(BaseModel):
    """One validation run and whether it met its expectation."""

    scenario: str
    solution: str  # noop | reference | shallow
    time_scale: float = 1.0
    repeat: int
    expectation: str
    status: str
    outcome_pass: bool | None
    safe_pass: bool | None
    ok: bool
    reason: str = ""
    run_dir: Path
    server_version: str | None = None
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
    if outcome is None:
        return False, "no outcome verdict"
    if outcome:
        return False, f"{solution} passed Outcome Pass: the verifier cannot fail"
    return True, ""


async def validate(
    refs: list[str],
    options: RunOptions,
    repeat: int = 1,
    monitor: RunMonitor | None = None,
    scales: list[float] | None = None,
    only: list[str] | None = None,
) -> ValidationSummary:
    """Validate ``refs`` at each of ``scales``; ``only`` restricts the solutions run (to run
    long validations side by side, each in its own ``DBAOPS_HOME``)."""
    rows: list[ValidationRow] = []
    for ref in refs:
        sc, _, _ = load_scenario(ref)
        solutions = ["noop", *sc.solutions()]
        solutions = [s for s in solutions if only is None or s in only or s.split(":")[0] in only]
        if sc.reference is None:
            raise ValueError(f"{sc.id} declares no reference solution: it cannot be validated")
        for scale in scales or [options.time_scale]:
            scaled = options.model_copy(update={"time_scale": scale})
            rows += await _validate_at(ref, sc, solutions, scaled, repeat, monitor)
    return ValidationSummary(rows=rows, flips=_flips(rows))


def _run_facts(run_dir: Path) -> tuple[list[Record], str | None, float | None]:
    """The run's records, its server version and its wall duration."""
    try:
        records = read_trace(run_dir)
    except FileNotFoundError:
        return [], None, None
    header = next((r for r in records if isinstance(r, RunHeader)), None)
    end = next((r for r in reversed(records) if isinstance(r, RunEnd)), None)
    server = header.versions.get("postgres") if header else None
    duration = end.t_wall - header.t_wall if header and end else None
    return records, server, duration


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
    label = label_difficulty(spec, records)
    if sc.difficulty is not None and label.label != sc.difficulty:
        return label, (
            f"declared {sc.difficulty}, measured {label.label} (D={label.depth}, "
            f"C={label.complexity:.2f}; hard needs D>2 and C>=0.5)"
        )
    return label, None


async def _validate_at(
    ref: str,
    sc: Scenario,
    solutions: list[str],
    options: RunOptions,
    repeat: int,
    monitor: RunMonitor | None,
) -> list[ValidationRow]:
    rows: list[ValidationRow] = []
    scale = options.time_scale
    scenario_id = sc.id
    for i in range(repeat):
        for solution in solutions:
            expectation = _EXPECT[solution.split(":")[0]]
            try:
                result = await run_scenario(ref, options, monitor, agent=solution)
            except ScenarioError as exc:  # the file changed under us: report, go on
                rows.append(ValidationRow(
                    scenario=scenario_id, solution=solution, time_scale=scale, repeat=i + 1,
                    expectation=expectation, status="invalid_file", outcome_pass=None,
                    safe_pass=None, ok=False, reason=str(exc)[:300], run_dir=Path("-"),
                ))  # fmt: skip
                continue
            verdict = result.verdict or {}
            outcome, safe = verdict.get("outcome_pass"), verdict.get("safe_pass")
            ok, reason = _judge(solution, result.status, outcome, safe)
            if result.status != "completed" and result.reason:
                reason = f"{reason}: {result.reason}"
            records, server, duration = _run_facts(result.run_dir)
            unapplied = [r.event_id for r in records
                         if isinstance(r, EventRecord) and r.status == "failed"]  # fmt: skip
            if solution.startswith("reference") and unapplied:
                # the scenario's own program broke in a run that did everything right
                ok = False
                reason = "; ".join(x for x in (reason, f"events not applied: {unapplied}") if x)
            label = None
            if solution == "reference" and result.status == "completed":
                label, problem = _difficulty_verdict(sc, records)
                if problem is not None:
                    ok, reason = False, "; ".join(x for x in (reason, problem) if x)
            rows.append(
                ValidationRow(
                    scenario=scenario_id,
                    solution=solution,
                    time_scale=scale,
                    repeat=i + 1,
                    expectation=expectation,
                    status=result.status,
                    outcome_pass=outcome,
                    safe_pass=safe,
                    ok=ok,
                    reason=reason,
                    run_dir=result.run_dir,
                    server_version=server,
                    duration_s=duration,
                    difficulty=label,
                )
            )
    return rows


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
