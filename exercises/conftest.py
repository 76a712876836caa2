"""pytest set-up for the classroom exercises (see ../EXERCISES.md).

The checks live in files named ``check_exN.py``. pytest does not collect that
name by default, so ``python -m pytest -q tests`` (the project's test suite)
never runs them. This file collects them when ``exercises`` or a file inside
it is named on the command line:

    python -m pytest exercises -k ex2
    python -m pytest exercises/check_ex2.py

By default the checks import the files you edit, in ``exercises/``. With
``EXERCISE_IMPL=answers`` they import the reference answers in
``exercises/answers/`` instead (see ``_impl.py``).
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (HERE, ROOT):
    if _p not in sys.path:
        sys.path.insert(0, _p)
# One thread: the checks are tiny, and the machine may be shared.
if not os.environ.get("OMP_NUM_THREADS"):
    os.environ["OMP_NUM_THREADS"] = "1"

import _impl  # noqa: E402


def _exercises_named(config):
    """True when a path on the command line is this folder or lies inside it."""
    for arg in config.args:
        path = os.path.abspath(os.path.join(config.invocation_params.dir, str(arg).split("::")[0]))
        if path == HERE or path.startswith(HERE + os.sep):
            return True
    return False


def pytest_collect_file(file_path, parent):
    # A file named on the command line is collected by pytest itself.
    if (file_path.suffix == ".py" and file_path.name.startswith("check_")
            and not parent.session.isinitpath(file_path)
            and _exercises_named(parent.config)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_report_header(config):
    return f"exercise files checked: {_impl.describe()}"
