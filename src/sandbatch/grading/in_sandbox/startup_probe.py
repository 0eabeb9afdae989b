"""What an interpreter runs at start-up, listed without running any of it (build_phase.py).

Run in the sandbox by the grader as `python -I -S startup_probe.py HOME [PYTHONPATH]`:
-S keeps `site` from processing anything, -I keeps the environment and the user's site out, so
no code of the sandbox's site directories runs in this process. It computes what `site` would
do in the test command's interpreter (PYTHONPATH as given, the site directories, the user site
of HOME) and prints one line per piece of code that runs before any test module is imported,
whatever its name or form:

    pth      <sha256> <path>          a .pth file with a line `site` executes (`import ...`)
    module   <sha256> <path>          the file a module such a line imports is loaded from
    custom   <sha256> <path>          sitecustomize / usercustomize as the import system finds it
                                      (a module, a package, compiled, an extension module)
    entry    <sha256> <path>          pytest11 entry points of a distribution's metadata (pytest
                                      loads them all), and the file each one names

where each is found by the interpreter's own machinery (site's directories, PathFinder), not by
file name. Written for every Python 3 a task image may hold: no annotations, no f-strings.
"""

import ast
import hashlib
import os
import site
import sys
from importlib.machinery import PathFinder


def _digest(path):
    try:
        if os.path.isdir(path):
            h = hashlib.sha256()
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    p = os.path.join(root, name)
                    h.update(p.encode("utf-8", "surrogateescape") + b"\0")
                    with open(p, "rb") as fh:
                        h.update(hashlib.sha256(fh.read()).digest())
            return h.hexdigest()
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (OSError, IOError):
        return "unreadable"


def _origin(name, path):
    """Where the import system would load top-level module `name` from on `path` (None if nowhere)."""
    try:
        spec = PathFinder.find_spec(name, path)
    except Exception:  # noqa: BLE001 - an unreadable entry finds nothing
        return None
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("namespace", "built-in", "frozen"):
        return spec.origin
    locations = list(spec.submodule_search_locations or [])
    return locations[0] if locations else None


def _imported(line):
    """The top-level modules a .pth line executed by `site` imports."""
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return names


def _site_dirs(home):
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    version = "python%d.%d" % sys.version_info[:2]
    user = os.path.join(home, ".local", "lib", version, "site-packages")  # site.ENABLE_USER_SITE's
    return dirs + [user]


def main(argv):
    home = argv[1]
    pythonpath = [p for p in (argv[2] if len(argv) > 2 else "").split(os.pathsep) if p]
    base = [p for p in sys.path if p]  # the standard library (-I: no script directory, no PYTHONPATH)
    path = pythonpath + base
    found = []
    pths = []
    for d in _site_dirs(home):
        if not os.path.isdir(d):
            continue
        path.append(d)
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".pth"))
        except OSError:
            continue
        pths += [os.path.join(d, n) for n in names]
    for pth in pths:
        try:
            with open(pth, "rb") as fh:
                lines = fh.read().decode("utf-8", "replace").splitlines()
        except (OSError, IOError):
            continue
        executed = [ln for ln in lines if ln.startswith(("import ", "import\t"))]
        for ln in lines:
            if ln.strip() and not ln.startswith("#") and ln not in executed:
                p = os.path.join(os.path.dirname(pth), ln.rstrip())
                if os.path.exists(p):
                    path.append(p)  # site adds it to sys.path
        if executed:
            found.append(("pth", pth))
            for line in executed:
                for name in _imported(line):
                    origin = _origin(name, path)
                    if origin:
                        found.append(("module", origin))
    for name in ("sitecustomize", "usercustomize"):
        origin = _origin(name, path)
        if origin:
            found.append(("custom", origin))
    for entry in path:
        try:
            names = sorted(os.listdir(entry)) if os.path.isdir(entry) else []
        except OSError:
            continue
        for n in names:
            ep = os.path.join(entry, n, "entry_points.txt")
            if not n.endswith((".dist-info", ".egg-info")) or not os.path.isfile(ep):
                continue
            for module in _pytest11(ep):
                found.append(("entry", ep))
                origin = _origin(module, path)
                if origin:
                    found.append(("entry", origin))
    seen = set()
    for kind, p in found:
        p = os.path.normpath(p)
        if (kind, p) not in seen:
            seen.add((kind, p))
            sys.stdout.write("%s %s %s\n" % (kind, _digest(p), p))


def _pytest11(path):
    """The top-level modules the pytest11 group of an entry_points.txt names."""
    out, group = [], None
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
    except (OSError, IOError):
        return out
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif group == "pytest11" and "=" in line:
            out.append(line.split("=", 1)[1].strip().split(":")[0].split(".")[0])
    return out


if __name__ == "__main__":
    main(sys.argv)
