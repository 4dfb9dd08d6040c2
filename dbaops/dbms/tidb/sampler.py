"""The harness's metric sampler of a TiDB server: the status port's Prometheus metrics and a
few information_schema counts, sampled into the same metric rows as PostgreSQL's.

Each sample reads ``/metrics`` and one SQL statement on a harness connection. Gauges are
recorded as read; counters as per-second rates over the wall time since the previous sample
(the first sample of a counter is its baseline). Names are ``tidb.<what>``; a label, where
there is one, is the resource group or the statement type. A failed sample records
``sampler.up`` = 0 and never raises.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

import aiohttp
import anyio
import polars as pl
import pymysql
import structlog

from dbaops.clock import ScenarioClock
from dbaops.dbms.tidb.endpoint import CONNECTION_ERRORS, TidbEndpoint, fetch_all
from dbaops.dbms.tidb.metrics import COUNTERS, GAUGES
from dbaops.record.metric_rows import MetricRows
from dbaops.record.tables import ParquetParts

log = structlog.get_logger(__name__)

#: What the harness counts in information_schema (its own sessions left out).
_COUNTS_SQL = (
    "SELECT "
    "(SELECT count(*) FROM information_schema.PROCESSLIST "
    " WHERE COMMAND <> 'Sleep' AND ID <> CONNECTION_ID()) AS active_sessions, "
    "(SELECT count(*) FROM information_schema.DATA_LOCK_WAITS) AS lock_waits, "
    "(SELECT count(*) FROM information_schema.TIDB_TRX) AS transactions, "
    "(SELECT coalesce(max(timestampdiff(MICROSECOND, START_TIME, now(6))), 0) / 1e6 "
    " FROM information_schema.TIDB_TRX) AS oldest_transaction_s, "
    "(SELECT count(*) FROM information_schema.DDL_JOBS "
    " WHERE STATE IN ('running', 'queueing', 'none')) AS ddl_jobs_pending"
)
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, families: Iterable[str]) -> dict[tuple[str, str], float]:
    """The samples of ``families`` in a Prometheus text exposition, summed per (family, value
    of the family's label key): ``{(family, label): value}``."""
    wanted = {f: (GAUGES.get(f) or COUNTERS[f])[1] for f in families}
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if m is None or m[1] not in wanted:
            continue
        key = wanted[m[1]]
        labels = dict(_LABEL.findall(m[2] or ""))
        label = labels.get(key, "") if key else ""
        try:
            value = float(m[3])
        except ValueError:
            continue
        out[(m[1], label)] = out.get((m[1], label), 0.0) + value
    return out


class TidbMetricSampler:
    """Samples one TiDB server every ``interval_s`` scenario seconds (at most every
    ``min_wall_interval_s`` wall seconds) into ``sink``."""

    def __init__(
        self,
        endpoint: TidbEndpoint,
        clock: ScenarioClock,
        sink: ParquetParts | None,
        *,
        interval_s: float = 1.0,
        min_wall_interval_s: float = 0.5,
        flush_every: int = 5,
        sample_timeout_s: float = 10.0,
    ) -> None:
        if endpoint.status_port is None:
            raise ValueError("the TiDB sampler needs the server's status port")
        self.endpoint = endpoint
        self._clock = clock
        self.rows = MetricRows(sink)
        self.interval_s = interval_s
        self.min_wall_interval_s = min_wall_interval_s
        self.flush_every = flush_every
        self.sample_timeout_s = sample_timeout_s
        self._conn: object = None
        self._previous: tuple[float, dict[tuple[str, str], float]] | None = None
        self.samples = 0
        self.failures = 0

    def wall_interval(self) -> float:
        return max(self.interval_s * self._clock.time_scale, self.min_wall_interval_s)

    async def run(self) -> None:
        """Sample until cancelled; database trouble is recorded as gaps, never raised."""
        try:
            async with aiohttp.ClientSession() as http:
                while True:
                    started = self._clock.mono()
                    await self.sample_once(http)
                    if self.rows.pending_samples >= self.flush_every:
                        await self.rows.flush()
                    await anyio.sleep(max(0.0, started + self.wall_interval() - self._clock.mono()))
        finally:
            with anyio.CancelScope(shield=True):
                await self.rows.flush()
                self._drop()

    async def sample_once(self, http: aiohttp.ClientSession) -> bool:
        """Take one sample now; False (``sampler.up`` = 0) when the server does not answer."""
        t = self._clock.now()
        t0 = time.monotonic()
        try:
            with anyio.fail_after(self.sample_timeout_s):
                url = f"http://{self.endpoint.host}:{self.endpoint.status_port}/metrics"
                async with http.get(url) as response:
                    text = await response.text()
                counts = await self._counts()
        except (OSError, TimeoutError, aiohttp.ClientError, pymysql.err.MySQLError) as exc:
            self.failures += 1
            if isinstance(exc, CONNECTION_ERRORS):
                self._drop()
            if self.failures == 1 or self.failures % 50 == 0:
                log.warning("tidb_sampler_failed", error=f"{type(exc).__name__}: {exc}")
            self.rows.add(t, "sampler.up", "", 0.0)
            self.rows.end_sample()
            return False
        self._record(t, time.monotonic(), parse_prometheus(text, [*GAUGES, *COUNTERS]), counts)
        self.rows.add(t, "sampler.up", "", 1.0)
        self.rows.add(t, "sampler.duration_ms", "", (time.monotonic() - t0) * 1000.0)
        self.rows.end_sample()
        self.samples += 1
        return True

    async def _counts(self) -> dict[str, float]:
        if self._conn is None:
            self._conn = await self.endpoint.raw_connect(connect_timeout_s=self.sample_timeout_s)
        row = (await fetch_all(self._conn, _COUNTS_SQL))[0]
        return {k: float(v or 0) for k, v in row.items()}

    def _record(
        self,
        t: float,
        wall: float,
        values: dict[tuple[str, str], float],
        counts: dict[str, float],
    ) -> None:
        for (family, label), value in values.items():
            if family in GAUGES:
                self.rows.add(t, GAUGES[family][0], label, value)
        previous, self._previous = self._previous, (wall, values)
        if previous is not None and wall > previous[0]:
            elapsed = wall - previous[0]
            for (family, label), value in values.items():
                before = previous[1].get((family, label))
                if family in COUNTERS and before is not None and value >= before:
                    self.rows.add(t, COUNTERS[family][0], label, (value - before) / elapsed)
        for name, value in counts.items():
            self.rows.add(t, f"tidb.{name}", "", value)

    def close(self) -> None:
        """Close the sampler's harness connection."""
        self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # type: ignore[attr-defined]

    def seed(self, frame: pl.DataFrame) -> None:
        self.rows.seed(frame)

    def snapshot(self) -> pl.DataFrame:
        return self.rows.snapshot()
