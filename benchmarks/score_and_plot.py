"""Time offline scoring and the per-run plot on a large synthetic persistent run.

Usage::

    python benchmarks/score_and_plot.py [--samples 10000000] [--metrics 100000] [--hours 2]
                                        [--repeats 3] [--keep DIR] [--json FILE]

Writes a synthetic run directory (:func:`dbaops.analysis.synthetic.big_run`: checkout, history,
a background workload and a report job; a lock stall at 40 % of the horizon that the agent ends,
~60 tool calls, one safety violation) with ``--samples`` SLO samples and ``--metrics`` metric
points, then times, each ``--repeats`` times (best and first reported):

* the references: ``pl.read_parquet`` of ``samples.parquet`` (all columns) and
  :func:`dbaops.record.tables.read_samples`;
* :func:`dbaops.evaluation.score.score_run` (what ``dbaops score`` does, minus writing);
* :func:`dbaops.analysis.plot.plot_run` (PNG + HTML), split into data (read and aggregate) and
  drawing (render), since the plot never draws raw samples.

This is a measurement, not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from dbaops.analysis.htmlpage import png_bytes
from dbaops.analysis.plot import plot_run, run_figure
from dbaops.analysis.series import run_series
from dbaops.analysis.synthetic import big_run
from dbaops.evaluation.score import score_run, write_verdict
from dbaops.record.tables import read_samples


def _time(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """(first, best) wall seconds of ``repeats`` calls, and the last result."""
    times: list[float] = []
    out: Any = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times[0], min(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--metrics", type=int, default=100_000)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="write the run here and keep it")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    args = ap.parse_args(argv)

    tmp = None
    if args.keep is None:
        tmp = tempfile.mkdtemp(prefix="dbaops-bench-")
        root = Path(tmp)
    else:
        root = args.keep
    run_dir = root / "runs" / "synthetic-big" / "bench-run"
    out_dir = root / "plot"
    try:
        t0 = time.perf_counter()
        big_run(
            run_dir,
            horizon_s=args.hours * 3600,
            n_samples=args.samples,
            n_metric_points=args.metrics,
        )
        gen_s = time.perf_counter() - t0
        size_mb = (run_dir / "samples.parquet").stat().st_size / 1e6
        n_rows = pl.scan_parquet(run_dir / "samples.parquet").select(pl.len()).collect().item()
        n_metric = pl.scan_parquet(run_dir / "metrics.parquet").select(pl.len()).collect().item()
        print(
            f"synthetic run: {n_rows:,} SLO samples ({size_mb:.0f} MB parquet), "
            f"{n_metric:,} metric points, horizon {args.hours * 3600:.0f} s; "
            f"generated in {gen_s:.1f} s"
        )
        r = args.repeats
        read_first, read_best, _ = _time(lambda: pl.read_parquet(run_dir / "samples.parquet"), r)
        rs_first, rs_best, _ = _time(lambda: read_samples(run_dir), r)
        score_first, score_best, verdict = _time(lambda: score_run(run_dir), r)
        write_verdict(run_dir, verdict)
        data_first, data_best, series = _time(lambda: run_series(run_dir), r)
        draw_first, draw_best, _ = _time(lambda: png_bytes(run_figure(series)), r)
        plot_first, plot_best, paths = _time(lambda: plot_run(run_dir, out_dir), r)
        sc = verdict.service_compliance
        print(
            "verdict: outcome_pass={} safe_pass={} SC={} ({})".format(
                verdict.outcome_pass,
                verdict.safe_pass,
                sc.passed,
                ", ".join(
                    f"{k}: {'pass' if w.passed else f'left at {w.left_at_s:g} s'}"
                    for k, w in sc.workloads.items()
                ),
            )
        )
        print(f"{'step':<42}{'first s':>10}{'best s':>10}{'x read_parquet':>16}")
        rows = [
            ("pl.read_parquet(samples.parquet) [ref]", read_first, read_best),
            ("rundir.read_samples", rs_first, rs_best),
            ("score_run", score_first, score_best),
            ("plot data (run_series: read + aggregate)", data_first, data_best),
            ("plot drawing (figure + PNG render)", draw_first, draw_best),
            ("plot_run (PNG + HTML, total)", plot_first, plot_best),
        ]
        for name, first, best in rows:
            print(f"{name:<42}{first:>10.2f}{best:>10.2f}{best / read_best:>16.2f}")
        goal = "meets" if score_best < 2.0 else "misses"
        print(
            f"score_run best {score_best:.2f} s {goal} the 2 s goal on {os.cpu_count()} CPUs "
            f"(polars threads {pl.thread_pool_size()}); plot files: "
            + ", ".join(f"{p.name} {p.stat().st_size / 1e3:.0f} kB" for p in paths)
        )
        if args.json is not None:
            args.json.write_text(
                json.dumps(
                    {
                        "samples": n_rows,
                        "metric_points": n_metric,
                        "horizon_s": args.hours * 3600,
                        "parquet_mb": size_mb,
                        "cpus": os.cpu_count(),
                        "python": sys.version.split()[0],
                        "platform": platform.platform(),
                        "polars": pl.__version__,
                        "repeats": r,
                        "seconds": {n: {"first": f, "best": b} for n, f, b in rows},
                    },
                    indent=2,
                )
                + "\n"
            )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
