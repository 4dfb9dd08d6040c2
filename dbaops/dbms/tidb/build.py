"""Building ``tidb-server`` from the Go module proxy: TiDB's SQL layer with its embedded
unistore storage, at one pinned commit.

The recipe is a wrapper module (``recipe/go.mod`` and ``recipe/go.sum``, shipped with dbaops)
that requires TiDB at that commit and repeats TiDB's own replace directives. The build runs the
user's Go toolchain (never a downloaded one: ``GOTOOLCHAIN=local``), stamps the release version,
commit and build time into the binary (so the server reports the truth, not TiDB's
placeholder), and leaves the binary with a ``build.json`` that records all of it in dbaops'
cache, keyed by the release version and a hash of the recipe: a second build of the same recipe
is a cache hit.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from dbaops.cache import cache_dir

#: The TiDB commit dbaops builds (master of 2025-11-26, between v8.5 and v9.0).
TIDB_COMMIT = "e4e814fdc0afe9c3a6e5e96f129d83df802ab820"
#: The module version of that commit on the Go module proxy (ask for exactly this one: the
#: proxy lists no versions of github.com/pingcap/tidb).
TIDB_MODULE_VERSION = "v1.1.0-beta.0.20251126154744-e4e814fdc0af"
#: The release version the server reports: TiDB's master at that commit, on its way to 9.0
#: (an untagged commit; ``tidb_version()`` also shows the commit and build time).
TIDB_RELEASE_VERSION = "v9.0.0-master.20251126"
#: The oldest Go toolchain TiDB at that commit builds with (its go.mod's ``go`` line).
MIN_GO = (1, 23, 6)
_PACKAGE = "github.com/pingcap/tidb/cmd/tidb-server"
_PARSER_MYSQL = "github.com/pingcap/tidb/pkg/parser/mysql"
_VERSIONINFO = "github.com/pingcap/tidb/pkg/util/versioninfo"


class TidbBuildError(RuntimeError):
    """``tidb-server`` could not be built (no Go toolchain, a failed download or compile)."""


class TidbBuild(BaseModel):
    """A built ``tidb-server`` and how it was built (``build.json`` beside the binary)."""

    binary: Path = Field(description="the executable")
    release_version: str
    commit: str = Field(description="the TiDB commit")
    recipe: str = Field(description="hash of the wrapper module (go.mod + go.sum) and flags")
    go_version: str
    ldflags: str
    built_at: str = Field(description="UTC, ISO 8601")
    seconds: float = Field(description="how long the build took")


def _recipe_files() -> dict[str, bytes]:
    base = resources.files("dbaops.dbms.tidb") / "recipe"
    return {name: (base / name).read_bytes() for name in ("go.mod", "go.sum")}


def ldflags(built_at: str) -> str:
    """The linker flags: version stamps, stripped symbols, and ``-checklinkname=0`` (TiDB's
    dependencies use ``go:linkname`` into the runtime, which Go 1.23+ refuses by default)."""
    return " ".join(
        [
            "-checklinkname=0",
            "-s",
            "-w",
            f"-X {_PARSER_MYSQL}.TiDBReleaseVersion={TIDB_RELEASE_VERSION}",
            f"-X {_VERSIONINFO}.TiDBGitHash={TIDB_COMMIT}",
            f"-X {_VERSIONINFO}.TiDBGitBranch=master",
            f"-X {_VERSIONINFO}.TiDBBuildTS={built_at}",
        ]
    )


def recipe_hash() -> str:
    """What decides the binary: the wrapper module, the flags (the build time aside)."""
    digest = hashlib.sha256(ldflags("").encode())
    for name, data in sorted(_recipe_files().items()):
        digest.update(name.encode() + b"\0" + data)
    return digest.hexdigest()[:12]


def build_dir() -> Path:
    """Where this recipe's binary lives in dbaops' cache."""
    return cache_dir("tidb") / f"{TIDB_RELEASE_VERSION}-{recipe_hash()}"


#: The reference files the knowledge base reads, by their path in TiDB's module.
REFERENCE_FILES = {
    "errors.toml": "errors.toml",
    "tidb_vars.go": "pkg/sessionctx/variable/tidb_vars.go",
    "sysvar.go": "pkg/sessionctx/variable/sysvar.go",
}


def reference_dir() -> Path:
    """Where the TiDB reference the knowledge base reads is kept (beside the build)."""
    return build_dir() / "reference"


def module_dir() -> Path:
    """TiDB's module in Go's module cache ($GOMODCACHE, else $GOPATH/pkg/mod, ~/go/pkg/mod)."""
    cache = os.environ.get("GOMODCACHE") or str(
        Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod"
    )
    return Path(cache) / "github.com" / "pingcap" / f"tidb@{TIDB_MODULE_VERSION}"


def keep_reference() -> Path | None:
    """Copy TiDB's error reference and system-variable sources from the module cache beside
    the build (where the knowledge base reads them); None when the module is not there."""
    source, target = module_dir(), reference_dir()
    if all((target / name).exists() for name in REFERENCE_FILES):
        return target
    if not all((source / rel).exists() for rel in REFERENCE_FILES.values()):
        return None
    target.mkdir(parents=True, exist_ok=True)
    for name, rel in REFERENCE_FILES.items():
        shutil.copyfile(source / rel, target / name)
    return target


def cached_build() -> TidbBuild | None:
    """The build of the current recipe, when there is one."""
    record = build_dir() / "build.json"
    if not record.exists():
        return None
    build = TidbBuild.model_validate_json(record.read_text())
    return build if build.binary.exists() else None


def find_go() -> Path:
    """The Go toolchain: ``go`` on PATH, else ``/usr/local/go/bin/go``; it must be at least
    :data:`MIN_GO`."""
    found = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if found is None:
        raise TidbBuildError(
            "building tidb-server needs a Go toolchain >= "
            f"{'.'.join(map(str, MIN_GO))} (https://go.dev/dl/), and none is on PATH"
        )
    return Path(found)


def parse_go_version(text: str) -> tuple[int, int, int]:
    """``go version go1.26.8 linux/amd64`` → (1, 26, 8)."""
    m = re.search(r"go(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        raise TidbBuildError(f"cannot read the Go version from {text.strip()!r}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


async def _go_version(go: Path) -> str:
    done = await anyio.run_process([str(go), "version"], env=_go_env(), check=False)
    text = done.stdout.decode().strip()
    if done.returncode != 0:
        raise TidbBuildError(f"{go} version failed: {done.stderr.decode().strip()}")
    if parse_go_version(text) < MIN_GO:
        raise TidbBuildError(
            f"{text}: tidb-server needs Go >= {'.'.join(map(str, MIN_GO))} (https://go.dev/dl/)"
        )
    return text


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"  # never fetch another toolchain
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"
    env.setdefault("CGO_ENABLED", "1")
    return env


async def build_tidb_server(
    *, force: bool = False, progress: Callable[[str], None] | None = None
) -> TidbBuild:
    """Build ``tidb-server`` into dbaops' cache (or find the build of this recipe there).

    ``progress`` hears about the steps (downloads, the number of packages compiled). The
    first build downloads about 1.9 GB of modules and compiles for 10–15 minutes on 2 cores;
    Go's module and build caches make a rebuild of the same commit a matter of linking."""
    say = progress or (lambda _msg: None)
    target = build_dir()
    target.mkdir(parents=True, exist_ok=True)
    fd = os.open(target / ".build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                say("waiting for another build of tidb-server")
                await anyio.sleep(1.0)
        if not force and (found := cached_build()) is not None:
            keep_reference()
            return found
        built = await _build(target, say)
        keep_reference()
        return built
    finally:
        os.close(fd)


async def _build(target: Path, say: Callable[[str], None]) -> TidbBuild:
    go = find_go()
    go_version = await _go_version(go)
    src = target / "src"
    src.mkdir(exist_ok=True)
    for name, data in _recipe_files().items():
        (src / name).write_bytes(data)
    (src / "main.go").unlink(missing_ok=True)
    built_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    flags = ldflags(built_at)
    partial = target / "tidb-server.partial"
    command = [str(go), "build", "-v", "-trimpath", f"-ldflags={flags}", "-o", str(partial)]
    t0 = time.monotonic()
    say(f"building tidb-server {TIDB_RELEASE_VERSION} with {go_version}")
    tail: list[str] = []
    compiled = 0
    async with await anyio.open_process(
        [*command, _PACKAGE], cwd=src, env=_go_env(), stdout=None, stderr=-1
    ) as proc:
        assert proc.stderr is not None
        pending = b""
        async for chunk in proc.stderr:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace").strip()
                tail = [*tail[-39:], line]
                if line.startswith("go: downloading"):
                    say(line.removeprefix("go: "))
                elif line and not line.startswith("#"):
                    compiled += 1
                    say(f"compiled {compiled} packages ({line})")
        code = await proc.wait()
    if code != 0:
        partial.unlink(missing_ok=True)
        raise TidbBuildError(
            f"go build of tidb-server failed (exit {code}) in {src}:\n" + "\n".join(tail)
        )
    binary = target / "tidb-server"
    partial.rename(binary)
    build = TidbBuild(
        binary=binary,
        release_version=TIDB_RELEASE_VERSION,
        commit=TIDB_COMMIT,
        recipe=recipe_hash(),
        go_version=go_version,
        ldflags=flags,
        built_at=built_at,
        seconds=round(time.monotonic() - t0, 1),
    )
    (target / "build.json").write_text(build.model_dump_json(indent=2) + "\n")
    say(f"built {binary} in {build.seconds:.0f} s")
    return build
