"""Scoring a recorded run where no database driver can be imported (for tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Runs in a fresh interpreter: every database driver's import fails, then the run is scored.
_PROBE = """
import importlib.abc, json, sys
class _NoDrivers(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("asyncpg", "aiomysql", "pymysql"):
            raise ImportError(f"no database driver here: {name}")
        return None
sys.meta_path.insert(0, _NoDrivers())
from dbaops.evaluation.score import score_run
print(json.dumps(score_run(sys.argv[1]).model_dump(mode="json")))
"""


def score_without_drivers(run_dir: Path) -> dict[str, Any]:
    """The verdict of ``run_dir`` (as JSON) scored in a fresh interpreter in which asyncpg,
    aiomysql and pymysql cannot be imported: scoring is offline."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(run_dir)], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise AssertionError(f"scoring without drivers failed:\n{out.stderr[-3000:]}")
    verdict: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return verdict
