"""E7 and E8 quick modes on a shrunk config: they run, write JSON (and PNG with
matplotlib) and carry the fields the README reports. No figure is asserted."""
import importlib
import json
import os
import sys

import pytest

from test_experiments import check_primary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
SMALL = ["--quick", "--small", "--sft_steps=5", "--rl_steps=2"]


def _load(name, tmp_path):
    mod = importlib.import_module(name)
    data = mod.main(SMALL + [f"--out={tmp_path}"])
    assert os.path.exists(os.path.join(tmp_path, f"{name}.json"))
    try:
        import matplotlib  # noqa: F401
        assert os.path.exists(os.path.join(tmp_path, f"{name}.png"))
    except ImportError:
        pass
    return data, json.load(open(os.path.join(tmp_path, f"{name}.json")))


def test_e7_quick(tmp_path):
    data, saved = _load("e7_schedulers", tmp_path)
    (key,) = saved["results"]  # quick: one task and setting
    assert set(saved["results"][key]) == {"full", "shuffle", "query", "balanced", "sign"}
    for r in saved["results"][key].values():
        assert len(r["runs"]) == 1 and len(r["final_acc"]) == 2
        assert r["runs"][0]["steps"][0] == 0 and r["tax_sum"][0] >= 0
    check_primary(saved)
    assert set(saved["primary"]) == {f"{key}: tax_sum {s} - shuffle" for s in ("query", "balanced", "sign")}
    assert saved["primary"][f"{key}: tax_sum query - shuffle"]["n"] == 1


def test_e8_quick(tmp_path):
    data, saved = _load("e8_objectives", tmp_path)
    assert len(saved["results"]) == 12  # 6 objectives x (no clip, clip-higher)
    for key, r in saved["results"].items():
        s = r["summary"]
        for k in ("residual", "tax_sum", "acc", "entropy", "logodds_drift", "answer_entropy"):
            assert k in s, (key, k)
        assert 0 <= s["residual"][0] <= 1
    check_primary(saved)
    assert len(saved["primary"]) == 6  # drift and answer entropy x (dfpo_min, dfpo_orth, dr_grpo) - grpo


def test_chain_style_quick(tmp_path):
    """Both arms from one warm start and seed; the primary contrast is the per-seed
    difference of the two arms' last signed restate drift, recomputed here."""
    data, saved = _load("chain_style", tmp_path)
    check_primary(saved)
    g, d = saved["runs"]["grpo"][0], saved["runs"]["dr_grpo"][0]
    assert g["seed"] == d["seed"] == 0 and g["steps"] == d["steps"]
    p = saved["primary"]["signed restate drift, grpo - dr_grpo"]
    assert p["n"] == 1 and p["predicted"] == "< 0"
    assert abs(p["diff"] - (g["style_drift_signed_restate"][-1] - d["style_drift_signed_restate"][-1])) < 1e-12
    assert g["style_drift_restate"][-1] >= abs(g["style_drift_signed_restate"][-1]) - 1e-12
