"""Check for exercise 1: your predictions against what loss.py computes."""

import pytest

import _impl
import ex1_run

PRED = _impl.load("ex1_predict_residual").PREDICTION
TRUTH = ex1_run.measure()


@pytest.mark.parametrize("key", ["grpo", "dr_grpo", "grpo_equal_lengths"])
def test_ex1_residual_prediction(key):
    guess = PRED[key]
    assert guess is not None, f"fill in PREDICTION[{key!r}] in ex1_predict_residual.py"
    assert isinstance(guess, (int, float)) and 0 <= guess <= 1, \
        f"PREDICTION[{key!r}] should be a number between 0 and 1, got {guess!r}"
    assert abs(guess - TRUTH[key]) <= 0.02, \
        f"{key}: you predicted {guess:.3f}; run python exercises/ex1_run.py and explain the difference"


@pytest.mark.parametrize("key", ["grpo_direction", "grpo_direction_swapped"])
def test_ex1_direction_prediction(key):
    guess = PRED[key]
    assert guess in ("up", "down", "none"), \
        f"PREDICTION[{key!r}] should be 'up', 'down' or 'none', got {guess!r}"
    assert guess == TRUTH[key], f"{key}: you predicted {guess!r}; run python exercises/ex1_run.py"
