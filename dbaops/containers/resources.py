"""The resource limits a scenario gives its server's container."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ServerResources(BaseModel):
    """CPU and memory limits of the server's container (the docker backend applies them and
    the run header records them; an embedded server runs unlimited)."""

    model_config = ConfigDict(extra="forbid")

    cpus: float | None = Field(default=None, gt=0, le=256, description="CPUs (may be fractional)")
    memory_mb: int | None = Field(default=None, ge=64, description="memory limit (no swap), MiB")
    disk_mb: int | None = Field(
        default=None,
        ge=64,
        le=65536,
        description="the data directory on a volume of its own of this size, MiB (an ext4 file, "
        "loop-mounted: a real, recoverable disk-full); WAL and the server log stay off it",
    )
    shm_mb: int = Field(
        default=512, ge=64, description="/dev/shm, MiB (parallel query's dynamic shared memory)"
    )
