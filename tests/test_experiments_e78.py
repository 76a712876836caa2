"""E7 and E8 quick modes on a shrunk config: they run, write JSON (and PNG with
matplotlib) and carry the fields the README reports. No figure is asserted."""
import importlib
import json
import math
import os
import sys

import pytest

from test_experiments import check_primary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--quick", "--small", "--sft_steps=5", "--rl_steps=2"]


def _load(name, tmp_path):
    mod = importlib.import_module("lab.experiments." + name)
    data = mod.main(SMALL + [f"--out={tmp_path}"])
    assert os.path.exists(os.path.join(tmp_path, f"{name}.json"))
    try:
        import matplotlib  # noqa: F401
        assert os.path.exists(os.path.join(tmp_path, f"{name}.png"))
    except ImportError:
        pass
    return data, json.load(open(os.path.join(tmp_path, f"{name}.json")))


def test_e7_quick(tmp_path):
    """Both settings, full only with one epoch; each primary contrast is the seed's
    arm minus shuffle at the last evaluation, recomputed here from the runs."""
    data, saved = _load("e7_schedulers", tmp_path)
    assert set(saved["runs"]) == {"1 epoch", "2 epochs"}
    assert set(saved["runs"]["1 epoch"]) == {"full", "shuffle", "query", "balanced", "sign"}
    assert set(saved["runs"]["2 epochs"]) == {"shuffle", "query", "balanced", "sign"}
    for name, arms in saved["runs"].items():
        for arm, runs in arms.items():
            (r,) = runs
            assert r["seed"] == 0 and r["steps"][0] == 0 and r["tax_interior_sum"][0] == 0.0
            assert r["tax_interior_sum"][-1] >= 0 and r["style_drift_restate"][-1] >= 0
            assert r["epochs"] == (1 if name == "1 epoch" else 2)
    check_primary(saved)
    assert len(saved["primary"]) == 12  # 2 settings x (query, balanced, sign) x (drift, tax)
    for name in saved["runs"]:
        for arm, sign in (("query", "<"), ("balanced", "<"), ("sign", ">")):
            for k, label in (
                ("style_drift_restate", "|restate drift|"),
                ("tax_interior_sum", "tax_interior_sum"),
            ):
                c = saved["primary"][f"{name}: {label} {arm} - shuffle"]
                a, b = saved["runs"][name][arm][0][k][-1], saved["runs"][name]["shuffle"][0][k][-1]
                assert (
                    c["n"] == 1
                    and c["predicted"] == f"{sign} 0"
                    and abs(c["diff"] - (a - b)) < 1e-12
                )
            c = saved["secondary"][f"{name}: accuracy (last 3 evals) {arm} - shuffle"]
            a, b = saved["runs"][name][arm][0], saved["runs"][name]["shuffle"][0]
            assert abs(c["diff"] - (a["acc_last3"] - b["acc_last3"])) < 1e-12
    assert saved["rate"]["units"] == 9
    assert len(saved["seeds_needed"]) == 18  # drift, tax, accuracy x 3 arms x 2 settings
    for name, x in saved["seeds_needed"].items():  # targets: 20 % of shuffle's value, or 3 points
        setting = name.split(":")[0]
        shuffle = saved["runs"][setting]["shuffle"][0]
        want = 0.03 if "accuracy" in name else 0.2 * abs(
            shuffle["style_drift_restate" if "drift" in name else "tax_interior_sum"][-1])
        assert x["target"] == pytest.approx(want) and x["n"] is None  # one seed: no sd


def test_e7_last3_and_settings():
    """Accuracy over the last 3 evaluations after the warm start, by hand."""
    from lab.experiments import e7_schedulers as e7
    assert e7.last3([0.5, 0.6, 0.7, 0.8, 0.9]) == pytest.approx((0.7 + 0.8 + 0.9) / 3)
    assert e7.last3([0.5, 0.6, 0.8]) == pytest.approx(0.7)  # the warm start (first) never counts
    assert e7.last3([0.5]) is None
    assert [(n, e, len(a)) for n, e, a in e7.settings()] == [
        ("1 epoch", 1, 5),
        ("2 epochs", 2, 4),
    ]


def test_e8_quick(tmp_path):
    """Quick mode's four arms from one warm start and seed; the primary contrast is
    recomputed from the JSON's per-run curves (last evaluation of |restate drift|)."""
    from lab.experiments import e8_objectives
    data = e8_objectives.main(SMALL + ["--jobs=1", f"--out={tmp_path}"])
    saved = json.load(open(os.path.join(tmp_path, "e8_objectives.json")))
    assert (
        saved["arms"] == ["grpo", "dr_grpo", "dfpo_min", "dfpo_orth"] and saved["minibatches"] == 2
    )
    assert saved["clip"] == "sym" and saved["lr"] == 3e-5
    for arm, runs in saved["runs"].items():
        (r,) = runs
        assert r["seed"] == 0 and r["steps"] == [0, 2] and r["style_drift_restate"][0] is None
        assert r["style_drift_restate"][-1] >= abs(r["style_drift_signed_restate"][-1]) - 1e-12
        assert 0 <= r["style_entropy_restate"][-1] <= 0.6932 and r["tax_interior_sum"] >= 0
    check_primary(saved)
    assert set(saved["primary"]) == {
        f"style_drift_restate {a} - grpo" for a in ("dfpo_min", "dfpo_orth", "dr_grpo")
    }
    g, d = saved["runs"]["grpo"][0], saved["runs"]["dfpo_min"][0]
    p = saved["primary"]["style_drift_restate dfpo_min - grpo"]
    assert p["n"] == 1 and p["predicted"] == "< 0"
    assert abs(p["diff"] - (d["style_drift_restate"][-1] - g["style_drift_restate"][-1])) < 1e-12
    s = saved["secondary"]["style_drift_restate dfpo_min - dr_grpo (token ratio vs min-replace)"]
    assert (
        abs(
            s["diff"]
            - (
                d["style_drift_restate"][-1]
                - saved["runs"]["dr_grpo"][0]["style_drift_restate"][-1]
            )
        )
        < 1e-12
    )
    a = saved["secondary"]["acc_last3 dr_grpo - grpo"]["diff"]
    acc = lambda r: sum(r["eval_acc"][-3:]) / len(r["eval_acc"][-3:])
    assert abs(a - (acc(saved["runs"]["dr_grpo"][0]) - acc(g))) < 1e-12
    assert data["rate"]["units"] == 4


def test_chain_style_quick(tmp_path):
    """Both arms from one warm start and seed; the primary contrast is the per-seed
    difference of the two arms' last signed restate drift, recomputed here."""
    data, saved = _load("chain_style", tmp_path)
    check_primary(saved)
    g, d = saved["runs"]["grpo"][0], saved["runs"]["dr_grpo"][0]
    assert g["seed"] == d["seed"] == 0 and g["steps"] == d["steps"]
    p = saved["primary"]["signed restate drift, grpo - dr_grpo"]
    assert p["n"] == 1 and p["predicted"] == "< 0"
    assert (
        abs(p["diff"] - (g["style_drift_signed_restate"][-1] - d["style_drift_signed_restate"][-1]))
        < 1e-12
    )
    assert g["style_drift_restate"][-1] >= abs(g["style_drift_signed_restate"][-1]) - 1e-12


def test_e8_run_flags_take_the_run_clip_except_clip_higher():
    """Every arm runs with the run's --clip and --lr; only 'grpo clip-higher' has its own clip."""
    from lab.experiments import e8_objectives as e8
    o = {"rl_steps": 600, "eval_every": 100, "minibatches": 2, "epochs": 2, "prompts_per_step": 4,
         "group_size": 8, "clip": "sym", "lr": 3e-5, "small": False}
    f = e8.run_flags(o, 3, "dfpo_orth", "w.pt")
    assert "--loss=dfpo_orth" in f and "--clip=sym" in f and "--lr=3e-05" in f and "--seed=3" in f
    assert "--init_from=w.pt" in f and "--minibatches=2" in f and "--batching=query" in f
    f = e8.run_flags({**o, "clip": "none"}, 0, "grpo clip-higher", "w.pt")
    assert "--clip=higher" in f and "--clip_high=0.28" in f and "--clip=none" not in f
    assert "--clip=none" in e8.run_flags({**o, "clip": "none"}, 0, "grpo", "w.pt")


def test_e9_quick(tmp_path):
    """Every arm from its warm start, paired by seed; each primary contrast is the
    difference of two arms' drifts, and a drift is the sum of its per-step changes."""
    from lab.experiments import e9_drift_mechanism as e9
    data = e9.main(["--quick", "--small", "--rl_steps=2", f"--out={tmp_path}"])
    saved = json.load(open(os.path.join(tmp_path, "e9_drift_mechanism.json")))
    check_primary(saved)
    assert set(saved["runs"]) == set(e9.ARMS) and len(saved["primary"]) == 6
    for arm, (r,) in saved["runs"].items():
        assert r["seed"] == 0 and all(len(r[k]) == 2 for k in e9.PER_STEP)
        assert abs(r["drift"] - sum(r["measured"])) < 1e-12 and all(k >= 0 for k in r["kl"])
        assert 0 <= r["entropy"][0] <= 0.6932
    runs = saved["runs"]
    for (a, b, pred), (name, c) in zip(e9.PRIMARY, saved["primary"].items()):
        assert name == f"drift {a} - {b}" and c["predicted"] == pred
        assert abs(c["diff"] - (runs[a][0]["drift"] - runs[b][0]["drift"])) < 1e-12
    assert runs["sgd"][0]["lr"] == e9.EXTRA["sgd_lr"][0] and runs["adamw"][0]["lr"] == 1e-4
    assert runs["sgd_kl"][0]["lr"] == e9.kl_matched_lr(runs["sgd"][0]["lr"], runs["adamw"][0]["kl"],
                                                       runs["sgd"][0]["kl"])
    assert runs["teacher60"][0]["ell_end"] != runs["adamw"][0]["ell_end"]  # its own warm start
    assert data["rl_steps"] == 2
    # cached runs, same numbers
    again = e9.main(["--quick", "--small", "--rl_steps=2", f"--out={tmp_path}"])
    assert again["primary"] == data["primary"]


def test_e9_calibration_interpolates_in_log_log():
    """KL = 0.01 lr^2 through 0.1 and 1: adamw's KL 2.5e-3 lies at lr 0.5 exactly."""
    from lab.experiments import e9_drift_mechanism as e9
    kls = {0.01: 1e-6, 0.1: 1e-4, 1.0: 1e-2}
    assert abs(e9.match_lr(kls, 2.5e-3) - 0.5) < 1e-12
    assert abs(e9.match_lr(kls, 1e-5) - 10 ** -1.5) < 1e-12  # the lower pair


def test_e9_kl_matched_lr_by_hand():
    """adamw's mean KL 4e-4 against SGD's 1e-4 at lr 0.01: lr 0.01 * 4^(1/KL_SLOPE)."""
    from lab.experiments import e9_drift_mechanism as e9
    lr = e9.kl_matched_lr(0.01, [3e-4, 5e-4], [0.5e-4, 1.5e-4])
    assert abs(lr - 0.01 * 4 ** (1 / e9.KL_SLOPE)) < 1e-15 and lr > 0.01
    # a run that did not move: nothing to match
    assert e9.kl_matched_lr(0.01, [3e-4], [0.0]) == 0.01


def test_e9_kl_slope_is_the_calibration_s():
    """KL_SLOPE is the least-squares slope of log KL on log lr over the committed calibration."""
    from lab.experiments import e9_drift_mechanism as e9
    cal = json.load(open(os.path.join(ROOT, "results", "e9_calibration.json")))
    pts = [(math.log(float(lr)), math.log(k)) for lr, k in cal["sgd_kl"].items()]
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    assert abs(slope - e9.KL_SLOPE) < 0.005


def test_e9_calibration_refuses_runs_that_do_not_move(tmp_path, capsys, monkeypatch):
    """--small's warm start earns no reward: no KL to match, one error line."""
    from lab.experiments import e9_drift_mechanism as e9
    with pytest.raises(SystemExit) as e:
        monkeypatch.setattr(
            sys,
            "argv",
            [
                "e9",
                "--calibrate",
                "--small",
                "--calib_steps=1",
                "--calib_lrs=0.1,1",
                f"--out={tmp_path}",
            ],
        )
        e9.common.cli(e9.main)
    assert e.value.code == 2 and capsys.readouterr().err.count("error:") == 1
