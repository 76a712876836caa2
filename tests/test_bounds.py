"""Every number a user types is bounded: each integer and float flag of every entry point
that takes one (train.py, sample.py, lab.see, the experiments, the marker) is driven with
0, -1, 1e30, nan and a 30-digit integer through its command line function, in-process.
Each is one 'error:' line naming the flag and exit status 2, before any work; 0 is
accepted only where it means something, and those flags are listed here, so a flag that
starts accepting 0 (or stops) fails this test. lab.bench, lab.plot, lab.ledger_plot,
exercises.check and exercises.handout take no number: their flags are refused alike by
their own tests."""

import dataclasses
import glob
import importlib
import os

import pytest

import sample
import train
from lab import see
from lab.experiments import common
from plumbing import config, errors
from plumbing.errors import CliError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAD = ["-1", "1e30", "nan", "1" * 30]
NO_CKPT = "--init_from=/nonexistent/ckpt.pt"  # read only after every number is checked

# 0 means something: no steps, no penalty, no flawed share, seed 0, greedy, all of them
ZERO_OK = {
    "train": {"sft_steps", "sft_flawed", "rl_steps", "top_k", "dual_clip", "beta",
              "entropy_coef", "dro_beta", "top_entropy_quantile", "off_policy_mask_threshold",
              "seed", "motion_every"},
    "sample": {"temperature", "seed"},
    "see": {"seed"},
    "experiments": {"seeds", "threads", "sft_flawed", "steps", "eps", "margin"},
}


def numeric(cls):
    return [f.name for f in dataclasses.fields(cls) if f.type in (int, float)]


def one_error(capsys, call, flag):
    """call() exits 2 after one 'error:' line; the line (naming ``flag`` or not)."""
    with pytest.raises(SystemExit) as e:
        call()
    lines = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("name", numeric(config.Config))
def test_train_bounds_each_number(capsys, tmp_path, name):
    for v in BAD:
        line = one_error(capsys, lambda: train.cli([f"--{name}={v}",
                                                    f"--out_dir={tmp_path}/run"]), name)
        assert f"--{name}" in line, (v, line)
    try:  # 0: the checks only, so that an accepted 0 does not start a run
        config.parse_args([f"--{name}=0"])
        accepted = True
    except CliError as e:
        accepted = False
        assert f"--{name}" in str(e), str(e)
    assert accepted == (name in ZERO_OK["train"]), name
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("script, cls, key", [(sample, sample.SampleConfig, "sample"),
                                              (see, see.SeeConfig, "see")])
def test_sample_and_see_bound_each_number_before_reading_the_checkpoint(capsys, script, cls,
                                                                        key):
    for name in numeric(cls):
        for v in BAD + ["0"]:
            line = one_error(capsys, lambda: script.cli([NO_CKPT, f"--{name}={v}"]), name)
            # a number accepted goes on to the checkpoint, which is not there
            accepted = "/nonexistent/ckpt.pt" in line
            assert accepted == (v == "0" and name in ZERO_OK[key]), (name, v, line)
            assert accepted or name in line, (name, v, line)


def experiments():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "lab", "experiments", "*.py"))):
        m = importlib.import_module("lab.experiments." + os.path.basename(path)[:-3])
        if hasattr(m, "EXTRA") and hasattr(m, "main"):
            out.append(m)
    return out


def test_every_experiment_bounds_each_number(capsys, monkeypatch, tmp_path):
    mods = experiments()
    assert len(mods) >= 12, [m.__name__ for m in mods]
    monkeypatch.chdir(tmp_path)
    for m in mods:
        flags = {"seeds": "0,1,2", "threads": 0, "jobs": 2, **{k: v[0] for k, v in
                                                                 m.EXTRA.items()}}
        for name, default in flags.items():
            numbers = isinstance(default, (int, float)) and not isinstance(default, bool)
            lists = isinstance(default, str) and ("," in default or name == "seeds"
                                                  or name.endswith("lrs"))
            if not (numbers or lists):
                continue
            for v in BAD:
                line = one_error(capsys, lambda: errors.cli(m.main, [f"--{name}={v}"]), name)
                assert f"--{name}" in line, (m.__name__, v, line)
            try:  # 0: the checks only; an accepted 0 would start the experiment
                common.values([f"--{name}=0"], m.EXTRA, "", ())
                accepted = True
            except CliError:
                accepted = False
            assert accepted == (name in ZERO_OK["experiments"]), (m.__name__, name)


@pytest.mark.parametrize("name", ["timeout", "jobs", "memory"])
def test_the_marker_bounds_each_number(capsys, tmp_path, name):
    from exercises.answers import mark  # noqa: F401  (the teacher's copy)
    for v in BAD + ["0"]:
        assert mark.main([str(tmp_path), f"--{name}={v}"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: --{name}"), (v, lines)


if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):  # the student copy
    del test_the_marker_bounds_each_number


def test_an_empty_output_is_refused_by_every_entry_point_that_writes_one(capsys, tmp_path):
    """--out= (or --out_dir=, or an empty OUT_DIR) would write nowhere, or somewhere no one
    asked: one line, exit 2, at every entry point that takes one."""
    from lab import bench, ledger_plot, plot
    from lab.experiments import e1_flips
    (tmp_path / "metrics.jsonl").write_text("")
    calls = {"train.py": lambda: train.cli(["--out_dir="]),
             "lab.see": lambda: see.cli([NO_CKPT, "--out="]),
             "lab.plot": lambda: errors.cli(plot.parse, [str(tmp_path), "--out="]),
             "lab.ledger_plot": lambda: errors.cli(ledger_plot.parse, [str(tmp_path), "--out="]),
             "lab.bench": lambda: errors.cli(bench.parse, ["--out="]),
             "e1_flips": lambda: errors.cli(e1_flips.main, ["--quick", "--out="])}
    for name, call in calls.items():
        line = one_error(capsys, call, name)
        assert "empty" in line or "needs a file name" in line, (name, line)
    if os.path.isdir(os.path.join(ROOT, "exercises", "answers")):  # the teacher's handout
        from exercises import handout
        assert handout.main(["", "--allow_dirty"]) == 2
        assert "empty" in capsys.readouterr().err
