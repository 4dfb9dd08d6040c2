"""Errors of an engine's server control that the run handles without knowing which engine
runs (a timed fault that cannot act is recorded as failed and the run goes on)."""

from __future__ import annotations


class InstanceError(RuntimeError):
    """The server could not be controlled as asked: started, stopped, restarted, restored
    from a snapshot, or changed on its machine."""
