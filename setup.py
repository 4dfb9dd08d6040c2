"""Ships the scenario and workload libraries (``timelines/``, ``workloads/``) inside the
package, as ``dbaops/_library/``, so that a non-editable install finds them (the loader
falls back to them when there is no repository checkout beside the package)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LIBRARIES = ("timelines", "workloads")


class BuildWithLibraries(build_py):
    """``build_py`` that also copies the declarative libraries into the built package."""

    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for name in LIBRARIES:
            for src in sorted((root / name).rglob("*")):
                if src.is_file():
                    dst = Path(self.build_lib, "dbaops", "_library", src.relative_to(root))
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    self.copy_file(str(src), str(dst))


setup(cmdclass={"build_py": BuildWithLibraries})
