"""--resume validates the whole checkpoint against the whole config before anything in
the run folder changes: the optimizer state against --optimizer (a config.json edited by
hand used to cut metrics.jsonl and then crash with KeyError 'betas', 'momentum' or
'step'), every other flag against the config the checkpoint was written with, and the
parts a run needs. Each refusal is one 'error:' line, exit status 2, with the run folder
and every committed file byte-identical."""
import itertools
import json
import os
import shutil

import pytest
import torch

import train
from model import GPT, GPTConfig, OPTIMIZERS, rl_optimizer
from plumbing import checkpoint, rundir
from plumbing.config import given_flags, parse_args
from tests.test_hostile import TINY, digest, refused
import toy_tasks

pytestmark = pytest.mark.usefixtures("unchanged")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny --optimizer=sgd run stopped by Ctrl-C inside RL step 3 (its checkpoint: after
    step 2), and the same run resumed to its end."""
    d = tmp_path_factory.mktemp("resume54")
    real = train.rl_step

    def stop_at_3(run, opt):
        if run.state.step == 3:
            raise KeyboardInterrupt
        return real(run, opt)
    train.rl_step = stop_at_3
    try:
        with pytest.raises(KeyboardInterrupt):
            train.main(parse_args(TINY + ["--optimizer=sgd", f"--out_dir={d}/stopped"]))
    finally:
        train.rl_step = real
    shutil.copytree(d / "stopped", d / "finished")
    train.main(parse_args(["--resume", f"--out_dir={d}/finished"]))
    return d


def made_with(runs, tmp_path, name):
    """A copy of the stopped run as if --optimizer=name had made it: its config.json, the
    checkpoint's config and the optimizer state (one step of that optimizer) agree."""
    d = tmp_path / name
    shutil.copytree(runs / "stopped", d)
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    model, _ = checkpoint.load_checkpoint(str(d / "ckpt.pt"))
    opt = rl_optimizer(model.parameters(), name, ck["config"]["lr"])
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    ck["resume"]["optimizer"] = opt.state_dict()
    ck["config"]["optimizer"] = name
    torch.save(ck, d / "ckpt.pt")
    edit_config(d, optimizer=name)
    return d


def edit_config(d, **change):
    cfg = json.load(open(d / "config.json"))
    cfg.update(change)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))


def edit_ckpt(d, change):
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    change(ck)
    torch.save(ck, d / "ckpt.pt")


def opens(d):
    """open_run's checks alone (nothing is written): the resume would start."""
    argv = ["--resume", f"--out_dir={d}"]
    return rundir.open_run(parse_args(argv), 1, given_flags(argv))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_run_of_each_optimizer_passes_the_checks(runs, tmp_path, name):
    d = made_with(runs, tmp_path, name)
    cfg, _, _, model, saved = opens(d)
    assert cfg.optimizer == name and saved["phase"] == "rl" and saved["step"] == 2


@pytest.mark.parametrize("old, new", list(itertools.permutations(OPTIMIZERS, 2)))
def test_config_json_edited_to_another_optimizer_is_refused(runs, tmp_path, capsys, old, new):
    d = made_with(runs, tmp_path, old)
    edit_config(d, optimizer=new)
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, f"optimizer={new}")
    assert digest(d) == before


@pytest.mark.parametrize("old, new", list(zip(OPTIMIZERS, list(OPTIMIZERS)[1:] + ["adamw"])))
def test_an_optimizer_state_of_another_optimizer_is_refused(runs, tmp_path, capsys, old, new):
    """config.json and the checkpoint's config both say ``new``; only the state is ``old``'s."""
    d = made_with(runs, tmp_path, old)
    edit_config(d, optimizer=new)
    edit_ckpt(d, lambda ck: ck["config"].update(optimizer=new))
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, f"does not fit --optimizer={new}")
    assert digest(d) == before


EDITS = [("lr", 0.001), ("loss", "dr_grpo"), ("group_size", 4), ("seed", 7), ("clip_low", 0.1),
         ("temperature", 0.9), ("sft_lr", 0.002), ("instruments", False), ("grad_clip", 0.5),
         ("entropy_coef", 0.01), ("eval_every", 3), ("permute_rewards", True)]


@pytest.mark.parametrize("flag, value", EDITS, ids=[f for f, _ in EDITS])
def test_config_json_edited_by_hand_is_refused(runs, tmp_path, capsys, flag, value):
    d = tmp_path / "run"
    shutil.copytree(runs / "stopped", d)
    edit_config(d, **{flag: value})
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, flag)
    assert digest(d) == before


def test_a_checkpoint_whose_optimizer_runs_at_another_lr_is_refused(runs, tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(runs / "stopped", d)
    edit_ckpt(d, lambda ck: ck["resume"]["optimizer"]["param_groups"][0].update(lr=0.5))
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, "runs at lr 0.5")
    assert digest(d) == before


def test_an_sft_checkpoint_with_an_rl_optimizer_state_is_refused(runs, tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(runs / "stopped", d)
    edit_ckpt(d, lambda ck: ck["resume"].update(phase="sft"))
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, "does not fit SFT's AdamW")
    assert digest(d) == before


def test_a_beta_reference_of_other_sizes_is_refused(runs, tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(runs / "stopped", d)
    edit_config(d, beta=0.1)
    edit_ckpt(d, lambda ck: ck["config"].update(beta=0.1))
    other = GPT(GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1,
                          n_head=2, n_embd=32))
    checkpoint.save_checkpoint(str(d / "warm_start.pt"), other, parse_args(TINY), "warm_start", 4)
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, "other sizes")
    assert digest(d) == before


@pytest.mark.parametrize("gone, message", [
    ("ckpt.pt", "finished run whose ckpt.pt is missing"),
    ("metrics.jsonl", "shorter"),
    ("config.json", "holds no run to resume"),
])
def test_a_finished_run_missing_a_part_is_refused(runs, tmp_path, capsys, gone, message):
    d = tmp_path / "run"
    shutil.copytree(runs / "finished", d)
    os.remove(d / gone)
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, message)
    assert digest(d) == before


@pytest.mark.parametrize("flags, message", [
    (["--instruments=false"], "instruments=true; drop --instruments=false"),
    (["--diagnostics"], "drop --diagnostics"),
    (["--optimizer=adamw"], "optimizer=sgd; drop --optimizer=adamw"),
    (["--optimizer=sgd", "--optimizer=sgd"], "--optimizer is given twice"),
    (["--optimizer=sgd", "--optimizer=adamw"], "--optimizer is given twice"),
    (["--optimizer=adam"], "unknown optimizer"),
])
def test_resume_flags_that_contradict_the_run_are_refused(runs, tmp_path, capsys, flags, message):
    d = tmp_path / "run"
    shutil.copytree(runs / "stopped", d)
    before = digest(d)
    refused(["--resume"] + flags + [f"--out_dir={d}"], capsys, message)
    assert digest(d) == before


def test_resume_with_the_runs_own_optimizer_and_instruments_given_starts(runs, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(runs / "stopped", d)
    argv = ["--resume", "--optimizer=sgd", "--instruments=true", f"--out_dir={d}"]
    cfg = rundir.open_run(parse_args(argv), 1, given_flags(argv))[0]
    assert (cfg.optimizer, cfg.instruments) == ("sgd", True)


def test_instruments_off_with_diagnostics_is_refused_before_the_folder_exists(tmp_path, capsys):
    d = tmp_path / "new"
    refused(TINY + ["--instruments=false", "--diagnostics", f"--out_dir={d}"], capsys,
            "needs --instruments=true")
    assert not d.exists()


def test_the_stopped_run_resumed_to_its_end_is_the_run(runs):
    """The checks pass the real run: it resumed after RL step 2 and wrote its summary."""
    lines = [json.loads(x) for x in open(runs / "finished" / "metrics.jsonl")]
    assert [m["step"] for m in lines if m["phase"] == "rl"] == [0, 1, 2, 3]
    assert lines[-1]["phase"] == "summary"
    assert rundir.finished(runs / "finished") and not rundir.finished(runs / "stopped")
