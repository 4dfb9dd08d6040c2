"""The run directory's layout: every file name of a run, spelled once.

Layout of ``runs/<scenario>/<run-id>/``::

    scenario.yaml      the scenario file as run (verbatim copy)
    trace.jsonl        typed records (:mod:`dbaops.record.kinds`), appended and fsynced
    samples/part-*.parquet, samples.parquet   SLO samples (parts while running, compacted at end)
    metrics/part-*.parquet, metrics.parquet   metric samples
    postgresql.log     the server log lines written during the run (PostgreSQL)
    standby.log        the replica profile's standby's log lines (runs with a standby)
    tidb.log, tidb-slow.log   TiDB's server log and slow query log lines (TiDB runs)
    mailbox.md         the durable mailbox (persistent runs)
    model_messages/    the request messages of model calls, by content hash
    judgments.jsonl    stored LLM-judge decisions (``dbaops judge``)
    verdict.json       the verdicts with their evidence (written by the run's end, ``dbaops
                       score`` or ``dbaops judge``; the trace holds none)
    plot.png, plot.html   ``dbaops plot`` output
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TRACE_FILE = "trace.jsonl"
SCENARIO_FILE = "scenario.yaml"
SAMPLES_FILE = "samples.parquet"
SAMPLES_PARTS = "samples"
METRICS_FILE = "metrics.parquet"
METRICS_PARTS = "metrics"
SERVER_LOG_FILE = "postgresql.log"
STANDBY_LOG_FILE = "standby.log"
#: The run-directory file of each server log, by engine and log role (what the engine's
#: backend calls it in ``log_files()``); kept as runs written before have them. Any other
#: engine's log is ``<engine>-<role>.log``.
SERVER_LOG_FILES = {
    ("postgres", "primary"): SERVER_LOG_FILE,
    ("postgres", "standby"): STANDBY_LOG_FILE,
    ("tidb", "primary"): "tidb.log",
    ("tidb", "slow"): "tidb-slow.log",
}
MAILBOX_FILE = "mailbox.md"
MODEL_MESSAGES_DIR = "model_messages"
JUDGMENTS_FILE = "judgments.jsonl"
VERDICT_FILE = "verdict.json"
PLOT_PNG = "plot.png"
PLOT_HTML = "plot.html"


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory."""

    path: Path

    @property
    def trace(self) -> Path:
        return self.path / TRACE_FILE

    @property
    def scenario(self) -> Path:
        return self.path / SCENARIO_FILE

    @property
    def samples(self) -> Path:
        return self.path / SAMPLES_FILE

    @property
    def samples_dir(self) -> Path:
        return self.path / SAMPLES_PARTS

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def metrics_dir(self) -> Path:
        return self.path / METRICS_PARTS

    @property
    def server_log(self) -> Path:
        return self.path / SERVER_LOG_FILE

    @property
    def standby_log(self) -> Path:
        return self.path / STANDBY_LOG_FILE

    def engine_log(self, engine: str, role: str) -> Path:
        """Where the run keeps ``engine``'s log of ``role`` (primary, standby, slow)."""
        return self.path / SERVER_LOG_FILES.get((engine, role), f"{engine}-{role}.log")

    @property
    def mailbox(self) -> Path:
        return self.path / MAILBOX_FILE

    @property
    def model_messages(self) -> Path:
        return self.path / MODEL_MESSAGES_DIR

    @property
    def judgments(self) -> Path:
        return self.path / JUDGMENTS_FILE

    @property
    def verdict(self) -> Path:
        return self.path / VERDICT_FILE

    def is_run(self) -> bool:
        """True when the directory holds a trace (a run, finished or not)."""
        return self.trace.is_file()

    def create(self) -> RunDir:
        self.path.mkdir(parents=True, exist_ok=False)
        return self


def discover_runs(runs_dir: Path) -> list[Path]:
    """Every directory below ``runs_dir`` (itself included) holding a trace."""
    found = {p.parent for p in Path(runs_dir).rglob(TRACE_FILE) if p.is_file()}
    return sorted(found)
