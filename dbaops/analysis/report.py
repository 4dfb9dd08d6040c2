"""Cross-run report: paper-style tables and figures from run directories only (DBA-Bench §6).

Validity
    A run counts in the metrics iff it completed (``run_end`` status ``completed``), its fault
    manifested and it has an Outcome Pass verdict (``outcome_pass`` not null: at least one
    applicable outcome dimension). Everything else (``infra_error``, ``not_manifested``,
    ``interrupted``, ``failed``, ``incomplete`` = killed, unreadable) is listed in
    ``excluded_runs`` with its reason and never counted as a pass or a failure.

Systems and cohorts
    A system is the agent (+ ``/model`` when the run names one), suffixed with its cohort:
    `` @0.1x`` for a run at ``--time-scale`` 0.1 (no suffix at 1x, the paper's setting; the
    scale is read from the run header, else from the verdict, `` @?x`` when unknown) and
    `` (replay)`` for a run replaying a recorded one (header ``settings.replay_of`` or an
    agent named ``*replay*``). So runs at different time scales, and replays and live runs,
    are never in one row, never repeats of each other and never pooled together: the pooled
    row of a cohort is ``(all)`` with the same suffix (column ``pool``). Every grouped table
    also carries the ``time_scale`` as a key column.

Metrics (paper §6.1.1), per system
    * Diagnosis Pass DP = passes / |D_a|, D_a = valid runs with an applicable, resolved
      diagnosis judgment (``diagnosis.passed`` true or false; a run without a report or with
      a crashed server is false and stays in D_a). ``dp_n`` = |D_a|; ``dp_unresolved`` counts
      the valid runs left out of D_a because their judgments are unresolved
      (``diagnosis.passed`` null with ``applicable`` true, or no diagnosis verdict yet for a
      bounded scenario with diagnosis criteria: the judge has not run). Runs of scenarios
      without criteria are in neither.
    * Outcome Pass OP = passes / valid runs (``n_runs``);
    * Safe Pass SP = (Outcome Pass and safe) / valid runs (``safe_pass``; older runs without it
      fall back to ``outcome_pass and safety.safe``, then to "no violation recorded in the
      trace");
    * mean Token Cost over C_a = valid runs with recorded token usage and a price for every
      model call (``cost.cost_usd`` not null), ``n_cost`` = |C_a|. Costs from placeholder
      (unchecked) registry prices are marked: per run ``cost_placeholder``, per row
      ``n_cost_placeholder`` and ``cost_placeholder`` (true when any run of the mean is
      placeholder-priced); the Markdown and HTML tables print "(placeholder prices)" next to
      such a mean.
    Reported overall, per domain and per difficulty (easy/hard; scenarios without a label
    are "unrated"), and pooled over the systems of a cohort as ``(all)``.

Conditional rates (§6.2, §6.4)
    P(Outcome fails | Diagnosis passes), P(Safe fails | Outcome passes) and
    P(Outcome fails | a safety violation).

Repeats and pass^k
    Valid runs of the same (scenario, system) are repeats, numbered by start time: only runs
    at one time scale, and live or replayed alike, are repeats of each other. With ``n`` valid
    repeats of which ``c`` pass, the unbiased estimate of "all of k i.i.d. attempts pass" is
    ``C(c, k) / C(n, k)`` (tau-bench); pass^k is its mean over the scenarios with ``n >= k``,
    for k = 1 .. max n. Its spread is the standard deviation of the per-scenario estimates
    (and their count); the per-repeat table gives the pass rate of each repeat index.

Service Compliance survival (Fig. 9 left)
    Over the valid persistent runs with Service Compliance objectives only (see
    :mod:`dbaops.analysis.survival` for when a case leaves): ``survival.png``, ``S(t)`` at 21
    normalised times, a per-system table (share still compliant at the end, how many cases
    left by which cause) and the cases themselves. Without such runs the report says so and
    writes no survival figure.
"""

from __future__ import annotations

import html as htmlmod
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from dbaops.analysis.htmlpage import (
    fmt_cell,
    frame_html,
    frame_markdown,
    page,
    png_bytes,
    png_img,
)
from dbaops.analysis.survival import (
    case_exit,
    survival_cases,
    survival_curve,
    survival_figure,
    survival_table,
)
from dbaops.record.layout import discover_runs
from dbaops.record.load import RunData, load_run, run_cost, run_is_replay, run_model, run_time_scale

__all__ = [
    "ALL_SYSTEMS",
    "SUMMARY_SCHEMA",
    "ReportResult",
    "build_report",
    "cohort_suffix",
    "conditional_rates",
    "load_summaries",
    "pass_hat_k",
    "pass_k_table",
    "pass_rates",
    "repeat_spread",
    "run_summary",
    "survival_curve",
    "survival_figure",
    "survival_table",
]

ALL_SYSTEMS = "(all)"
_RATE_COLS = {"diagnosis_pass", "outcome_pass", "safe_pass"}

SUMMARY_SCHEMA: dict[str, pl.DataType] = {
    "run_dir": pl.String(),
    "scenario": pl.String(),
    "mode": pl.String(),
    "domain": pl.String(),
    "difficulty": pl.String(),
    "agent": pl.String(),
    "model": pl.String(),
    "system": pl.String(),
    "time_scale": pl.Float64(),
    "knowledge_base": pl.String(),
    "replay": pl.Boolean(),
    "pool": pl.String(),
    "run_id": pl.String(),
    "started": pl.Float64(),
    "repeat": pl.Int64(),
    "status": pl.String(),
    "manifested": pl.Boolean(),
    "valid": pl.Boolean(),
    "exclude_reason": pl.String(),
    "outcome_pass": pl.Boolean(),
    "safe": pl.Boolean(),
    "safe_pass": pl.Boolean(),
    "n_violations": pl.Int64(),
    "violation_types": pl.String(),
    "diagnosis_pass": pl.Boolean(),
    "diagnosis_applicable": pl.Boolean(),
    "diagnosis_unresolved": pl.Boolean(),
    "sc_applicable": pl.Boolean(),
    "sc_pass": pl.Boolean(),
    "left_at_s": pl.Float64(),
    "horizon_s": pl.Float64(),
    "left_norm": pl.Float64(),
    "left_workload": pl.String(),
    "left_cause": pl.String(),
    "n_tool_calls": pl.Int64(),
    "n_model_calls": pl.Int64(),
    "input_tokens": pl.Int64(),
    "cached_input_tokens": pl.Int64(),
    "output_tokens": pl.Int64(),
    "cost_usd": pl.Float64(),
    "cost_placeholder": pl.Boolean(),
    "unpriced_calls": pl.Int64(),
}


@dataclass
class ReportResult:
    """What :func:`build_report` wrote and computed."""

    out_dir: Path
    files: list[Path]
    runs: pl.DataFrame  # one summary row per discovered run (valid and excluded)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)

    @property
    def n_runs(self) -> int:
        return self.runs.height

    @property
    def n_valid(self) -> int:
        return int(self.runs["valid"].sum()) if self.runs.height else 0

    @property
    def excluded(self) -> pl.DataFrame:
        return self.tables.get("excluded_runs", pl.DataFrame())


# --------------------------------------------------------------------------- per-run rows


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _safety(run: RunData, verdict: dict[str, Any]) -> tuple[bool | None, int, str]:
    """(safe, number of violations, types) from the verdict, else from the trace details."""
    safety = verdict.get("safety")
    if isinstance(safety, dict):
        vs = [v for v in safety.get("violations") or [] if isinstance(v, dict)]
        types = sorted({str(v.get("type")) for v in vs if v.get("type")})
        safe = _bool(safety.get("safe"))
        if safe is None:
            score = safety.get("score")
            safe = (float(score) == 0.0) if isinstance(score, int | float) else not vs
        return safe, len(vs), ",".join(types)
    n = 0
    types_set: set[str] = set()
    for call in run.tool_calls:
        found = call.detail.get("safety_violations") if isinstance(call.detail, dict) else None
        if found:
            items = found if isinstance(found, list) else [found]
            n += len(items)
            types_set |= {
                str(i.get("type")) for i in items if isinstance(i, dict) and i.get("type")
            }
    return n == 0, n, ",".join(sorted(types_set))


def cohort_suffix(time_scale: float | None, replay: bool, no_kb: bool = False) -> str:
    """The label suffix that keeps a cohort apart: `` @0.1x`` for a time scale other than 1,
    `` @?x`` when unknown, `` (replay)`` for a replayed run, `` (no KB)`` for a run whose
    knowledge tool had no corpus to search."""
    if time_scale is None:
        out = " @?x"
    else:
        out = "" if time_scale == 1.0 else f" @{time_scale:g}x"
    return out + (" (replay)" if replay else "") + (" (no KB)" if no_kb else "")


def _diagnosis(run: RunData, verdict: dict[str, Any]) -> tuple[bool | None, bool, bool]:
    """(passed, applicable, unresolved) of the run's diagnosis verdict.

    A bounded scenario with diagnosis criteria whose verdict has no diagnosis yet (the judge
    has not run) is applicable and unresolved, like one with unknown judgments."""
    diag = verdict.get("diagnosis")
    if isinstance(diag, dict):
        passed = _bool(diag.get("passed"))
        applicable = diag.get("applicable") is not False
        return passed, applicable, applicable and passed is None
    sc = run.scenario
    criteria = sc is not None and sc.mode == "bounded" and sc.evaluation.diagnosis.applicable
    return None, criteria, criteria


def run_summary(run_dir: Path) -> dict[str, Any]:
    """One summary row (see :data:`SUMMARY_SCHEMA`) for a run directory."""
    run = load_run(Path(run_dir), rescore_missing=True)
    verdict = run.verdict or {}
    sc = run.scenario
    h = run.header
    agent = h.agent if h else verdict.get("agent")
    model = run_model(run)
    system = agent or "?"
    if model and model not in system:
        system = f"{system}/{model}"
    time_scale = run_time_scale(run)
    replay = run_is_replay(run)
    corpus = h.knowledge_base if h else None  # None: recorded before provenance existed
    no_kb = corpus is not None and not corpus.available
    system += cohort_suffix(time_scale, replay and "replay" not in system.lower(), no_kb)
    status = run.status
    manifested = bool(verdict.get("manifested", status != "not_manifested"))
    if status == "not_manifested":
        manifested = False
    outcome = _bool(verdict.get("outcome_pass"))
    end_reason = f": {run.end.reason[:200]}" if run.end and run.end.reason else ""
    reason: str | None = None
    if sc is None:
        reason = f"unreadable scenario: {run.scenario_error}"
    elif not run.verdict:
        reason = "no verdict (unscorable run)"
    elif not manifested:
        reason = f"not_manifested{end_reason}"
    elif status != "completed":
        reason = f"{status}{end_reason}"
    elif outcome is None:
        reason = "no applicable outcome dimension"
    valid = reason is None
    safe, n_viol, types = _safety(run, verdict)
    safe_pass = _bool(verdict.get("safe_pass")) if "safe_pass" in verdict else None
    if safe_pass is None and outcome is not None:
        safe_pass = bool(outcome and safe)
    diagnosis_pass, diagnosis_applicable, diagnosis_unresolved = _diagnosis(run, verdict)
    scv = verdict.get("service_compliance") or {}
    sc_applicable = bool(scv.get("applicable")) if scv else False
    sc_pass = _bool(scv.get("passed")) if sc_applicable else None
    horizon = run.scheduled_horizon_s
    left = case_exit(scv, horizon) if sc_applicable else None
    cost = run_cost(run)
    n_tools = verdict.get("tool_calls")
    return {
        "run_dir": str(run.path),
        "scenario": sc.id if sc else (h.scenario_id if h else verdict.get("scenario_id", "?")),
        "mode": sc.mode if sc else (h.scenario_mode if h else None),
        "domain": (sc.domain or "unspecified") if sc else None,
        "difficulty": (sc.difficulty or "unrated") if sc else None,
        "agent": agent,
        "model": model,
        "system": system,
        "time_scale": time_scale,
        "replay": replay,
        "pool": ALL_SYSTEMS + cohort_suffix(time_scale, replay, no_kb),
        "knowledge_base": corpus.summary() if corpus else None,
        "run_id": h.run_id if h else run.path.name,
        "started": h.t_wall if h else None,
        "repeat": None,
        "status": status,
        "manifested": manifested,
        "valid": valid,
        "exclude_reason": reason,
        "outcome_pass": outcome,
        "safe": safe,
        "safe_pass": safe_pass,
        "n_violations": n_viol,
        "violation_types": types,
        "diagnosis_pass": diagnosis_pass,
        "diagnosis_applicable": diagnosis_applicable,
        "diagnosis_unresolved": diagnosis_unresolved,
        "sc_applicable": sc_applicable,
        "sc_pass": sc_pass,
        "left_at_s": left.left_at_s if left else None,
        "horizon_s": horizon,
        "left_norm": left.left_norm if left else None,
        "left_workload": left.workload if left else None,
        "left_cause": left.cause if left else None,
        "n_tool_calls": n_tools if isinstance(n_tools, int) else len(run.tool_calls),
        "n_model_calls": cost.calls,
        "input_tokens": cost.input_tokens,
        "cached_input_tokens": cost.cached_input_tokens,
        "output_tokens": cost.output_tokens,
        "cost_usd": cost.cost_usd,
        "cost_placeholder": cost.price_placeholder if cost.cost_usd is not None else None,
        "unpriced_calls": cost.unpriced_calls,
    }


def load_summaries(runs_dir: Path) -> pl.DataFrame:
    """Summary rows of every run below ``runs_dir``, with repeat indices assigned."""
    rows = [run_summary(p) for p in discover_runs(Path(runs_dir))]
    df = pl.DataFrame(rows, schema=SUMMARY_SCHEMA, orient="row" if rows else None)
    if df.height == 0:
        return df
    # repeats are numbered among the valid runs of a (scenario, system), by start time; the
    # system label carries the time scale and the replay mark, so they are repeats only
    # within one cohort
    return df.sort("scenario", "system", "started", "run_id", nulls_last=True).with_columns(
        pl.when(pl.col("valid"))
        .then(pl.col("valid").cast(pl.Int64).cum_sum().over("scenario", "system"))
        .otherwise(None)
        .cast(pl.Int64)
        .alias("repeat")
    )


# --------------------------------------------------------------------------- tables


def _rate(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.Float64).mean()


def _in_cost_cohort() -> pl.Expr:
    """C_a (paper §6.1.1): a priced cost over recorded token usage."""
    return pl.col("cost_usd").is_not_null() & (
        (pl.col("input_tokens") + pl.col("output_tokens")) > 0
    )


def _rate_aggs() -> list[pl.Expr]:
    in_c = _in_cost_cohort()
    placeholder = in_c & pl.col("cost_placeholder").fill_null(False)
    dp_n = pl.col("diagnosis_pass").is_not_null().sum().cast(pl.Int64)
    unresolved = pl.col("diagnosis_unresolved").fill_null(False).sum().cast(pl.Int64)
    return [
        pl.col("time_scale").first().alias("time_scale"),
        pl.len().cast(pl.Int64).alias("n_runs"),
        dp_n.alias("n_diagnosis"),  # = dp_n; kept for readers of older reports
        dp_n.alias("dp_n"),
        unresolved.alias("dp_unresolved"),
        _rate("diagnosis_pass").alias("diagnosis_pass"),
        _rate("outcome_pass").alias("outcome_pass"),
        _rate("safe_pass").alias("safe_pass"),
        in_c.sum().cast(pl.Int64).alias("n_cost"),
        placeholder.sum().cast(pl.Int64).alias("n_cost_placeholder"),
        placeholder.any().alias("cost_placeholder"),
        pl.col("cost_usd").filter(in_c).mean().alias("mean_cost_usd"),
        pl.col("input_tokens").cast(pl.Float64).mean().alias("mean_input_tokens"),
        pl.col("cached_input_tokens").cast(pl.Float64).mean().alias("mean_cached_tokens"),
        pl.col("output_tokens").cast(pl.Float64).mean().alias("mean_output_tokens"),
    ]


def pass_rates(valid: pl.DataFrame) -> pl.DataFrame:
    """DP/OP/SP and mean cost per system: overall, per domain, per difficulty (long format).
    The pooled rows are per cohort (``pool``: time scale and replay mark)."""
    pooled = valid.with_columns(pl.col("pool").alias("system"))
    both = pl.concat([valid, pooled])
    parts = [
        both.group_by("system")
        .agg(_rate_aggs())
        .with_columns(pl.lit("overall").alias("scope"), pl.lit("all").alias("group"))
    ]
    for scope in ("domain", "difficulty"):
        parts.append(
            both.group_by("system", scope)
            .agg(_rate_aggs())
            .with_columns(pl.lit(scope).alias("scope"), pl.col(scope).alias("group"))
            .drop(scope)
        )
    order = {"overall": 0, "domain": 1, "difficulty": 2}
    out = pl.concat([p.select(["scope", "group", "system", *p.columns[1:-2]]) for p in parts])
    return (
        out.with_columns(
            pl.col("scope").replace_strict(order, return_dtype=pl.Int64).alias("_o"),
            pl.col("system").str.starts_with(ALL_SYSTEMS).alias("_p"),
        )
        .sort("_o", "group", "_p", "system")
        .drop("_o", "_p")
    )


def conditional_rates(valid: pl.DataFrame) -> pl.DataFrame:
    """Per system and pooled: how often diagnosis passes without outcome, and so on."""

    def block(df: pl.DataFrame, system: str) -> dict[str, Any]:
        dp = df.filter(pl.col("diagnosis_pass") == True)  # noqa: E712
        op = df.filter(pl.col("outcome_pass") == True)  # noqa: E712
        unsafe = df.filter(pl.col("safe") == False)  # noqa: E712
        n_dp_of = int((dp["outcome_pass"] == False).sum())  # noqa: E712
        n_op_us = int((op["safe_pass"] == False).sum())  # noqa: E712
        n_us_of = int((unsafe["outcome_pass"] == False).sum())  # noqa: E712
        return {
            "system": system,
            "time_scale": df["time_scale"][0] if df.height else None,
            "n_diagnosis_pass": dp.height,
            "n_diagnosis_pass_outcome_fail": n_dp_of,
            "outcome_fail_given_diagnosis_pass": n_dp_of / dp.height if dp.height else None,
            "n_outcome_pass": op.height,
            "n_outcome_pass_unsafe": n_op_us,
            "unsafe_given_outcome_pass": n_op_us / op.height if op.height else None,
            "n_unsafe": unsafe.height,
            "n_unsafe_outcome_fail": n_us_of,
            "outcome_fail_given_unsafe": n_us_of / unsafe.height if unsafe.height else None,
        }

    rows = [block(valid.filter(pl.col("system") == s), s) for s in _systems(valid)]
    rows += [block(valid.filter(pl.col("pool") == p), p) for p in _pools(valid)]
    return pl.DataFrame(rows).with_columns(
        pl.col("time_scale").cast(pl.Float64),
        pl.col(
            "outcome_fail_given_diagnosis_pass",
            "unsafe_given_outcome_pass",
            "outcome_fail_given_unsafe",
        ).cast(pl.Float64),
    )


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate that k of the n attempts, drawn without replacement, all pass."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    return math.comb(c, k) / math.comb(n, k)


def pass_k_table(valid: pl.DataFrame) -> pl.DataFrame:
    """pass^k for k = 1 .. max repeats, per system (one cohort) and metric (outcome, safe)."""
    rows: list[dict[str, Any]] = []
    for system in _systems(valid):
        mine = valid.filter(pl.col("system") == system)
        scale = mine["time_scale"][0]
        for metric in ("outcome_pass", "safe_pass"):
            per = (
                mine.group_by("scenario")
                .agg(
                    pl.len().alias("n"),
                    pl.col(metric).fill_null(False).cast(pl.Int64).sum().alias("c"),
                )
                .sort("scenario")
            )
            if per.height == 0:
                continue
            ns = per["n"].to_list()
            cs = per["c"].to_list()
            for k in range(1, max(ns) + 1):
                est = [pass_hat_k(n, c, k) for n, c in zip(ns, cs, strict=True) if n >= k]
                rows.append(
                    {
                        "system": system,
                        "time_scale": scale,
                        "metric": metric,
                        "k": k,
                        "pass_k": float(np.mean(est)),
                        "std_over_scenarios": float(np.std(est, ddof=1)) if len(est) > 1 else None,
                        "n_scenarios": len(est),
                    }
                )
    schema = {
        "system": pl.String,
        "time_scale": pl.Float64,
        "metric": pl.String,
        "k": pl.Int64,
        "pass_k": pl.Float64,
        "std_over_scenarios": pl.Float64,
        "n_scenarios": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row" if rows else None)


def repeat_spread(valid: pl.DataFrame) -> pl.DataFrame:
    """Pass rate of each repeat index (repeat r over the scenarios that have an r-th valid
    run), and the mean, min and max of those rates: how much a single-run pass@1 moves."""
    rows: list[dict[str, Any]] = []
    for system in _systems(valid):
        mine = valid.filter(pl.col("system") == system)
        scale = mine["time_scale"][0]
        for metric in ("outcome_pass", "safe_pass"):
            per = (
                mine.group_by("repeat")
                .agg(pl.col(metric).fill_null(False).cast(pl.Float64).mean().alias("rate"))
                .sort("repeat")
            )
            if per.height == 0:
                continue
            rates = per["rate"].to_list()
            rows.append(
                {
                    "system": system,
                    "time_scale": scale,
                    "metric": metric,
                    "n_repeats": per.height,
                    "per_repeat": " / ".join(f"{r * 100:.1f}" for r in rates),
                    "mean": float(np.mean(rates)),
                    "min": float(np.min(rates)),
                    "max": float(np.max(rates)),
                }
            )
    schema = {
        "system": pl.String,
        "time_scale": pl.Float64,
        "metric": pl.String,
        "n_repeats": pl.Int64,
        "per_repeat": pl.String,
        "mean": pl.Float64,
        "min": pl.Float64,
        "max": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row" if rows else None)


def _systems(df: pl.DataFrame) -> list[str]:
    return sorted(df["system"].unique().to_list()) if df.height else []


def _pools(df: pl.DataFrame) -> list[str]:
    return sorted(df["pool"].unique().to_list()) if df.height else []


# --------------------------------------------------------------------------- figures


def pass_rates_figure(rates: pl.DataFrame) -> Figure:
    """Fig. 4 style: DP/OP/SP per system, overall."""
    overall = rates.filter(pl.col("scope") == "overall")
    systems = overall["system"].to_list()
    fig = Figure(figsize=(max(5.0, 1.3 * len(systems) + 2), 4), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(systems))
    for j, (col, label) in enumerate(
        (
            ("diagnosis_pass", "Diagnosis Pass"),
            ("outcome_pass", "Outcome Pass"),
            ("safe_pass", "Safe Pass"),
        )  # fmt: skip
    ):
        vals = [np.nan if v is None else v * 100 for v in overall[col].to_list()]
        bars = ax.bar(x + (j - 1) * 0.27, vals, width=0.27, label=label, color=f"C{j}")
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(x, systems, fontsize=8)
    ax.set_ylabel("%")
    ax.set_ylim(0, 110)
    ax.legend(fontsize=8)
    ax.set_title("Pass rates per system (valid runs)", fontsize=10)
    return fig


# --------------------------------------------------------------------------- output


def _pivot_md(rates: pl.DataFrame, scope: str, metric: str) -> pl.DataFrame:
    """Table 2 style: rows systems, columns groups with their run counts, cells metric %."""
    sub = rates.filter(pl.col("scope") == scope)
    groups = sorted(sub["group"].unique().to_list())
    rows = []
    labels = sub["system"].unique().to_list()
    systems = sorted(s for s in labels if not s.startswith(ALL_SYSTEMS))
    pools = sorted(s for s in labels if s.startswith(ALL_SYSTEMS))
    for system in [*systems, *pools]:
        row: dict[str, Any] = {"system": system}
        for g in groups:
            r = sub.filter((pl.col("system") == system) & (pl.col("group") == g))
            if r.height == 0 or r[metric][0] is None:
                row[g] = "—"
            else:
                row[g] = f"{r[metric][0] * 100:.1f} ({r['n_runs'][0]})"
        rows.append(row)
    return pl.DataFrame(rows, schema={"system": pl.String, **{g: pl.String for g in groups}})


_TITLES = {
    "runs": "All runs",
    "excluded_runs": "Excluded runs (not counted in any metric)",
    "pass_rates": "Diagnosis / Outcome / Safe Pass and mean Token Cost (paper Fig. 4, Table 2)",
    "safe_pass_by_difficulty": "Safe Pass (%) by difficulty, run counts in parentheses "
    "(paper Table 2)",
    "outcome_pass_by_domain": "Outcome Pass (%) by domain, run counts in parentheses",
    "safe_pass_by_domain": "Safe Pass (%) by domain, run counts in parentheses",
    "conditional_rates": "Conditional rates (paper §6.2, §6.4)",
    "pass_k": "pass^k over repeated runs (tau-bench estimator; std over scenarios)",
    "repeat_spread": "Pass rate per repeat index (%)",
    "survival": "Service Compliance survival S(t) over normalised time (paper Fig. 9 left)",
    "survival_by_system": "Service Compliance survival per system: share of cases still "
    "compliant at the end, cases by how they left (paper Fig. 9 left)",
    "survival_cases": "Service Compliance survival cases (valid persistent runs)",
}
_PCT = {
    "pass_rates": _RATE_COLS,
    "conditional_rates": {
        "outcome_fail_given_diagnosis_pass",
        "unsafe_given_outcome_pass",
        "outcome_fail_given_unsafe",
    },
    "pass_k": {"pass_k", "std_over_scenarios"},
    "repeat_spread": {"mean", "min", "max"},
    "survival": {"survival"},
    "survival_by_system": {"survival_end"},
}


PLACEHOLDER_NOTE = "(placeholder prices)"
NO_SURVIVAL = (
    "No valid persistent runs with Service Compliance objectives: no survival figure "
    "(bounded runs are not cases)."
)
_CASE_COLUMNS = [
    "system",
    "scenario",
    "run_id",
    "repeat",
    "sc_pass",
    "left_norm",
    "left_at_s",
    "horizon_s",
    "left_workload",
    "left_cause",
]


def _mean_cost_text(mean: float | None, n_cost: int, n_placeholder: int) -> str:
    """A mean Token Cost cell: the mark goes with any mean that includes placeholder costs."""
    text = fmt_cell(mean)
    if mean is None or n_placeholder == 0:
        return text
    if n_placeholder == n_cost:
        return f"{text} {PLACEHOLDER_NOTE}"
    return f"{text} (placeholder prices: {n_placeholder} of {n_cost} runs)"


def _display(name: str, df: pl.DataFrame) -> pl.DataFrame:
    """The table as shown in Markdown and HTML (the CSV keeps the plain numbers)."""
    if name != "pass_rates" or df.height == 0:
        return df
    cells = [
        _mean_cost_text(m, n, k)
        for m, n, k in zip(
            df["mean_cost_usd"].to_list(),
            df["n_cost"].to_list(),
            df["n_cost_placeholder"].to_list(),
            strict=True,
        )
    ]
    return df.drop("n_diagnosis").with_columns(pl.Series("mean_cost_usd", cells, pl.String))


def _notes(runs: pl.DataFrame, valid: pl.DataFrame) -> list[str]:
    """Sentences under the report title: cohorts kept apart, placeholder costs."""
    out: list[str] = []
    if runs.height and runs["pool"].n_unique() > 1:
        pools = ", ".join(f"`{p}`" for p in sorted(runs["pool"].unique().to_list()))
        out.append(
            "Runs at different time scales, replayed runs and runs whose knowledge tool had "
            "no corpus are separate systems (label suffix `@<scale>x`, `(replay)`, "
            f"`(no KB)`) and are pooled separately: {pools}."
        )
    n_ph = int(valid["cost_placeholder"].fill_null(False).sum()) if valid.height else 0
    if n_ph:
        out.append(
            f"{n_ph} valid run(s) were priced with placeholder prices from the model registry, "
            f"not official prices: their costs and every mean that includes them are marked "
            f"{PLACEHOLDER_NOTE}."
        )
    return out


def build_report(runs_dir: Path, out_dir: Path, html: bool = False) -> ReportResult:
    """Discover run directories below ``runs_dir`` and write the report to ``out_dir``.

    Writes ``<table>.csv`` and ``<table>.md`` per table, ``report.md`` with all of them,
    ``pass_rates.png`` and, when there are persistent runs with Service Compliance
    objectives, ``survival.png``; with ``html`` also a self-contained
    ``report.html`` (figures embedded as data URIs, no scripts).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = load_summaries(Path(runs_dir))
    valid = runs.filter(pl.col("valid")) if runs.height else runs
    excluded = (
        runs.filter(~pl.col("valid")).select(
            "scenario", "system", "run_id", "status", "exclude_reason", "run_dir"
        )
        if runs.height
        else pl.DataFrame(
            schema={
                c: SUMMARY_SCHEMA[c]
                for c in ("scenario", "system", "run_id", "status", "exclude_reason", "run_dir")
            }
        )
    )
    tables: dict[str, pl.DataFrame] = {"runs": runs, "excluded_runs": excluded}
    if valid.height:
        rates = pass_rates(valid)
        tables["pass_rates"] = rates
        tables["safe_pass_by_difficulty"] = _pivot_md(rates, "difficulty", "safe_pass")
        tables["outcome_pass_by_domain"] = _pivot_md(rates, "domain", "outcome_pass")
        tables["safe_pass_by_domain"] = _pivot_md(rates, "domain", "safe_pass")
        tables["conditional_rates"] = conditional_rates(valid)
        tables["pass_k"] = pass_k_table(valid)
        tables["repeat_spread"] = repeat_spread(valid)
    cases = survival_cases(valid)
    if cases.height:
        tables["survival_by_system"] = survival_table(cases)
        tables["survival"] = survival_curve(cases, np.round(np.linspace(0, 1, 21), 4))
        tables["survival_cases"] = cases.select(_CASE_COLUMNS).sort("system", "scenario", "repeat")
    files: list[Path] = []
    notes = _notes(runs, valid)
    md_parts = [
        "# dbaops report\n",
        f"{runs.height} runs found under `{runs_dir}`, {valid.height} valid, "
        f"{runs.height - valid.height} excluded.\n",
        *(f"{n}\n" for n in notes),
    ]
    for name, df in tables.items():
        pct = _PCT.get(name)
        csv = out / f"{name}.csv"
        df.write_csv(csv)
        files.append(csv)
        md = frame_markdown(_display(name, df), pct)
        (out / f"{name}.md").write_text(md, encoding="utf-8")
        files.append(out / f"{name}.md")
        if name != "runs":
            md_parts.append(f"## {_TITLES.get(name, name)}\n\n{md}")
    if not cases.height:
        md_parts.append(f"## {_TITLES['survival']}\n\n{NO_SURVIVAL}\n")
    figs: dict[str, bytes] = {}
    if cases.height:
        figs["survival"] = png_bytes(survival_figure(cases), dpi=120)
    if valid.height:
        figs["pass_rates"] = png_bytes(pass_rates_figure(tables["pass_rates"]), dpi=120)
    for name, data in figs.items():
        p = out / f"{name}.png"
        p.write_bytes(data)
        files.append(p)
        md_parts.append(f"![{name}]({name}.png)\n")
    report_md = out / "report.md"
    report_md.write_text("\n".join(md_parts), encoding="utf-8")
    files.append(report_md)
    if html:
        body = [
            f"<p>{runs.height} runs found under <code>{runs_dir}</code>, {valid.height} valid, "
            f"{runs.height - valid.height} excluded.</p>",
            *(f"<p>{htmlmod.escape(n).replace('`', '')}</p>" for n in notes),
        ]
        for name in ("pass_rates", "safe_pass_by_difficulty", "outcome_pass_by_domain",
                     "safe_pass_by_domain", "conditional_rates"):  # fmt: skip
            if name in tables:
                shown = _display(name, tables[name])
                body.append(f"<h2>{_TITLES[name]}</h2>" + frame_html(shown, _PCT.get(name)))
        if "pass_rates" in figs:
            body.append(png_img(figs["pass_rates"], "pass rates"))
        for name in ("pass_k", "repeat_spread"):
            if name in tables:
                body.append(f"<h2>{_TITLES[name]}</h2>" + frame_html(tables[name], _PCT.get(name)))
        body.append(f"<h2>{_TITLES['survival']}</h2>")
        if "survival" in figs:
            body.append(png_img(figs["survival"], "survival"))
            for name in ("survival_by_system", "survival_cases"):
                table = frame_html(tables[name], _PCT.get(name))
                body.append(f"<h3>{htmlmod.escape(_TITLES[name])}</h3>" + table)
        else:
            body.append(f"<p>{NO_SURVIVAL}</p>")
        body.append(f"<h2>{_TITLES['excluded_runs']}</h2>" + frame_html(excluded))
        body.append(f"<h2>{_TITLES['runs']}</h2>" + frame_html(runs.drop("run_dir")))
        report_html = out / "report.html"
        report_html.write_text(page("dbaops report", "\n".join(body)), encoding="utf-8")
        files.append(report_html)
    return ReportResult(out_dir=out, files=files, runs=runs, tables=tables)
