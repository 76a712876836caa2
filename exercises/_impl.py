"""Which implementation the checks import: yours, or the reference answers.

    EXERCISE_IMPL unset or "student"  ->  exercises/<name>.py          (your edits)
    EXERCISE_IMPL=answers             ->  exercises/answers/<name>.py  (the reference)
    EXERCISE_IMPL=/some/folder        ->  /some/folder/<name>.py       (e.g. a wrong answer
                                          that a check must catch: tests/test_exercises.py)

Each check file calls ``load("ex2_adv_orthogonal")`` (and so on) once at import.
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDERS = {"student": HERE, "answers": os.path.join(HERE, "answers")}


def mode():
    value = os.environ.get("EXERCISE_IMPL", "") or "student"
    if value not in FOLDERS and not os.path.isdir(value):
        raise RuntimeError(f"EXERCISE_IMPL={value!r}; use 'student' (the default), 'answers' or a folder")
    return value


def folder():
    return FOLDERS.get(mode()) or os.path.abspath(mode())


def describe():
    return f"{mode() if mode() in FOLDERS else 'other'} ({os.path.relpath(folder(), os.path.dirname(HERE))}/)"


def load(name):
    """Import <name>.py from the chosen folder as a fresh module."""
    path = os.path.join(folder(), name + ".py")
    tag = mode() if mode() in FOLDERS else "other"
    spec = importlib.util.spec_from_file_location(f"{tag}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
