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
    """Quick mode's three arms from one warm start and seed; the primary contrast is
    recomputed from the JSON's per-run curves (last evaluation of |restate drift|)."""
    import e8_objectives
    data = e8_objectives.main(SMALL + ["--jobs=1", f"--out={tmp_path}"])
    saved = json.load(open(os.path.join(tmp_path, "e8_objectives.json")))
    assert saved["arms"] == ["grpo", "dr_grpo", "dfpo_min"] and saved["minibatches"] == 2
    for arm, runs in saved["runs"].items():
        (r,) = runs
        assert r["seed"] == 0 and r["steps"] == [0, 2] and r["style_drift_restate"][0] is None
        assert r["style_drift_restate"][-1] >= abs(r["style_drift_signed_restate"][-1]) - 1e-12
        assert 0 <= r["style_entropy_restate"][-1] <= 0.6932 and r["tax_interior_sum"] >= 0
    check_primary(saved)
    assert set(saved["primary"]) == {"style_drift_restate dfpo_min - grpo", "style_drift_restate dr_grpo - grpo"}
    g, d = saved["runs"]["grpo"][0], saved["runs"]["dfpo_min"][0]
    p = saved["primary"]["style_drift_restate dfpo_min - grpo"]
    assert p["n"] == 1 and p["predicted"] == "< 0"
    assert abs(p["diff"] - (d["style_drift_restate"][-1] - g["style_drift_restate"][-1])) < 1e-12
    s = saved["secondary"]["style_drift_restate dfpo_min - dr_grpo (token ratio vs min-replace)"]
    assert abs(s["diff"] - (d["style_drift_restate"][-1] - saved["runs"]["dr_grpo"][0]["style_drift_restate"][-1])) \
        < 1e-12
    a = saved["secondary"]["acc_last3 dr_grpo - grpo"]["diff"]
    acc = lambda r: sum(r["eval_acc"][-3:]) / len(r["eval_acc"][-3:])
    assert abs(a - (acc(saved["runs"]["dr_grpo"][0]) - acc(g))) < 1e-12
    assert data["rate"]["units"] == 3


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
