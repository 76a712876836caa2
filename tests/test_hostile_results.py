"""results/ is written only by the full run that was asked for: any flag that changes an
experiment's design (--quick, --small, --seeds, a step count...) makes a partial run,
whose --out defaults to out/partial/ and may not be in results/. Also: every experiment
refuses a flag given twice and a shared flag it has no use for; damaged caches are set
aside (NAME.bad) and computed again; damaged calibration and results files are one line.
Every case runs with every committed file (and all of results/) hashed around it."""
import errno
import importlib
import json
import os
import shutil
import sys

import pytest
import torch

from lab.experiments import common
from plumbing import checkpoint
from plumbing.errors import CliError

pytestmark = pytest.mark.usefixtures("unchanged")

SCRIPTS = ["chain_style", "demo_ledger", "e1_flips", "e2_coupling", "e3_masked",
           "e4_categories", "e5_value", "e6_group_size", "e7_schedulers", "e8_objectives",
           "e9_drift_mechanism", "e10_length", "e11_optimizer", "e12_covariance", "e13_dose",
           "multiplicity", "scoreboard"]
PARTIAL = common.default_out(True)


class Parsed(Exception):
    """Raised right after common.parse: the script's options, flags and refusals."""


@pytest.fixture
def parsed(monkeypatch):
    """script, argv -> (opts, extra, unused, modes) of the script's main, stopped right after
    its common.parse (which decides where the run writes), before any work."""
    real = common.parse

    def stop(argv, extra=None, doc="", redraw=None, unused=(), name=None, modes=(),
             check=None):
        raise Parsed(real(argv, extra, doc, redraw, unused, name, modes, check), extra or {},
                     unused, modes)
    monkeypatch.setattr(common, "parse", stop)

    def call(script, argv):
        with pytest.raises(Parsed) as e:
            importlib.import_module("lab.experiments." + script).main(argv)
        return e.value.args
    return call


def changed(key, default):
    """A flag that sets ``key`` to a value other than its default."""
    if isinstance(default, bool):
        return f"--{key}={str(not default).lower()}"
    if isinstance(default, int):
        return f"--{key}={default + 1}"
    if isinstance(default, float):
        return f"--{key}={default / 2 if default else 0.5:g}"
    if "," in default:
        return f"--{key}={default.split(',')[0]}"
    return {"task": "--task=add"}.get(key)


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_full_run_alone_writes_results_and_says_so(parsed, capsys, script):
    opts, extra, unused, _ = parsed(script, [])
    assert opts["out"] == common.RESULTS
    out = capsys.readouterr().out
    assert out.count("full run of ") == 1 and "updates the committed results/" in out
    how = [f for f in ("--jobs=1", "--device=cpu") if f[2:].split("=")[0] not in unused]
    assert parsed(script, how)[0]["out"] == common.RESULTS  # flags of how, not of what


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_flag_that_changes_the_design_makes_a_partial_run(parsed, capsys, script):
    """Every flag of the script, set to another value, moves the run to out/partial/; a value
    its checks refuse is refused before anything is written."""
    _, extra, unused, modes = parsed(script, [])
    capsys.readouterr()
    keys = [k for k in ["quick", "seeds"] + list(extra)
            if k not in unused and k not in common.HOW + tuple(modes) and k != "results"]
    default = {"quick": False, "seeds": "0,1,2", **{k: v[0] for k, v in extra.items()}}
    partial = 0
    for key in keys:
        flag = changed(key, default[key])
        if flag is None:
            continue
        try:
            opts = parsed(script, [flag])[0]
        except CliError:
            continue
        assert opts["out"] == PARTIAL, flag
        assert "full run" not in capsys.readouterr().out, flag
        partial += 1
    assert partial >= min(len(keys), 1)


@pytest.mark.parametrize("argv", [
    ["--small", "--seeds=100", "--sft_steps=20", "--rl_steps=2"],  # the smoke run of issue 54
    ["--quick"], ["--seeds=0,1,2,3,4,5,6,7,8"], ["--rl_steps=199", "--device=cpu"],
])
def test_e10s_smoke_runs_are_partial(parsed, argv):
    assert parsed("e10_length", argv)[0]["out"] == PARTIAL


def test_flags_at_their_default_values_keep_the_full_run(parsed, capsys):
    opts = parsed("e10_length", ["--seeds=0,1,2,3,4,5,6,7,8,9", "--rl_steps=200"])[0]
    assert opts["out"] == common.RESULTS and "full run of e10_length" in capsys.readouterr().out


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_partial_run_may_not_write_into_results(parsed, script, tmp_path):
    flag = "--results=" + str(tmp_path) if script == "multiplicity" else "--seeds=5"
    for out in (common.RESULTS, os.path.join(common.RESULTS, "sub")):
        with pytest.raises(CliError, match="which only the full run writes"):
            parsed(script, [flag, f"--out={out}"])
    assert not os.path.exists(os.path.join(common.RESULTS, "sub"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_flag_given_twice_is_refused(parsed, script):
    with pytest.raises(CliError, match="--out is given twice"):
        parsed(script, ["--out=a", "--out=b"])


@pytest.mark.parametrize("script, flag", [
    ("e10_length", "--jobs=5"), ("chain_style", "--jobs=2"), ("demo_ledger", "--jobs=2"),
    ("scoreboard", "--jobs=2"), ("multiplicity", "--seeds=1"), ("demo_ledger", "--replot"),
])
def test_a_shared_flag_the_script_does_not_use_is_refused(parsed, script, flag):
    with pytest.raises(CliError, match="does nothing in this script"):
        parsed(script, [flag])


def one_line(capsys, script, argv, message, monkeypatch):
    """The script as its command line runs it: exit status 2 and one 'error:' line."""
    mod = importlib.import_module("lab.experiments." + script)
    monkeypatch.setattr(sys, "argv", [script] + argv)
    with pytest.raises(SystemExit) as e:
        common.cli(mod.main)
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert message in err[0], err[0]


def test_a_partial_run_writes_out_partial_and_leaves_results_alone(capsys):
    """A real partial run (the synthetic scoreboard's quick mode, seconds) with no --out."""
    from lab.experiments import scoreboard
    before = os.path.getmtime(os.path.join(common.RESULTS, "scoreboard.json"))
    scoreboard.main(["--quick"])
    assert "full run" not in capsys.readouterr().out
    assert json.load(open(os.path.join(PARTIAL, "scoreboard.json")))["config"]["quick"] is True
    assert os.path.getmtime(os.path.join(common.RESULTS, "scoreboard.json")) == before


# ----------------------------------------------------------------------------- damaged files

CALIBRATIONS = {
    "truncated": '{"experiment": "e11_calibration", "arms": {"sgd": {"lr": 0.0',
    "foreign": '{"experiment": "e9_calibration", "sgd_lr": 0.0175}',
    "a list": "[1, 2, 3]",
    "lr a string": '{"arms": {"sgd": {"lr": "fast"}}, "teacher": {"p_f": 0.3}}',
    "not UTF-8": b"\xff\xfe\x00".decode("latin-1"),
}


@pytest.mark.parametrize("kind", CALIBRATIONS)
def test_e11_refuses_a_damaged_calibration_in_one_line(tmp_path, capsys, monkeypatch, kind):
    path = tmp_path / "e11_calibration.json"
    path.write_text(CALIBRATIONS[kind], encoding="latin-1")
    before = path.read_bytes()
    one_line(capsys, "e11_optimizer", ["--quick", "--small", f"--out={tmp_path}", "--jobs=1"],
             "e11_calibration.json is not", monkeypatch)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == [path.name]


def damage_e1(contrasts):
    contrasts["primary"][next(iter(contrasts["primary"]))].pop("half")


MULTIPLICITY = {  # a change to e1_flips.json, a piece of the message
    "a contrast without its half": (damage_e1, "is not a contrast"),
    "a contrast that is a string": (
        lambda d: d["primary"].update({k: "big" for k in d["primary"]}), "is not a contrast"),
    "n a string": (lambda d: [c.update(n="ten") for c in d["primary"].values()],
                   "is not a contrast"),
    "secondaries a list": (lambda d: d.update(secondary=[1, 2]), "are not a JSON object"),
    "post-hoc contrasts a list": (lambda d: d.update(experiment="e10_length"), None),
}


@pytest.mark.parametrize("kind", MULTIPLICITY)
def test_multiplicity_refuses_a_malformed_results_file(tmp_path, capsys, monkeypatch, kind):
    change, message = MULTIPLICITY[kind]
    data = json.load(open(os.path.join(common.RESULTS, "e1_flips.json")))
    name = "e1_flips.json"
    if message is None:  # post-hoc contrasts read by name: e10's, with a list in their place
        name, message = "e10_length.json", "its contrasts are not an experiment's"
        data["warm_check_gap"] = [1, 2]
    else:
        change(data)
    (tmp_path / name).write_text(json.dumps(data))
    one_line(capsys, "multiplicity", [f"--results={tmp_path}"], message, monkeypatch)
    assert os.listdir(tmp_path) == [name]


def test_multiplicity_of_another_folder_writes_beside_it(tmp_path):
    from lab.experiments import multiplicity
    shutil.copy(os.path.join(common.RESULTS, "e1_flips.json"), tmp_path)
    data = multiplicity.main([f"--results={tmp_path}"])
    assert (tmp_path / "multiplicity.json").exists() and "e1_flips" in data["families"]


def fake_metrics(steps=2):
    """What e10's one_run reads of a run's metrics lines."""
    rl = [{"phase": "rl", "step": s, "length_correct": 5.0, "length_incorrect": 7.0,
           "reward": 0.5, "ledger_mass": 0.0} for s in range(1, steps + 1)]
    rl[-1].update(eval_acc=0.5, style_drift_signed_restate=0.0, entropy=1.0)
    return [{"phase": "rl", "step": 0, "eval_acc": 0.25}] + rl


@pytest.mark.parametrize("content", ['{"seed": 100, "arm": "gr', "[1, 2]", '{"seed": 100}'])
def test_e10_sets_a_damaged_record_aside_and_runs_it_again(tmp_path, capsys, monkeypatch,
                                                           content):
    from lab.experiments import e10_length
    ran = []
    monkeypatch.setattr(common, "run", lambda flags, d: ran.append(d) or fake_metrics())
    cache = tmp_path / "runs" / "e10" / "grpo_s100.json"
    cache.parent.mkdir(parents=True)
    cache.write_text(content)
    rec = e10_length.one_run({"out": str(tmp_path), "small": True}, 100, "grpo", 2, "w.pt")
    assert len(ran) == 1 and rec["warm_acc"] == 0.25
    assert (tmp_path / "runs" / "e10" / "grpo_s100.json.bad").read_text() == content
    assert json.load(open(cache)) == rec
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("warning: ") and str(cache) in err[0]
    assert e10_length.one_run({"out": str(tmp_path), "small": True}, 100, "grpo", 2,
                              "w.pt") == rec and len(ran) == 1  # now a good record: reused


def test_e10_an_old_record_whose_run_log_is_cut_is_run_again(tmp_path, monkeypatch):
    from lab.experiments import e10_length
    ran = []
    monkeypatch.setattr(common, "run", lambda flags, d: ran.append(d) or fake_metrics())
    o = {"out": str(tmp_path), "small": True}
    rec = e10_length.one_run(o, 100, "dapo", 2, "w.pt")
    old = {k: v for k, v in rec.items() if k not in ("warm_acc", "ledger")}  # before amendment
    cache = tmp_path / "runs" / "e10" / "dapo_s100.json"
    cache.write_text(json.dumps(old))
    (tmp_path / "runs" / "e10" / "dapo_s100").mkdir()
    (tmp_path / "runs" / "e10" / "dapo_s100" / "metrics.jsonl").write_text('{"phase": "r')
    assert e10_length.one_run(o, 100, "dapo", 2, "w.pt") == rec and len(ran) == 2
    assert (tmp_path / "runs" / "e10" / "dapo_s100.json.bad").exists()


def test_e11_sets_a_damaged_run_record_aside_and_runs_it_again(tmp_path, capsys, monkeypatch):
    from lab.experiments import e11_optimizer as E11
    ran = []
    monkeypatch.setattr(E11, "run_arm", lambda *a: ran.append(a) or {"seed": 10, "arm": "sgd",
                                                                      "lr": 0.1, "kl": [1.0]})
    opts = {"out": str(tmp_path), "small": True}
    first = E11.cached_run(opts, 10, "sgd", 2, 0.1)
    path = tmp_path / "runs" / "e11" / os.listdir(tmp_path / "runs" / "e11")[0]
    path.write_text(path.read_text()[:20])  # cut by something outside the run
    again = E11.cached_run(opts, 10, "sgd", 2, 0.1)
    assert len(ran) == 2 and again["fresh"] and first["kl"] == again["kl"] == [1.0]
    assert os.path.exists(str(path) + ".bad") and "set aside" in capsys.readouterr().err


def test_e9s_calibration_cache_cut_is_set_aside_and_computed_again(tmp_path, monkeypatch):
    from lab.experiments import e9_drift_mechanism as E9
    monkeypatch.setattr(E9, "run_arm", lambda opts, seed, arm, n, lr=None: {
        "kl": [1e-4 if arm == "adamw" else lr * 1e-2] * n})
    (tmp_path / "e9_calibration.json").write_text('{"steps": 2, "adamw_kl": 1e-4, "sgd_kl": {')
    data = E9.calibrate({"out": str(tmp_path), "calib_steps": 2, "calib_lrs": [0.003, 0.03]})
    assert abs(data["sgd_lr"] - 0.01) < 1e-9 and (tmp_path / "e9_calibration.json.bad").exists()


@pytest.fixture
def fake_train(monkeypatch):
    """train.main as the warm starts call it, writing a tiny checkpoint (no training); with
    ``fail`` set it writes config.json, then raises that exception."""
    from model import GPT, GPTConfig
    import toy_tasks
    calls = {"n": 0, "fail": None}

    def main(cfg):
        calls["n"] += 1
        os.makedirs(cfg.out_dir, exist_ok=True)
        open(os.path.join(cfg.out_dir, "config.json"), "w").write("{}")
        if calls["fail"]:
            raise calls["fail"]
        m = GPT(GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1,
                          n_head=2, n_embd=16))
        checkpoint.save_checkpoint(os.path.join(cfg.out_dir, "warm_start.pt"), m, cfg,
                                   "warm_start", cfg.sft_steps)
    monkeypatch.setattr(common.train, "main", main)
    return calls


def test_a_cut_warm_start_is_set_aside_and_trained_again(tmp_path, capsys, fake_train):
    path = common.warm_start(str(tmp_path), 0, "add", sft_steps=3)
    good = open(path, "rb").read()
    open(path, "wb").write(good[: len(good) // 2])
    assert common.warm_start(str(tmp_path), 0, "add", sft_steps=3) == path
    assert fake_train["n"] == 2 and checkpoint.load_checkpoint(path)
    assert os.path.exists(path + ".bad") and "set aside" in capsys.readouterr().err
    common.warm_start(str(tmp_path), 0, "add", sft_steps=3)
    assert fake_train["n"] == 2  # a good one is reused


@pytest.mark.parametrize("stop", [OSError(errno.ENOSPC, "No space left on device", "x"),
                                  KeyboardInterrupt(), FloatingPointError("diverged")])
def test_a_warm_start_that_stops_leaves_no_folder_behind(tmp_path, fake_train, stop):
    fake_train["fail"] = stop
    with pytest.raises(type(stop)):
        common.warm_start(str(tmp_path / "out"), 0, "add", sft_steps=3)
    assert not (tmp_path / "out").exists()


def test_a_refused_warm_start_touches_nothing(tmp_path, fake_train):
    """A CliError (say, another process writes the folder) leaves the folder as it was."""
    fake_train["fail"] = CliError("being written by another process")
    d = tmp_path / "ckpt" / "add2_sft3_seed0"
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text("theirs\n")
    with pytest.raises(CliError):
        common.warm_start(str(tmp_path), 0, "add", sft_steps=3)
    assert (d / "metrics.jsonl").read_text() == "theirs\n" and (d / "config.json").exists()


def test_a_damaged_rl_state_is_set_aside(tmp_path):
    good, cut = tmp_path / "step0.pt", tmp_path / "step5.pt"
    torch.save({"model": {}, "optimizer": {}, "step": 0}, good)
    cut.write_bytes(good.read_bytes()[:30])
    assert common.loads(str(good)) and not common.loads(str(cut))


def test_a_damaged_record_is_set_aside_under_a_name_that_never_collides(tmp_path, capsys):
    """NAME.bad, then NAME.bad.1, NAME.bad.2 ...: each damaged copy is kept. A folder or a
    link already at NAME.bad takes nothing and loses nothing."""
    path = tmp_path / "rec.json"
    (tmp_path / "rec.json.bad.1").mkdir()  # a folder where the second would go
    (tmp_path / "rec.json.bad.2").symlink_to(tmp_path / "nowhere")  # a dangling link
    for i in range(3):
        path.write_text("{cut " + str(i))
        assert common.load_record(str(path), ("x",)) is None
        assert not path.exists()
    assert (tmp_path / "rec.json.bad").read_text() == "{cut 0"
    assert (tmp_path / "rec.json.bad.3").read_text() == "{cut 1"
    assert (tmp_path / "rec.json.bad.4").read_text() == "{cut 2"
    assert (tmp_path / "rec.json.bad.1").is_dir() and os.listdir(tmp_path / "rec.json.bad.1") == []
    assert os.readlink(tmp_path / "rec.json.bad.2") == str(tmp_path / "nowhere")
    err = capsys.readouterr().err.splitlines()
    assert [line.split("set aside as ")[1].split(";")[0] for line in err] == [
        "rec.json.bad", "rec.json.bad.3", "rec.json.bad.4"], err
