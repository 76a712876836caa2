"""The statistics of experiments/common.py against values from t tables."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments"))
import common  # noqa: E402


@pytest.mark.parametrize("df, t", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622),
                                   (29, 2.0452), (120, 1.9799)])
def test_t_quantile_matches_tables(df, t):
    assert abs(common.t_quantile(df) - t) < 1e-4


def test_mean_ci_is_student_t():
    m, h = common.mean_ci([1, 2, 3])
    assert m == 2 and abs(h - 2.484) < 1e-3          # 4.3027 * 1 / sqrt(3)
    m, h = common.mean_ci([5.0])
    assert m == 5 and math.isnan(h)


def test_paired_by_hand():
    # differences 1, 1.5, 1: mean 7/6, sd = sqrt(1/12), half = 4.3027 sd / sqrt(3)
    p = common.paired([1, 2, 3], [0, 0.5, 2])
    assert abs(p["diff"] - 7 / 6) < 1e-12 and p["n"] == 3
    assert abs(p["half"] - 4.3027 * math.sqrt(1 / 12) / math.sqrt(3)) < 1e-4
    assert abs(p["mde"] - (4.3027 + 0.8416) * math.sqrt(1 / 12) / math.sqrt(3)) < 1e-4
    # dicts pair by seed, whatever the order; unshared seeds drop out
    q = common.paired({0: 1, 1: 2, 2: 3, 7: 9}, {2: 2, 1: 0.5, 0: 0})
    assert q["per_seed"] == [1.0, 1.5, 1.0]
    # paired beats unpaired when arms share a seed effect
    a, b = [10, 20, 30, 40], [9, 19.5, 29, 39.2]
    assert common.paired(a, b)["half"] < common.mean_ci(a)[1] / 5
    with pytest.raises(ValueError):
        common.paired([1, 2], [1])
