"""Workload drivers: open-loop OLTP, scheduled OLAP jobs and closed-loop background noise.

OLTP arrivals are scheduled on a fixed or Poisson timetable independent of completions (open
loop): when the server stalls, units keep arriving and show up as late, failed or dropped, never
as fewer requests. Each unit's deadline counts from its *scheduled* start, so waiting for a
connection, lock waits, retries and backoff all count.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
import asyncpg
import structlog

from dbaops.clock import ScenarioClock
from dbaops.dbms.postgres.endpoint import CONNECTION_ERRORS, Endpoint
from dbaops.scenario.model import (
    BackgroundWorkload,
    ConnectionLeak,
    OlapJob,
    OlapWorkload,
    OltpWorkload,
    WorkloadSpec,
)
from dbaops.workloads.samples import Outcome
from dbaops.workloads.sink import SampleSink
from dbaops.workloads.spec import (
    ArgSampler,
    PreviousArg,
    TransactionTemplate,
    WorkloadLibrary,
)

log = structlog.get_logger(__name__)

_ISOLATION = {
    "read_committed": "read_committed",
    "repeatable_read": "repeatable_read",
    "serializable": "serializable",
}


def result_hash(rows: Sequence[Any]) -> str:
    """Order-sensitive digest of a query result (OLAP correctness checks)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(repr(tuple(row)).encode())
        h.update(b"\n")
    return h.hexdigest()


class _Pools:
    """One asyncpg pool per role, created lazily."""

    def __init__(
        self, endpoint: Endpoint, app: str, size: int, max_queries: int | None = None
    ) -> None:
        self._endpoint = endpoint
        self._app = app
        self._size = size
        self._max_queries = max_queries
        self._pools: dict[str, asyncpg.Pool] = {}
        self._lock = anyio.Lock()

    async def get(self, role: str) -> asyncpg.Pool:
        pool = self._pools.get(role)
        if pool is None:
            async with self._lock:
                pool = self._pools.get(role)
                if pool is None:
                    pool = await self._endpoint.pool(
                        role, self._app, self._size, max_queries=self._max_queries
                    )
                    self._pools[role] = pool
        return pool

    async def close(self) -> None:
        """Close gracefully first: asyncpg finishes a cancelled unit's release in a shielded
        future, and terminating under it would leave an unretrieved error on the loop."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            for pool in self._pools.values():
                await pool.close()
        for pool in self._pools.values():
            pool.terminate()
        self._pools.clear()


class _Mix:
    """A weighted choice of templates, with cumulative weights computed once (hot path)."""

    def __init__(self, mix: dict[str, float]) -> None:
        self.names = list(mix)
        self.cum_weights = list(itertools.accumulate(mix[n] for n in self.names))

    def pick(self, rng: random.Random) -> str:
        return rng.choices(self.names, cum_weights=self.cum_weights, k=1)[0]


async def _run_transaction(
    conn: asyncpg.Connection,
    template: TransactionTemplate,
    drawn: list[list[Any]],
    give_up: float,
    clock: ScenarioClock,
) -> None:
    """Execute a template's statements; PreviousArg slots are filled from earlier results."""
    previous: list[Any] = []

    async def body() -> None:
        for st, args in zip(template.statements, drawn, strict=True):
            values = [
                previous[a.previous] if isinstance(a, PreviousArg) else v
                for a, v in zip(st.args, args, strict=True)
            ]
            remaining = give_up - clock.mono()
            if remaining <= 0:
                raise TimeoutError
            rows = await conn.fetch(st.sql, *values, timeout=remaining)
            previous.append(rows[0][0] if rows else None)

    if len(template.statements) == 1 and template.isolation == "read_committed":
        await body()
        return
    async with conn.transaction(isolation=_ISOLATION[template.isolation]):  # type: ignore[arg-type]
        await body()


class AttemptTimeout(Exception):
    """The client's attempt timeout fired (see :class:`ClientBehaviour`)."""


SpecT = TypeVar("SpecT", OltpWorkload, BackgroundWorkload)


class _TemplateDriver(Generic[SpecT]):
    """Shared state of drivers that run transaction templates with seeded arguments."""

    def __init__(
        self,
        spec: SpecT,
        library: WorkloadLibrary,
        params: dict[str, int],
        endpoint: Endpoint,
        clock: ScenarioClock,
        sink: SampleSink,
        seed: int,
    ) -> None:
        self.spec: SpecT = spec
        self.mix = _Mix(spec.mix)
        self.library = library
        self.endpoint = endpoint
        self.clock = clock
        self.sink = sink
        self.rng = random.Random(f"{seed}:{spec.name}")  # arrivals and the mix only
        self._seed = seed
        self._params = {**library.params, **params}
        self._template_seeds: dict[str, int] = {}
        self._units: dict[str, int] = {}

    def unit_rng(self, name: str, index: int) -> random.Random:
        """The argument stream of unit ``index`` of template ``name``: seeded by the run's
        seed, the workload, the template and the index alone, so the same seed draws the same
        arguments for the same unit however the run's timing went (which units started when,
        which were dropped)."""
        base = self._template_seeds.get(name)
        if base is None:
            digest = hashlib.sha256(f"{self._seed}:{self.spec.name}:{name}".encode()).digest()
            base = self._template_seeds[name] = int.from_bytes(digest[:8], "big")
        return random.Random((base << 32) | index)

    def next_unit(self, name: str) -> int:
        """The index of the next unit of template ``name`` (counted where units are made)."""
        index = self._units.get(name, 0)
        self._units[name] = index + 1
        return index

    def _draw(self, name: str, index: int) -> list[list[Any]]:
        """Arguments for every statement of unit ``index`` of template ``name``; PreviousArg
        slots are filled at execution time."""
        template = self.library.transactions[name]
        sampler = ArgSampler(self._params, self.unit_rng(name, index))
        return [
            [None if isinstance(a, PreviousArg) else sampler.draw(a, []) for a in st.args]
            for st in template.statements
        ]


class OltpDriver(_TemplateDriver[OltpWorkload]):
    """Open-loop transaction arrivals with deadlines, retries and an in-flight cap."""

    def __init__(
        self,
        spec: OltpWorkload,
        library: WorkloadLibrary,
        params: dict[str, int],
        endpoint: Endpoint,
        clock: ScenarioClock,
        sink: SampleSink,
        seed: int,
    ) -> None:
        super().__init__(spec, library, params, endpoint, clock, sink, seed)
        self.pools = _Pools(
            endpoint, spec.app_name, spec.connections, spec.client.recycle_after_queries
        )
        self.inflight = 0
        self.rate_factor = 1.0
        self.leaked: list[asyncpg.Connection] = []

    @asynccontextmanager
    async def _connection(self, role: str, timeout_s: float) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection, or a fresh one per unit for pool-less clients."""
        if self.spec.connect_per_unit:
            conn = await self.endpoint.connect(
                role, self.spec.app_name, connect_timeout_s=timeout_s
            )
            try:
                yield conn
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        await conn.close(timeout=2)
                    except (OSError, asyncpg.InterfaceError, TimeoutError):
                        conn.terminate()
            return
        pool = await self.pools.get(role)
        async with pool.acquire(timeout=timeout_s) as conn:
            yield conn

    async def run(self) -> None:
        spec = self.spec
        clock = self.clock
        try:
            async with anyio.create_task_group() as tg:
                if spec.client.leak is not None:
                    tg.start_soon(self._leak, spec.client.leak)
                if spec.start_s is not None:
                    await clock.sleep_until(spec.start_s)
                next_mono = clock.mono()
                while True:
                    rate = spec.rate_per_s * self.rate_factor
                    gap = self.rng.expovariate(rate) if spec.arrival == "poisson" else 1.0 / rate
                    next_mono += gap
                    delay = next_mono - clock.mono()
                    if delay > 0:
                        await anyio.sleep(delay)
                    if spec.stop_s is not None and clock.to_scenario(next_mono) >= spec.stop_s:
                        return
                    name = self.mix.pick(self.rng)
                    index = self.next_unit(name)  # a dropped unit keeps its index
                    if self.inflight >= spec.max_inflight:
                        t = clock.to_scenario(next_mono)
                        self.sink.add(
                            spec.name,
                            "oltp",
                            name,
                            t,
                            None,
                            t,
                            0.0,
                            0,
                            Outcome.DROPPED,
                            error="max_inflight",
                        )
                        continue
                    self.inflight += 1
                    tg.start_soon(self._unit, name, index, next_mono)
        finally:
            await self.pools.close()
            for conn in self.leaked:
                conn.terminate()

    async def _leak(self, leak: ConnectionLeak) -> None:
        """Open connections and never close them, at the leak's rate, up to its maximum."""
        role = leak.role or self.library.transactions[self.mix.names[0]].role
        await self.clock.sleep_until(leak.start_s)
        while len(self.leaked) < leak.max:
            try:
                conn = await self.endpoint.connect(role, self.spec.app_name)
                if leak.state == "idle_in_transaction":
                    await conn.execute("BEGIN; SELECT 1")
                self.leaked.append(conn)
            except (asyncpg.PostgresError, *CONNECTION_ERRORS) as exc:
                log.debug("leak_connect_failed", workload=self.spec.name, error=str(exc)[:200])
            await self.clock.sleep(1.0 / leak.per_s)

    async def _attempt(
        self,
        conn: asyncpg.Connection,
        template: TransactionTemplate,
        drawn: list[list[Any]],
        give_up: float,
    ) -> None:
        """One attempt of a unit under the client's behaviour: with an attempt timeout, the
        client either abandons the attempt (drops the connection without a cancel request, so
        the server keeps running the query) or cancels it, and raises :class:`AttemptTimeout`."""
        client = self.spec.client
        if client.attempt_timeout_ms is None:
            await _run_transaction(conn, template, drawn, give_up, self.clock)
            return
        cutoff = min(give_up, self.clock.mono() + client.attempt_timeout_ms / 1000.0)
        if client.on_attempt_timeout == "cancel":
            try:
                await _run_transaction(conn, template, drawn, cutoff, self.clock)
            except TimeoutError:
                raise AttemptTimeout from None
            return
        abandoned = False

        async def abandon_at_cutoff() -> None:
            nonlocal abandoned
            await anyio.sleep(max(cutoff - self.clock.mono(), 0.0))
            abandoned = True
            conn.terminate()

        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(abandon_at_cutoff)
            try:
                await _run_transaction(conn, template, drawn, give_up, self.clock)
            # raised below, outside the task group, so the unit's own handlers see it (a
            # server error such as 57014 as itself), not as an exception group
            except Exception as exc:
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if failure is not None:
            lost = isinstance(failure, (asyncpg.PostgresConnectionError, *CONNECTION_ERRORS))
            if abandoned and lost:
                raise AttemptTimeout from None
            raise failure

    async def _unit(self, name: str, index: int, scheduled: float) -> None:
        spec = self.spec
        clock = self.clock
        template = self.library.transactions[name]
        drawn = self._draw(name, index)
        deadline = scheduled + spec.deadline_ms / 1000.0
        give_up = scheduled + (spec.timeout_ms or 4 * spec.deadline_ms) / 1000.0
        retries = 0
        in_doubt = 0  # attempts that may have committed without the client knowing
        attempts_left = spec.client.immediate_retries
        start: float | None = None
        sqlstate: str | None = None
        error: str | None = None
        ok = False
        cancelled = False
        token = id(drawn)
        self.sink.ledger.begin(name)
        self.sink.started(spec.name, token, clock.to_scenario(scheduled),
                          clock.to_scenario(deadline), scheduled)  # fmt: skip
        try:
            while True:
                remaining = give_up - clock.mono()
                if remaining <= 0:
                    error = "client_timeout"
                    break
                try:
                    async with self._connection(template.role, remaining) as conn:
                        if start is None:
                            start = clock.mono()
                        await self._attempt(conn, template, drawn, give_up)
                    ok = True
                    break
                except AttemptTimeout:
                    error = "client_attempt_timeout"
                    in_doubt += 1
                    if attempts_left > 0:
                        attempts_left -= 1
                        retries += 1
                        continue  # at once: the abandoned query may still run on the server
                    break
                except asyncpg.PostgresError as exc:
                    sqlstate = exc.sqlstate
                    if sqlstate in spec.retry.sqlstates and retries < spec.retry.max_retries:
                        retries += 1
                        await anyio.sleep(spec.retry.backoff_ms / 1000.0)
                        continue
                    error = str(exc)[:300]
                    break
                except TimeoutError:
                    error = "client_timeout"
                    in_doubt += start is not None
                    break
                except CONNECTION_ERRORS as exc:
                    error = f"{type(exc).__name__}: {exc}"[:300]
                    in_doubt += start is not None
                    break
        except CONNECTION_ERRORS as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
            in_doubt += start is not None
        except asyncpg.PostgresError as exc:
            sqlstate, error = exc.sqlstate, str(exc)[:300]
        except anyio.get_cancelled_exc_class():
            cancelled = True
            error = "unfinished at the end of the run"
            in_doubt += start is not None and not ok
            raise
        finally:
            self.inflight -= 1
            self.sink.ledger.end(name, committed=ok, in_doubt=in_doubt)
            self.sink.finished(token)
            end = clock.mono()
            # A unit cut off by the end of the run before its deadline has an unknown outcome
            # and is not a sample; one already past its deadline is a real miss.
            if not (cancelled and end <= deadline):
                outcome = (
                    (Outcome.ON_TIME if end <= deadline else Outcome.LATE) if ok else Outcome.ERROR
                )
                self.sink.add(
                    spec.name,
                    "oltp",
                    name,
                    clock.to_scenario(scheduled),
                    None if start is None else clock.to_scenario(start),
                    clock.to_scenario(end),
                    (end - scheduled) * 1000.0,
                    retries,
                    outcome,
                    None if ok else sqlstate,
                    None if ok else error,
                )


@dataclass(frozen=True)
class _JobAttempt:
    """How one attempt of an OLAP job ended."""

    ok: bool = False
    correct: bool | None = None
    sqlstate: str | None = None
    error: str | None = None


class OlapDriver:
    """Runs analytical jobs at their scheduled times and checks their results."""

    def __init__(
        self,
        spec: OlapWorkload,
        library: WorkloadLibrary,
        endpoint: Endpoint,
        clock: ScenarioClock,
        sink: SampleSink,
        horizon_s: float,
        expected: dict[str, str],
        start_s: float = 0.0,
    ) -> None:
        self.spec = spec
        self.library = library
        self.clock = clock
        self.sink = sink
        self.horizon_s = horizon_s
        self.start_s = start_s
        self.expected = expected
        self.endpoint = endpoint
        self.slots = anyio.Semaphore(spec.connections)

    def schedule(self) -> list[tuple[float, OlapJob]]:
        """All (scenario time, job) pairs in ``[start_s, horizon_s)``, in time order (a
        periodic job runs at ``start_s + offset_s`` and every ``every_s`` after)."""
        out: list[tuple[float, OlapJob]] = []
        for job in self.spec.jobs:
            out.extend((t, job) for t in job.at_s if self.start_s <= t < self.horizon_s)
            if job.every_s:
                t = self.start_s + job.offset_s
                while t < self.horizon_s:
                    out.append((t, job))
                    t += job.every_s
        return sorted(out, key=lambda x: x[0])

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            for t, job in self.schedule():
                await self.clock.sleep_until(t)
                tg.start_soon(self._job, t, job)

    async def _job(self, at_s: float, job: OlapJob) -> None:
        clock = self.clock
        name = job.name or job.template
        scheduled = clock.to_mono(at_s)
        if job.due_s is not None:
            deadline = clock.to_mono(job.due_s)
        else:
            deadline = scheduled + (job.deadline_ms or 0) / 1000.0
        start: float | None = None
        attempts = 0
        result = _JobAttempt()
        try:
            async with self.slots:
                start = clock.mono()
                while True:
                    attempts += 1
                    result = await self._attempt(job)
                    pause = job.resubmit_pause_ms / 1000.0
                    if result.ok or not job.resubmit or clock.mono() + pause >= deadline:
                        break
                    await anyio.sleep(pause)
        except anyio.get_cancelled_exc_class():
            result = _JobAttempt(error="unfinished at end of run")
            raise
        finally:
            end = clock.mono()
            if result.ok:
                outcome = Outcome.ON_TIME if end <= deadline else Outcome.LATE
            else:
                outcome = Outcome.ERROR
            self.sink.add(
                self.spec.name,
                "olap",
                name,
                at_s,
                None if start is None else clock.to_scenario(start),
                clock.to_scenario(end),
                (end - scheduled) * 1000.0,
                max(attempts - 1, 0),
                outcome,
                result.sqlstate,
                result.error,
                result.correct,
            )

    async def _attempt(self, job: OlapJob) -> _JobAttempt:
        """One run of the job's query, with its result check; errors are returned."""
        template = self.library.jobs[job.template]
        reference = template.reference_sql if template.check_result else None
        timeout = None if job.attempt_timeout_ms is None else job.attempt_timeout_ms / 1000.0
        try:
            at_start = None if reference is None else await self._reference(reference)
            conn = await self.endpoint.connect(template.role, self.spec.app_name)
            try:
                # on timeout asyncpg sends a cancel request, so the server stops the query
                rows = await conn.fetch(template.sql, timeout=timeout)
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.close(timeout=5)
        except asyncpg.PostgresError as exc:
            return _JobAttempt(sqlstate=exc.sqlstate, error=str(exc)[:300])
        except TimeoutError as exc:  # before CONNECTION_ERRORS: TimeoutError is an OSError
            if job.attempt_timeout_ms is None:
                return _JobAttempt(error=f"TimeoutError: {exc}"[:300])
            return _JobAttempt(error=f"attempt cancelled after {job.attempt_timeout_ms:g} ms")
        except CONNECTION_ERRORS as exc:
            return _JobAttempt(error=f"{type(exc).__name__}: {exc}"[:300])
        got = result_hash(rows)
        correct: bool | None = None
        if reference is not None:
            correct = got == at_start or got == await self._reference(reference)
        elif template.check_result and job.template in self.expected:
            correct = got == self.expected[job.template]
        return _JobAttempt(ok=True, correct=correct)

    async def _reference(self, sql: str) -> str | None:
        """The reference result's hash on the state now, from a hidden harness session (None
        if the reference query fails: the job is then not correct)."""
        try:
            conn = await self.endpoint.harness_connect(probe=True)
        except (asyncpg.PostgresError, *CONNECTION_ERRORS) as exc:
            log.warning("olap_reference_unavailable", error=str(exc)[:200])
            return None
        try:
            return result_hash(await conn.fetch(sql))
        except asyncpg.PostgresError as exc:
            log.warning("olap_reference_failed", error=str(exc)[:200])
            return None
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close(timeout=5)


class BackgroundDriver(_TemplateDriver[BackgroundWorkload]):
    """Closed-loop sessions running noise templates with a pause between units."""

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(self.spec.sessions):
                tg.start_soon(self._session, i)

    async def _session(self, index: int) -> None:
        clock = self.clock
        conn: asyncpg.Connection | None = None
        role: str | None = None
        try:
            while True:
                name = self.mix.pick(self.rng)
                template = self.library.transactions[name]
                drawn = self._draw(name, self.next_unit(name))
                t0 = clock.mono()
                ok, sqlstate, error = False, None, None
                sent, lost = False, False
                self.sink.ledger.begin(name)
                try:
                    if conn is None or conn.is_closed() or role != template.role:
                        if conn is not None:
                            await conn.close(timeout=5)
                        role = template.role
                        conn = await self.endpoint.connect(role, self.spec.app_name)
                    sent = True
                    await _run_transaction(conn, template, drawn, t0 + 3600.0, clock)
                    ok = True
                except asyncpg.PostgresError as exc:
                    sqlstate, error = exc.sqlstate, str(exc)[:300]
                except CONNECTION_ERRORS as exc:
                    error = f"{type(exc).__name__}: {exc}"[:300]
                    lost = sent
                    conn = None
                    await anyio.sleep(0.5)
                except BaseException:  # cancelled at the end of the run: it may have committed
                    lost = sent
                    raise
                finally:
                    self.sink.ledger.end(name, committed=ok, in_doubt=int(lost))
                t1 = clock.mono()
                self.sink.add(
                    self.spec.name,
                    "background",
                    name,
                    clock.to_scenario(t0),
                    clock.to_scenario(t0),
                    clock.to_scenario(t1),
                    (t1 - t0) * 1000.0,
                    0,
                    Outcome.ON_TIME if ok else Outcome.ERROR,
                    sqlstate,
                    error,
                )
                await anyio.sleep(self.spec.pause_ms / 1000.0)
        finally:
            if conn is not None:
                conn.terminate()


Driver = OltpDriver | OlapDriver | BackgroundDriver


def scenario_drivers(
    workloads: Sequence[WorkloadSpec],
    library: WorkloadLibrary,
    params: dict[str, int],
    primary: Endpoint,
    standby: Endpoint | None,
    clock: ScenarioClock,
    sink: SampleSink,
    seed: int,
    horizon_s: float,
    expected: dict[str, str],
    start_s: float = 0.0,
) -> list[Driver]:
    """A driver for each workload, on the server it names (``server: standby``: the replica);
    scheduled jobs run in ``[start_s, horizon_s)``."""
    out: list[Driver] = []
    for w in workloads:
        endpoint = primary
        if w.server == "standby":
            if standby is None:
                raise ValueError(f"workload {w.name!r} reads from the standby; the run has none")
            endpoint = standby
        if isinstance(w, OltpWorkload):
            out.append(OltpDriver(w, library, params, endpoint, clock, sink, seed))
        elif isinstance(w, OlapWorkload):
            out.append(OlapDriver(w, library, endpoint, clock, sink, horizon_s, expected, start_s))
        else:
            out.append(BackgroundDriver(w, library, params, endpoint, clock, sink, seed))
    return out
