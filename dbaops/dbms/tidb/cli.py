"""``dbaops tidb``: getting the ``tidb-server`` that TiDB scenarios run on (an engine's
commands: its package's ``cli.APP``, added by :mod:`dbaops.cli` under the engine's name)."""

from __future__ import annotations

from typing import Annotated

import anyio
import typer

APP = typer.Typer(no_args_is_help=True, help="The TiDB server TiDB scenarios run on.")


@APP.command("build")
def build_cmd(
    force: Annotated[
        bool, typer.Option("--force", help="build again even when this recipe's build exists")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="print every step")] = False,
) -> None:
    """Build tidb-server (TiDB's SQL layer with its embedded unistore storage) at dbaops'
    pinned commit from the Go module proxy, with your Go toolchain, into dbaops' cache. The
    first build downloads about 1.9 GB of modules and compiles for 10-15 minutes on 2 cores."""
    from rich.status import Status

    from dbaops.cli import _error, console
    from dbaops.dbms.tidb.build import TidbBuildError, build_tidb_server

    with Status("tidb-server", console=console) as status:

        def progress(line: str) -> None:
            status.update(f"[bold]tidb-server[/bold] {line[:110]}")
            if verbose:
                console.print(line, highlight=False)

        try:
            build = anyio.run(lambda: build_tidb_server(force=force, progress=progress))
        except TidbBuildError as exc:
            _error(exc)
            raise typer.Exit(2) from None
    console.print(
        f"{build.binary}: TiDB {build.release_version} (commit {build.commit[:12]}, "
        f"{build.go_version}, built {build.built_at} in {build.seconds:.0f} s)",
        highlight=False,
        soft_wrap=True,
    )


@APP.command("where")
def where_cmd() -> None:
    """Print the tidb-server dbaops would use, where it was found, and its version."""
    from dbaops.cli import _error, console
    from dbaops.dbms.tidb.binary import TidbServerNotFound, find_tidb_server
    from dbaops.dbms.tidb.server import TidbError, binary_version

    try:
        found = find_tidb_server()
        version = binary_version(found.path)
    except (TidbServerNotFound, TidbError) as exc:
        _error(exc)
        raise typer.Exit(2) from None
    console.print(f"{found.path} ({found.source}): TiDB {version}", highlight=False, soft_wrap=True)
