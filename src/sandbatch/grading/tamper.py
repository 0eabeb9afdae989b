"""Tests belong to the benchmark, not to the agent: what of a patch is neutralised before grading.

After the agent's patch is applied in the grading sandbox, every path it touched that can
change how tests are collected, run or reported is restored as the workdir had it before
the patch (the base commit plus the task image's own edits), or removed when the patch
created it, and each is recorded as a `tampering` entry {path, kind, action}:

- test_file: test files and directories by the conventions of the languages we grade,
  and every file the task's own test_patch / selected test files name;
- runner_hook: code the test runner or interpreter loads by itself (conftest.py anywhere,
  .pth files, sitecustomize.py / usercustomize.py, anything under .git/), installed-distribution
  metadata (*.dist-info/, *.egg-info/, entry_points.txt: pytest loads the pytest11 entry points
  of every distribution on sys.path), compiled code (*.pyc, __pycache__/, extension modules,
  *.class: the interpreter prefers some of them to the source the diff shows), and the files
  that decide what a package manager's loader pulls in (composer's autoload, Yarn PnP);
- runner_config: test-runner configuration (pytest.ini, tox.ini, jest/vitest/mocha/karma
  configs, .cargo/config, phpunit.xml, go.work, ...), and the test-runner parts of files
  that mix code and configuration (MIXED below): such a file keeps the agent's change
  unless its test-runner parts differ from the file before the patch, then the whole file
  is restored (a fix never needs to change how its tests run);
- shim: executables and modules that the test command could resolve to instead of the
  image's own (a `pytest`, `python`, `go` or `npm` file anywhere in the workdir, a
  `pytest` package at its root that `python -m pytest` would import, node_modules/,
  virtualenvs), and anything under a dependency directory (vendor/, Ruby's vendor/bundle)
  that the workdir did not track before the patch: the dependencies are the image's.

A path that existed before the patch goes back to what it was, tracked or not (the image's
own build output, such as an editable install's *.egg-info, is kept: apply_patch saves the
untracked files a patch names before applying it).

docs/benchmarks.md ("What the grader restores") states the rules and their limits.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Callable

from ..contracts.tasks import SweBenchProTask, SweTask, Task
from ..core.errors import InfraError
from ..core.failures import FailureClass
from . import workdir_reads

if TYPE_CHECKING:
    from ..sandbox import Sandbox

# --- which paths ------------------------------------------------------------------------

# test files by name (any directory)
TEST_FILE_GLOBS = (
    "test_*.py", "*_test.py",  # pytest
    "*_test.go",  # go
    "*.test.[jt]s", "*.test.[jt]sx", "*.test.[mc][jt]s", "*.spec.[jt]s", "*.spec.[jt]sx", "*.spec.[mc][jt]s", "*.snap",
    "*_spec.rb", "*_test.rb",  # ruby
    "*Test.java", "*Tests.java", "*Test.kt", "*Test.php",  # junit, phpunit
)
# test directories, anywhere in the path
TEST_DIRS = {"tests", "__tests__", "__snapshots__", "__mocks__", "testdata", "spec"}
# test directories that are also common package names (django.test, numpy.testing): at the root,
# under src/ (src/test/java), or anywhere for non-Python files
TEST_DIRS_SHALLOW = {"test", "testing"}
HOOK_NAMES = {"conftest.py", "sitecustomize.py", "usercustomize.py"}
# what the interpreter imports at start-up by module name: in any form (module, package, compiled,
# an extension module's platform-tagged name)
STARTUP_MODULES = {"sitecustomize", "usercustomize"}
CONFIG_GLOBS = (
    "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "noxfile.py", ".coveragerc",
    "jest.config.*", "jest.setup.*", "jest.preset.*", "vitest.config.*", "vitest.workspace.*", "vitest.setup.*",
    ".mocharc*", "karma.conf.*", "ava.config.*", ".taprc", "playwright.config.*", "cypress.config.*",
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", "bunfig.toml",  # npm's node-options preloads code
    "babel.config.*", ".babelrc*",  # jest transforms the test files with it
    "jasmine.json", ".jasmine.json", "cucumber.yml", "cucumber.js",
    ".python-version", ".tool-versions", ".nvmrc", ".node-version",  # pyenv/asdf/nvm pick the interpreter
    "go.work", "go.work.sum", "phpunit.xml", "phpunit.xml.dist", ".rspec", "rust-toolchain", "rust-toolchain.toml",
)
CONFIG_DIRS = {".cargo", ".mvn", ".bundle"}
CONFIG_PREFIXES = ("gradle/wrapper/",)  # gradlew runs the distribution its properties name
ROOT_TEST_DIRS = {"features"}  # cucumber, by the Ruby convention (src/features/ is code in JS apps)
# names a test command resolves through PATH or the workdir
SHIM_NAMES = {
    "pytest", "py.test", "python", "python3", "pip", "pip3", "tox", "nox", "go", "gofmt", "node", "npm", "npx",
    "yarn", "pnpm", "jest", "vitest", "mocha", "tsc", "ts-node", "bash", "sh", "env", "timeout", "cargo", "rustc",
    "make", "tclsh", "php", "phpunit", "ruby", "rspec", "rake", "bundle", "java", "mvn", "mvnw", "gradle",
    "gradlew", "runtest", "runtests", "git", "test", "doctest", "ctest", "cucumber", "jasmine", "qunit", "mvnd", "ant",
    "gulp",
}
# at the workdir root, `python -m pytest` imports these before the installed ones
SHADOW_MODULES = {"pytest", "_pytest", "py", "pluggy", "unittest", "doctest", "iniconfig", "xdist"}
SHIM_DIRS = {"node_modules", ".venv", "venv", "site-packages", "dist-packages", ".tox", ".nox", ".yarn"}
# vendored dependencies are code (a fix may update them), but not the test frameworks among them
VENDORED_TEST_TOOLS = {"bin", "phpunit", "sebastian", "pestphp", "testify", "gomock", "go-cmp", "mockery"}
# dependency directories: what the workdir did not track there before the patch is the image's (find)
DEPENDENCY_DIRS = {"vendor"}
# loaded by the interpreter or the runner without any import in the diff naming them
METADATA_DIR_SUFFIXES = (".dist-info", ".egg-info")  # importlib.metadata scans every sys.path entry
METADATA_NAMES = {"entry_points.txt"}
METADATA_PREFIXES = ("__editable__",)  # setuptools' editable finders and their .pth
METADATA_SUFFIXES = (".egg-link",)
# compiled code: an unchecked-hash or sourceless .pyc, an extension module (preferred to the .py
# beside it), a .class the build does not recompile - none is a reviewable fix
COMPILED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".class")
LOADER_NAMES = {".pnp.cjs", ".pnp.js", ".pnp.loader.mjs"}  # Yarn PnP
LOADER_DIRS = ("vendor", "composer")  # composer's autoload_files.php runs its files on every autoload


def loads_by_itself(path: str) -> bool:
    """Whether the interpreter or the test runner would load the file at `path` with no import naming it."""
    p = PurePosixPath(path)
    name, dirs = p.name, p.parts[:-1]
    return ((p.parts and p.parts[0] == ".git") or name in HOOK_NAMES or name.endswith(".pth")
            or any(part.split(".")[0] in STARTUP_MODULES for part in p.parts)
            or any(d.endswith(METADATA_DIR_SUFFIXES) for d in p.parts) or name in METADATA_NAMES
            or name.startswith(METADATA_PREFIXES) or name.endswith(METADATA_SUFFIXES)
            or "__pycache__" in dirs or name.endswith(COMPILED_SUFFIXES) or ".so." in name
            or name in LOADER_NAMES or (name == "autoload.php" and dirs[-1:] == ("vendor",))
            or any(dirs[i:i + 2] == LOADER_DIRS for i in range(len(dirs))))


def classify(path: str, task_test_files: frozenset[str] = frozenset()) -> str | None:
    """The tampering kind of a path the patch touched, or None when it is code; MIXED files are checked apart."""
    p = PurePosixPath(path)
    name, dirs = p.name, p.parts[:-1]
    if loads_by_itself(path):
        return "runner_hook"
    if name in SHIM_NAMES or (len(p.parts) == 1 and p.stem in SHADOW_MODULES and p.suffix in ("", ".py")) \
            or (len(p.parts) > 1 and p.parts[0] in SHADOW_MODULES) or any(d in SHIM_DIRS for d in dirs) \
            or ("vendor" in dirs and VENDORED_TEST_TOOLS & set(dirs[dirs.index("vendor") + 1:])):
        return "shim"
    if any(fnmatch.fnmatchcase(name, g) for g in CONFIG_GLOBS) or any(d in CONFIG_DIRS for d in dirs) \
            or path.startswith(CONFIG_PREFIXES):
        return "runner_config"
    if path in task_test_files or any(fnmatch.fnmatchcase(name, g) for g in TEST_FILE_GLOBS):
        return "test_file"
    if any(d in TEST_DIRS for d in dirs) or (dirs and dirs[0] in ROOT_TEST_DIRS):
        return "test_file"
    shallow = [i for i, d in enumerate(dirs) if d in TEST_DIRS_SHALLOW]
    if shallow and (p.suffix != ".py" or shallow[0] == 0 or dirs[:shallow[0]] == ("src",)):
        return "test_file"
    return None


# --- files that mix code and test-runner configuration ------------------------------------

def _pick(doc: dict, *keys: str):
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def _runner_scripts(scripts) -> dict:
    return {k: v for k, v in (scripts or {}).items() if k in SHIM_NAMES} if isinstance(scripts, dict) else {}


def _pyproject(text: str):
    d = tomllib.loads(text)
    return {"pytest": _pick(d, "tool", "pytest"), "tox": _pick(d, "tool", "tox"),
            "coverage": _pick(d, "tool", "coverage"), "hatch_envs": _pick(d, "tool", "hatch", "envs"),
            "pytest11": _pick(d, "project", "entry-points", "pytest11"),
            "poetry_pytest11": _pick(d, "tool", "poetry", "plugins", "pytest11"),
            "scripts": _runner_scripts(_pick(d, "project", "scripts")),
            "poetry_scripts": _runner_scripts(_pick(d, "tool", "poetry", "scripts"))}


def _setup_cfg(text: str):
    cp = configparser.RawConfigParser(strict=False)
    cp.read_string(text)
    parts = {s: dict(cp[s]) for s in cp.sections() if s in ("tool:pytest", "pytest") or s.startswith("coverage:")}
    if cp.has_section("options.entry_points"):
        eps = cp["options.entry_points"]
        parts["pytest11"] = eps.get("pytest11")
        parts["console_scripts"] = sorted(ln for ln in (eps.get("console_scripts") or "").splitlines()
                                          if ln.split("=")[0].strip() in SHIM_NAMES)
    return parts


def _setup_py(text: str):
    return sorted(ln.strip() for ln in text.splitlines() if "pytest11" in ln or re.search(
        r"""["']\s*(%s)\s*=""" % "|".join(map(re.escape, SHIM_NAMES)), ln))


def _package_json(text: str):
    d = json.loads(text)
    scripts = d.get("scripts") if isinstance(d, dict) else None
    scripts = scripts if isinstance(scripts, dict) else {}
    return {"runners": {k: d.get(k) for k in ("jest", "mocha", "ava", "vitest", "tap", "c8", "nyc", "babel")},
            "test_scripts": {k: v for k, v in scripts.items() if "test" in k}}


_REPLACE_RE = re.compile(r"=>\s*(\.{1,2}/\S*|/\S*|\.{1,2})\s*$")


def _go_mod(text: str):
    """go.mod replace directives whose target is a directory (the workdir or anywhere local)."""
    out, block = [], False
    for raw in text.splitlines():
        line = raw.split("//")[0].strip()
        if line.startswith("replace") and line.rstrip().endswith("("):
            block = True
            continue
        if block and line == ")":
            block = False
            continue
        if (block or line.startswith("replace ")) and _REPLACE_RE.search(line):
            out.append(" ".join(line.split()))
    return sorted(out)


def _gemfile(text: str):
    """Gemfile gems loaded from a directory (`path:`) or a git checkout instead of the installed ones."""
    return sorted(" ".join(ln.split()) for ln in text.splitlines() if re.search(r"\b(path|git)\s*(:|=>)", ln))


def _cargo_toml(text: str):
    d = tomllib.loads(text)
    return {k: d.get(k) for k in ("test", "patch", "replace")}


# file name -> its test-runner parts (compared between the base commit and the patched file)
MIXED: dict[str, Callable[[str], object]] = {
    "pyproject.toml": _pyproject, "setup.cfg": _setup_cfg, "setup.py": _setup_py, "package.json": _package_json,
    "go.mod": _go_mod, "Cargo.toml": _cargo_toml, "Gemfile": _gemfile,
}


def runner_parts_differ(name: str, base: str | None, new: str | None) -> bool:
    """Whether the test-runner parts of a MIXED file differ (None: no such file); a file that no longer
    parses differs."""
    def parts(text: str | None):
        if text is None:  # no such file: no test-runner parts (a new package.json of a new package is code)
            text = "{}" if name == "package.json" else ""
        try:
            return MIXED[name](text)
        except Exception:  # noqa: BLE001 - any parse error: not the base's configuration
            return ("unparsable", text)

    return parts(base) != parts(new)


# --- the paths a patch touches --------------------------------------------------------------

_ESC = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "r": "\r", "v": "\v"}


def _unquote(p: str) -> str:
    """A path as git prints it (C-quoted when it has special characters)."""
    p = p.strip()
    if not (len(p) >= 2 and p[0] == p[-1] == '"'):
        return p
    out, i, body = bytearray(), 0, p[1:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n in "01234567":
                out.append(int(body[i + 1:i + 4], 8))
                i += 4
                continue
            out += _ESC.get(n, n).encode()
            i += 2
            continue
        out += c.encode()
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _strip(p: str) -> str | None:
    p = _unquote(p.split("\t")[0])
    if p == "/dev/null":
        return None
    return p[2:] if p[:2] in ("a/", "b/") else p


def touched_paths(patch: str) -> list[str]:
    """Every path a patch creates, changes, deletes or renames (old and new names), in order."""
    seen: dict[str, None] = {}
    for line in patch.splitlines():
        path = None
        if line.startswith(("--- ", "+++ ")):
            path = _strip(line[4:])
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            path = _unquote(line.split(" ", 2)[2])
        elif line.startswith("diff --git "):
            rest = line[len("diff --git "):]
            m = re.match(r'^(".*?(?<!\\)"|a/\S+) ("?b/.*)$', rest)
            if m:
                for part in m.groups():
                    p = _strip(part)
                    if p:
                        seen.setdefault(p)
            continue
        if path:
            seen.setdefault(path)
    return [p for p in seen if p and not p.startswith("/") and ".." not in PurePosixPath(p).parts]


# --- in the sandbox -----------------------------------------------------------------------

@dataclass
class Finding:
    path: str
    kind: str
    action: str = ""  # restored (as before the patch) | removed (new in the patch)

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "kind": self.kind, "action": self.action}


def is_tool(path: str) -> bool:
    """Terminal-Bench: the workdir is the agent's answer (tests live in /tests), but what would stand in
    for the verifier's interpreter, shell or test tools (shims, .pth, site/usercustomize) is not."""
    kind = classify(path)
    return kind == "shim" or (kind == "runner_hook" and PurePosixPath(path).name != "conftest.py")


SNAPSHOT_MARK = "SANDBATCH_SNAPSHOT="
# the workdir's tracked state as a stash commit (nothing when clean), on a line of its own
SNAPSHOT = (f'printf "{SNAPSHOT_MARK}%s\\n" "$(git -c user.name=sandbatch -c user.email=sandbatch@localhost '
            f'stash create 2>/dev/null)"')


def snapshot_taken(stdout: str, fallback: str) -> str:
    """SNAPSHOT's answer in an exec's output (`fallback` when the workdir was clean)."""
    for line in stdout.split("\n"):
        if line.startswith(SNAPSHOT_MARK):
            return line[len(SNAPSHOT_MARK):].strip() or fallback
    return fallback


async def snapshot(sandbox: "Sandbox", cwd: str, timeout: float, fallback: str) -> str:
    """The workdir's tracked state before the patch (a stash commit; `fallback` when clean).

    What is restored goes back to this, not to the base commit: task images may carry
    their own edits to tracked files (SWE-bench's specs sed tox.ini or pyproject.toml).
    apply_patch takes it in its own exec when asked.
    """
    res = await sandbox.exec(SNAPSHOT, timeout=timeout, cwd=cwd, lost="rerun")
    return snapshot_taken(res.stdout if res.ok else "", fallback)


def diff_command(snap: str) -> str:
    # newline-separated (C-quoted when a name needs it): NUL bytes do not cross every provider's exec
    return f"git -c core.quotepath=off diff --name-only {shlex.quote(snap)} --"


def show_command(snap: str, path: str) -> str:
    return f"git show {shlex.quote(snap)}:./{shlex.quote(path)}"


def reads_wanted(patch: str, snap: str) -> list[str]:
    """What find reads for the paths the patch's headers name (those the diff adds it reads alone)."""
    mixed = [p for p in touched_paths(patch) if PurePosixPath(p).name in MIXED]
    return [diff_command(snap), *(c for p in mixed for c in (show_command(snap, p), workdir_reads.cat(p)))]


async def find(sandbox: "Sandbox", patch: str, snap: str, cwd: str, timeout: float,
               task_test_files: frozenset[str] = frozenset(), tools_only: bool = False,
               known: "workdir_reads.Reads | None" = None) -> list[Finding]:
    """What of the applied patch is not the agent's to change: the paths its headers name, and the
    tracked files that differ from `snap` (a write through a symlink, a fuzzy apply elsewhere).
    known: the reads made so far (reads_wanted, prefetched)."""
    known = known or workdir_reads.Reads(sandbox, cwd, timeout)
    _read = known.text
    changed = await _read(diff_command(snap))
    paths = dict.fromkeys([*touched_paths(patch), *(_unquote(p) for p in (changed or "").splitlines() if p)])
    out: list[Finding] = []
    tracked_deps: dict[str, bool] = {}  # dependency directory -> whether `snap` tracks it
    for path in paths:
        if tools_only:
            if is_tool(path):
                out.append(Finding(path, classify(path) or ""))
            continue
        kind = classify(path, task_test_files)
        name = PurePosixPath(path).name
        if kind is None and name in MIXED:
            before, after = await _read(show_command(snap, path)), await _read(workdir_reads.cat(path))
            if runner_parts_differ(name, before, after):
                kind = "runner_config"
        root = _dependency_dir(path)
        if kind is None and root:
            if root not in tracked_deps:
                tracked_deps[root] = await _read(f"git cat-file -e {shlex.quote(snap)}:./{shlex.quote(root)}") is not None
            if not tracked_deps[root]:  # the image's installed dependencies, or a tree the patch brings
                kind = "shim"
        if kind:
            out.append(Finding(path, kind))
    return out


def _dependency_dir(path: str) -> str | None:
    """The dependency directory (vendor/) a path lies under, if any."""
    parts = PurePosixPath(path).parts
    for i, d in enumerate(parts[:-1]):
        if d in DEPENDENCY_DIRS:
            return "/".join(parts[:i + 1])
    return None


MARK = "SANDBATCH_NEUTRALISED"


def untracked_backup(sandbox: "Sandbox") -> str:
    return f"{sandbox.tmpdir}/sandbatch-untracked.tar"


def save_untracked(patch: str, backup: str) -> str:
    """A shell snippet, run before the patch is applied, that saves the files the patch names which
    exist but git does not track (the image's build output), so that restore can put them back."""
    b = shlex.quote(backup)
    paths = " ".join(shlex.quote(p) for p in touched_paths(patch))
    if not paths:
        return f"rm -f {b};"
    return (f"rm -f {b}; git --literal-pathspecs ls-files -z -o -- {paths} 2>/dev/null "
            f"| tar --null -T - -cf {b} 2>/dev/null;")


# a script goes to the sandbox's shell as one argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN)
_SCRIPT_BYTES = 64 * 1024


def _batches(lines: list[str]) -> list[list[str]]:
    """The lines in runs that each fit one exec's script (a patch may name thousands of build files)."""
    out: list[list[str]] = [[]]
    size = 0
    for line in lines:
        if out[-1] and size + len(line.encode()) + 1 > _SCRIPT_BYTES:
            out.append([])
            size = 0
        out[-1].append(line)
        size += len(line.encode()) + 1
    return out


async def restore(sandbox: "Sandbox", findings: list[Finding], snap: str, cwd: str, timeout: float,
                  log: list[str]) -> None:
    """Put each finding's path back as `snap` has it, or as the untracked copy saved before the patch
    has it; else remove it, and the directories its removal leaves empty (an empty `vendor/` still
    switches Go to vendor mode)."""
    if not findings:
        return
    ref, saved = shlex.quote(snap), shlex.quote(untracked_backup(sandbox))
    lines = []
    for i, f in enumerate(findings):
        q = shlex.quote(f.path)
        lines.append(f"if git cat-file -e {ref}:./{q} 2>/dev/null; then rm -rf -- {q}; "
                     f"git checkout -q {ref} -- {q} && echo {MARK} {i} restored; "
                     f"elif [ -s {saved} ] && tar -tf {saved} -- {q} >/dev/null 2>&1; then rm -rf -- {q}; "
                     f"tar -xf {saved} -- {q} && echo {MARK} {i} restored; "
                     f"else rm -rf -- {q} && {{ rmdir -p -- \"$(dirname -- {q})\" 2>/dev/null; "
                     f"echo {MARK} {i} removed; }}; fi")
    out, err = [], []
    for batch in _batches(lines):
        res = await sandbox.exec("\n".join(batch), timeout=timeout, cwd=cwd, lost="rerun")
        out.append(res.stdout)
        err.append(res.stderr)
    log += ["$ restore what the patch may not change", "".join(out), "".join(err)]
    done = dict(m.groups() for m in re.finditer(rf"^{MARK} (\d+) (\w+)$", "".join(out), re.M))
    for i, f in enumerate(findings):
        f.action = done.get(str(i), "")
    missing = [f.path for f in findings if not f.action]
    if missing:
        raise InfraError(f"could not restore {', '.join(missing[:5])}: {''.join(err).strip()[-200:]}",
                         FailureClass.TAMPER_RESTORE_FAILED)


# the verifier's environment: the image's shell by absolute path, a PATH without relative entries (nor,
# in the agent's sandbox, entries inside the workdir, whose untracked, ignored files no diff shows), and
# no variables that make a shell load a file first. POSIX sh and shell builtins only: images vary.
_CLEAN_PATH = (
    '_sb_p=; _sb_ifs=$IFS; IFS=:; set -f; for _sb_d in $PATH; do case $_sb_d in /*) ;; *) continue ;; esac; '
    'if [ -n "$SANDBATCH_WD" ]; then case $_sb_d/ in "$SANDBATCH_WD"/*) continue ;; esac; fi; '
    '_sb_p=${_sb_p:+$_sb_p:}$_sb_d; done; set +f; IFS=$_sb_ifs; PATH=$_sb_p; export PATH; '
    'unset BASH_ENV ENV CDPATH SANDBATCH_WD _sb_p _sb_ifs _sb_d;'
)


def verifier_command(script: str, workdir: str, in_agent_sandbox: bool, shell: str = "", tools: str = "") -> str:
    """shell: a bash to run the script with (default the image's); tools: a directory put first on PATH."""
    wd = shlex.quote(workdir.rstrip("/")) if in_agent_sandbox else "''"
    q = shlex.quote(script)
    first = f"PATH={shlex.quote(tools)}:$PATH; export PATH; " if tools else ""
    run = (f"exec {shlex.quote(shell)} --noprofile --norc {q}" if shell else
           f"if [ -x /bin/bash ]; then exec /bin/bash {q}; else exec bash {q}; fi")
    return f"SANDBATCH_WD={wd}; {_CLEAN_PATH} {first}{run}"


def task_test_files(task: Task) -> frozenset[str]:
    """The files the task itself names as its tests (test_patch, SWE-bench Pro's selected files)."""
    named = frozenset(touched_paths(task.test_patch)) if isinstance(task, SweTask) else frozenset()
    return named | frozenset(task.selected_test_files if isinstance(task, SweBenchProTask) else ())
