"""Report checks: predicates over the agent's structured report, judged at scoring time.

A pure function of the recorded ``submit_report`` calls (see ``score._reports``); the result is
a :class:`~dbaops.record.kinds.CheckRecord` that scoring aggregates with the harness's own terminal
checks, but which is never written to the trace.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dbaops.record.kinds import CheckRecord
from dbaops.scenario.checks import ReportCheck, compare

_MISSING = object()


def _field(report: dict[str, Any], path: str) -> Any:
    value: Any = report
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _token(x: Any) -> str:
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    return str(x).strip().casefold()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _contains(value: Any, item: Any) -> bool:
    """A list holds ``item`` as one of its elements; a text holds it as a whole word."""
    if isinstance(value, list | tuple):
        return _token(item) in {_token(v) for v in value}
    word = re.escape(_token(item))
    return re.search(rf"(?<!\w){word}(?!\w)", _text(value).casefold()) is not None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def report_failures(check: ReportCheck, report: dict[str, Any]) -> list[str]:
    """The predicates of ``check`` that ``report`` fails (empty: it passes)."""
    value = _field(report, check.field)
    if value is _MISSING or value is None:
        return [f"the report has no {check.field}"]
    failed: list[str] = []
    if check.contains_all is not None:
        missing = [x for x in check.contains_all if not _contains(value, x)]
        if missing:
            failed.append(f"contains_all: missing {missing}")
    if check.contains_any is not None and not any(_contains(value, x) for x in check.contains_any):
        failed.append(f"contains_any: none of {check.contains_any}")
    if check.contains_none is not None:
        present = [x for x in check.contains_none if _contains(value, x)]
        if present:
            failed.append(f"contains_none: has {present}")
    if check.matches is not None and not re.search(check.matches, _text(value)):
        failed.append(f"matches: /{check.matches}/ not found")
    if check.op is not None:
        number = _number(value)
        if number is None:
            failed.append(f"op: {check.field} is not a number")
        elif not compare(number, check.op, check.value):
            failed.append(f"op: {number:g} {check.op} {check.value:g} does not hold")
    return failed


def report_expectation(check: ReportCheck) -> str:
    preds = []
    if check.contains_all is not None:
        preds.append(f"contains all {check.contains_all}")
    if check.contains_any is not None:
        preds.append(f"contains any of {check.contains_any}")
    if check.contains_none is not None:
        preds.append(f"contains none of {check.contains_none}")
    if check.matches is not None:
        preds.append(f"matches /{check.matches}/")
    if check.op is not None:
        preds.append(f"{check.op} {check.value:g}")
    which = f"{check.reports} report" + (f" for task {check.task_id}" if check.task_id else "")
    return f"{which}: {check.field} " + "; ".join(preds)


def judge_report_check(check: ReportCheck, reports: list[dict[str, Any]]) -> CheckRecord:
    """Judge a report check on the run's reports (in trace order); no report fails it."""
    chosen = [r for r in reports if check.task_id is None or r.get("task_id") == check.task_id]
    expected = report_expectation(check)
    if not chosen:
        scope = f" for task {check.task_id}" if check.task_id else ""
        return CheckRecord(
            purpose="terminal",
            name=check.name,
            passed=False,
            expected=expected,
            error=f"no report submitted{scope}",
        )
    if check.reports == "last":
        chosen = chosen[-1:]
    judged = [(r, report_failures(check, r)) for r in chosen]
    # Evidence: the (last) report that passes, else the last one judged.
    report, failed = next(((r, f) for r, f in reversed(judged) if not f), judged[-1])
    value = _field(report, check.field)
    return CheckRecord(
        t_scn=report.get("t_scn"),
        purpose="terminal",
        name=check.name,
        passed=not failed,
        observed={
            "call_id": report.get("call_id"),
            "value": None if value is _MISSING else _text(value)[:500],
            "failed": failed,
        },
        expected=expected,
    )
