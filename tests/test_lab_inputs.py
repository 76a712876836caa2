"""The lab's commands hold to train.py's rules on bad input: one 'error:' line and exit
status 2, checked before anything is written. A record that is not what the experiment wrote
(a NaN, a string where a number belongs) is named and refused, never dropped from an
analysis, and nothing under results/ is rewritten from it; e12_recheck refuses --quick and a
seed with no committed record, and writes only under --out; lab.ledger_plot refuses a
ledger with a missing, null or non-numeric value; lab.see takes a checkpoint path with a
space; a checkpoint write cut by Ctrl-C is a KeyboardInterrupt (one line), and the last
checkpoint still loads. Every case runs on tiny synthetic files in a temporary folder, and
no case trains a model."""
import hashlib
import io
import json
import math
import os
import re
import shutil

import pytest
import torch

from lab.experiments import common
from plumbing import checkpoint
from plumbing.errors import CliError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")


def results_digest():
    """sha256 of every file under results/ but its scratch folders."""
    out = {}
    for folder, dirs, names in os.walk(RESULTS):
        dirs[:] = [d for d in dirs if d not in ("ckpt", "runs")]
        for n in names:
            path = os.path.join(folder, n)
            out[path] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return out


@pytest.fixture
def results_kept():
    before = results_digest()
    yield
    assert results_digest() == before


@pytest.fixture
def no_training(monkeypatch):
    """A case that would train a model fails at once instead of running for minutes."""
    def refuse(*a, **k):
        raise AssertionError("this case would train a model")
    monkeypatch.setattr(common, "run", refuse)
    monkeypatch.setattr(common, "warm_start", refuse)


# ----------------------------------------------------------------------------- records

@pytest.mark.parametrize("value,says", [(float("nan"), "holds NaN in 'drift', not a finite"),
                                        ("0.5", 'holds "0.5" in \'drift\', not a finite'),
                                        (None, "holds null in 'drift'"),
                                        (True, "holds true in 'drift'")])
def test_check_record_names_the_record_and_the_field(tmp_path, value, says):
    rec = json.load(open(os.path.join(RESULTS, "e13", "D0_grpo_adamw_s200.json")))
    from lab.experiments import e13_dose
    assert common.check_record("x.json", rec, e13_dose.RECORD) is rec  # the committed one
    rec["drift"] = value
    with pytest.raises(CliError, match=r"^record x\.json " + says.replace("(", r"\(")):
        common.check_record("x.json", rec, e13_dose.RECORD)
    del rec["drift"]
    with pytest.raises(CliError, match="has no field 'drift'"):
        common.check_record("x.json", rec, e13_dose.RECORD)


def every_committed_record(exp):
    for name in sorted(os.listdir(os.path.join(RESULTS, exp))):
        yield name, json.load(open(os.path.join(RESULTS, exp, name)))


def test_every_committed_record_passes_its_check():
    from lab.experiments import e12_covariance, e13_dose
    for exp, fields in (("e12", e12_covariance.RECORD), ("e13", e13_dose.RECORD)):
        for name, rec in every_committed_record(exp):
            kind = (common.GATE_FIELDS if name.startswith("gate_") else
                    {"seed": common.INT, "task": common.STR, "seconds": common.NUM}
                    if name.startswith("warm_") else fields)
            common.check_record(name, rec, kind)


def copy_records(tmp_path, exp, seed, damage):
    """A --out holding the committed records of one seed (and the calibration), one of them
    damaged by ``damage(record)``."""
    os.makedirs(tmp_path / exp)
    for name in os.listdir(os.path.join(RESULTS, exp)):
        if name.endswith(f"_s{seed}.json"):
            shutil.copy(os.path.join(RESULTS, exp, name), tmp_path / exp / name)
    shutil.copy(os.path.join(RESULTS, f"{exp}_calibration.json"), tmp_path)
    return tmp_path / exp


@pytest.mark.parametrize("field,value", [("drift", float("nan")), ("kl", "0.01"),
                                         ("push", None), ("gap", [1.0, "x"])])
def test_e13_refuses_a_damaged_record_and_writes_nothing(tmp_path, capsys, field, value,
                                                         results_kept, no_training):
    from lab.experiments import e13_dose
    records = copy_records(tmp_path, "e13", 200, None)
    name = "D0_grpo_adamw_s200.json"  # the first run of the first seed
    rec = json.load(open(records / name))
    rec[field] = value
    (records / name).write_text(json.dumps(rec))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CliError, match=f"record {records / name} holds .* in '{field}'"):
        e13_dose.main([f"--out={tmp_path}"])
    assert sorted(os.listdir(tmp_path)) == before and not (tmp_path / "e13_dose.json").exists()
    assert os.path.exists(records / name)  # refused, not set aside nor rewritten


def test_e13_refuses_a_damaged_gate_and_calibration(tmp_path, results_kept, no_training):
    from lab.experiments import e13_dose
    records = copy_records(tmp_path, "e13", 200, None)
    gate = records / "gate_parity_wrong_long1_s200.json"
    gate.write_text(json.dumps(dict(json.load(open(gate)), gap="-5")))
    with pytest.raises(CliError, match="gate_parity_wrong_long1_s200.json holds"):
        e13_dose.main([f"--out={tmp_path}"])
    cal = json.load(open(tmp_path / "e13_calibration.json"))
    cal["lr"]["sgd"] = "fast"
    (tmp_path / "e13_calibration.json").write_text(json.dumps(cal))
    with pytest.raises(CliError, match="'lr' is not one positive number per optimizer"):
        e13_dose.main([f"--out={tmp_path}"])


@pytest.mark.parametrize("field,value,shown", [("push", "x", '"x"'),
                                               ("drift", float("nan"), "NaN"),
                                               ("entropy_end", None, "null")])
def test_e12_refuses_a_damaged_record_and_writes_nothing(tmp_path, results_kept, no_training,
                                                         field, value, shown):
    from lab.experiments import e12_covariance
    records = copy_records(tmp_path, "e12", 0, None)
    name = "Wp_grpo_s0.json"
    rec = json.load(open(records / name))
    rec[field] = value
    (records / name).write_text(json.dumps(rec))
    with pytest.raises(CliError, match=f"record {records / name} holds {shown} in '{field}'"):
        e12_covariance.main([f"--out={tmp_path}"])
    assert not (tmp_path / "e12_covariance.json").exists()


@pytest.mark.parametrize("argv,says", [(["--stream=bogus"], "--stream takes even, odd, both"),
                                       (["--stream=even", "--stream=odd"], "given twice")])
def test_e13_refuses_its_flags_before_creating_out(tmp_path, argv, says):
    from lab.experiments import e13_dose
    out = tmp_path / "new"
    with pytest.raises(CliError, match=says):
        e13_dose.main(argv + [f"--out={out}"])
    assert not out.exists()


# ----------------------------------------------------------------------------- e12_recheck

@pytest.mark.parametrize("argv,says", [
    (["--quick"], "--quick does nothing in this script"),
    (["--seeds=99"], "seed 99 has no committed record gate_parity_wrong_long_s99.json"),
    (["--seeds=13"], "seed 13 has no committed record"),  # the gate left seed 13 out
    (["--seeds=0,1"], "--seeds takes one seed here"),
    (["--conds=W0"], "--conds takes W+, W- or both"),
    (["--seeds=0", "--seeds=0"], "given twice")])
def test_e12_recheck_refuses_before_creating_out(tmp_path, argv, says):
    from lab.experiments import e12_recheck
    out = tmp_path / "new"
    with pytest.raises(CliError, match=re.escape(says)):
        e12_recheck.main(argv + [f"--out={out}"])
    assert not out.exists()


def test_e12_recheck_writes_only_under_out(tmp_path, monkeypatch, results_kept, no_training):
    """Its warm starts, runs and result all go under --out (here the committed records stand
    in for the new runs: every field identical)."""
    from lab.experiments import e12_covariance as e12
    from lab.experiments import e12_recheck
    seen = []

    def copy(o, name):
        seen.append(o["records"])
        os.makedirs(o["records"], exist_ok=True)
        shutil.copy(os.path.join(RESULTS, "e12", name + ".json"), o["records"])
    task = lambda cond: f"parity_{e12.CONDITIONS[cond]}"
    monkeypatch.setattr(e12, "warm_gap", lambda o, seed, cond, w: copy(
        o, f"gate_{task(cond)}_s{seed}"))
    monkeypatch.setattr(e12, "one_run", lambda o, seed, cond, arm, w: copy(
        o, f"{cond}_{arm}_s{seed}".replace("+", "p").replace("-", "m")))
    report = e12_recheck.main(["--seeds=3", "--conds=W+", f"--out={tmp_path}"])
    assert report["identical"] and len(report["records"]) == 3
    threads = torch.get_num_threads()
    assert (tmp_path / f"e12_recheck_s3_t{threads}.json").exists()
    assert all(p.startswith(str(tmp_path)) for p in seen)


# ----------------------------------------------------------------------------- ledger_plot

def metrics(tmp_path, change):
    """A run folder whose metrics.jsonl holds two ledger steps, the second changed."""
    row = lambda step: {"phase": "rl", "step": step, "ledger_mass": 0.3,
                        "ledger_cancelled": 0.6, "ledger_credit": 0.3, "ledger_weights": 0.01,
                        "ledger_ratios": 0.0, "ledger_split": 0.0, "ledger_uncentred": 0.0}
    rows = [row(1), row(2)]
    change(rows[1])
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(tmp_path)


@pytest.mark.parametrize("change,says", [
    (lambda r: r.pop("ledger_credit"), "RL step 2 has no value for ledger_credit"),
    (lambda r: r.update(ledger_mass=None), "RL step 2 has null for ledger_mass"),
    (lambda r: r.update(ledger_weights="0.1"), 'RL step 2 has "0.1" for ledger_weights'),
    (lambda r: r.update(ledger_split=[1]), "RL step 2 has \\[1\\] for ledger_split"),
    (lambda r: r.update(ledger_cancelled=float("nan")), "RL step 2 has NaN for ledger_cancel")])
def test_ledger_plot_refuses_a_ledger_train_py_did_not_write(tmp_path, change, says):
    from lab import ledger_plot
    from lab.plot import load_run
    folder = metrics(tmp_path, change)
    with pytest.raises(CliError, match=says):
        ledger_plot.ledger_steps(load_run(folder), folder)
    with pytest.raises(CliError, match=says):  # before matplotlib is asked for
        ledger_plot.main([folder])
    assert sorted(os.listdir(tmp_path)) == ["metrics.jsonl"]


def test_ledger_plot_reads_a_good_ledger(tmp_path):
    from lab import ledger_plot
    from lab.plot import load_run
    folder = metrics(tmp_path, lambda r: r.update(ledger_mass=0))
    steps = ledger_plot.ledger_steps(load_run(folder), folder)
    assert [r["step"] for r in steps] == [1]  # a step with no mass is not drawn


# ----------------------------------------------------------------------------- lab.see

@pytest.mark.parametrize("form", ["equals", "apart"])
def test_see_takes_a_checkpoint_path_with_a_space(tmp_path, form, capsys):
    """The path reaches the checkpoint check whole (here: a file that is not a checkpoint)."""
    from lab import see
    folder = tmp_path / "a run"
    folder.mkdir()
    ckpt = folder / "my ckpt.pt"
    ckpt.write_text("not a checkpoint")
    argv = ([f"--init_from={ckpt}"] if form == "equals" else ["--init_from", str(ckpt)])
    with pytest.raises(SystemExit) as e:
        see.cli(argv + [f"--out={tmp_path / 'a figure.png'}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert f"checkpoint '{ckpt}' is corrupt or not a checkpoint" in err


def test_see_says_a_path_cut_by_the_shell_needs_quotes(tmp_path, capsys):
    from lab import see
    with pytest.raises(SystemExit) as e:
        see.cli([f"--init_from={tmp_path}/a", "run/ckpt.pt"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "a path with a space needs quotes, as in --init_from='" in err
    assert f"{tmp_path}/a run/ckpt.pt'" in err


# ----------------------------------------------------------------------------- checkpoints

class CutFile(io.FileIO):
    """A file whose third write is cut by Ctrl-C, inside torch's zip writer."""
    writes = 0

    def write(self, b):
        CutFile.writes += 1
        if CutFile.writes == 3:
            raise KeyboardInterrupt
        return super().write(b)


def test_ctrl_c_inside_a_checkpoint_write_is_an_interrupt(tmp_path, monkeypatch):
    """torch.save cut by Ctrl-C raises a RuntimeError of its own ('unexpected pos'); the
    write says KeyboardInterrupt (one line at the entry points), leaves no temp file, and
    the checkpoint written before it still loads."""
    path = str(tmp_path / "ckpt.pt")
    checkpoint.atomic_save({"w": torch.ones(3)}, path)
    real_open = open
    monkeypatch.setattr(checkpoint, "open", lambda p, mode="r", *a, **k: (
        CutFile(p, "w") if "w" in mode else real_open(p, mode, *a, **k)), raising=False)
    CutFile.writes = 0
    with pytest.raises(KeyboardInterrupt):
        checkpoint.atomic_save({"w": torch.zeros(1000, 1000)}, path)
    assert CutFile.writes >= 3 and os.listdir(tmp_path) == ["ckpt.pt"]
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.ones(3))


def test_interrupted_follows_the_chain():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("unexpected pos")
    except RuntimeError as e:
        assert checkpoint.interrupted(e)
    assert not checkpoint.interrupted(RuntimeError("x")) and not checkpoint.interrupted(None)
    assert math.isfinite(1.0)
