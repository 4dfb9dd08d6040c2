"""The committed validation report: ``timelines/validation.json`` and ``VALIDATION.md``.

One record per scenario, engine, server major version and time scale: whether the scenario is
valid (no-op fails Outcome, every reference solution passes Outcome and Safety, the shallow fix
fails, every blunt fix fails Safe Pass), each solution's verdicts, the server version, how long
the runs took and the difficulty measured from the reference run. A new validation replaces
the records it covers and keeps the others, so the report can be regenerated scenario by
scenario.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from pydantic import BaseModel, Field

import dbaops
from dbaops.execution.validate import ValidationRow, ValidationSummary

REPORT_JSON = "validation.json"
REPORT_MARKDOWN = "VALIDATION.md"


class SolutionVerdict(BaseModel):
    """One solution's run in a validation."""

    solution: str
    status: str
    outcome_pass: bool | None
    safe_pass: bool | None
    ok: bool
    reason: str = ""
    duration_s: float | None = None


class ScenarioValidation(BaseModel):
    """A scenario's validation on one engine version at one time scale."""

    id: str
    engine: str = "postgres"
    backend: str = Field(
        default="embedded",
        description="where the server ran: embedded (a local process) or docker (in a container)",
    )
    server_version: str | None
    time_scale: float
    valid: bool
    verdicts: list[SolutionVerdict]
    duration_s: float = Field(description="wall seconds of all the runs")
    declared_difficulty: str | None = None
    measured_difficulty: str | None = None
    depth: int | None = None
    complexity: float | None = None
    definition: str | None = Field(
        default=None,
        description="the scenario's definition key (loader.definition_key) when validated: "
        "a record whose key is not the scenario's current one is stale",
    )
    expected: list[str] | None = Field(
        default=None,
        description="the solutions the scenario declares (noop, reference, reference:NAME, "
        "shallow, blunt:NAME); a record without all of them is incomplete, never valid (None: the "
        "solutions run are all there are)",
    )
    flips: list[str] = Field(default_factory=list, description="verdicts that differed")
    dbaops_version: str = dbaops.__version__
    validated_on: dt.date = Field(default_factory=lambda: dt.datetime.now(dt.UTC).date())

    @property
    def key(self) -> tuple[str, str, str, float, str]:
        major = (self.server_version or "?").split(".")[0]
        return self.id, self.engine, major, self.time_scale, self.backend

    @property
    def missing(self) -> list[str]:
        """Declared solutions this record has no verdict for."""
        have = {v.solution for v in self.verdicts}
        return [s for s in self.expected or [] if s not in have]

    def judged(self) -> ScenarioValidation:
        """This record with ``valid`` recomputed from its verdicts, flips and completeness."""
        ok = all(v.ok for v in self.verdicts) and not self.flips and not self.missing
        return self.model_copy(update={"valid": ok})

    def combined(self, new: ScenarioValidation) -> ScenarioValidation:
        """``new``'s verdicts added to this record's (replacing those of the same solutions):
        validations of one definition run in parts (e.g. a long time scale, one solution per
        session) make one record."""
        mine = {v.solution for v in new.verdicts}
        verdicts = [v for v in self.verdicts if v.solution not in mine] + new.verdicts
        has_reference = any(v.solution == "reference" for v in new.verdicts)
        difficulty = new if has_reference else self
        return new.model_copy(
            update={
                "verdicts": verdicts,
                "duration_s": sum(v.duration_s or 0.0 for v in verdicts),
                "flips": sorted({*self.flips, *new.flips}),
                "expected": new.expected or self.expected,
                "measured_difficulty": difficulty.measured_difficulty,
                "depth": difficulty.depth,
                "complexity": difficulty.complexity,
            }
        ).judged()


class ValidationReport(BaseModel):
    """All validation records of a scenario library."""

    format: int = 1
    records: list[ScenarioValidation] = Field(default_factory=list)

    def only(self, ids: set[str]) -> ValidationReport:
        """This report without the records of scenarios not in ``ids`` (removed ones)."""
        return ValidationReport(
            format=self.format, records=[r for r in self.records if r.id in ids]
        )

    def current(
        self, definitions: dict[str, str]
    ) -> tuple[ValidationReport, list[ScenarioValidation]]:
        """This report without the records of the scenarios in ``definitions`` (id -> the
        definition key they have now) that were validated from another definition (stale at
        any scale or server: the scenario changed since), and those records."""
        stale = [
            r for r in self.records if r.id in definitions and r.definition != definitions[r.id]
        ]
        kept = [r for r in self.records if r not in stale]
        return ValidationReport(format=self.format, records=kept), stale

    def merged(self, new: list[ScenarioValidation]) -> ValidationReport:
        """This report with ``new`` replacing the records of the same key, or, for the same
        scenario definition, adding to them the solutions a partial validation ran."""
        old = {r.key: r for r in self.records}
        fresh: list[ScenarioValidation] = []
        for r in new:
            before = old.get(r.key)
            part = r.missing and r.definition is not None  # a part of one definition's validation
            if part and before is not None and before.definition == r.definition:
                fresh.append(before.combined(r))
            else:
                fresh.append(r)
        keys = {r.key for r in fresh}
        kept = [r for r in self.records if r.key not in keys]
        records = sorted(
            [*kept, *fresh], key=lambda r: (r.id, r.engine, r.key[2], r.time_scale, r.backend)
        )
        return ValidationReport(format=self.format, records=records)


def scenario_records(
    summary: ValidationSummary,
    declared: dict[str, str | None],
    definitions: dict[str, str] | None = None,
    expected: dict[str, list[str]] | None = None,
) -> list[ScenarioValidation]:
    """Group a validation's rows into one record per scenario, server and scale
    (``definitions``: each scenario's definition key when it was validated; ``expected``:
    the solutions each declares, so a partial validation is recorded as incomplete)."""
    groups: dict[tuple[str, str, str | None, float, str], list[ValidationRow]] = {}
    for row in summary.rows:
        server = row.server_version.split()[0] if row.server_version else None  # "15.20 (Debian…)"
        key = (row.scenario, row.engine, server, row.time_scale, row.backend)
        groups.setdefault(key, []).append(row)
    out: list[ScenarioValidation] = []
    for (scenario, engine, server, scale, backend), rows in groups.items():
        label = next((r.difficulty for r in rows if r.difficulty is not None), None)
        out.append(
            ScenarioValidation(
                id=scenario,
                engine=engine,
                backend=backend,
                server_version=server,
                time_scale=scale,
                valid=False,  # judged below
                verdicts=[
                    SolutionVerdict(
                        solution=r.solution,
                        status=r.status,
                        outcome_pass=r.outcome_pass,
                        safe_pass=r.safe_pass,
                        ok=r.ok,
                        reason=r.reason,
                        duration_s=r.duration_s,
                    )
                    for r in rows
                ],
                duration_s=sum(r.duration_s or 0.0 for r in rows),
                declared_difficulty=declared.get(scenario),
                measured_difficulty=label.label if label else None,
                depth=label.depth if label else None,
                complexity=label.complexity if label else None,
                definition=(definitions or {}).get(scenario),
                expected=(expected or {}).get(scenario),
                flips=[f for f in summary.flips if f.split("/")[0] == scenario],
            ).judged()
        )
    return out


def scale_flips(report: ValidationReport) -> list[str]:
    """Verdicts that differ between time scales: for each scenario, engine, server major and
    backend, every solution whose Outcome or Safe Pass at one scale is not what it is at
    another, among records of the same definition (a compressed run must tell the story a run
    at the speed of use tells)."""
    groups: dict[tuple[str, str, str, str, str | None], list[ScenarioValidation]] = {}
    for r in report.records:
        groups.setdefault((r.id, r.engine, r.key[2], r.backend, r.definition), []).append(r)
    flips = []
    for (sid, engine, major, backend, _), records in sorted(groups.items(), key=str):
        if len(records) < 2:
            continue
        seen: dict[str, dict[float, tuple[bool | None, bool | None]]] = {}
        for r in records:
            for v in r.verdicts:
                seen.setdefault(v.solution, {})[r.time_scale] = (v.outcome_pass, v.safe_pass)
        where = f"{engine} {major}" + (" (docker)" if backend == "docker" else "")
        for solution, by_scale in sorted(seen.items()):
            if len(set(by_scale.values())) > 1:
                told = ", ".join(
                    f"{_cell(op)}/{_cell(sp)} at {scale:g}"
                    for scale, (op, sp) in sorted(by_scale.items())
                )
                flips.append(f"{sid}/{solution} on {where}: OP/SP {told}")
    return flips


def read_report(directory: Path) -> ValidationReport:
    path = directory / REPORT_JSON
    if not path.exists():
        return ValidationReport()
    return ValidationReport.model_validate_json(path.read_text())


def _cell(value: bool | None) -> str:
    return {True: "pass", False: "fail", None: "–"}[value]


def _named_cells(record: ScenarioValidation, prefix: str) -> str:
    """The verdicts (OP/SP) of a record's named solutions (``reference:``, ``blunt:``)."""
    named = [v for v in record.verdicts if v.solution.startswith(prefix)]
    cells = [
        f"{v.solution.split(':', 1)[1]} {_cell(v.outcome_pass)}/{_cell(v.safe_pass)}" for v in named
    ]
    return ", ".join(cells) or "–"


def render_markdown(report: ValidationReport) -> str:
    """The report as a readable table (one row per record)."""
    lines = [
        "# Scenario validation",
        "",
        "Generated by `dbaops validate --report timelines` from `validation.json`; do not edit.",
        "A scenario is valid when the no-op agent fails Outcome Pass, every reference solution",
        "reaches Outcome Pass and Safe Pass, the shallow fix fails Outcome Pass, every blunt fix",
        "fails Safe Pass, and (bounded scenarios) the difficulty measured from the reference run",
        "matches the declared label.",
        "",
        "| scenario | server | scale | valid | noop OP | reference OP/SP | alternatives | "
        "shallow OP | blunt OP/SP | difficulty (declared / measured, D, C) | minutes | "
        "validated |",
        "| --- " * 12 + "|",
    ]
    valid = sum(r.valid for r in report.records)
    for r in report.records:
        by = {v.solution: v for v in r.verdicts}
        noop, ref, shallow = by.get("noop"), by.get("reference"), by.get("shallow")
        alt_cell = _named_cells(r, "reference:")
        blunt_cell = _named_cells(r, "blunt:")
        difficulty = f"{r.declared_difficulty or '–'} / {r.measured_difficulty or '–'}"
        if r.depth is not None and r.complexity is not None:
            difficulty += f", {r.depth}, {r.complexity:.2f}"
        problems = "; ".join(v.reason for v in r.verdicts if not v.ok and v.reason)
        where = " (docker)" if r.backend == "docker" else ""
        if r.valid:
            verdict = "yes"
        elif r.missing and not problems:
            verdict = f"incomplete: {', '.join(r.missing)} not run yet"
        else:
            verdict = "NO: " + problems[:120]
        lines.append(
            f"| {r.id} | {r.engine} {r.server_version or '?'}{where} | {r.time_scale:g} | "
            f"{verdict} | "
            f"{_cell(noop.outcome_pass) if noop else '–'} | "
            f"{_cell(ref.outcome_pass) + '/' + _cell(ref.safe_pass) if ref else '–'} | "
            f"{alt_cell} | {_cell(shallow.outcome_pass) if shallow else '–'} | {blunt_cell} | "
            f"{difficulty} | "
            f"{r.duration_s / 60:.1f} | {r.validated_on} |"
        )
    lines += ["", f"{valid} of {len(report.records)} records valid."]
    servers = sorted({(r.engine, r.key[2]) for r in report.records})
    if servers:
        lines += [
            "",
            "| server | valid scenarios | of them valid at time scale 1 | not valid |",
            "| --- | --- | --- | --- |",
        ]
        for engine, major in servers:
            mine = [r for r in report.records if (r.engine, r.key[2]) == (engine, major)]
            good = sorted({r.id for r in mine if r.valid})
            at_speed = {r.id for r in mine if r.valid and r.time_scale == 1.0}
            bad = sorted({r.id for r in mine if not r.valid})
            lines.append(
                f"| {engine} {major} | {len(good)} | {len(at_speed)} | {', '.join(bad) or '–'} |"
            )
    flips = scale_flips(report)
    lines += ["", "Verdicts that differ between time scales (same definition, same server):"]
    lines += [f"- {f}" for f in flips] if flips else ["none."]
    return "\n".join(lines) + "\n"


def write_report(directory: Path, report: ValidationReport) -> tuple[Path, Path]:
    """Write ``validation.json`` and ``VALIDATION.md`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    js, md = directory / REPORT_JSON, directory / REPORT_MARKDOWN
    js.write_text(json.dumps(report.model_dump(mode="json"), indent=1) + "\n")
    md.write_text(render_markdown(report))
    return js, md
