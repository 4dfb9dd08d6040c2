"""A non-editable install (a wheel) carries the scenario and workload libraries with it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_wheel_ships_the_libraries_and_the_loader_finds_them_there(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("dbaops-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        z.extractall(site)
    for name in ("timelines/pg-p-02.yaml", "timelines/scenario.schema.json", "workloads/shop.yaml"):
        assert f"dbaops/_library/{name}" in names
    # run from a directory without a checkout: the installed copy is what it finds
    probe = (
        "import dbaops; from dbaops.scenario.loader import load_scenario, timelines_dir;"
        "sc, lib, _ = load_scenario('pg-p-02');"
        "print(dbaops.__file__, timelines_dir(), lib.id, sep='\\n')"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBAOPS_")}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True, capture_output=True,
        text=True,
    )  # fmt: skip
    module, library, lib_id = done.stdout.split()
    assert Path(module).is_relative_to(site)
    assert Path(library) == site / "dbaops" / "_library" / "timelines"
    assert lib_id == "shop"
