"""Running a campaign's manifest on a Ray cluster (``--executor ray``): one task per run, each
on the worker that runs it with its own database, its run directory collected back into the
campaign directory. ``address=None`` starts a local Ray instance."""

from __future__ import annotations

import io
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from dbaops.campaign.executor import open_manifest, run_options, saver, settle
from dbaops.campaign.manifest import RUNS_DIR, Manifest, PlannedRun
from dbaops.campaign.spec import CampaignSpec


class RemoteRun(BaseModel):
    """What a Ray task sends back: how the run ended and its run directory, as a tar."""

    status: str
    reason: str | None
    verdict: dict[str, Any] | None
    run_dir: str | None  # relative to the runs directory
    archive: bytes


def remote_run(spec_json: str, run_json: str, slot: int) -> RemoteRun:
    """The Ray task: run one planned run in a private runs directory on this worker, on the
    cluster of its ``slot`` (no two tasks of one slot run at once), and pack the run
    directory."""
    from dbaops.evaluation.score import score_and_record
    from dbaops.execution.runner import RunMonitor, run_scenario

    spec = CampaignSpec.model_validate_json(spec_json)
    run = PlannedRun.model_validate_json(run_json)
    with tempfile.TemporaryDirectory(prefix="dbaops-ray-") as tmp:
        runs = Path(tmp)
        options, agent = run_options(spec, run, runs, slot)
        monitor = RunMonitor()
        try:
            result = anyio.run(run_scenario, run.scenario, options, monitor, agent)
            scored = score_and_record(result.run_dir)
            status, reason = result.status, result.reason
            verdict = scored.model_dump(mode="json") if scored is not None else None
        except Exception as exc:
            status, reason, verdict = "failed", f"{type(exc).__name__}: {exc}", None
        rel = None if monitor.run_dir is None else str(monitor.run_dir.relative_to(runs))
        buffer = io.BytesIO()
        if rel is not None:
            with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
                tar.add(runs / rel, arcname=rel)
        return RemoteRun(
            status=status, reason=reason, verdict=verdict, run_dir=rel, archive=buffer.getvalue()
        )


def run_on_ray(
    spec: CampaignSpec,
    out: Path,
    *,
    workers: int = 1,
    resume: bool = False,
    address: str | None = None,
    on_change: Callable[[Manifest], None] | None = None,
) -> Manifest:
    """Run every pending run of the campaign in ``out`` as Ray tasks, ``workers`` at a time."""
    import ray

    manifest = open_manifest(spec, out, resume)
    out = out.resolve()
    pending = [r for r in manifest.runs if r.state == "pending"]
    changed = saver(manifest, out, on_change)

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=address,
            num_cpus=workers if address is None else None,
            include_dashboard=False,
            log_to_driver=False,
        )
    task = ray.remote(num_cpus=1, max_retries=0)(remote_run)
    inflight: dict[Any, tuple[PlannedRun, int]] = {}
    try:
        while pending or inflight:
            while pending and len(inflight) < workers:
                run = pending.pop(0)
                run.state, run.attempts = "running", run.attempts + 1
                changed()
                busy = {slot for _, slot in inflight.values()}
                slot = min(set(range(1, workers + 1)) - busy)
                ref = task.remote(spec.model_dump_json(), run.model_dump_json(), slot)
                inflight[ref] = (run, slot)
            (ready,), _ = ray.wait(list(inflight), num_returns=1)
            run, _ = inflight.pop(ready)
            try:
                back: RemoteRun = ray.get(ready)
            except Exception as exc:  # the task or its worker died
                run.state = settle(run, "failed", f"{type(exc).__name__}: {exc}", None)
            else:
                run.state = settle(run, back.status, back.reason, back.verdict)
                if back.run_dir is not None:
                    with tarfile.open(fileobj=io.BytesIO(back.archive), mode="r:gz") as tar:
                        tar.extractall(out / RUNS_DIR, filter="data")
                    run.run_dir = str(Path(RUNS_DIR) / back.run_dir)
            changed()
    finally:
        for ref in inflight:  # interrupted: the runs stay "running", resume re-runs them
            ray.cancel(ref)  # a KeyboardInterrupt in the task: the run ends cleanly
        changed()
        if started_here:
            ray.shutdown()
    return manifest
