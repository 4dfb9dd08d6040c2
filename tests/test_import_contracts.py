"""The engine seam's import contracts (``.importlinter``), checked by import-linter: engine
packages are private, drivers stay in them, the scenario layer is a leaf, and the engines do
not import each other. Known violations are listed in the file and may only go away."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold() -> None:
    linter = shutil.which("lint-imports")
    assert linter, "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run(
        [linter, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
