"""The ``dbaops`` command line (Typer + Rich)."""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import structlog
import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from dbaops.evaluation.score import RunVerdict
    from dbaops.execution.validate import ValidationSummary

#: Exit status of `dbaops persistent|bounded` by run status (scripts tell infra errors apart).
EXIT_CODES = {"completed": 0, "failed": 1, "infra_error": 3, "not_manifested": 4}


app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
console = Console()


def _error(message: object) -> None:
    """Print an error as plain text: brackets in it (``[models.<name>]``) are not markup."""
    console.print(Text.assemble(("error:", "red"), " ", str(message)))


class _CurrentStderr:
    """``sys.stderr`` as it is when a line is written (whoever embeds the CLI, a test runner
    for one, may swap it and close the old one)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _configure_logging(verbose: bool) -> None:
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.INFO if verbose else logging.WARNING
        ),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
    )


@app.command("list")
def list_cmd() -> None:
    """List the scenario library (and any file that fails to load, with its error)."""
    from dbaops.scenario.loader import ScenarioError, list_scenarios

    table = Table("id", "engine", "mode", "domain", "level", "horizon / time budget", "title")
    bad = 0
    for path, item in list_scenarios():
        if isinstance(item, ScenarioError):
            bad += 1
            table.add_row(path.stem, "", "[red]invalid[/red]", "", "", "", escape(str(item)[:100]))
        else:
            table.add_row(
                item.id,
                item.engine,
                item.mode,
                item.domain,
                item.difficulty or "",
                f"{item.time_budget_s:.0f}s" + ("" if item.mode == "persistent" else " budget"),
                item.title,
            )
    console.print(table)
    loaded = [item for _, item in list_scenarios() if not isinstance(item, ScenarioError)]
    console.print(library_summary(loaded))
    raise typer.Exit(1 if bad else 0)


def library_summary(scenarios: list[Any]) -> str:
    """One line per engine and mode: how many scenarios, by domain and level (the paper's
    Table 1, whose strata are the engines)."""
    lines = []
    for engine in sorted({s.engine for s in scenarios}):
        for mode in ("bounded", "persistent"):
            mine = [s for s in scenarios if s.mode == mode and s.engine == engine]
            if not mine:
                continue
            domains: dict[str, list[int]] = {}
            for s in mine:
                counts = domains.setdefault(s.domain or "-", [0, 0])
                counts[0 if s.difficulty != "hard" else 1] += 1
            by = ", ".join(f"{d} {e}/{h}" for d, (e, h) in sorted(domains.items()))
            lines.append(f"{engine}: {len(mine)} {mode} ({by}; easy/hard)")
    return "\n".join(lines)


def _run(
    scenario: str,
    mode: str,
    agent: str,
    time_scale: float,
    runs_dir: Path,
    fresh: bool,
    model: str | None,
    models: Path | None,
    turn_budget: int | None,
    replay_model: Path | None,
    dsn: str | None,
    backend: Backend | None,
    image: str | None,
    seed: int | None,
    horizon: float | None,
    history: float | None,
    quiet: bool,
    verbose: bool,
) -> None:
    from dbaops.cli.live import render
    from dbaops.execution.runner import RunMonitor, RunOptions, run_scenario
    from dbaops.scenario.loader import ScenarioError, load_scenario

    _configure_logging(verbose)
    try:
        sc, _, _ = load_scenario(scenario)
    except ScenarioError as exc:
        _error(exc)
        raise typer.Exit(2) from None
    if sc.mode != mode:
        _error(f"{sc.id} is a {sc.mode} scenario: use `dbaops {sc.mode}`")
        raise typer.Exit(2)
    if model and replay_model is None:  # a replay needs nothing but the recorded run
        from dbaops.models import ModelConfigError, UnknownModelError, load_registry

        try:
            spec = load_registry(models).get(model)
            spec.resolve_api_key()
        except (UnknownModelError, ModelConfigError) as exc:
            _error(exc)
            raise typer.Exit(2) from None
    options = RunOptions(
        model=model,
        models_file=models,
        turn_budget=turn_budget,
        replay_model=replay_model,
        time_scale=time_scale,
        agent=agent,
        runs_dir=runs_dir,
        fresh=fresh,
        dsn=dsn,
        backend=backend.value if backend else None,
        docker_image=image,
        seed=seed,
        horizon_s=horizon,
        history_s=history,
    )
    monitor = RunMonitor()

    async def main() -> object:
        if quiet or not console.is_terminal:
            return await run_scenario(scenario, options, monitor)
        with Live(render(monitor), console=console, refresh_per_second=2) as live:
            async with anyio.create_task_group() as tg:

                async def refresh() -> None:
                    while True:
                        live.update(render(monitor))
                        await anyio.sleep(0.5)

                tg.start_soon(refresh)
                result = await run_scenario(scenario, options, monitor)
                tg.cancel_scope.cancel()
            live.update(render(monitor))
            return result

    try:
        result = anyio.run(main, backend_options={"use_uvloop": True})
    except KeyboardInterrupt:
        console.print(
            Text.assemble(("interrupted", "yellow"), f"; run directory: {monitor.run_dir}")
        )
        if monitor.run_dir is not None:
            from dbaops.evaluation.score import score_and_record

            score_and_record(monitor.run_dir)  # what it got to, scored as any run
        raise typer.Exit(130) from None
    from dbaops.evaluation.score import score_and_record
    from dbaops.execution.runner import RunResult

    assert isinstance(result, RunResult)
    console.print(
        f"run directory: [bold]{escape(str(result.run_dir))}[/bold]  status: {result.status}"
    )
    if result.reason:
        console.print(Text(f"reason: {result.reason}"))
    verdict = score_and_record(result.run_dir)
    if verdict is None:
        console.print(Text("the run could not be scored (see the log); dbaops score RUN_DIR"))
        raise typer.Exit(1)
    _print_verdict(verdict)
    raise typer.Exit(EXIT_CODES.get(result.status, 1))


def _print_verdict(v: RunVerdict) -> None:
    from dbaops.evaluation.compliance import format_compliance

    kind = f" ({v.agent_kind})" if v.agent_kind and v.agent_kind != "agent" else ""
    scale = f" time-scale={v.time_scale:g}" if v.time_scale is not None else ""
    console.print(
        f"[bold]{v.scenario_id}[/bold] run {v.run_id} agent={v.agent}{kind} status={v.status}"
        + scale
    )
    if v.ended_by:
        console.print(f"  agent session ended by: {v.ended_by}")
    for note in v.notes:
        console.print(f"  note: {note}")
    if v.service_compliance.applicable:
        console.print("Service Compliance: " + ("PASS" if v.service_compliance.passed else "FAIL"))
        console.print(format_compliance(v.service_compliance))
    for name, dim in (
        ("Terminal Acceptance", v.terminal_acceptance),
        ("State Integrity", v.state_integrity),
    ):
        if dim.applicable:
            console.print(f"{name}: " + {True: "PASS", False: "FAIL", None: "n/a"}[dim.passed])
            for c in dim.checks:
                console.print(
                    f"  {'ok ' if c.passed else 'BAD'} {c.name}: observed {c.observed!r} "
                    f"expected {c.expected}" + (f" error {c.error}" if c.error else "")
                )
            for m in dim.missing:
                console.print(f"  --- {m}: not evaluated")
    outcome = {True: "[green]PASS[/green]", False: "[red]FAIL[/red]", None: "n/a (invalid run)"}
    console.print(f"Outcome Pass: {outcome[v.outcome_pass]}")
    safety = v.safety
    console.print(
        f"Safety: {'no violation' if safety.safe else f'score {safety.score:g}'}"
        f"  Safe Pass: {outcome[v.safe_pass]}"
    )
    for viol in safety.violations:
        console.print(f"  {viol.type} {viol.rule_id} call {viol.call_id}: {viol.reason}")
    if v.diagnosis is not None:
        dp = "unresolved" if v.diagnosis.passed is None else outcome[v.diagnosis.passed]
        console.print(f"Diagnosis Pass: {dp} ({v.diagnosis.reason})")
    if v.cost.calls:
        cost = "n/a" if v.cost.cost_usd is None else f"${v.cost.cost_usd:.4f}"
        if v.cost.cost_usd is not None and v.cost.price_placeholder:
            cost += " (placeholder prices)"
        console.print(
            f"Cost: {v.cost.calls} model calls, {v.cost.input_tokens} in "
            f"({v.cost.cached_input_tokens} cached), {v.cost.output_tokens} out, {cost}"
        )


ScenarioArg = Annotated[str, typer.Argument(help="scenario id (see `dbaops list`) or a YAML path")]
AgentOpt = Annotated[str, typer.Option("--agent", help="built-in agent name or module:Class")]
ScaleOpt = Annotated[float, typer.Option("--time-scale", help="wall seconds per scenario second")]
RunsOpt = Annotated[
    Path,
    typer.Option(
        "--out",
        "--runs-dir",
        help="where run directories land (OUT/<scenario>/<run-id>); --runs-dir is the old name",
    ),
]
FreshOpt = Annotated[bool, typer.Option("--fresh", help="rebuild the dirty snapshot")]
DsnOpt = Annotated[
    str | None, typer.Option("--dsn", help="use your own server instead of the embedded one")
]


class Backend(StrEnum):
    """Where a run's server runs."""

    embedded = "embedded"
    docker = "docker"


BackendOpt = Annotated[
    Backend | None,
    typer.Option(
        "--backend",
        help="where the server runs: embedded (a local process) or docker (the same server in "
        "a container with the scenario's resource limits); default: the scenario's, else "
        "embedded",
    ),
]
ImageOpt = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="docker backend: a named PostgreSQL image (pulled when missing) instead of the one "
        "dbaops builds from Debian packages",
    ),
]
SeedOpt = Annotated[int | None, typer.Option("--seed")]
ExecutorOpt = Annotated[
    str, typer.Option("--executor", help="local (this machine) or ray (tasks on a Ray cluster)")
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option("--ray-address", help="a Ray cluster's address (default: start one here)"),
]
HorizonOpt = Annotated[
    float | None,
    typer.Option(
        "--horizon",
        help="override the horizon (persistent) or the agent's time budget (bounded), "
        "in scenario seconds",
    ),
]
HistoryOpt = Annotated[
    float | None,
    typer.Option(
        "--history-s",
        help="workload history before the incident, in scenario seconds (overrides the "
        "scenario's preparation.history; 0: none); part of the snapshot",
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="no live view")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v")]


ModelOpt = Annotated[
    str | None, typer.Option("--model", help="run the ReAct agent on a registered model")
]
ModelsOpt = Annotated[Path | None, typer.Option("--models", help="model registry TOML file")]
BudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--turn-budget", help="model turns before the final report round (default: scenario's)"
    ),
]
ReplayOpt = Annotated[
    Path | None,
    typer.Option("--replay-model", help="replay the model responses recorded in this run dir"),
]


def _scenario_command(mode: str):  # type: ignore[no-untyped-def]
    def command(
        scenario: ScenarioArg,
        agent: AgentOpt = "noop",
        model: ModelOpt = None,
        models: ModelsOpt = None,
        turn_budget: BudgetOpt = None,
        replay_model: ReplayOpt = None,
        time_scale: ScaleOpt = 1.0,
        runs_dir: RunsOpt = Path("runs"),
        fresh: FreshOpt = False,
        dsn: DsnOpt = None,
        backend: BackendOpt = None,
        image: ImageOpt = None,
        seed: SeedOpt = None,
        horizon: HorizonOpt = None,
        history: HistoryOpt = None,
        quiet: QuietOpt = False,
        verbose: VerboseOpt = False,
    ) -> None:
        _run(
            scenario,
            mode,
            agent,
            time_scale,
            runs_dir,
            fresh,
            model,
            models,
            turn_budget,
            replay_model,
            dsn,
            backend,
            image,
            seed,
            horizon,
            history,
            quiet,
            verbose,
        )

    return command


app.command(
    "persistent", help="Run a persistent scenario (one agent session over a timed event program)."
)(_scenario_command("persistent"))
app.command("bounded", help="Run a bounded scenario (one task from a restored dirty snapshot).")(
    _scenario_command("bounded")
)


@app.command()
def plot(
    run_dir: Annotated[Path, typer.Argument(help="a run directory")],
    out: Annotated[
        Path | None, typer.Option("--out", help="output dir (default: the run dir)")
    ] = None,
) -> None:
    """Time-series compliance plot of one run (PNG and a self-contained HTML page)."""
    from dbaops.analysis.plot import plot_run

    for path in plot_run(run_dir, out or run_dir):
        console.print(f"wrote {path}")


@app.command()
def report(
    runs_dir: Annotated[Path, typer.Argument(help="directory holding run directories")],
    out: Annotated[Path, typer.Option("--out")] = Path("report"),
    html: Annotated[bool, typer.Option("--html")] = False,
) -> None:
    """Paper-style tables and figures over many runs (pass rates, pass^k, survival, cost)."""
    from dbaops.analysis.report import NO_SURVIVAL, build_report

    result = build_report(runs_dir, out, html=html)
    console.print(f"{result.n_runs} runs, {result.n_valid} valid")
    if "survival_by_system" not in result.tables:
        console.print(NO_SURVIVAL)
    for path in result.files:
        console.print(f"wrote {path}")


@app.command()
def campaign(
    spec_path: Annotated[Path, typer.Argument(help="the campaign file (SPEC.yaml)")],
    out: Annotated[Path, typer.Option("--out", help="the campaign directory")],
    workers: Annotated[
        int, typer.Option("--workers", min=1, max=16, help="runs at once, each on its own cluster")
    ] = 1,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="continue: skip finished runs, re-run interrupted ones"),
    ] = False,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Run scenarios × agents × seeds × repeats from a manifest that survives interruption,
    then write the report over the campaign's runs."""
    if executor not in ("local", "ray"):
        _error(f"--executor must be local or ray, not {executor!r}")
        raise typer.Exit(2)
    from dbaops.analysis.report import build_report
    from dbaops.campaign import load_campaign_spec, run_campaign
    from dbaops.campaign.executor import CampaignError
    from dbaops.campaign.manifest import RUNS_DIR, Manifest
    from dbaops.cli.live import campaign_view
    from dbaops.scenario.loader import ScenarioError

    _configure_logging(verbose)
    try:
        spec = load_campaign_spec(spec_path)
    except ScenarioError as exc:
        _error(exc)
        raise typer.Exit(2) from None
    started = time.monotonic()
    try:
        with Live(console=console, auto_refresh=False) as live:

            def show(manifest: Manifest) -> None:
                live.update(campaign_view(manifest, started), refresh=True)

            if executor == "ray":
                from dbaops.campaign.ray_executor import run_on_ray

                manifest = run_on_ray(
                    spec, out, workers=workers, resume=resume, address=ray_address,
                    on_change=show,
                )  # fmt: skip
            else:
                manifest = anyio.run(
                    functools.partial(
                        run_campaign, spec, out, workers=workers, resume=resume, on_change=show
                    )
                )
    except CampaignError as exc:
        _error(exc)
        raise typer.Exit(2) from None
    result = build_report(out / RUNS_DIR, out / "report")
    console.print(f"{result.n_runs} runs, {result.n_valid} valid; report in {out / 'report'}")
    failed = [r for r in manifest.runs if r.state == "infra_error"]
    for r in failed:
        console.print(Text.assemble(("infra error", "yellow"), f" {r.key}: {r.status}: {r.reason}"))
    if failed:
        console.print("re-run them with --resume")
    raise typer.Exit(1 if failed else 0)


@app.command()
def kb(
    doc_dir: Annotated[
        Path | None,
        typer.Option(
            "--doc-dir",
            help="a directory of the PostgreSQL manual's HTML pages (default: "
            "$DBAOPS_PG_DOC_DIR, else the newest installed postgresql-doc-NN package)",
        ),
    ] = None,
    build: Annotated[
        bool, typer.Option("--build", help="build (or refresh) the search index now")
    ] = False,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="build even if current")] = False,
) -> None:
    """The knowledge base's corpus (what `query_knowledge_base` searches) and its index."""
    from dbaops.tools.knowledge import KnowledgeBase, KnowledgeUnavailable, describe_corpus

    corpus = describe_corpus(doc_dir)
    console.print(f"corpus: {corpus.summary()}")
    if not corpus.available:
        raise typer.Exit(1)
    console.print(f"  directory: {corpus.doc_dir}")
    console.print(f"  content sha256: {corpus.content_sha256}")
    if not (build or rebuild):
        return
    try:
        base = KnowledgeBase.open_or_build(doc_dir, rebuild=rebuild)
    except KnowledgeUnavailable as exc:
        _error(exc)
        raise typer.Exit(1) from None
    with base:
        state = "built" if base.built else "current"
        console.print(f"index: {base.path} ({state}, {base.backend})")
        if base.build_stats is not None:
            console.print(f"  {base.build_stats}")


@app.command()
def judge(
    run_dirs: Annotated[list[Path], typer.Argument(help="run directories of bounded runs")],
    models: ModelsOpt = None,
    judge_model: Annotated[
        str | None, typer.Option("--judge", help="registry name (default: the judge role)")
    ] = None,
) -> None:
    """Judge the diagnosis in the agents' reports (cached per report, condition and judge)."""
    from dbaops.evaluation.diagnosis import judge_diagnosis
    from dbaops.evaluation.score import score_run, write_verdict
    from dbaops.models import ModelClient, load_registry
    from dbaops.record.layout import JUDGMENTS_FILE
    from dbaops.record.load import load_run_scenario

    registry = load_registry(models)
    spec = registry.get(judge_model) if judge_model else registry.role("judge")

    async def main() -> None:
        async with ModelClient(spec) as client:
            for rd in run_dirs:
                sc = load_run_scenario(rd)
                dspec = sc.evaluation.diagnosis
                reports = score_run(rd).reports
                verdict = await judge_diagnosis(dspec, reports, client, rd / JUDGMENTS_FILE)
                write_verdict(rd, score_run(rd))
                console.print(f"{rd}: Diagnosis Pass = {verdict.passed} ({verdict.reason})")

    anyio.run(main)


@app.command()
def score(
    run_dir: Annotated[Path, typer.Argument(help="a run directory")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Score a recorded run again (no database needed) and write verdict.json."""
    from dbaops.evaluation.score import score_run, write_verdict
    from dbaops.record.layout import RunDir

    if not RunDir(run_dir).is_run():
        _error(f"{run_dir} has no trace.jsonl: not a run directory")
        raise typer.Exit(2)
    verdict = score_run(run_dir)
    path = write_verdict(run_dir, verdict)
    if as_json:
        print(json.dumps(verdict.model_dump(mode="json"), indent=2))
    else:
        _print_verdict(verdict)
        console.print(f"wrote {path}")


@app.command()
def validate(
    scenarios: Annotated[
        list[str] | None, typer.Argument(help="scenario ids or YAML paths (or --all)")
    ] = None,
    all_scenarios: Annotated[
        bool, typer.Option("--all", help="every scenario in the library")
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="merge the results into DIR/validation.json and DIR/VALIDATION.md "
            "(the committed report lives in timelines/)",
        ),
    ] = None,
    repeat: Annotated[int, typer.Option("--repeat", min=1)] = 1,
    time_scale: ScaleOpt = 0.1,
    scales: Annotated[
        str | None,
        typer.Option(
            "--scales",
            help="comma-separated time scales to prove each scenario at (e.g. 1.0,0.05); "
            "verdicts that differ between scales are reported as flips",
        ),
    ] = None,
    runs_dir: Annotated[
        Path,
        typer.Option(
            "--runs-dir",
            help="without --out: the validation's campaign goes to RUNS_DIR/validations/<stamp>",
        ),
    ] = Path("runs"),
    fresh: FreshOpt = False,
    history: HistoryOpt = None,
    backend: BackendOpt = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="also write the table as Markdown here")
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            "--only",
            help="comma-separated solutions to run (noop, reference (with its alternatives), "
            "reference:NAME, shallow, blunt (every blunt fix), blunt:NAME)",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="the validation's campaign directory (default: a new one under "
            "RUNS_DIR/validations)",
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, max=16, help="runs at once, each on its own cluster")
    ] = 1,
    resume: Annotated[
        bool, typer.Option("--resume", help="continue the validation in --out")
    ] = False,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Prove scenarios achievable and not vacuous: noop fails, reference passes, shallow fails,
    blunt fixes fail Safe Pass (a campaign preset: --workers, --out and --resume work as for
    dbaops campaign)."""
    from dbaops.campaign.executor import CampaignError
    from dbaops.campaign.manifest import Manifest
    from dbaops.cli.live import campaign_view
    from dbaops.execution.runner import RunOptions
    from dbaops.execution.validate import summarize_validation, validation_plan
    from dbaops.execution.validate import validate as run_validation
    from dbaops.scenario.loader import ScenarioError, definition_key, load_scenario, timelines_dir

    if executor not in ("local", "ray"):
        _error(f"--executor must be local or ray, not {executor!r}")
        raise typer.Exit(2)
    _configure_logging(verbose)
    if all_scenarios:
        scenarios = [*(scenarios or []), *(p.stem for p in sorted(timelines_dir().glob("*.yaml")))]
    if not scenarios:
        _error("name scenarios to validate, or give --all")
        raise typer.Exit(2)
    declared: dict[str, str | None] = {}
    definitions: dict[str, str] = {}
    expected: dict[str, list[str]] = {}
    try:
        for s in scenarios:
            sc, lib, _ = load_scenario(s)
            declared[sc.id] = sc.difficulty
            definitions[sc.id] = definition_key(sc, lib)
            expected[sc.id] = ["noop", *sc.solutions()]
    except ScenarioError as exc:
        _error(exc)
        raise typer.Exit(2) from None
    scale_list = [float(x) for x in scales.split(",")] if scales else [time_scale]
    options = RunOptions(
        time_scale=scale_list[0],
        runs_dir=runs_dir,
        fresh=fresh,
        history_s=history,
        backend=backend.value if backend else None,
    )
    only_list = only.split(",") if only else None
    if resume and out is None:
        _error("--resume needs the validation's --out directory")
        raise typer.Exit(2)
    started = time.monotonic()
    try:
        with Live(console=console, auto_refresh=False) as live:

            def show(manifest: Manifest) -> None:
                live.update(campaign_view(manifest, started), refresh=True)

            if executor == "ray":
                from dbaops.campaign.ray_executor import run_on_ray

                spec, out = validation_plan(
                    scenarios, options, repeat, scale_list, only_list, out=out
                )
                manifest = run_on_ray(
                    spec, out, workers=workers, resume=resume, address=ray_address,
                    on_change=show,
                )  # fmt: skip
                summary = summarize_validation(spec, out, manifest)
            else:
                summary = anyio.run(
                    functools.partial(
                        run_validation, scenarios, options, repeat, scale_list, only_list,
                        out=out, workers=workers, resume=resume, on_change=show,
                    )
                )  # fmt: skip
    except CampaignError as exc:
        _error(exc)
        raise typer.Exit(2) from None
    _print_validation_rows(summary)
    for flip in summary.flips:
        console.print(Text.assemble(("flip:", "red"), f" {flip}"))
    if markdown is not None:
        markdown.write_text(summary.markdown())
        console.print(f"wrote {markdown}")
    if report is not None:
        from dbaops.execution.validation_report import read_report, scenario_records, write_report

        # the definitions as they are now, which every run was checked against (a run that
        # used another one failed its row)
        definitions = {
            sc.id: definition_key(sc, lib) for sc, lib, _ in (load_scenario(s) for s in scenarios)
        }
        records = scenario_records(summary, declared, definitions, expected)
        merged, stale = read_report(report).merged(records).current(definitions)
        for r in stale:  # the scenario changed since: its other records say nothing of it now
            console.print(
                f"dropped stale record {r.id} ({r.engine} {r.server_version}, scale "
                f"{r.time_scale:g}, {r.backend})"
            )
        library = {p.stem for p in report.glob("*.yaml")}
        if library:  # the library's own report: records of removed scenarios go
            merged = merged.only(library)
        for path in write_report(report, merged):
            console.print(f"wrote {path}")
    console.print("[green]valid[/green]" if summary.ok else "[red]NOT valid[/red]")
    raise typer.Exit(0 if summary.ok else 1)


def _print_validation_rows(summary: ValidationSummary) -> None:
    """Each validation run with its verdicts and the whole reason: a table on a terminal,
    one plain line per run elsewhere (a log or a pipe, where a table is cut to 80 columns)."""
    if not console.is_terminal:
        console.print()  # the live view's last frame ends without a newline there
        for r in summary.rows:
            line = (
                f"{r.scenario} {r.solution} x{r.time_scale:g} #{r.repeat}: expected "
                f"{r.expectation}; {r.status}, outcome {r.outcome_pass}, safe {r.safe_pass}: "
                f"{'ok' if r.ok else 'FAIL'}{' - ' + r.reason if r.reason else ''}"
            )
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        return
    table = Table(
        "scenario", "solution", "scale", "#", "expected", "status", "outcome", "safe", "ok",
        "reason",
    )  # fmt: skip
    for r in summary.rows:
        table.add_row(
            r.scenario,
            r.solution,
            f"{r.time_scale:g}",
            str(r.repeat),
            r.expectation,
            r.status,
            str(r.outcome_pass),
            str(r.safe_pass),
            "[green]ok[/green]" if r.ok else "[red]FAIL[/red]",
            Text(r.reason),
        )
    console.print(table)


@app.command()
def difficulty(
    run_dir: Annotated[Path, typer.Argument(help="a run of the scenario (any agent)")],
) -> None:
    """Paper §4.2 difficulty from a run: path depth D_s, complexity C_s over the surveyed
    observation surface, Easy/Hard."""
    from dbaops.evaluation.difficulty import label_difficulty
    from dbaops.record.load import load_run_scenario
    from dbaops.record.trace import read_trace

    sc = load_run_scenario(run_dir)
    if sc.evaluation.difficulty is None:
        _error(f"{sc.id} declares no evaluation.difficulty")
        raise typer.Exit(2)
    result = label_difficulty(sc.evaluation.difficulty, read_trace(run_dir))
    console.print(
        f"{sc.id}: D_s = {result.depth}, C_s = {result.complexity:.2f} -> {result.label}"
        f" (declared: {sc.difficulty or 'none'}; counted over "
        + (
            "the survey of its observation surface)"
            if result.basis == "surface"
            else "the run's own observations: it has no survey)"
        )
    )
    for m in result.modalities:
        how = (
            "declared" if m.declared else f"{m.causal_units} causal / {m.competing_units} competing"
        )
        console.print(f"  {m.modality}: C = {m.complexity:.2f} ({how})")


@app.command()
def clean(
    scenarios: Annotated[
        list[str] | None, typer.Argument(help="scenario ids (default: every cluster)")
    ] = None,
) -> None:
    """Stop and delete embedded clusters and TiDB servers and their dirty snapshots (rebuilt on
    the next run)."""
    import shutil

    from dbaops.dbms.serverdir import cluster_dir_name, dbaops_home

    home = dbaops_home()
    root = home / "clusters"
    targets = [p for p in sorted(root.glob("*")) if p.is_dir()] if root.exists() else []
    stores = home / "snapshots"
    snapshots = [p for p in sorted(stores.glob("*")) if p.is_dir()] if stores.exists() else []
    if scenarios:
        # a scenario's own cluster and its campaign workers' (dbaops campaign --workers)
        names = [n for s in scenarios for n in (s, *(f"{s}-w{i}" for i in range(1, 17)))]
        wanted = {cluster_dir_name(n, home) for n in names}

        def of_scenario(name: str) -> bool:  # db-<hash>-<flavor>: pg15, tidb-9.0.0-...
            return "-".join(name.split("-")[:2]) in wanted

        targets = [p for p in targets if of_scenario(p.name)]
        snapshots = [p for p in snapshots if of_scenario(p.name)]
    from dbaops.dbms.registry import engine_names, get_engine

    engines = [get_engine(name) for name in engine_names()]
    for path in targets:
        # what each engine left running or mounted there (a killed run's server, a volume,
        # the docker backend's containers), then the directory
        for engine in engines:
            for done in engine.release_cluster_dir(path):
                console.print(done)
        shutil.rmtree(path, ignore_errors=True)
        console.print(f"removed {path}")
    for path in snapshots:
        shutil.rmtree(path, ignore_errors=True)
        console.print(f"removed {path}")
    if not targets and not snapshots:
        console.print(f"nothing to remove under {root}")


@app.command()
def image(
    major: Annotated[
        int, typer.Option("--major", help="PostgreSQL major version (15: bookworm, 17: trixie)")
    ] = 15,
    name: ImageOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Build (when missing) or find the docker backend's server image, from Debian packages
    with no registry (or pull --image NAME from yours), and print its tag."""
    from rich.status import Status

    from dbaops.containers.daemon import DockerUnavailable, docker_client
    from dbaops.containers.images import ImageError, ensure_postgres_image
    from dbaops.dbms.serverdir import dbaops_home

    _configure_logging(verbose)

    async def build(status: Status) -> str:
        def progress(line: str) -> None:
            status.update(f"[bold]building[/bold] {line[:110]}")
            if verbose:
                console.print(line, highlight=False)

        async with docker_client() as docker:
            img = await ensure_postgres_image(
                docker, major, dbaops_home() / "images", progress, name
            )
        return f"{img.tag}: PostgreSQL {img.version} ({'built now' if img.built else 'cached'})"

    try:
        with Status(f"PostgreSQL {major} image", console=console) as status:
            result = anyio.run(build, status)
    except (DockerUnavailable, ImageError) as exc:
        _error(exc)
        raise typer.Exit(2) from None
    console.print(result)


@app.command()
def schema() -> None:
    """Print the JSON Schema of scenario files."""
    from dbaops.scenario.loader import scenario_json_schema

    print(json.dumps(scenario_json_schema(), indent=2))


@app.command()
def check(paths: Annotated[list[Path], typer.Argument(help="scenario files to validate")]) -> None:
    """Validate scenario files; prints one clear error per problem."""
    from dbaops.scenario.loader import ScenarioError, check_scenario

    bad = 0
    for p in paths:
        try:
            notes = check_scenario(p)[3]
            console.print(f"ok  {p}")
            for note in notes:
                console.print(f"    note: {note}")
        except ScenarioError as exc:
            bad += 1
            console.print(Text.assemble(("BAD", "red"), f" {exc}"))
    raise typer.Exit(1 if bad else 0)


def _add_subcommands() -> None:
    """Each engine's own commands (``dbaops tidb build``): its package's ``cli.APP``."""
    import importlib
    import importlib.util

    from dbaops.dbms.dialect import engine_packages

    for name, package in engine_packages().items():
        if importlib.util.find_spec(f"{package}.cli") is not None:
            module = importlib.import_module(f"{package}.cli")
            app.add_typer(module.APP, name=name)


_add_subcommands()


def main() -> None:
    app()
