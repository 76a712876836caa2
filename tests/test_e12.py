"""E12's pieces: the manipulation check, the per-seed numbers and the registered contrasts
computed from hand-made records, and the quick run end to end (records, resumption)."""
import json
import os

import pytest

from lab.experiments import e12_covariance as e12


def test_manipulation_by_hand():
    assert e12.manipulation([-16, -12, -9, None, -15], "W+") == pytest.approx(3 / 5)
    assert e12.manipulation([16, 12, 9, 10], "W-") == pytest.approx(3 / 4)
    assert e12.manipulation([-16, -12], "W-") == 0.0  # the wrong way round counts for nothing
    assert e12.manipulation([1, 2], "W0") is None  # no gap is made there


def fake(drift, push=0.0, manip=1.0):
    return {"drift": drift, "push_1L": push, "push": push, "manipulation": manip,
            "length_incorrect": [20.0], "entropy_end": 0.5, "entropy_start": 0.6,
            "p_end": 0.3, "seconds": 1.0, "ell": [(0, 0.0), (30, drift)]}


def runs_for(seeds, manip_wp_dapo=1.0):
    runs = {}
    for k, s in enumerate(seeds):
        runs[s] = {
            # grpo - dapo: -1 - k/10 in W+, +1 in W-: I = 2 + k/10
            "W+": {"grpo": fake(-1.5 - k / 10, -0.1), "dapo": fake(-0.5, 0.0,
                                                                    manip_wp_dapo)},
            "W-": {"grpo": fake(0.5, 0.1), "dapo": fake(-0.5)},
            "W0": {"grpo": fake(0.1 * (-1) ** k), "dapo": fake(0.0)},
            "NC": {"grpo": fake(-0.2), "dapo": fake(-0.2 + 0.05 * k)},
            "PC+": {"dapo": fake(1.5)}, "PC-": {"dapo": fake(-1.0)},
        }
    return runs


def test_per_seed_and_the_primary_by_hand():
    seeds = [0, 1, 2]
    primary, sec, checks, rows = e12.analyse(runs_for(seeds), seeds)
    assert [r["I"] for r in rows] == pytest.approx([2.0, 2.1, 2.2])
    c = next(iter(primary.values()))
    assert c["diff"] == pytest.approx(2.1) and c["n"] == 3 and c["predicted"] == "> 0"
    assert sec["[grpo - dapo]_W+"]["diff"] == pytest.approx(-1.1)
    assert checks["positive control, PC+ - PC- (dapo)"]["diff"] == pytest.approx(2.5)
    assert all(v["p_holm"] >= v["p"] for v in sec.values() if v["p"] is not None)
    assert "equivalence" in sec["[grpo - dapo]_W0"]


def test_a_void_run_leaves_its_seed_out_of_the_primary():
    seeds = [0, 1, 2]
    runs = runs_for(seeds)
    runs[1]["W+"]["dapo"]["manipulation"] = 0.5  # the gap did not last: void, not null
    _, _, checks, rows = e12.analyse(runs, seeds)
    assert rows[1]["I"] is None and rows[1]["I_all"] == pytest.approx(2.1)
    assert checks["primary with void runs kept"]["n"] == 3


def test_quick_writes_records_and_resumes(tmp_path):
    out = str(tmp_path / "q")
    rows = e12.main(["--quick", f"--out={out}"])
    names = sorted(os.listdir(os.path.join(out, "e12")))
    runs = [n for n in names if not n.startswith("warm_")]
    assert runs == sorted(f"{c}_{a}_s1100.json" for c in ("Wp", "Wm") for a in e12.ARMS)
    rec = json.load(open(os.path.join(out, "e12", "Wp_grpo_s1100.json")))
    assert rec["ell"][0][0] == 0 and rec["drift"] is not None and len(rec["gap"]) == 6
    stamp = os.path.getmtime(os.path.join(out, "e12", "Wp_grpo_s1100.json"))
    again = e12.main(["--quick", f"--out={out}"])  # every record is read back, none redone
    assert again == rows
    assert os.path.getmtime(os.path.join(out, "e12", "Wp_grpo_s1100.json")) == stamp


def test_the_gate_by_hand():
    assert e12.gate_passes(-12.0, "W+") and not e12.gate_passes(-9.0, "W+")
    assert e12.gate_passes(10.0, "W-") and not e12.gate_passes(-16.0, "W-")
    assert not e12.gate_passes(None, "NC") and e12.gate_passes(None, "W0")


def test_the_full_path_on_a_tiny_model(tmp_path, monkeypatch):
    """main's full path (every condition, the controls, the contrasts, the JSON) on one
    seed of a tiny model, the gate waved through (a 20-step warm start cannot pass it)."""
    monkeypatch.setattr(e12, "SFT_STEPS", 20)
    monkeypatch.setattr(e12, "STEPS", 4)
    monkeypatch.setattr(e12, "gate_passes", lambda gap, cond: True)
    out = str(tmp_path / "f")
    data = e12.main(["--small", "--valid=1", "--seeds=3000", f"--out={out}"])
    assert data["seeds"] == [3000] and data["void_seeds"] == {}
    assert set(data["per_arm"]) >= {"W+ grpo", "W0 dapo", "NC grpo", "PC+ dapo", "PC- dapo"}
    assert os.path.exists(os.path.join(out, "e12_covariance.json"))
    assert len([n for n in os.listdir(os.path.join(out, "e12")) if n.endswith("_s3000.json")
                and not n.startswith(("warm_", "gate_"))]) == 10


def options_with_gates(tmp_path, gap_wp, gap_wm):
    """A small run's options, with seed 0's W+ and W- gate records already written."""
    from lab.experiments import common
    o = {"out": str(tmp_path), "records": str(tmp_path / "e12"), "small": True,
         "sft_steps": 40, "quick": False, "lr": 3e-5, "steps": 6}
    os.makedirs(o["records"])
    for task, gap in (("parity_wrong_long", gap_wp), ("parity_right_long", gap_wm)):
        common.save_record(os.path.join(o["records"], f"gate_{task}_s0.json"),
                           {"seed": 0, "task": task, "gap": gap})
    return o


def test_a_seed_with_every_record_trains_no_warm_start(tmp_path, monkeypatch):
    """Records are committed, warm starts are scratch: a finished seed continues on another
    machine without training its six warm starts again; a missing record trains its own."""
    from lab.experiments import common
    trained = []

    def fake_warm_start(out, seed, task, **kw):
        trained.append(task)
        return common.warm_start_path(out, seed, task, **kw)
    monkeypatch.setattr(common, "warm_start", fake_warm_start)
    monkeypatch.setattr(common, "run", lambda flags, run_dir: [])
    base = json.load(open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "results", "e12", "Wp_grpo_s0.json")))  # every field a record holds
    monkeypatch.setattr(e12, "record_of", lambda ms, cond, arm, seed, flags, s: dict(
        base, cond=cond, arm=arm, seed=seed, flags=flags, drift=0.0))
    monkeypatch.setattr(e12, "choice_entropy", lambda *a: 0.0)
    o = options_with_gates(tmp_path, -16.0, 16.0)
    first = e12.seed_runs(o, 0, tuple(e12.CONDITIONS), e12.ARMS)
    assert "void" not in first and len(trained) == len(e12.CONDITIONS) + len(e12.CONTROLS)
    trained.clear()
    assert e12.seed_runs(o, 0, tuple(e12.CONDITIONS), e12.ARMS) == first and trained == []
    os.remove(os.path.join(o["records"], "Wm_dapo_s0.json"))
    e12.seed_runs(o, 0, tuple(e12.CONDITIONS), e12.ARMS)
    assert trained == ["parity_right_long"]


def contrast_of(diff, half, mde=1.0):
    return {"diff": diff, "half": half, "mde": mde, "n": 16}


@pytest.mark.parametrize("diff,half,valid,pc,verdict", [
    (1.5, 0.7, 16, True, "effect"),          # [0.8, 2.2]: above 0
    (-1.5, 0.7, 16, True, "contradicted"),   # [-2.2, -0.8]: below 0
    (0.1, 0.5, 16, True, "equivalent"),      # [-0.4, 0.6]: inside +-1
    (0.1, 0.5, 16, False, "inconclusive"),   # inside, but the positive control failed
    (0.5, 0.9, 16, True, "inconclusive"),    # [-0.4, 1.4]: crosses 0 and +1
    (-0.3, 0.8, 16, True, "inconclusive"),   # [-1.1, 0.5]: crosses -1
    (1.5, 0.7, 11, True, "void"),            # 11 seeds pass the manipulation check
    (1.5, 0.7, 12, True, "effect"),          # 12 is enough
])
def test_the_primary_verdict_by_hand(diff, half, valid, pc, verdict):
    assert e12.primary_verdict(contrast_of(diff, half), valid, pc)[0] == verdict


def test_the_decisions_on_made_up_records():
    seeds = list(range(12))
    runs = runs_for(seeds)
    primary, sec, checks, _ = e12.analyse(runs, seeds)
    d = e12.decisions(primary, sec, checks, runs, seeds, e12.ARMS)
    assert d["primary"]["verdict"] == "effect"  # I = 2 + k/10 on every seed
    assert d["manipulation"]["n_valid"] == 12 and not d["manipulation"]["primary_void"]
    assert d["positive_control"] == {"nats": pytest.approx(2.5), "needs": 2.0, "passes": True}
    # fake()'s ell ends at step 30: no arm has a value at the measurement step 20
    assert d["choice_inside"]["arms"] == {}
    for s in seeds:  # put the measurement step in: W+ grpo ends far below 0.1
        for c in runs[s]:
            for a in runs[s][c]:
                runs[s][c][a]["ell"] = [(0, 0.0), (e12.STEPS, -3.0 if (c, a) == ("W+", "grpo")
                                                   else 0.0)]
                runs[s][c][a]["reward"] = [0.5, 0.8 if (c, a) == ("W0", "dapo") else 0.5]
    d = e12.decisions(primary, sec, checks, runs, seeds, e12.ARMS)
    assert d["choice_inside"]["saturated"] == ["W+ grpo"]  # sigma(-3) = 0.047
    assert d["choice_inside"]["arms"]["W- dapo"]["p"] == pytest.approx(0.5)
    assert d["accuracy"]["outside"] == []  # W0 dapo's mean 0.65 is inside 0.3-0.7
    # one seed's W+ dapo run fails the manipulation check: 11 valid seeds, void
    runs[3]["W+"]["dapo"]["manipulation"] = 0.5
    primary, sec, checks, _ = e12.analyse(runs, seeds)
    d = e12.decisions(primary, sec, checks, runs, seeds, e12.ARMS)
    assert d["primary"]["verdict"] == "void" and d["manipulation"]["n_valid"] == 11
    # a weak positive control: W0 and NC are not read as "about 0"
    for s in seeds:
        runs[s]["PC+"]["dapo"]["drift"] = 0.5
    primary, sec, checks, _ = e12.analyse(runs, seeds)
    d = e12.decisions(primary, sec, checks, runs, seeds, e12.ARMS)
    assert not d["positive_control"]["passes"]
    assert all(not v.startswith("agree") for v in d["equivalence"].values())


def test_both_gates_run_before_any_rl_run(tmp_path, monkeypatch):
    """The registered order: a seed whose W- gate fails has no RL record, not even W+'s."""
    from lab.experiments import common
    ran = []
    monkeypatch.setattr(common, "warm_start", lambda out, seed, task, **kw:
                        common.warm_start_path(out, seed, task, **kw))
    monkeypatch.setattr(e12, "one_run", lambda o, seed, cond, arm, w: ran.append(cond))
    o = options_with_gates(tmp_path, -16.0, 3.0)  # W-'s gap under the 10 tokens
    assert e12.seed_runs(o, 0, tuple(e12.CONDITIONS), e12.ARMS) == {"void": "W-"}
    assert ran == []
