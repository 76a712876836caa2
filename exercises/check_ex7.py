"""Check for exercise 7: your predictions against the categories of toy_tasks."""

import pytest

import _impl
import ex7_run

PRED = _impl.load("ex7_predict_template").PREDICTION
TRUTH = ex7_run.measure()


@pytest.mark.parametrize("key, scratchpad, tol", [("add_plain", False, 0.05), ("add_scratch", True, 0.08)])
def test_ex7_template_share(key, scratchpad, tol):
    guess = PRED[key]
    assert isinstance(guess, (int, float)) and 0 <= guess <= 1, \
        f"PREDICTION[{key!r}] should be a number between 0 and 1, got {guess!r}"
    truth = TRUTH[("add", scratchpad)][0]["template"]
    assert abs(guess - truth) <= tol, f"{key}: you predicted {guess:.2f}; run python exercises/ex7_run.py"


def test_ex7_mul_direction():
    guess = PRED["mul_direction"]
    assert guess in ("up", "down", "same"), f"mul_direction should be 'up', 'down' or 'same', got {guess!r}"
    before, after = TRUTH[("mul", False)][0]["template"], TRUTH[("mul", True)][0]["template"]
    truth = "up" if after > before + 1e-9 else "down" if after < before - 1e-9 else "same"
    assert guess == truth, f"you predicted {guess!r}; run python exercises/ex7_run.py"


def test_ex7_copy_tokens():
    guess = PRED["copy_with_scratchpad"]
    assert guess in (True, False), f"copy_with_scratchpad should be True or False, got {guess!r}"
    assert guess == (TRUTH[("add", True)][0]["copy"] > 0)
