"""The wheel's build step: the files a run needs that live outside src/ (the Snakefile, the
workflow's rules and step scripts, the schemas, the shipped configs and profiles, the bundled
smoke benchmark) are copied into the package as sandbatch/_bundle/, laid out as in the
repository, so the installed tool runs from any directory (sandbatch.core.resources finds
them). They stay where they are in the repository, which runs from its checkout as before.
Everything else is declared in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# the same list is in MANIFEST.in (the source distribution the wheel is built from)
BUNDLE = ("Snakefile", "workflow", "schemas", "config", "profiles", "data/smoke")


class BuildPyWithBundle(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own files
        dest = Path(self.build_lib) / "sandbatch" / "_bundle"
        shutil.rmtree(dest, ignore_errors=True)  # nothing stale from an earlier build in build/
        for name in BUNDLE:
            src, out = HERE / name, dest / name
            if not src.exists():
                raise SystemExit(f"setup.py: {src} is missing; build from a checkout or its sdist")
            out.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache",
                                                                         ".snakemake"))
            else:
                shutil.copy2(src, out)


setup(cmdclass={"build_py": BuildPyWithBundle})
