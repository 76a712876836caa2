import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)


# In a student copy (exercises/handout.py) some library functions are exercises
# that raise NotImplementedError("exercise N: ..."). A test that reaches one,
# in this process or in a subprocess whose output the failure shows, is
# skipped with that reason instead of failing.
STUB = "NotImplementedError: exercise "


def pytest_runtest_makereport(item, call):
    import pytest
    if call.excinfo is None or call.when == "teardown":
        return None
    text = str(call.excinfo.getrepr(style="short"))
    if STUB in text or (call.excinfo.errisinstance(NotImplementedError)
                        and str(call.excinfo.value).startswith("exercise ")):
        why = text[text.find(STUB) + len("NotImplementedError: "):].split("(")[0].strip() if STUB in text \
            else str(call.excinfo.value).split("(")[0].strip()
        report = pytest.TestReport.from_item_and_call(item, call)
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"needs a solved exercise: {why}")
        return report
    return None
