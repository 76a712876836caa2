"""--resume continues any run from its saved config alone, and never guesses: a
flag given on resume that differs from the saved run is refused (also one set back
to its default), a saved config of the wrong types is refused before any file is
touched, and a flag the run predates takes what the older version did."""
import json
import os
import shutil

import pytest
import torch

import train
from plumbing.config import parse_args
from tests.test_hostile import TINY, digest, refused


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Finished tiny runs: mul (whose defaults differ from add's), sgd, rloo."""
    d = tmp_path_factory.mktemp("resume")
    train.main(parse_args(TINY + ["--task=mul", f"--out_dir={d}/mul"]))
    train.main(parse_args(TINY + ["--optimizer=sgd", "--lr=0.01", f"--out_dir={d}/sgd"]))
    train.main(parse_args(TINY + ["--loss=rloo", f"--out_dir={d}/rloo"]))
    return d


def copy(runs, tmp_path, name):
    shutil.copytree(runs / name, tmp_path / name)
    return tmp_path / name


def lines_but_summary(folder):
    return [x for x in open(folder / "metrics.jsonl") if '"summary"' not in x]


def test_a_bare_resume_continues_a_run_of_another_task(runs, tmp_path, capsys):
    d = copy(runs, tmp_path, "mul")
    before = lines_but_summary(d)
    open(d / "metrics.jsonl", "w").writelines(before)  # cut before its end: one step to redo
    train.cli(["--resume", f"--out_dir={d}"])  # no flag but the folder: the saved config rules
    assert "error" not in capsys.readouterr().err
    assert lines_but_summary(d) == before


@pytest.mark.parametrize("name, flag, message", [
    ("sgd", "--optimizer=adamw", "optimizer=sgd; drop --optimizer=adamw"),  # back to the default
    ("sgd", "--lr=0.0001", "lr=0.01; drop --lr=0.0001"),
    ("rloo", "--adv=grpo", "adv=rloo; drop --adv=grpo"),
    ("rloo", "--loss=grpo", "loss=rloo; drop --loss=grpo"),
    ("mul", "--task=add", "task=mul; drop --task=add"),
])
def test_a_flag_that_differs_from_the_saved_run_is_refused(
    runs, tmp_path, capsys, name, flag, message
):
    d = copy(runs, tmp_path, name)
    before = digest(d)
    refused(["--resume", flag, f"--out_dir={d}"], capsys, message)
    assert digest(d) == before


def test_adv_auto_on_resume_means_the_saved_objectives_own(runs, tmp_path, capsys):
    d = copy(runs, tmp_path, "rloo")
    train.cli(["--resume", "--adv=auto", f"--out_dir={d}"])
    assert "error" not in capsys.readouterr().err


@pytest.mark.parametrize("key, value", [("seed", 1.5), ("lr", "abc"), ("digits", "2"),
                                        ("rl_steps", None), ("diagnostics", 1), ("loss", 3)])
def test_a_saved_config_of_the_wrong_type_is_refused_before_anything_changes(
        runs, tmp_path, capsys, key, value):
    d = copy(runs, tmp_path, "mul" if key != "diagnostics" else "sgd")
    conf = json.load(open(d / "config.json"))
    conf[key] = value
    json.dump(conf, open(d / "config.json", "w"))
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, f"{key}={json.dumps(value)}")
    assert digest(d) == before


def test_a_run_that_predates_adv_resumes_on_its_objectives_own_estimator(runs, tmp_path):
    from plumbing import rundir
    d = copy(runs, tmp_path, "rloo")
    conf = json.load(open(d / "config.json"))
    del conf["adv"]  # as written before --adv existed
    json.dump(conf, open(d / "config.json", "w"))
    cfg = rundir.resumed_config(parse_args(["--resume", f"--out_dir={d}"], check=False), {})
    assert cfg.loss == "rloo" and cfg.adv == "rloo"
    assert os.path.exists(d / "ckpt.pt")


def test_a_bare_resume_runs_on_the_device_its_config_names(runs, tmp_path, monkeypatch):
    """The sampling generator's stream belongs to one device, so a resume continues on
    the saved run's device, not on what --device=auto would pick on this machine."""
    from plumbing import dist_utils
    asked = []
    real = dist_utils.resolve_device
    monkeypatch.setattr(dist_utils, "resolve_device", lambda d: asked.append(d) or real(d))
    d = copy(runs, tmp_path, "sgd")
    train.cli(["--resume", f"--out_dir={d}"])
    assert asked == ["cpu"]  # the saved config's, although this command's default is auto


def test_a_checkpoint_sampled_on_a_gpu_is_valid_but_resumes_only_there(runs, tmp_path, capsys):
    """A CUDA generator's state (16 bytes) passes the checkpoint's validation, so that
    sample.py and --init_from can read a GPU run's ckpt.pt anywhere; resuming it on
    the CPU is refused with one line, before anything is written."""
    from plumbing import checkpoint
    d = copy(runs, tmp_path, "sgd")
    ck = torch.load(d / "ckpt.pt", weights_only=False)
    ck["resume"]["streams"][0]["torch_gen"] = torch.zeros(16, dtype=torch.uint8)
    torch.save(ck, d / "ckpt.pt")
    checkpoint.validate_state(ck["resume"])  # must not raise
    checkpoint.load_checkpoint(str(d / "ckpt.pt"))  # must not raise
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, "sampled on another device")
    assert digest(d) == before
