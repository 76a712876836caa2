"""Which implementation the checks import: yours, or the reference answers.

    EXERCISE_IMPL unset or "student"  ->  exercises/<name>.py          (your edits)
    EXERCISE_IMPL=answers             ->  exercises/answers/<name>.py  (the reference)

Each check file calls ``load("ex2_adv_orthogonal")`` (and so on) once at import.
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDERS = {"student": HERE, "answers": os.path.join(HERE, "answers")}


def mode():
    value = os.environ.get("EXERCISE_IMPL", "") or "student"
    if value not in FOLDERS:
        raise RuntimeError(f"EXERCISE_IMPL={value!r}; use 'student' (the default) or 'answers'")
    return value


def describe():
    return f"{mode()} ({os.path.relpath(FOLDERS[mode()], os.path.dirname(HERE))}/)"


def load(name):
    """Import exercises/<name>.py or exercises/answers/<name>.py as a fresh module."""
    path = os.path.join(FOLDERS[mode()], name + ".py")
    spec = importlib.util.spec_from_file_location(f"{mode()}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
