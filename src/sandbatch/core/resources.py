"""Where the files a run needs live: the Snakefile, the workflow's rules and step scripts, the
schemas, the shipped configs and the bundled smoke benchmark.

In a checkout (an editable install, or `src/` on the path) they are the repository's own
files beside `src/`. An installed wheel carries copies of them in `sandbatch/_bundle/`,
laid out as in the repository (setup.py's build step), so the Snakefile's relative
`include:`s and `configfile:` resolve the same way in both. Every path to them is computed
here, nowhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import REPO_ROOT
from .errors import UserError

BUNDLE = Path(__file__).resolve().parents[1] / "_bundle"


def root() -> Path:
    """The directory holding the Snakefile, workflow/, schemas/, config/ and data/smoke/."""
    return BUNDLE if (BUNDLE / "Snakefile").is_file() else REPO_ROOT


def resource(*parts: str) -> Path:
    """A file or directory under the root, e.g. resource("config", "default.yaml")."""
    return root().joinpath(*parts)


def snakefile() -> Path:
    return resource("Snakefile")


def schema(name: str) -> Path:
    """A JSON Schema under schemas/ (config.schema.yaml, tasks/<family>.schema.yaml)."""
    return resource("schemas", name)


def default_config() -> Path:
    return resource("config", "default.yaml")


def config_file(arg: str | os.PathLike, must_exist: bool = False) -> Path:
    """A config file as the user names it: a path that exists here, else a shipped config by
    name ("swe_verified"), file name or repository path ("config/swe_verified.yaml"), so the
    installed tool reads the commands the docs show from any directory. Anything else is
    returned as given, for the config loader to report missing (or, must_exist, reported here)."""
    path = Path(arg)
    if path.exists():
        return path
    name = path.name if path.parent in (Path("."), Path("config")) else None
    if name:
        shipped = resource("config", name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
        if shipped.is_file():
            return shipped
    if must_exist:
        shipped = sorted(p.stem for p in resource("config").glob("*.yaml"))
        raise UserError(f"{arg}: neither a file nor a shipped config; the shipped ones: {', '.join(shipped)}")
    return path
