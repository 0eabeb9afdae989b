"""Building a corpus row's image: `docker build` of the row's Dockerfile FROM the local base
image (nothing is pulled), skipped when the engine already has the tag (a hash of the
recipe: sandbatch.corpus.Row.image).

The build context is the row's directory and corpus/_common/, plus what the machine
provides and the recipe does not pin: the spec's Python as pyenv built it, with only the
pip and setuptools a fresh build has (copied to the same prefix in the image,
/root/.pyenv/versions/<X.Y.Z>, and linked as the conda environment
/opt/miniconda3/envs/testbed that swebench's eval scripts activate), and the host's CA
bundle for pip behind a TLS-intercepting proxy (ca.crt).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..core.errors import InfraError, UserError
from ..core.failures import FailureClass
from . import COMMON, Row

BASE_IMAGE = os.environ.get("SANDBATCH_BASE_IMAGE", "sandbatch/base:bookworm")
PYENV = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
# what a pyenv prefix holds that is this machine's, not Python's: its own files, and whatever was
# installed into it (the machine's own interpreter may be the pyenv build a row's spec names: 3.11
# here, with 200 distributions, pytest 9 among them); a fresh build's site-packages and bin/ are kept
_MACHINE_FILES = shutil.ignore_patterns("_sandboxing_*", "__pycache__", "*.pyc")
_PYTHON_OWN = re.compile(r"(pip|setuptools|pkg_resources|_distutils_hack)(-[^/]+\.dist-info)?|distutils-precedence\.pth"
                         r"|easy_install\.py|README\.txt")
_PYTHON_BIN = re.compile(r"(python|pip|pydoc|idle|2to3|easy_install)[0-9.]*(-[0-9.]+)?(-config|-gdb\.py)?")


def _not_python(prefix: Path):
    """shutil.copytree's ignore for a pyenv prefix: the files above, and every distribution beyond the
    pip and setuptools a fresh build has, with their scripts."""
    def ignore(directory: str, names: list[str]) -> set[str]:
        out = set(_MACHINE_FILES(directory, names))
        d = Path(directory)
        if d.name == "site-packages" and d.parent.parent == prefix / "lib":
            out |= {n for n in names if not _PYTHON_OWN.fullmatch(n)}
        elif d == prefix / "bin":
            out |= {n for n in names if not _PYTHON_BIN.fullmatch(n)}
        return out
    return ignore


def pyenv_python(version: str) -> Path:
    """The newest pyenv build of `version` (3.9 -> /root/.pyenv/versions/3.9.18)."""
    found = sorted((p for p in PYENV.glob(f"{version}.*") if p.name.count(".") == 2 and (p / "bin").is_dir()),
                   key=lambda p: [int(x) for x in p.name.split(".") if x.isdigit()])
    if not found:
        raise UserError(f"corpus: no pyenv Python {version} under {PYENV}; install it (`pyenv install {version}`)")
    return found[-1]


def exists(tag: str, docker: str = "docker") -> bool:
    return subprocess.run([docker, "image", "inspect", tag], capture_output=True).returncode == 0


def build(row: Row, docker: str = "docker", timeout: float = 3600, fresh: bool = False) -> tuple[str, float | None]:
    """(tag, seconds the build took; None when the engine already had it). fresh: build it again,
    with no cached layer (to measure a fresh machine's build)."""
    tag = row.image()
    if not fresh and exists(tag, docker):
        return tag, None
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sandbatch-corpus-") as tmp:
        ctx = Path(tmp) / "ctx"
        shutil.copytree(row.dir, ctx, ignore=shutil.ignore_patterns("row.json", "lists.json"))
        shutil.copytree(COMMON, ctx / "_common")
        args = ["--build-arg", f"BASE={BASE_IMAGE}"]
        if row.python:
            py = pyenv_python(row.python)
            shutil.copytree(py, ctx / "python", symlinks=True, ignore=_not_python(py))
            args += ["--build-arg", f"PY={py.name}"]
        ca = next((c for c in (os.environ.get("SSL_CERT_FILE"), *CA_BUNDLES) if c and os.path.isfile(c)), None)
        (ctx / "ca.crt").write_bytes(Path(ca).read_bytes() if ca else b"")
        proc = subprocess.run([docker, "build", *(["--no-cache"] if fresh else []), "-t", tag, *args, str(ctx)],
                              capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise InfraError(f"corpus: building {tag} for {row.id} failed:\n{(proc.stdout + proc.stderr)[-3000:]}",
                         FailureClass.IMAGE_BUILD)
    return tag, time.monotonic() - start
