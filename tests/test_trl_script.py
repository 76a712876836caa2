"""trl_bridge/train_lm.py as a researcher runs it: their data and reward, a run that keeps what
it trained, a resume after Ctrl-C, and every bad input one error line (in-process, so that
the cases cost no interpreter each). Skipped where the TRL extra is not installed."""
import json
import os
import sys
import time

import pytest

pytest.importorskip("trl")
from trl_bridge import train_lm  # noqa: E402
from trl_bridge.lesson import load  # noqa: E402

(errors,) = load("plumbing.errors")
FAST = ["--model=tiny", "--steps=4", "--batch=8", "--group_size=4", "--accumulation=1",
        "--steps_per_generation=2"]
REWARDS = '''
calls = []


def digits_even(completions, answer, **kw):
    calls.append(list(answer))
    return [float(c[-1:] in "02468") for c in completions]


def stop_at_second(completions, answer, **kw):
    calls.append(1)
    if len(calls) == 2:
        raise KeyboardInterrupt
    return [float(c[-1:] in "02468") for c in completions]


def stop_at_once(completions, **kw):
    raise KeyboardInterrupt
'''


@pytest.fixture
def research(tmp_path, monkeypatch):
    """A researcher's folder: a JSONL dataset and a module of reward functions."""
    (tmp_path / "my_rewards.py").write_text(REWARDS, encoding="utf-8")
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10, 30)
            for b in range(40, 44)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                         encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # `python -m` puts the current folder first
    sys.modules.pop("my_rewards", None)
    return tmp_path


def run(argv, capsys, main=train_lm.main):
    """errors.cli(main) in-process: (exit status, stdout, stderr)."""
    try:
        errors.cli(main, argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_run_keeps_what_it_trained(research, capsys):
    """Own data, own reward, a warm-up: the folder holds a model and tokenizer that
    from_pretrained loads, metrics.jsonl (config, TRL's history with the ledger, summary)
    and run.json; the start says the processes and the effective batch."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    out = research / "run"
    code, text, err = run([f"--out={out}", "--dataset=data.jsonl", "--sft_steps=30",
                           "--reward=my_rewards:digits_even", *FAST], capsys)
    assert code == 0, err
    assert "1 process; an optimizer step takes 8 x 1 x 1 = 8 completions (2 prompts x 4)" in text
    assert not os.path.exists(f"{out}.partial")
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    from trl_bridge import tiny
    ids = tok("12+4=", return_tensors="pt").input_ids
    assert ids.tolist()[0] == tiny.tokenizer()("12+4=").input_ids
    assert model(ids).logits.isfinite().all()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["phase"] == "config" and lines[0]["dataset"] == "data.jsonl"
    steps = [x for x in lines if x["phase"] == "rl"]
    assert any("ledger/cancelled" in x for x in steps)
    assert any("lengthcov/gap" in x for x in steps)
    assert lines[-1] == {"phase": "summary", **train_lm.summary(steps)}
    assert json.loads((out / "run.json").read_text())["reward"] == "my_rewards:digits_even"
    import my_rewards
    assert my_rewards.calls and my_rewards.calls[0][0].isdigit()  # the answers reach it
    code, _, err = run([f"--out={out}", *FAST], capsys)  # a used --out is refused
    assert code == 2 and "--overwrite=true replaces it" in err


def test_ctrl_c_keeps_the_checkpoint_and_resume_finishes_the_run(research, capsys):
    out = research / "run"
    argv = [f"--out={out}", "--dataset=data.jsonl", "--reward=my_rewards:stop_at_second",
            "--save_every=2", *FAST]
    code, _, err = run(argv, capsys)  # the 2nd generation batch comes after step 2
    assert code == 2 and [x for x in err.splitlines() if "error" in x] == [
        f"error: interrupted; {out}.partial/checkpoint-2 is kept: --resume=true continues "
        f"from it"]
    assert not os.path.exists(out)
    code, _, err = run([f"--out={out}", "--resume=true", "--steps=5"], capsys)
    assert code == 2 and "contradicts the saved run's --steps=4" in err
    code, _, err = run([f"--out={out}", "--resume=true"], capsys)
    assert code == 0, err
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if x["phase"] == "rl" and "loss" in x] == [1, 2, 3, 4]
    code, _, err = run([f"--out={out}", "--resume=true"], capsys)
    assert code == 2 and "holds a finished run" in err


def bad_cases(d):
    """(argv, words of its error line) for the bad inputs a researcher meets."""
    (d / "afile").write_text("x")
    (d / "notamodel").mkdir()
    (d / "used").mkdir()
    (d / "used" / "x").write_text("x")
    (d / "bad.jsonl").write_text('{"prompt": "1+1="}\n')
    return [
        (["--model="], "--model is empty"),
        ([f"--model={d}/missing"], "no such folder"),
        ([f"--model={d}/afile"], "is a file, not a model folder"),
        ([f"--model={d}/notamodel"], "without config.json"),
        (["--model=Qwen/Qwen2.5-0.5B"], "HF_HUB_OFFLINE is set"),
        (["--out="], "--out is empty"),
        ([f"--out={d}/afile"], "is a file, not a folder"),
        ([f"--out={d}/used"], "is not empty"),
        (["--steps=3", "--steps=4"], "--steps is given twice"),
        (["--loss=dapo", "--objective=grpo"], "--loss is given twice"),
        (["--batch=2000000000"], "GiB, more than the"),
        (["--max_completion_length=200"], "exceeds the model's 128 positions"),
        ([f"--dataset={d}/missing.jsonl"], "no such file"),
        ([f"--dataset={d}/bad.jsonl"], "line 1 needs"),
        (["--dataset=data.jsonl", "--task=mul"], "give one"),
        (["--reward=nowhere:f"], "cannot import nowhere"),
        (["--reward=my_rewards:absent"], "has no absent"),
        (["--reward=my_rewards"], "give module:function"),
        (["--resume=true"], "holds no unfinished run"),
        (["--resume=true", "--overwrite=true"], "give one"),
        (["--loss=dfpo_min", "--importance_sampling_level=sequence"], "DFPO has its own"),
        (["--beta=-1"], "--beta must be a finite number >= 0"),
        (["--reward=my_rewards:stop_at_once"], "interrupted; nothing was saved"),
        (["--batch=6", "--group_size=4", "--accumulation=1", "--steps_per_generation=2"],
         "keep_groups needs whole groups"),
        (["--steps=0"], "--steps takes a whole number >= 1"),
        (["--lr=nan"], "--lr must be a finite number"),
        (["--task=nope"], "unknown task 'nope'"),
        (["--keep_groups=yes"], "--keep_groups takes true or false"),
        (["--bogus=1"], "unknown argument"),
    ]


def test_every_bad_input_is_one_error_line_and_writes_nothing(research, capsys, monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for argv, words in bad_cases(research):
        out = research / "o"
        full = argv if any(a.startswith("--out=") for a in argv) else [f"--out={out}", *argv]
        start = time.monotonic()
        code, text, err = run(full, capsys)
        assert code == 2 and err.count("error: ") == 1, (argv, err)
        assert err.strip().splitlines()[-1].startswith("error: ") and words in err, (argv, err)
        assert "Traceback" not in err and time.monotonic() - start < 20, argv
        assert not os.path.exists(out) and not os.path.exists(f"{out}.partial"), argv


def test_the_default_reward_is_an_exact_match_of_the_completions_start():
    from trl_bridge.inputs import exact_match
    got = exact_match(["46", " 46 and more", "461", "4", "\n46\n", "46,"], [" 46"] * 6)
    assert got == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]


def test_shuffle_costs_line_is_the_mean_over_seeds_with_its_t_interval(capsys):
    from trl_bridge import shuffle_cost
    # mean 0.2, sd 0.1 * sqrt(2), t(1 dof) = 12.706: half-width 12.706 * 0.1 = 1.2706
    assert shuffle_cost.line("a", [0.1, 0.3]) == "a: 20.0 % ± 127.1 (n=2 seeds)"
    assert shuffle_cost.line("a", [0.1]) == "a: 10.0 % ± n/a (n=1 seeds)"
    assert shuffle_cost.line("a", []) == "a: no run had shared tokens"
    for argv, words in [(["--seeds=0"], "--seeds takes"), (["--objectives=ppo"], "names from"),
                        (["--steps=2", "--steps=3"], "given twice")]:
        code, _, err = run(argv, capsys, shuffle_cost.main)
        assert code == 2 and words in err and err.count("error: ") == 1, argv


def test_help_lists_every_flag_with_its_default(capsys):
    from trl_bridge import shuffle_cost
    code, text, _ = run(["--help"], capsys)
    assert code == 0
    for k, (default, _) in train_lm.FLAGS.items():
        assert f"--{k}={default or chr(39) * 2} " in text, k
    code, text, _ = run(["--help"], capsys, shuffle_cost.main)
    assert code == 0 and all(f"{k} ({v})" in text for k, v in shuffle_cost.FLAGS.items())


@pytest.mark.parametrize("module", ["trl_bridge.train_lm", "trl_bridge.shuffle_cost"])
def test_a_command_without_the_extra_installed_is_one_line(module):
    """As from an interpreter that lacks one of the extra's packages (trl, here hidden)."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import sys, runpy; sys.modules['trl'] = None; sys.argv = ['x', '--help']; "
            f"runpy.run_module({module!r}, run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("error: trl not installed for ")
    assert "requirements-trl.txt" in p.stderr
