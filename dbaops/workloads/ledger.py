"""The driver ledger: what the workload clients know they committed, per transaction template.

State Integrity checks compare the database with it ("rows now = rows before + rows the
clients committed"). A client cannot always know: an attempt that lost its connection, hit a
client timeout or was abandoned (the server may still run it) may or may not have committed,
and a unit still running when the check looks may commit at any moment. The ledger keeps those
apart, so a check can accept exactly the range the evidence allows: at least every committed
unit, at most every committed, in-doubt and in-flight one.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field


class LedgerEntry(BaseModel):
    """Counts of one transaction template's units."""

    committed: int = 0
    in_doubt: int = Field(default=0, description="attempts whose commit the client cannot know")
    in_flight: int = 0


class LedgerSnapshot(BaseModel):
    """The ledger at one moment, per template name."""

    units: dict[str, LedgerEntry] = Field(default_factory=dict)

    def entry(self, unit: str) -> LedgerEntry:
        return self.units.get(unit, LedgerEntry())


class DriverLedger:
    """Counters the drivers update as their units begin and end (all on the run's event
    loop, so no lock on the drivers' hot path)."""

    def __init__(self) -> None:
        self._committed: Counter[str] = Counter()
        self._in_doubt: Counter[str] = Counter()
        self._in_flight: Counter[str] = Counter()

    def begin(self, unit: str) -> None:
        """A unit of template ``unit`` is about to send its first statement."""
        self._in_flight[unit] += 1

    def end(self, unit: str, committed: bool, in_doubt: int = 0) -> None:
        """The unit ended: committed (the client saw the commit succeed) or not, after
        ``in_doubt`` attempts whose outcome the client could not know."""
        self._in_flight[unit] -= 1
        if committed:
            self._committed[unit] += 1
        self._in_doubt[unit] += in_doubt

    def state(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """The raw counters (committed, in doubt, in flight), to relay to another process."""
        return dict(self._committed), dict(self._in_doubt), dict(self._in_flight)

    def load(self, *states: tuple[dict[str, int], dict[str, int], dict[str, int]]) -> None:
        """Replace the counters by the sum of relayed states (one per driver process)."""
        self._committed, self._in_doubt, self._in_flight = Counter(), Counter(), Counter()
        for committed, in_doubt, in_flight in states:
            self._committed.update(committed)
            self._in_doubt.update(in_doubt)
            self._in_flight.update(in_flight)

    def snapshot(self) -> LedgerSnapshot:
        names = set(self._committed) | set(self._in_doubt) | set(self._in_flight)
        return LedgerSnapshot(
            units={
                n: LedgerEntry(
                    committed=self._committed[n],
                    in_doubt=self._in_doubt[n],
                    in_flight=self._in_flight[n],
                )
                for n in sorted(names)
            }
        )


def ledger_bounds(
    before: LedgerSnapshot, after: LedgerSnapshot, per_unit: dict[str, float]
) -> tuple[float, float]:
    """The change a state measure may show given the ledger read before and after it: at
    least what was committed before the measure was taken, at most what was committed, in
    doubt or in flight after it (``per_unit``: the measure's change per committed unit)."""
    low = sum(w * before.entry(u).committed for u, w in per_unit.items())
    high = sum(
        w * (after.entry(u).committed + after.entry(u).in_doubt + after.entry(u).in_flight)
        for u, w in per_unit.items()
    )
    return (min(low, high), max(low, high))
