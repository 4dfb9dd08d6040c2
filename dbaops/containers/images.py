"""Container images built from Debian packages alone (no registry), cached by content hash.

Two layers, each tagged with a hash of everything that goes into it, so an image is rebuilt
exactly when its recipe changes and found again otherwise:

- a base: ``debootstrap --variant=minbase <suite>`` from the host's own Debian mirror, with a
  ``policy-rc.d`` that keeps packages from starting services, added ``FROM scratch``
  (``dbaops/debian:<suite>-<hash>``);
- PostgreSQL of one major version from that suite's packages (15 from bookworm, 17 from
  trixie): ``dbaops/postgres:<major>-<hash>``, with the Debian packaging's own cluster creation
  turned off (dbaops runs initdb itself).

A user whose machine has a registry names an image instead (``--image``); it is pulled when
missing and must hold ``/usr/lib/postgresql/<major>/bin``.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import aiodocker
import anyio
from pydantic import BaseModel

#: The Debian suite whose packages give each PostgreSQL major version.
POSTGRES_SUITES: dict[int, str] = {15: "bookworm", 17: "trixie"}
#: The host's apt sources (deb822), which the images use as their own.
HOST_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
LABEL = "dbaops.recipe"

Progress = Callable[[str], None]


class ImageError(RuntimeError):
    """An image could not be built, pulled or used."""


class PostgresImage(BaseModel):
    """A PostgreSQL server image and what it holds."""

    tag: str
    major: int
    bindir: str
    version: str  # what its ``postgres --version`` reports, e.g. 15.20
    from_registry: bool = False  # named by the user (--image) rather than built by dbaops
    built: bool = False  # built (or pulled) by this call rather than found


def host_sources() -> str:
    """The host's Debian sources (deb822), or a plain default."""
    if HOST_SOURCES.exists():
        return HOST_SOURCES.read_text()
    return (
        f"Types: deb\nURIs: {DEFAULT_MIRROR}\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def sources_for(suite: str, sources: str) -> str:
    """The host's sources with its suite replaced by ``suite`` (bookworm-updates becomes
    trixie-updates and so on)."""
    host_suite = re.search(r"^Suites:\s*([a-z]+)", sources, re.MULTILINE)
    if host_suite is None:
        return sources
    return re.sub(rf"\b{host_suite.group(1)}(?=[\s-]|$)", suite, sources)


def mirror(sources: str) -> str:
    """The first mirror of the sources (where debootstrap fetches the base)."""
    m = re.search(r"^URIs:\s*(\S+)", sources, re.MULTILINE)
    return m.group(1) if m else DEFAULT_MIRROR


def recipe_hash(recipe: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def base_recipe(suite: str, sources: str) -> dict[str, str]:
    return {
        "kind": "debian-base",
        "suite": suite,
        "mirror": mirror(sources),
        "variant": "minbase",
        "dockerfile": BASE_DOCKERFILE,
        "policy-rc.d": POLICY_RC_D,
    }


def postgres_dockerfile(base_tag: str, major: int) -> str:
    return POSTGRES_DOCKERFILE.format(base=base_tag, major=major)


BASE_DOCKERFILE = 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n'
POLICY_RC_D = "#!/bin/sh\nexit 101\n"
POSTGRES_DOCKERFILE = """\
FROM {base}
COPY debian.sources /etc/apt/sources.list.d/debian.sources
RUN rm -f /etc/apt/sources.list \\
 && mkdir -p /etc/postgresql-common \\
 && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \\
 && apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      postgresql-{major} iproute2 \\
 && apt-get clean && rm -rf /var/lib/apt/lists/*
STOPSIGNAL SIGINT
CMD ["sleep", "infinity"]
"""


async def _image_exists(client: aiodocker.Docker, tag: str) -> bool:
    try:
        await client.images.inspect(tag)
        return True
    except aiodocker.DockerError:
        return False


def _context(files: dict[str, bytes | Path]) -> io.BytesIO | tempfile.SpooledTemporaryFile[bytes]:
    """A build context: a tar of the given files (bytes, or a file on disk)."""
    out: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(max_size=1 << 24)
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, content in files.items():
            if isinstance(content, Path):
                tar.add(content, arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    out.seek(0)
    return out


async def _build(
    client: aiodocker.Docker,
    tag: str,
    files: dict[str, bytes | Path],
    labels: dict[str, str],
    progress: Progress,
) -> None:
    context = await anyio.to_thread.run_sync(_context, files)
    try:
        async for chunk in client.images.build(
            fileobj=context, encoding="identity", tag=tag, labels=labels, stream=True, forcerm=True
        ):
            if "error" in chunk:
                raise ImageError(f"building {tag} failed: {chunk['error'].strip()}")
            line = str(chunk.get("stream", "")).strip()
            if line:
                progress(line)
    except aiodocker.DockerError as exc:
        raise ImageError(f"building {tag} failed: {exc}") from exc
    finally:
        context.close()


def _debootstrap(suite: str, mirror_url: str, rootfs: Path, progress: Progress) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageError(
            "building a base image needs debootstrap (Debian: apt-get install debootstrap), or "
            "name an image of your registry with --image"
        )
    cmd = ["debootstrap", "--variant=minbase", suite, str(rootfs), mirror_url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        progress(line.strip())
        tail = [*tail[-19:], line.rstrip()]
    if proc.wait() != 0:
        raise ImageError(f"{' '.join(cmd)} failed:\n" + "\n".join(tail))
    policy = rootfs / "usr" / "sbin" / "policy-rc.d"
    policy.write_text(POLICY_RC_D)
    policy.chmod(0o755)


def _tar_rootfs(rootfs: Path, target: Path) -> None:
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(target), "."], check=True)


async def ensure_base(
    client: aiodocker.Docker, suite: str, work: Path, progress: Progress
) -> tuple[str, bool]:
    """The base image of ``suite`` (built when missing); returns its tag and whether it was
    built now."""
    sources = host_sources()
    recipe = base_recipe(suite, sources)
    tag = f"dbaops/debian:{suite}-{recipe_hash(recipe)}"
    if await _image_exists(client, tag):
        return tag, False
    await anyio.Path(work).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work, prefix=f"base-{suite}-") as tmp:
        rootfs, archive = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        progress(f"debootstrap {suite} from {recipe['mirror']} (about a minute)")
        await anyio.to_thread.run_sync(_debootstrap, suite, recipe["mirror"], rootfs, progress)
        await anyio.to_thread.run_sync(_tar_rootfs, rootfs, archive)
        progress(f"adding the {suite} root filesystem as {tag}")
        await _build(
            client,
            tag,
            {"Dockerfile": BASE_DOCKERFILE.encode(), "rootfs.tar": archive},
            {LABEL: json.dumps(recipe)},
            progress,
        )
    return tag, True


def bindir_of(major: int) -> str:
    """Where Debian's packaging (and so the images) keeps PostgreSQL ``major``'s binaries."""
    return f"/usr/lib/postgresql/{major}/bin"


async def _server_version(client: aiodocker.Docker, tag: str, major: int) -> str:
    """What the image's PostgreSQL ``major`` server says its version is (one short-lived
    container; an error if the image holds no such server)."""
    postgres = f"{bindir_of(major)}/postgres"
    container = await client.containers.run(
        {"Image": tag, "Entrypoint": [], "Cmd": [postgres, "--version"]}
    )
    try:
        status = await container.wait()
        out = "".join(await container.log(stdout=True, stderr=True))
    finally:
        await container.delete(force=True)
    if status.get("StatusCode") != 0:
        raise ImageError(f"image {tag} holds no PostgreSQL {major} server ({postgres})")
    words = out.split()
    return words[-1] if words else "unknown"


async def ensure_postgres_image(
    client: aiodocker.Docker,
    major: int,
    work: Path,
    progress: Progress,
    image: str | None = None,
) -> PostgresImage:
    """A PostgreSQL ``major`` image: ``image`` (pulled when missing) or dbaops' own, built
    from Debian packages when missing."""
    if image is not None:
        built = False
        if not await _image_exists(client, image):
            progress(f"pulling {image}")
            try:
                await client.images.pull(image)
            except aiodocker.DockerError as exc:
                raise ImageError(f"image {image} is not here and cannot be pulled: {exc}") from exc
            built = True
        return PostgresImage(
            tag=image,
            major=major,
            bindir=bindir_of(major),
            version=await _server_version(client, image, major),
            from_registry=True,
            built=built,
        )
    suite = POSTGRES_SUITES.get(major)
    if suite is None:
        raise ImageError(
            f"no Debian suite gives PostgreSQL {major} (dbaops builds "
            f"{', '.join(map(str, POSTGRES_SUITES))}); name an image with --image"
        )
    base, base_built = await ensure_base(client, suite, work, progress)
    sources = sources_for(suite, host_sources())
    dockerfile = postgres_dockerfile(base, major)
    recipe = {"kind": "postgres", "major": str(major), "dockerfile": dockerfile, "sources": sources}
    tag = f"dbaops/postgres:{major}-{recipe_hash(recipe)}"
    built = False
    if not await _image_exists(client, tag):
        progress(f"installing PostgreSQL {major} from {suite} into {tag} (about a minute)")
        await _build(
            client,
            tag,
            {"Dockerfile": dockerfile.encode(), "debian.sources": sources.encode()},
            {LABEL: json.dumps(recipe)},
            progress,
        )
        built = True
    return PostgresImage(
        tag=tag,
        major=major,
        bindir=bindir_of(major),
        version=await _server_version(client, tag, major),
        built=built or base_built,
    )
