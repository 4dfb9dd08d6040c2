"""Running a campaign's manifest on this machine: ``workers`` runs at a time, each worker on
its own embedded cluster, the manifest saved after every change."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from dbaops.campaign.manifest import (
    MANIFEST_FILE,
    RUNS_DIR,
    SUPERSEDED_DIR,
    Manifest,
    PlannedRun,
    RunState,
    plan,
)
from dbaops.campaign.spec import CampaignSpec
from dbaops.evaluation.score import score_and_record
from dbaops.execution.runner import RunMonitor, RunOptions, run_scenario
from dbaops.scenario.loader import load_scenario


class CampaignError(RuntimeError):
    """A campaign cannot start as asked (e.g. its directory holds another campaign)."""


def open_manifest(spec: CampaignSpec, out: Path, resume: bool) -> Manifest:
    """The manifest of ``out``: a new one, or (``resume``) the existing one with interrupted
    and infrastructure-failed runs made pending again (their run directories superseded)."""
    exists = (out / MANIFEST_FILE).exists()
    if exists and not resume:
        raise CampaignError(f"{out} already holds a campaign: pass --resume to continue it")
    if not exists:
        out.mkdir(parents=True, exist_ok=True)
        manifest = Manifest(spec=spec, runs=plan(spec))
        manifest.save(out)
        return manifest
    manifest = Manifest.load(out)
    if manifest.spec != spec:
        raise CampaignError(
            f"{out} holds a campaign of another spec: resume it with the same SPEC.yaml "
            "(or start a new one in another directory)"
        )
    for run in manifest.runs:
        if run.state in ("running", "infra_error"):
            _supersede(out, run)
            run.state, run.status, run.reason = "pending", None, None
    manifest.save(out)
    return manifest


def _absolute(path: Path) -> Path:
    return path.resolve()


def _supersede(out: Path, run: PlannedRun) -> None:
    """Move an unfinished attempt's directory out of ``runs/`` (kept, readable, not scored
    with the campaign)."""
    if run.run_dir is None:
        return
    src = out / run.run_dir
    if src.exists():
        dest = out / SUPERSEDED_DIR / f"{run.key.replace('/', '__')}-a{run.attempts}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dest))
    run.run_dir = None


def run_options(
    spec: CampaignSpec, run: PlannedRun, runs_dir: Path, slot: int | None
) -> tuple[RunOptions, str | None]:
    """How to make ``run`` (on the cluster of worker ``slot``; None: the scenario's own) and
    the agent to pass to ``run_scenario`` (None for ``model:NAME``: the options name it)."""
    sc, _, _ = load_scenario(run.scenario)
    model = run.agent.removeprefix("model:") if run.agent.startswith("model:") else None
    options = RunOptions(
        time_scale=run.time_scale or spec.time_scale,
        runs_dir=runs_dir,
        seed=run.seed,
        model=model,
        cluster=None if slot is None else f"{sc.id}-w{slot}",
        fresh=spec.fresh,
        history_s=spec.history_s,
        backend=spec.backend,
    )
    return options, None if model else run.agent


def saver(
    manifest: Manifest, out: Path, on_change: Callable[[Manifest], None] | None
) -> Callable[[], None]:
    """Save the manifest and tell ``on_change`` (synchronous: no task sees half a save)."""

    def changed() -> None:
        manifest.save(out)
        if on_change is not None:
            on_change(manifest)

    return changed


def settle(
    run: PlannedRun, status: str, reason: str | None, verdict: dict[str, Any] | None
) -> RunState:
    """Record how an attempt ended; its state: completed runs are done, refused ones refused,
    anything else (not manifested, an infrastructure error, a harness failure) is the
    harness's failure, to be re-run on resume."""
    run.status, run.reason = status, (reason or None) and reason[:500]
    run.outcome_pass = (verdict or {}).get("outcome_pass")
    if status == "completed":
        return "done"
    return "refused" if status == "refused" else "infra_error"


async def run_campaign(
    spec: CampaignSpec,
    out: Path,
    *,
    workers: int = 1,
    resume: bool = False,
    on_change: Callable[[Manifest], None] | None = None,
) -> Manifest:
    """Run every pending run of the campaign in ``out`` (created, or resumed) and return the
    final manifest."""
    manifest = open_manifest(spec, out, resume)
    out = _absolute(out)
    pending = [r for r in manifest.runs if r.state == "pending"]
    changed = saver(manifest, out, on_change)

    async def worker(index: int) -> None:
        while pending:
            run = pending.pop(0)
            await _execute(spec, out, run, index if workers > 1 else None, changed)

    async with anyio.create_task_group() as tg:
        for index in range(max(1, min(workers, len(pending)))):
            tg.start_soon(worker, index + 1)
    return manifest


async def _execute(
    spec: CampaignSpec,
    out: Path,
    run: PlannedRun,
    worker: int | None,
    changed: Callable[[], None],
) -> None:
    """One attempt of ``run`` on this machine (``worker``: its own cluster)."""
    options, agent = run_options(spec, run, out / RUNS_DIR, worker)
    run.state, run.attempts = "running", run.attempts + 1
    changed()
    monitor = RunMonitor()
    state: RunState = "infra_error"
    try:
        result = await run_scenario(run.scenario, options, monitor, agent)
        verdict = await anyio.to_thread.run_sync(score_and_record, result.run_dir)
        dumped = verdict.model_dump(mode="json") if verdict is not None else None
        state = settle(run, result.status, result.reason, dumped)
    except Exception as exc:  # the harness failed: recorded, the campaign goes on
        state = settle(run, "failed", f"{type(exc).__name__}: {exc}", None)
    except BaseException:
        state = "running"  # interrupted: resume re-runs it
        raise
    finally:
        if monitor.run_dir is not None:
            run.run_dir = str(_absolute(monitor.run_dir).relative_to(out))
        run.state = state
        changed()
