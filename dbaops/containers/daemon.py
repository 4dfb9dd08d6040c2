"""The Docker daemon a container backend talks to (aiodocker over the local socket)."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiodocker

#: The socket dbaops talks to ($DOCKER_HOST when it names a unix socket).
DEFAULT_SOCKET = "/var/run/docker.sock"


class DockerUnavailable(RuntimeError):
    """No Docker daemon answers: the container backend cannot run here."""


def docker_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    return host.removeprefix("unix://") if host.startswith("unix://") else DEFAULT_SOCKET


def daemon_problem() -> str | None:
    """Why there is no daemon to talk to (None: a socket is there; ``docker_client`` checks
    that it answers)."""
    if not Path(docker_socket()).exists():
        return (
            f"no Docker daemon: {docker_socket()} does not exist (Debian: apt-get install "
            "docker.io, then start dockerd; see .ci/docker.sh)"
        )
    return None


def daemon_unavailable() -> str | None:
    """Why no Docker daemon answers here (None: one does): a blocking ``/_ping`` over the
    socket, for callers outside an event loop (test collection, listings)."""
    problem = daemon_problem()
    if problem:
        return problem
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(docker_socket())
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(64)
    except OSError as exc:
        return f"the Docker daemon at {docker_socket()} does not answer: {exc}"
    if b" 200 " not in reply:
        return f"the Docker daemon at {docker_socket()} answers {reply[:40]!r} to a ping"
    return None


async def open_docker() -> aiodocker.Docker:
    """A client of the local daemon (close it when done); a clear error when none answers."""
    problem = daemon_problem()
    if problem:
        raise DockerUnavailable(problem)
    client = aiodocker.Docker(url=f"unix://{docker_socket()}")
    try:
        await client.version()
    except (aiodocker.DockerError, OSError) as exc:
        await client.close()
        raise DockerUnavailable(
            f"the Docker daemon at {docker_socket()} does not answer: {exc}"
        ) from exc
    return client


@asynccontextmanager
async def docker_client() -> AsyncIterator[aiodocker.Docker]:
    """A client of the local daemon for the duration of a block."""
    client = await open_docker()
    try:
        yield client
    finally:
        await client.close()
