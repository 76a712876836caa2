"""lab/see_length.py: its reading in both regimes, by hand, and the command end to end on a
tiny model, each printed number checked against the run's own metrics.jsonl."""
import json
import os
import re

import pytest

from lab import see_length


def runs(g_drift, d_drift, push, gap=-15.0, kept=1.0):
    arm = lambda drift: {"ell0": -0.3, "ell": -0.3 + drift, "drift": drift, "gap": gap,
                         "push_1L": push, "kept": kept}
    return {"grpo": arm(g_drift), "dapo": arm(d_drift)}


def test_the_reading_follows_the_push_and_says_when_it_does_not():
    lines = see_length.reading(runs(-0.94, 0.23, -0.072))
    assert lines[-1].startswith("reading: grpo moved the choice 1.17 nats further from")
    assert lines[-1].endswith("in the direction of the 1/L push")
    assert "wrong rollouts longer" in lines[0] and "-15.0 tokens" in lines[0]
    assert "(away from restating)" in lines[-2]
    lines = see_length.reading(runs(0.9, 0.1, 0.05, gap=12.0))  # right ones longer
    assert "right rollouts longer" in lines[0] and "towards restating than dapo" in lines[-1]
    lines = see_length.reading(runs(0.2, -0.1, -0.07))  # the arms differ against the push
    assert "the other way" in lines[-1] and "further" not in lines[-1]
    assert not any(x.startswith("note:") for x in lines)


def test_one_line_says_when_the_gap_is_below_e12_s_check():
    """E12 keeps a W+ run whose gap is >= 10 tokens in >= 80 % of its steps; below, one line."""
    from lab.experiments import e12_covariance
    assert (e12_covariance.GAP_MIN, e12_covariance.GAP_SHARE) == (10.0, 0.8)
    lines = see_length.reading(runs(-0.5, 0.1, -0.05, gap=-8.3, kept=0.55))
    notes = [x for x in lines if x.startswith("note:")]
    assert notes == ["note: wrong rollouts were 10+ tokens longer in only 55 % of grpo's steps "
                     "and 55 % of dapo's steps; E12's check asks 80 %, so 1/L had less to push"]
    assert not any(x.startswith("note:") for x in see_length.reading(runs(-1, 0, -0.07,
                                                                           kept=0.8)))


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    from plumbing.errors import CliError
    for argv in (["--seed=x"], ["--seed=-1"], [f"--seed={2 ** 31}"], ["--bogus=1"], ["--seed"],
                 [f"--out={tmp_path}/f.txt/x"], ["--seed=1", "--seed=2"],
                 [f"--out={tmp_path}/a", f"--out={tmp_path}/b"]):
        if argv[0].startswith("--out"):
            (tmp_path / "f.txt").write_text("")
        with pytest.raises(CliError):
            see_length.main(argv)
    assert sorted(os.listdir(tmp_path)) in ([], ["f.txt"])


def test_the_command_prints_its_own_runs_numbers(tmp_path, monkeypatch, capsys):
    """... and a damaged warm start already there is set aside in one line on the terminal."""
    from lab.experiments import common
    monkeypatch.setattr(see_length, "SFT_STEPS", 30)
    monkeypatch.setattr(see_length, "STEPS", 4)
    monkeypatch.setattr(see_length, "EVAL_EVERY", 2)
    monkeypatch.setattr(see_length, "WIDTH", 32)
    out = tmp_path / "sl"
    warm = common.warm_start_path(str(out / "seed5"), 5, see_length.TASK, sft_steps=30,
                                  sft_flawed=0.5, n_embd=32)
    os.makedirs(os.path.dirname(warm))
    open(warm, "w").write("not a checkpoint")
    got = see_length.main(["--seed=5", f"--out={out}"])
    captured = capsys.readouterr()
    text = captured.out
    warned = [x for x in captured.err.splitlines() if x.startswith("warning:")]
    assert len(warned) == 1 and "set aside as warm_start.pt.bad" in warned[0]
    assert os.path.exists(warm + ".bad") and os.path.getsize(warm) > 1000
    folder = out / "seed5"
    for arm in ("grpo", "dapo"):
        ms = [json.loads(line) for line in open(folder / arm / "metrics.jsonl")]
        ell = {m["step"]: m["choice_log_odds"] for m in ms if "choice_log_odds" in m
               and m["phase"] == "rl"}
        steps = [m for m in ms if m["phase"] == "rl" and m["step"] >= 1 and "reward" in m]
        assert got[arm]["drift"] == pytest.approx(ell[4] - ell[0])
        assert got[arm]["push_1L"] == pytest.approx(sum(m["lencov_choice_1L"] or 0.0
                                                        for m in steps))
        line = next(x for x in text.splitlines() if x.strip().startswith(arm + " ("))
        assert f"{ell[4] - ell[0]:+.2f} nats" in line
    gap = (got["grpo"]["gap"] + got["dapo"]["gap"]) / 2
    assert re.search(rf"gap in a group: {gap:+.1f} tokens", text)
    assert f"{got['grpo']['push_1L']:+.3f}" in text
    assert f"{got['grpo']['drift'] - got['dapo']['drift']:+.2f} nats" in text
    assert "reading: " in text and os.path.exists(folder / "train.log")
