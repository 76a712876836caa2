"""lesson.py: the lesson's own modules for the bridge, whatever else a script has on its path.

What it teaches: a module name is global. The lesson's modules are top-level names (loss,
model, toy_tasks, batching, lab, plumbing). A script run elsewhere puts its own folder first
on sys.path, so its own loss.py or model.py would be found first, inside the bridge too.
``load`` imports the lesson's modules from this repository's folder, by location, and
hands them to the bridge. Afterwards each name the script would find elsewhere is taken
back out of sys.modules (and a module of the script's that held the name is put back):
the script's own ``import model`` still finds its own file. Run from the repository's
root, the lesson's modules are the ones found anyway, and they stay (one copy of each).
"""
import importlib
import importlib.machinery
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the lesson's top-level names: its .py files and packages in ROOT (the bridge aside)
NAMES = frozenset(
    n[:-3] if n.endswith(".py") else n for n in os.listdir(ROOT)
    if (n.endswith(".py") or os.path.isfile(os.path.join(ROOT, n, "__init__.py")))
    and n != "trl_bridge")


def top(name):
    return name.partition(".")[0]


def ours(module):
    """Was the module loaded from this repository's folder?"""
    f = getattr(module, "__file__", None) or ""
    return os.path.abspath(f).startswith(ROOT + os.sep)


class Finder:
    """Finds the lesson's top-level names in ROOT only (their submodules follow their
    package's own path)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if "." in name or name not in NAMES:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [ROOT])


def found_elsewhere(name):
    """Would a plain import of top-level ``name`` find a file outside this repository?"""
    spec = importlib.machinery.PathFinder.find_spec(name)
    return spec is not None and not (spec.origin or "").startswith(ROOT + os.sep)


LOADED = {}  # every lesson module loaded so far: one copy of each, however often asked
EXTRA = ("torch", "transformers", "trl", "accelerate", "datasets")  # requirements-trl.txt


def refuse_without_extra():
    """A command of the bridge run where the extra is not installed (another interpreter, a
    venv not activated): one ``error:`` line naming what is missing, exit status 2."""
    import importlib.util
    missing = [m for m in EXTRA if importlib.util.find_spec(m) is None]
    if missing:
        sys.stderr.write(f"error: {', '.join(missing)} not installed for {sys.executable}: "
                         f"activate the project's venv, or pip install -r requirements-trl.txt\n")
        sys.exit(2)


def load(*names):
    """The lesson's modules ``names`` (e.g. "loss", "lab.ledger"), from ROOT."""
    foreign = {k: sys.modules.pop(k) for k in list(sys.modules)
               if top(k) in NAMES and not ours(sys.modules[k])}
    sys.modules.update(LOADED)
    sys.meta_path.insert(0, Finder)
    try:
        mods = [importlib.import_module(n) for n in names]
    finally:
        sys.meta_path.remove(Finder)
        LOADED.update((k, m) for k, m in sys.modules.items() if top(k) in NAMES and ours(m))
        clash = {n for n in NAMES if n in {top(k) for k in foreign} or found_elsewhere(n)}
        for k in [k for k in sys.modules if top(k) in clash]:
            del sys.modules[k]  # the lesson's copy stays referenced by the bridge
        sys.modules.update(foreign)
    return mods
