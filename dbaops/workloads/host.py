"""The workload drivers in their own process, on their own uvloop event loop.

The run's process holds the agent, the metric sampler, the safety judge and Parquet writing; a
driver sharing their event loop would count their CPU as the database's latency. So the
drivers run in a child process (``python -m dbaops.workloads.host``). The run's process sends
it a :class:`DriverPlan` (the workloads, the library, the endpoints and the run's clock) and
keeps its :class:`~dbaops.workloads.sink.SampleSink`; the child relays finished samples, the
ledger and the units in flight in batches, and at once when asked (:meth:`DriverProcess.sync`,
before a check reads the sink). Samples still reach the run directory through the parent
sink's atomic Parquet parts.

The channel is a socket pair (length-prefixed pickles: both ends are dbaops). The child stops
when told, or when the channel closes (the run's process died), after relaying the samples of
units the stop cut off.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import anyio
import structlog
from anyio.abc import Process, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import BaseModel

from dbaops.clock import ScenarioClock
from dbaops.dbms.sessions import EndpointField
from dbaops.scenario.model import WorkloadSpec
from dbaops.workloads.sink import SampleSink
from dbaops.workloads.spec import WorkloadLibrary

log = structlog.get_logger(__name__)

#: Wall seconds between relayed batches (a check does not wait for one: it syncs).
RELAY_EVERY_S = 0.1
_HEADER = struct.Struct("!I")


class DriverProcessError(RuntimeError):
    """The driver process failed (its traceback is the message) or could not start."""


class DriverPlan(BaseModel):
    """Everything the driver process needs: what :func:`scenario_drivers` takes, and the run
    clock's origin (monotonic time is the machine's, so both processes share it)."""

    workloads: list[WorkloadSpec]
    library: WorkloadLibrary
    params: dict[str, int]
    primary: EndpointField
    standby: EndpointField | None = None
    seed: int
    horizon_s: float
    expected: dict[str, str]
    start_s: float = 0.0
    earliest_s: float | None = None
    time_scale: float
    origin_mono: float
    origin_wall: float

    @classmethod
    def for_clock(cls, clock: ScenarioClock, **fields: Any) -> DriverPlan:
        mono, wall = clock.origin()
        return cls(time_scale=clock.time_scale, origin_mono=mono, origin_wall=wall, **fields)

    def clock(self) -> ScenarioClock:
        return ScenarioClock.at_origin(self.time_scale, self.origin_mono, self.origin_wall)

    async def run_here(self, sink: SampleSink) -> None:
        """Run every driver on this event loop into ``sink`` until cancelled or all end."""
        from dbaops.workloads.drivers import scenario_drivers

        async with anyio.create_task_group() as tg:
            for driver in scenario_drivers(
                self.workloads, self.library, self.params, self.primary, self.standby,
                self.clock(), sink, self.seed, self.horizon_s, self.expected, self.start_s,
                self.earliest_s,
            ):  # fmt: skip
                tg.start_soon(driver.run)


class _Channel:
    """Length-prefixed pickled messages over a stream socket."""

    def __init__(self, stream: SocketStream) -> None:
        self._stream = stream
        self._reader = BufferedByteReceiveStream(stream)
        self._send_lock = anyio.Lock()

    @classmethod
    async def over(cls, sock: socket.socket) -> _Channel:
        return cls(await SocketStream.from_socket(sock))

    async def send(self, *message: Any) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        async with self._send_lock:
            await self._stream.send(_HEADER.pack(len(payload)) + payload)

    async def receive(self) -> tuple[Any, ...]:
        """The next message; raises ``anyio.EndOfStream`` when the other end closed."""
        try:
            (size,) = _HEADER.unpack(await self._reader.receive_exactly(_HEADER.size))
            # the rest of the frame is on its way (frames are written whole): a cancellation
            # now would leave the stream mid-frame, so it waits for the frame's end
            with anyio.CancelScope(shield=True):
                payload = await self._reader.receive_exactly(size)
        except anyio.IncompleteRead:
            raise anyio.EndOfStream from None
        message: tuple[Any, ...] = pickle.loads(payload)
        return message

    async def aclose(self) -> None:
        await self._stream.aclose()


class DriverProcess:
    """The parent's handle on one driver process (see the module docstring).

    ``spawn`` starts the interpreter at once, so its imports overlap whatever the run does
    before the workloads start; ``run`` starts the drivers and feeds the sink until cancelled,
    then stops the child and takes its last samples.
    """

    def __init__(self, process: Process, channel: _Channel) -> None:
        self._process = process
        self._channel = channel
        self._sink: SampleSink | None = None
        self._asked = 0
        self._answered = 0
        self._answer = anyio.Event()
        self._ended = False
        self._ready = False

    @classmethod
    async def spawn(cls) -> DriverProcess:
        parent, child = socket.socketpair()
        try:
            process = await anyio.open_process(
                [sys.executable, "-m", "dbaops.workloads.host", str(child.fileno())],
                stdin=None,
                stdout=None,
                stderr=None,
                pass_fds=[child.fileno()],
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        return cls(process, await _Channel.over(parent))

    async def run(self, plan: DriverPlan, sink: SampleSink) -> None:
        """Run the plan's drivers into ``sink`` until cancelled (or until they all end)."""
        self._sink = sink
        sink.attach(self)
        try:
            await self.ready()
            await self._channel.send("start", plan.model_dump_json(by_alias=True))
            while not self._ended:
                await self._handle(await self._receive())
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop()

    async def ready(self) -> None:
        """Wait until the child has imported the drivers (about a second after ``spawn``):
        a run starts its clock after this, so the workloads start on time."""
        if self._ready:
            return
        message = await self._receive()
        if message[0] != "ready":
            raise DriverProcessError(f"the driver process sent {message[0]!r} before 'ready'")
        self._ready = True

    async def sync(self) -> None:
        """Return once every sample and ledger change the child made before this call has
        reached the sink."""
        if self._ended or self._sink is None:
            return
        self._asked += 1
        wanted = self._asked
        try:
            await self._channel.send("sync", wanted)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the child is gone or stopping: nothing more will arrive
        while self._answered < wanted and not self._ended:
            await self._answer.wait()

    async def _receive(self) -> tuple[Any, ...]:
        try:
            return await self._channel.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._ended = True
            code = await self._process.wait()
            raise DriverProcessError(
                f"the driver process ended unexpectedly (exit {code})"
            ) from None

    async def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "batch":
            _, rows, ledger, in_flight, answered = message
            assert self._sink is not None
            self._sink.extend(rows)
            self._sink.ledger.load(ledger)
            self._sink.replace_in_flight(in_flight)
            if answered > self._answered:
                self._answered = answered
                self._answer.set()
                self._answer = anyio.Event()
        elif kind == "done":
            self._ended = True
            self._answer.set()
        elif kind == "error":
            self._ended = True
            self._answer.set()
            raise DriverProcessError(f"the workload drivers failed:\n{message[1]}")

    async def _stop(self) -> None:
        """Tell the child to stop, take its last samples, and reap it (killed if it hangs)."""
        try:
            if not self._ended:
                with anyio.move_on_after(30):
                    try:
                        await self._channel.send("stop")
                        while not self._ended:
                            await self._handle(await self._receive())
                    except (
                        DriverProcessError,
                        anyio.BrokenResourceError,
                        anyio.ClosedResourceError,
                        OSError,
                    ) as exc:
                        log.warning("driver_process_stop", error=str(exc)[:300])
            with anyio.move_on_after(10):
                await self._process.wait()
        finally:
            self._ended = True  # a second stop (aclose after run) has nothing to ask
            if self._process.returncode is None:
                self._process.kill()
                await self._process.wait()
            await self._channel.aclose()
            self._answer.set()

    async def aclose(self) -> None:
        """Stop a child that never ran a plan."""
        with anyio.CancelScope(shield=True):
            if self._sink is None and not self._ended:  # it waits for a plan: no last batch
                self._ended = True
                try:
                    await self._channel.send("stop")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
            await self._stop()


async def run_workloads(
    plan: DriverPlan, sink: SampleSink, process: DriverProcess | None = None
) -> None:
    """Run the plan's drivers into ``sink`` until cancelled: in ``process`` when given, else
    on this event loop."""
    if process is not None:
        await process.run(plan, sink)
    else:
        await plan.run_here(sink)


# -- the child -----------------------------------------------------------------------------------
async def _relay(channel: _Channel, sink: SampleSink, answered: int) -> None:
    await channel.send("batch", sink.take(), sink.ledger.state(), sink.in_flight(), answered)


async def _child(fd: int) -> None:
    import dbaops.workloads.drivers  # noqa: F401 - imported before "ready": the run waits for it

    channel = await _Channel.over(socket.socket(fileno=fd))
    await channel.send("ready")
    try:
        message = await channel.receive()
    except anyio.EndOfStream:
        return
    if message[0] != "start":
        return
    plan = DriverPlan.model_validate_json(message[1])
    sink = SampleSink(None, recent_s=None)
    answered = 0
    failure: str | None = None

    async def drivers_then_done(tg: anyio.abc.TaskGroup) -> None:
        nonlocal failure
        try:
            await plan.run_here(sink)
        except Exception:
            failure = traceback.format_exc()
        tg.cancel_scope.cancel()

    async def relay_periodically() -> None:
        while True:
            await anyio.sleep(RELAY_EVERY_S)
            await _relay(channel, sink, answered)

    async with anyio.create_task_group() as tg:
        tg.start_soon(drivers_then_done, tg)
        tg.start_soon(relay_periodically)
        while True:
            try:
                message = await channel.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                tg.cancel_scope.cancel()  # the run's process is gone
                return
            if message[0] == "sync":
                answered = message[1]
                await _relay(channel, sink, answered)
            elif message[0] == "stop":
                tg.cancel_scope.cancel()
                break
    # the drivers' cancellation handlers have recorded the units the stop cut off
    try:
        await _relay(channel, sink, answered)
        if failure is not None:
            await channel.send("error", failure)
        else:
            await channel.send("done")
    except (anyio.BrokenResourceError, OSError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the driver process: ``python -m dbaops.workloads.host FD``."""
    args = list(sys.argv[1:] if argv is None else argv)
    fd = int(args[0])
    # the run's process decides when the drivers stop (and takes their last samples first)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(2, 1)  # nothing the drivers print can reach the parent's standard output
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(30),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
    try:
        anyio.run(_child, fd, backend="asyncio", backend_options={"use_uvloop": True})
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
