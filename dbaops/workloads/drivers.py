"""Workload drivers: open-loop OLTP, scheduled OLAP jobs and closed-loop background noise.

OLTP arrivals are scheduled on a fixed or Poisson timetable independent of completions (open
loop): when the server stalls, units keep arriving and show up as late, failed or dropped, never
as fewer requests. Each unit's deadline counts from its *scheduled* start, so waiting for a
connection, lock waits, retries and backoff all count.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import itertools
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
import structlog

from dbaops.clock import ScenarioClock
from dbaops.dbms.sessions import (
    CONNECTION_ERRORS,
    LOST_ERRORS,
    SERVER_ERRORS,
    RunEndpoint,
    Session,
    sqlstate_of,
)
from dbaops.scenario.model import (
    BackgroundWorkload,
    ConnectionLeak,
    OlapJob,
    OlapWorkload,
    OltpWorkload,
    WorkloadSpec,
)
from dbaops.workloads.samples import Outcome
from dbaops.workloads.session import StatementCaches, TemplateSession
from dbaops.workloads.sink import CLIENT_ATTEMPT_TIMEOUT, CLIENT_TIMEOUT, SampleSink
from dbaops.workloads.spec import Drawer, TransactionTemplate, WorkloadLibrary, template_drawers

log = structlog.get_logger(__name__)


def result_hash(rows: Sequence[Any]) -> str:
    """Order-sensitive digest of a query result (OLAP correctness checks)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(repr(tuple(row)).encode())
        h.update(b"\n")
    return h.hexdigest()


class _Mix:
    """A weighted choice of templates, with cumulative weights computed once (hot path)."""

    def __init__(self, mix: dict[str, float]) -> None:
        self.names = list(mix)
        self.cum_weights = list(itertools.accumulate(mix[n] for n in self.names))
        self._total = self.cum_weights[-1]
        self._last = len(self.names) - 1

    def pick(self, rng: random.Random) -> str:
        """What ``rng.choices(names, cum_weights=...)`` picks, without its per-call setup."""
        return self.names[
            bisect.bisect(self.cum_weights, rng.random() * self._total, 0, self._last)
        ]


#: The arrival loop's shortest sleep: at high rates it wakes about once per this, not once per
#: arrival (each wake-up costs the client more CPU than a unit's bookkeeping).
MIN_SLEEP_S = 0.001


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
        endpoint: RunEndpoint,
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
        self._drawers: dict[str, list[list[Drawer | None]]] = {}
        self._caches = StatementCaches()

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
        """Arguments for every statement of unit ``index`` of template ``name``; previous-result
        slots are ``None``, filled at execution time."""
        drawers = self._drawers.get(name)
        if drawers is None:
            template = self.library.transactions[name]
            drawers = self._drawers[name] = template_drawers(template, self._params)
        rng = self.unit_rng(name, index)
        return [[None if d is None else d(rng) for d in st] for st in drawers]

    def session(self, conn: Session) -> TemplateSession:
        """A session of this client (its sessions share statement-cache invalidations)."""
        return TemplateSession(conn, self.spec.protocol, self._caches)


@dataclass(slots=True)
class _Unit:
    """One admitted arrival. Times are monotonic: ``ready`` is when the client could issue it
    (its scheduled time plus the client's own lag), and its deadline and give-up time count
    from there, so a client that fell behind its timetable is not charged to the database."""

    name: str
    index: int
    scheduled: float
    ready: float
    deadline: float
    give_up: float
    token: int


class _Worker:
    """A connection slot of one role: an idle worker waits on ``handed`` for its next unit
    (an asyncio future, the cheapest wake-up there is; asyncpg is asyncio-only anyway)."""

    __slots__ = ("handed", "unit")

    def __init__(self) -> None:
        self.handed: asyncio.Future[None] | None = None
        self.unit: _Unit | None = None


def _hand(lane: _Lane, unit: _Unit) -> bool:
    """Give ``unit`` to an idle worker of ``lane``, if one is waiting."""
    while lane.idle:
        worker = lane.idle.pop()
        handed = worker.handed
        if handed is not None and not handed.done():  # (done: cancelled with the run)
            worker.unit = unit
            handed.set_result(None)
            return True
    return False


class _Lane:
    """The connection slots of one role: the idle ones, and the units waiting for one."""

    __slots__ = ("role", "idle", "backlog", "workers")

    def __init__(self, role: str) -> None:
        self.role = role
        self.idle: list[_Worker] = []
        self.backlog: deque[_Unit] = deque()
        self.workers: list[_Worker] = []


class OltpDriver(_TemplateDriver[OltpWorkload]):
    """Open-loop transaction arrivals with deadlines, retries and an in-flight cap.

    Each role of the mix has ``connections`` slots, each a task that opens its session on
    first use and keeps it (a pool); an arrival goes to an idle slot at once or waits in the
    role's backlog, and counts against ``max_inflight`` until it ends. A client without a pool
    (``connect_per_unit``) has ``max_inflight`` slots that connect for every unit.
    """

    def __init__(
        self,
        spec: OltpWorkload,
        library: WorkloadLibrary,
        params: dict[str, int],
        endpoint: RunEndpoint,
        clock: ScenarioClock,
        sink: SampleSink,
        seed: int,
    ) -> None:
        super().__init__(spec, library, params, endpoint, clock, sink, seed)
        self.inflight = 0
        self.rate_factor = 1.0
        self.leaked: list[Session] = []
        self._lanes: dict[str, _Lane] = {}
        self._deadline_s = spec.deadline_ms / 1000.0
        self._timeout_s = (spec.timeout_ms or 4 * spec.deadline_ms) / 1000.0
        self._drained: anyio.Event | None = None

    async def run(self) -> None:
        spec = self.spec
        clock = self.clock
        sink = self.sink
        mono = clock.mono
        slots = spec.max_inflight if spec.connect_per_unit else spec.connections
        roles = {self.library.transactions[n].role for n in self.mix.names}
        lanes = self._lanes = {role: _Lane(role) for role in sorted(roles)}
        unit_lanes = {n: lanes[self.library.transactions[n].role] for n in self.mix.names}
        try:
            async with anyio.create_task_group() as tg:
                for lane in lanes.values():
                    for _ in range(slots):
                        worker = _Worker()
                        lane.workers.append(worker)
                        tg.start_soon(self._work, lane, worker)
                if spec.client.leak is not None:
                    tg.start_soon(self._leak, spec.client.leak)
                if spec.start_s is not None:
                    await clock.sleep_until(spec.start_s)
                stop_mono = None if spec.stop_s is None else clock.to_mono(spec.stop_s)
                poisson = spec.arrival == "poisson"
                next_mono = mono()
                while True:
                    rate = spec.rate_per_s * self.rate_factor
                    next_mono += self.rng.expovariate(rate) if poisson else 1.0 / rate
                    now = mono()
                    if next_mono > now:
                        # never a wake-up per arrival: arrivals less than MIN_SLEEP_S apart are
                        # issued together, up to that late (recorded as client lag)
                        await anyio.sleep(max(next_mono - now, MIN_SLEEP_S))
                        now = mono()
                    if stop_mono is not None and next_mono >= stop_mono:
                        # the timetable has ended: let the admitted units finish, then stop
                        while self.inflight:
                            self._drained = anyio.Event()
                            await self._drained.wait()
                        tg.cancel_scope.cancel()
                        return
                    name = self.mix.pick(self.rng)
                    index = self.next_unit(name)  # a dropped unit keeps its index
                    # a timer may fire a little early: the unit is then issued now, but
                    # its clock starts at its scheduled time (lag 0, never negative)
                    ready = now if now > next_mono else next_mono
                    lag = ready - next_mono
                    for lane in lanes.values():
                        if lane.backlog and lane.backlog[0].give_up <= now:
                            self._expire(lane, now)
                    if self.inflight >= spec.max_inflight:
                        t = clock.to_scenario(now)
                        sink.add(spec.name, "oltp", name, clock.to_scenario(next_mono), None, t,
                                 0.0, 0, Outcome.DROPPED, None, "max_inflight", None,
                                 lag * 1000.0)  # fmt: skip
                        continue
                    unit = _Unit(name, index, next_mono, ready, ready + self._deadline_s,
                                 ready + self._timeout_s, next(sink.tokens))  # fmt: skip
                    self.inflight += 1
                    sink.ledger.begin(name)
                    sink.started(spec.name, unit.token, clock.to_scenario(next_mono),
                                 clock.to_scenario(unit.deadline), ready)  # fmt: skip
                    lane = unit_lanes[name]
                    if not _hand(lane, unit):
                        lane.backlog.append(unit)
        finally:
            self._unfinished()
            for conn in self.leaked:
                conn.terminate()

    async def _work(self, lane: _Lane, worker: _Worker) -> None:
        """A connection slot: takes units from the backlog, or waits idle for one."""
        session: TemplateSession | None = None
        loop = asyncio.get_running_loop()
        try:
            if self.spec.client.prefill:
                session = await self._prefill(lane.role)
            while True:
                if lane.backlog:
                    unit = lane.backlog.popleft()
                else:
                    worker.handed = loop.create_future()
                    lane.idle.append(worker)
                    await worker.handed
                    handed, worker.unit = worker.unit, None
                    assert handed is not None
                    unit = handed
                if unit.give_up <= self.clock.mono():
                    self._give_up(unit)
                    continue
                session = await self._unit(lane.role, unit, session)
        finally:
            if session is not None:
                # politely: a close waits for a cancel request still on its way, which a
                # terminate would drop (leaving the server running an abandoned statement)
                await session.close()

    def _expire(self, lane: _Lane, now: float) -> None:
        """Units that waited for a connection past their give-up time: the client gave up."""
        backlog = lane.backlog
        while backlog and backlog[0].give_up <= now:
            self._give_up(backlog.popleft())

    def _give_up(self, unit: _Unit) -> None:
        self._end(unit, None, unit.give_up, False, 0, None, CLIENT_TIMEOUT, 0)

    def _unfinished(self) -> None:
        """At the end of the run, units still waiting for a connection: past their deadline
        they are misses, otherwise their outcome is unknown and they are not samples."""
        end = self.clock.mono()
        for lane in self._lanes.values():
            waiting = list(lane.backlog)
            waiting += [w.unit for w in lane.workers if w.unit is not None]
            lane.backlog.clear()
            for unit in waiting:
                self._end(unit, None, end, False, 0, None, "unfinished at the end of the run",
                          0, cancelled=True)  # fmt: skip

    def _end(
        self,
        unit: _Unit,
        start: float | None,
        end: float,
        ok: bool,
        retries: int,
        sqlstate: str | None,
        error: str | None,
        in_doubt: int,
        cancelled: bool = False,
    ) -> None:
        """Account for a unit that ended: the ledger, the in-flight count and its sample."""
        self.inflight -= 1
        if self._drained is not None and not self.inflight:
            self._drained.set()
        sink = self.sink
        sink.ledger.end(unit.name, committed=ok, in_doubt=in_doubt)
        sink.finished(unit.token)
        # A unit cut off by the end of the run before its deadline has an unknown outcome
        # and is not a sample; one already past its deadline is a real miss.
        if cancelled and end <= unit.deadline:
            return
        if ok:
            outcome = Outcome.ON_TIME if end <= unit.deadline else Outcome.LATE
        else:
            outcome = Outcome.ERROR
        to_scenario = self.clock.to_scenario
        sink.add(
            self.spec.name,
            "oltp",
            unit.name,
            to_scenario(unit.scheduled),
            None if start is None else to_scenario(start),
            to_scenario(end),
            (end - unit.ready) * 1000.0,
            retries,
            outcome,
            None if ok else sqlstate,
            None if ok else error,
            None,
            (unit.ready - unit.scheduled) * 1000.0,
        )

    async def _prefill(self, role: str) -> TemplateSession | None:
        """A slot's connection opened when the workload starts; none if that fails (the slot
        then connects at its first unit, as it would without prefill)."""
        try:
            return await self._connect(role, self._timeout_s)
        except (*SERVER_ERRORS, *CONNECTION_ERRORS) as exc:
            log.debug("prefill_connect_failed", workload=self.spec.name, error=str(exc)[:200])
            return None

    async def _connect(self, role: str, timeout_s: float) -> TemplateSession:
        conn = await self.endpoint.connect(role, self.spec.app_name, connect_timeout_s=timeout_s)
        return self.session(conn)

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
            except (*SERVER_ERRORS, *CONNECTION_ERRORS) as exc:
                log.debug("leak_connect_failed", workload=self.spec.name, error=str(exc)[:200])
            await self.clock.sleep(1.0 / leak.per_s)

    async def _attempt(
        self,
        session: TemplateSession,
        template: TransactionTemplate,
        drawn: list[list[Any]],
        give_up: float,
    ) -> None:
        """One attempt of a unit under the client's behaviour: with an attempt timeout, the
        client either abandons the attempt (drops the connection without a cancel request, so
        the server keeps running the query) or cancels it, and raises :class:`AttemptTimeout`."""
        client = self.spec.client
        if client.attempt_timeout_ms is None:
            await session.run(template, drawn, give_up, self.clock)
            return
        cutoff = min(give_up, self.clock.mono() + client.attempt_timeout_ms / 1000.0)
        if client.on_attempt_timeout == "cancel":
            try:
                await session.run(template, drawn, cutoff, self.clock)
            except TimeoutError:
                raise AttemptTimeout from None
            return
        abandoned = False

        async def abandon_at_cutoff() -> None:
            nonlocal abandoned
            await anyio.sleep(max(cutoff - self.clock.mono(), 0.0))
            abandoned = True
            session.terminate()

        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(abandon_at_cutoff)
            try:
                await session.run(template, drawn, give_up, self.clock)
            # raised below, outside the task group, so the unit's own handlers see it (a
            # server error such as 57014 as itself), not as an exception group
            except Exception as exc:
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if failure is not None:
            lost = isinstance(failure, LOST_ERRORS)
            if abandoned and lost:
                raise AttemptTimeout from None
            raise failure

    async def _unit(
        self, role: str, unit: _Unit, session: TemplateSession | None
    ) -> TemplateSession | None:
        """Run one unit with retries on this slot's session; returns the session to keep."""
        spec = self.spec
        mono = self.clock.mono
        template = self.library.transactions[unit.name]
        drawn = self._draw(unit.name, unit.index)
        give_up = unit.give_up
        retries = 0
        in_doubt = 0  # attempts that may have committed without the client knowing
        attempts_left = spec.client.immediate_retries
        start: float | None = None
        sqlstate: str | None = None
        error: str | None = None
        ok = False
        cancelled = False
        try:
            while True:
                remaining = give_up - mono()
                if remaining <= 0:
                    error = CLIENT_TIMEOUT
                    break
                try:
                    if session is None or session.is_closed():
                        session = None
                        session = await self._connect(role, remaining)
                    if start is None:
                        start = mono()
                    await self._attempt(session, template, drawn, give_up)
                    ok = True
                    break
                except AttemptTimeout:
                    error = CLIENT_ATTEMPT_TIMEOUT
                    in_doubt += 1
                    if attempts_left > 0:
                        attempts_left -= 1
                        retries += 1
                        continue  # at once: the abandoned query may still run on the server
                    break
                except SERVER_ERRORS as exc:
                    sqlstate = sqlstate_of(exc)
                    if sqlstate in spec.retry.sqlstates and retries < spec.retry.max_retries:
                        retries += 1
                        await anyio.sleep(spec.retry.backoff_ms / 1000.0)
                        continue
                    error = str(exc)[:300]
                    break
                except TimeoutError:
                    error = CLIENT_TIMEOUT
                    in_doubt += start is not None
                    break
                except CONNECTION_ERRORS as exc:
                    error = f"{type(exc).__name__}: {exc}"[:300]
                    in_doubt += start is not None
                    if session is not None:
                        session.terminate()  # a session in an unknown state is not reused
                        session = None
                    break
        except anyio.get_cancelled_exc_class():
            cancelled = True
            error = "unfinished at the end of the run"
            in_doubt += start is not None and not ok
            raise
        finally:
            self._end(unit, start, mono(), ok, retries, sqlstate, error, in_doubt, cancelled)
        if session is not None:
            recycle = spec.client.recycle_after_queries
            if spec.connect_per_unit or (recycle is not None and session.queries >= recycle):
                await session.close()
                session = None
        return session


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
        endpoint: RunEndpoint,
        clock: ScenarioClock,
        sink: SampleSink,
        horizon_s: float,
        expected: dict[str, str],
        start_s: float = 0.0,
        earliest_s: float | None = None,
    ) -> None:
        self.spec = spec
        self.library = library
        self.clock = clock
        self.sink = sink
        self.horizon_s = horizon_s
        self.start_s = start_s
        self.earliest_s = start_s if earliest_s is None else earliest_s
        self.expected = expected
        self.endpoint = endpoint
        self.slots = anyio.Semaphore(spec.connections)

    def schedule(self) -> list[tuple[float, OlapJob]]:
        """All (scenario time, job) pairs in ``[earliest_s, horizon_s)``, in time order (a
        periodic job runs at ``start_s + offset_s`` and every ``every_s`` after; the main
        run's ``earliest_s`` is the warm-up's start, so jobs at negative times run in it)."""
        out: list[tuple[float, OlapJob]] = []
        for job in self.spec.jobs:
            out.extend((t, job) for t in job.at_s if self.earliest_s <= t < self.horizon_s)
            if job.every_s:
                t = self.start_s + job.offset_s
                while t < self.horizon_s:
                    if t >= self.earliest_s:
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
        # how late the client itself started the job (its own loop, not the server): the
        # deadline and the latency count from there
        ready = max(scheduled, clock.mono())
        lag = ready - scheduled
        if job.due_s is not None:
            deadline = clock.to_mono(job.due_s) + lag
        else:
            deadline = ready + (job.deadline_ms or 0) / 1000.0
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
                (end - ready) * 1000.0,
                max(attempts - 1, 0),
                outcome,
                result.sqlstate,
                result.error,
                result.correct,
                lag * 1000.0,
            )

    async def _attempt(self, job: OlapJob) -> _JobAttempt:
        """One run of the job's query, with its result check; errors are returned."""
        template = self.library.jobs[job.template]
        reference = template.reference_sql if template.check_result else None
        timeout = None if job.attempt_timeout_ms is None else job.attempt_timeout_ms / 1000.0
        try:
            at_start = (
                None if reference is None else await self._reference(reference, template.role)
            )
            conn = await self.endpoint.connect(template.role, self.spec.app_name)
            try:
                # on timeout asyncpg sends a cancel request, so the server stops the query
                rows = await conn.fetch(template.sql, timeout=timeout)
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.close(timeout=5)
        except SERVER_ERRORS as exc:
            return _JobAttempt(sqlstate=sqlstate_of(exc), error=str(exc)[:300])
        except TimeoutError as exc:  # before CONNECTION_ERRORS: TimeoutError is an OSError
            if job.attempt_timeout_ms is None:
                return _JobAttempt(error=f"TimeoutError: {exc}"[:300])
            return _JobAttempt(error=f"attempt cancelled after {job.attempt_timeout_ms:g} ms")
        except CONNECTION_ERRORS as exc:
            return _JobAttempt(error=f"{type(exc).__name__}: {exc}"[:300])
        got = result_hash(rows)
        correct: bool | None = None
        if reference is not None:
            correct = got == at_start or got == await self._reference(reference, template.role)
        elif template.check_result and job.template in self.expected:
            correct = got == self.expected[job.template]
        return _JobAttempt(ok=True, correct=correct)

    async def _reference(self, sql: str, role: str) -> str | None:
        """The reference result's hash on the state now, from a hidden session of the job's
        role with its own search path (the library's SQL, read as the application reads it;
        None if the reference query fails: the job is then not correct)."""
        try:
            conn = await self.endpoint.role_session(role, probe=True, pinned=False)
        except (*SERVER_ERRORS, *CONNECTION_ERRORS) as exc:
            log.warning("olap_reference_unavailable", error=str(exc)[:200])
            return None
        try:
            return result_hash(await conn.fetch(sql))
        except SERVER_ERRORS as exc:
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
        session: TemplateSession | None = None
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
                    if session is None or session.is_closed() or role != template.role:
                        if session is not None:
                            await session.close()
                            session = None
                        role = template.role
                        session = self.session(
                            await self.endpoint.connect(role, self.spec.app_name)
                        )
                    sent = True
                    await session.run(template, drawn, t0 + 3600.0, clock)
                    ok = True
                except SERVER_ERRORS as exc:
                    sqlstate, error = sqlstate_of(exc), str(exc)[:300]
                except CONNECTION_ERRORS as exc:
                    error = f"{type(exc).__name__}: {exc}"[:300]
                    lost = sent
                    if session is not None:
                        session.terminate()
                        session = None
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
            if session is not None:
                session.terminate()


Driver = OltpDriver | OlapDriver | BackgroundDriver


def scenario_drivers(
    workloads: Sequence[WorkloadSpec],
    library: WorkloadLibrary,
    params: dict[str, int],
    primary: RunEndpoint,
    standby: RunEndpoint | None,
    clock: ScenarioClock,
    sink: SampleSink,
    seed: int,
    horizon_s: float,
    expected: dict[str, str],
    start_s: float = 0.0,
    earliest_s: float | None = None,
) -> list[Driver]:
    """A driver for each workload, on the server it names (``server: standby``: the replica);
    scheduled jobs run in ``[earliest_s, horizon_s)`` (default ``earliest_s``: ``start_s``),
    periodic ones counted from ``start_s``."""
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
            out.append(
                OlapDriver(
                    w, library, endpoint, clock, sink, horizon_s, expected, start_s, earliest_s
                )
            )
        else:
            out.append(BackgroundDriver(w, library, params, endpoint, clock, sink, seed))
    return out
