"""What runs in the test command's interpreter before the grader's runner plugin, recorded from the
interpreter's start-up (docs/benchmarks.md, "Start-up hooks, found by what was imported").

Uploaded into the channel's directory, which goes first on PYTHONPATH for the test command: the
pytest channel's `sitecustomize.py` (the interpreter imports it while it starts, after `site`
has run the `.pth` lines and before the runner's script, its configuration or any plugin), and
`_sbv_tracker.py` beside the unittest plugin, which is that channel's sitecustomize and uses
chain_site alone. As sitecustomize it (only `site`'s `.pth` lines run before it: the workdir
modules they import are found by the plugin, with no start noted)

- imports the image's own sitecustomize, as the interpreter would have: one outside the workdir
  (the workdir's, in any form, is a start-up hook of the code under test: noted, not imported);
- puts a finder first on sys.meta_path that imports nothing: once pytest's configuration module
  is loaded, it notes for each module first asked for whether pytest was importing a plugin
  named by a `-p` option (`consider_preparse`, which reads the ini file's `addopts`, then
  PYTEST_ADDOPTS, then the command line: the ini's plugins load before the grader's) and which;
  and, as the first such plugin starts to import, takes the grader's pristine state: pytest's
  outcome machinery and the assertion machinery as pytest built them (run_checks.snapshot),
  before any of that plugin's code (or the code under test it imports) runs.

The pytest plugin finds this module under KEY + its directory in sys.modules when it loads, stops
its TRACKER and records with it what started each workdir module imported before the plugin
(run_checks.Checks.startup); the grader judges them (plugin_findings.of_the_patch). Where code
comes from is judged by the frames' code files (pytest's own configuration module, as loaded), not
by what a module calls itself.

Written for every Python 3 a task image may hold: no annotations, no f-strings, only the standard
library; nothing here runs unless pytest's configuration module is loaded (other interpreters the
test command starts pay a dictionary look-up per import).
"""

import os
import sys

KEY = "_sbv_tracker:"
_getattr, _realpath = getattr, os.path.realpath


def _load(here, name):
    """A module of the channel, loaded from its file (nothing of the workdir can stand in for it)."""
    import importlib.util as iu
    spec = iu.spec_from_file_location("_sbv_%s_%d" % (name, id(here)), os.path.join(here, "_sbv_%s.py" % name))
    mod = iu.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _workdir(here):
    import json
    try:
        with open(os.path.join(here, "conf.json")) as fh:
            wd = json.load(fh).get("workdir") or ""
    except (OSError, IOError, ValueError):
        return None
    return _realpath(wd).rstrip(os.sep) + os.sep if wd else None


def chain_site(here, rel):
    """Import the image's own sitecustomize, which the channel's stands in front of; rel(path): the
    workdir-relative path of a file of the workdir, else None. Returns the workdir's sitecustomize
    that would have come next (relative path), not imported, or None."""
    import importlib.machinery as im
    import importlib.util as iu
    me = sys.modules.get("sitecustomize")
    spec = im.PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != here])
    if spec is None or spec.loader is None:
        return None
    found = rel(spec.origin or "")
    if found is not None:  # the workdir's, in whatever form (a package, compiled): not the image's hook
        return found
    mod = iu.module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception:
        sys.modules["sitecustomize"] = me
        raise
    return None


class Tracker(object):
    def __init__(self, here):
        self.here = here
        self._wd = []  # the workdir, read from conf.json when first needed (most interpreters never ask)
        self.via = {}  # module name -> the plugin pytest was importing for a `-p` option when it was asked for
        self.pristine = None  # (runner objects, assertion machinery) before the first such plugin's code ran
        self.next_site = None  # the workdir's sitecustomize the chain did not import
        self.active = True
        self._busy = False  # taking the pristine state imports the checks' own modules: not noted
        self._config_file = None
        self._ours = {}  # code object named like pytest's plugin import -> whether it is pytest's (its file)

    def rel(self, path):
        if not self._wd:
            self._wd.append(_workdir(self.here))
        wd = self._wd[0]
        if not wd or not path:
            return None
        p = _realpath(path)
        return p[len(wd):] if p.startswith(wd) else None

    def stop(self):
        self.active = False
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def find_spec(self, name, path=None, target=None):
        """Imports nothing; notes why `name` is being imported (the import system asks each finder in turn)."""
        if not self.active or self._busy or name in self.via:
            return None
        cfg = sys.modules.get("_pytest.config")
        if cfg is None:
            return None
        self._busy = True
        try:
            self._note(name, cfg)
            if sys.meta_path[0] is not self:  # first again, ahead of pytest's assertion rewriter, which
                sys.meta_path.remove(self)  # claims the plugins it rewrites before this finder is asked
                sys.meta_path.insert(0, self)
        except Exception:
            pass
        finally:
            self._busy = False
        return None

    def _note(self, name, cfg):
        if self._config_file is None:
            f = _getattr(cfg, "__file__", None)
            if not f:
                return
            self._config_file = _realpath(f[:-1] if f.endswith((".pyc", ".pyo")) else f)
        plugin, preparse, f, ours = None, False, sys._getframe(2), self._ours
        while f is not None:
            co = f.f_code
            if co.co_name in ("import_plugin", "consider_preparse"):
                if co not in ours:  # its file resolved once per code object: an import walks the stack each time
                    ours[co] = _realpath(co.co_filename) == self._config_file
                if not ours[co]:
                    pass
                elif co.co_name == "consider_preparse":
                    preparse = True
                else:
                    plugin = f.f_locals.get("modname")  # the outermost plugin import wins
            f = f.f_back
        if not (preparse and plugin):
            return
        plugin = "%s" % (plugin,)
        if self.pristine is None and not os.path.exists(os.path.join(self.here, plugin + ".py")):
            checks = _load(self.here, "checks")  # the grader's own plugin needs none: it takes its own
            self.pristine = (checks.snapshot(checks.PYTEST_RUNNER), checks.snapshot(checks.ASSERTIONS))
        self.via[name] = plugin


if __name__ == "sitecustomize":
    _here = os.path.dirname(os.path.abspath(__file__))
    TRACKER = Tracker(_here)
    sys.modules[KEY + _here] = sys.modules[__name__]  # found by the plugin once the chain replaced sitecustomize
    sys.meta_path.insert(0, TRACKER)
    TRACKER.next_site = chain_site(_here, TRACKER.rel)
