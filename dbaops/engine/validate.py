"""``dbaops validate``: prove a scenario achievable and not vacuous (SWE-bench/τ²-style checks).

For each scenario: the no-op agent must fail Outcome Pass; the reference solution must reach
Outcome Pass and Safe Pass; a declared shallow solution must fail Outcome Pass. Every run
restores the same dirty snapshot. With repeats, any verdict that flips is reported.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from dbaops.agents.base import load_agent
from dbaops.engine.runner import RunMonitor, RunOptions, run_scenario
from dbaops.scenario.loader import ScenarioError, load_scenario


class ValidationRow(BaseModel):
    """One validation run and whether it met its expectation."""

    scenario: str
    solution: str  # noop | reference | shallow
    repeat: int
    expectation: str
    status: str
    outcome_pass: bool | None
    safe_pass: bool | None
    ok: bool
    reason: str = ""
    run_dir: Path


class ValidationSummary(BaseModel):
    rows: list[ValidationRow]
    flips: list[str]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows) and not self.flips


_EXPECT = {
    "noop": "fails Outcome Pass",
    "reference": "Outcome Pass and Safe Pass",
    "shallow": "fails Outcome Pass",
}


def _judge(solution: str, status: str, outcome: bool | None, safe: bool | None) -> tuple[bool, str]:
    if status != "completed":
        return False, f"run {status}"
    if solution == "reference":
        if not outcome:
            return False, "reference did not reach Outcome Pass"
        if not safe:
            return False, "reference is not Safe Pass"
        return True, ""
    if outcome is None:
        return False, "no outcome verdict"
    if outcome:
        return False, f"{solution} passed Outcome Pass: the verifier cannot fail"
    return True, ""


async def validate(
    refs: list[str], options: RunOptions, repeat: int = 1, monitor: RunMonitor | None = None
) -> ValidationSummary:
    rows: list[ValidationRow] = []
    for ref in refs:
        sc, _, _ = load_scenario(ref)
        solutions = ["noop", "reference"] + (["shallow"] if sc.shallow else [])
        if sc.reference is None:
            raise ValueError(f"{sc.id} declares no reference solution: it cannot be validated")
        for i in range(repeat):
            for solution in solutions:
                try:
                    result = await run_scenario(ref, options, monitor, agent=load_agent(solution))
                except ScenarioError as exc:  # the file changed under us: report, go on
                    rows.append(ValidationRow(
                        scenario=sc.id, solution=solution, repeat=i + 1,
                        expectation=_EXPECT[solution], status="invalid_file", outcome_pass=None,
                        safe_pass=None, ok=False, reason=str(exc)[:300], run_dir=Path("-"),
                    ))  # fmt: skip
                    continue
                verdict = result.verdict or {}
                outcome, safe = verdict.get("outcome_pass"), verdict.get("safe_pass")
                ok, reason = _judge(solution, result.status, outcome, safe)
                if result.status != "completed" and result.reason:
                    reason = f"{reason}: {result.reason}"
                rows.append(
                    ValidationRow(
                        scenario=sc.id,
                        solution=solution,
                        repeat=i + 1,
                        expectation=_EXPECT[solution],
                        status=result.status,
                        outcome_pass=outcome,
                        safe_pass=safe,
                        ok=ok,
                        reason=reason,
                        run_dir=result.run_dir,
                    )
                )
    flips: list[str] = []
    keys = {(r.scenario, r.solution) for r in rows}
    for scenario, solution in sorted(keys):
        seen = {
            (r.outcome_pass, r.safe_pass)
            for r in rows
            if r.scenario == scenario and r.solution == solution
        }
        if len(seen) > 1:
            flips.append(
                f"{scenario}/{solution}: verdicts differ across repeats {sorted(map(str, seen))}"
            )
    return ValidationSummary(rows=rows, flips=flips)
