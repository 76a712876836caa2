"""What a user of a clone meets first: documents whose links resolve, the
training-curve plot, --help, hints for runs that cannot learn, quick modes
that leave committed results alone, and the task registry."""
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from plumbing import config, console
from lab import ledger, plot, residuals
import toy_tasks
import train
from plumbing.config import Config, parse_args
from plumbing.errors import CliError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


def tracked_files(*suffixes):
    """The repository's files (git's view: tracked, or untracked and not ignored; every file
    in a copy without git), by ending."""
    if os.path.isdir(os.path.join(ROOT, ".git")):
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        files = [p for p in out.split("\0") if p and os.path.isfile(os.path.join(ROOT, p))]
    else:
        files = [os.path.relpath(os.path.join(d, f), ROOT) for d, dirs, fs in os.walk(ROOT)
                 for f in fs if "__pycache__" not in d and "/." not in d]
    return sorted(f for f in files if f.endswith(suffixes))


# ----------------------------------------------------------------------------- documents

def md_links(text):
    """Relative link targets of a markdown text: [x](target) and ![x](target)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_md_links_finder_is_not_vacuous():
    text = "see [a](THEORY.md#1-setting) and ![b](results/x.png) and [c](https://x.org/y)"
    assert md_links(text) == ["THEORY.md#1-setting", "results/x.png"]
    assert anchor("## 8. References".lstrip("# ")) == "8-references"


def test_every_relative_link_in_every_markdown_file_resolves_inside_the_repository():
    mds = tracked_files(".md")
    assert {"README.md", "THEORY.md", "EXERCISES.md"} <= set(mds)
    bad = []
    for md in mds:
        text = open(os.path.join(ROOT, md)).read()
        for target in md_links(text):
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(ROOT, os.path.dirname(md), path)) if path else \
                os.path.join(ROOT, md)
            if not full.startswith(ROOT + os.sep) or not os.path.exists(full):
                bad.append(f"{md}: {target}")
            elif frag and full.endswith(".md"):
                heads = [anchor(h) for h in re.findall(r"^#+ (.*)$", open(full).read(), re.M)]
                if frag not in heads:
                    bad.append(f"{md}: {target} (no such heading)")
    assert not bad, bad


def test_nothing_points_outside_a_clone():
    offenders = [f for f in tracked_files(".md", ".py", ".txt")
                 if re.search(r"\.\./shared|DESIGN\.md", open(os.path.join(ROOT, f)).read())]
    assert not offenders, offenders


def test_licence_and_citations():
    lic = open(os.path.join(ROOT, "LICENSE")).read()
    assert lic.startswith("MIT License") and "Copyright (c) 2026 the cancel-gpt authors" in lic
    theory = " ".join(open(os.path.join(ROOT, "THEORY.md")).read().split())
    for needle in (
        "2604.13088",
        "2605.08666",
        "Token Gradient Cancellation",
        "Cancellation Hypothesis",
        "Fei Ding",
        "Zeyu Huang",
        "2402.03300",
        "2503.20783",
        "2503.14476",
        "2507.18071",
        "2402.14740",
        "1707.06347",
    ):
        assert needle in theory, needle


# ----------------------------------------------------------------------------- plot.py

def write_run(d, loss="grpo", diagnostics=False, n=30):
    os.makedirs(d, exist_ok=True)
    json.dump({"loss": loss, "task_name": "add2"}, open(os.path.join(d, "config.json"), "w"))
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for s in range(1, 6):
            f.write(json.dumps({"phase": "sft", "step": s, "loss": 2.0 / s}) + "\n")
        f.write(json.dumps({"phase": "rl", "step": 0, "eval_acc": 0.5}) + "\n")
        for s in range(1, n + 1):
            rec = {
                "phase": "rl",
                "step": s,
                "reward": s / n,
                "mixed": 0.7,
                "first_token_residual": 0.01,
                "clip_frac": 0.0,
            }
            if diagnostics:
                rec.update(tax=0.1, tax_sum=0.1 * s)
            if s % 10 == 0:
                rec["eval_acc"] = 0.5 + s / (4 * n)
                if diagnostics:
                    rec["entropy"] = 0.3
            f.write(json.dumps(rec) + "\n")
        f.write(json.dumps({"phase": "summary", "step": n, "final_acc": 0.75}) + "\n")


def test_plot_series_and_panels(tmp_path):
    write_run(tmp_path / "a")
    write_run(tmp_path / "b", diagnostics=True)
    a, b = plot.load_run(str(tmp_path / "a")), plot.load_run(str(tmp_path / "b"))
    assert a["label"] == "a (grpo, add2)"
    assert plot.series(a, "eval_acc", "eval") == (
        [0, 10, 20, 30],
        [0.5, 0.5 + 10 / 120, 0.5 + 20 / 120, 0.75],
    )
    assert plot.series(a, "loss", "sft")[1] == [2.0, 1.0, 2 / 3, 0.5, 0.4]
    keys = lambda runs: [p[0] for p in plot.panels_present(runs)]
    assert "tax_sum" not in keys([a]) and "entropy" not in keys([a])
    assert {"tax_sum", "entropy", "eval_acc", "reward", "mixed", "first_token_residual"} <= set(
        keys([a, b])
    )
    assert plot.running_mean([1, 2, 3, 4], k=2) == [1, 1.5, 2.5, 3.5]


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is an optional extra")
def test_plot_writes_curves_png_and_overlays(tmp_path):
    write_run(tmp_path / "a")
    write_run(tmp_path / "b", loss="dr_grpo", diagnostics=True)
    assert plot.main([str(tmp_path / "a")]) == str(tmp_path / "a" / "curves.png")
    assert open(tmp_path / "a" / "curves.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "cmp" / "both.png"
    (tmp_path / "cmp").mkdir()  # plot.py creates no folder it was not asked to
    plot.main([str(tmp_path / "a"), str(tmp_path / "b"), f"--out={out}"])
    assert out.stat().st_size > 0


def test_plot_bad_input_is_one_line_exit_2(tmp_path):
    write_run(tmp_path / "a")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.jsonl").write_text("{not json\n")
    for args in ([], [str(tmp_path / "nowhere")], ["--colour=red", str(tmp_path / "a")]):
        p = subprocess.run(
            [sys.executable, "-m", "lab.plot", *args], cwd=ROOT, capture_output=True, text=True
        )
        assert (
            p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1
        ), p.stderr
    with pytest.raises(CliError, match="line 1"):
        plot.load_run(str(tmp_path / "bad"))


def test_plot_without_matplotlib_says_so_in_one_line(tmp_path):
    write_run(tmp_path / "a")
    code = ("import sys; sys.modules['matplotlib'] = None; sys.argv = ['plot.py', %r]; "
            "import runpy; runpy.run_module('lab.plot', run_name='__main__')" % str(tmp_path / "a"))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert (
        p.stderr.strip() == "error: plot.py needs matplotlib: pip install -r requirements-plots.txt"
    )
    assert not (tmp_path / "a" / "curves.png").exists()


# ----------------------------------------------------------------------------- --help

def test_help_is_grouped_with_examples_and_hides_no_flag():
    text = config.usage(Config, train.__doc__, config.GROUPS, config.EXAMPLES)
    heads = [
        line[:-1]
        for line in text.splitlines()
        if line and not line.startswith(" ") and line.endswith(":")
    ]
    assert heads[:8] == list(config.GROUPS) and heads[-1] == "examples"
    for f in dataclasses.fields(Config):
        assert (
            sum(line.lstrip().startswith(f"--{f.name}=") for line in text.splitlines()) == 1
        ), f.name
    assert len(re.findall(r"^  python (train|plot)\.py", text, re.M)) == 3
    # A flag that no group names (one being added elsewhere) is still shown, under "other".
    extra = dataclasses.make_dataclass(
        "WithNew", [("new_flag", int, config._f(3, "something new"))], bases=(Config,)
    )
    text = config.usage(extra, "", config.GROUPS, config.EXAMPLES)
    other = text.split("\nother:\n")[1]
    assert other.splitlines()[0].split() == ["--new_flag=3", "something", "new"]


def test_experiment_help_has_one_flag_per_line():
    from lab.experiments import common
    text = common.help_text(
        "E0: a doc.", {"eps": (1e-4, "a threshold"), "threads": (1, "torch threads")}
    )
    flags = [line for line in text.splitlines() if line.lstrip().startswith("--")]
    assert not re.search(r"--\w+(=\S*)?\s+--\w", text), "two flags on one line"
    names = [line.split()[0].split("=")[0] for line in flags]
    assert names == ["--quick", "--seeds", "--out", "--jobs", "--device", "--replot", "--eps",
                     "--threads"]


# --------------------------------------------------------------------------- runs that cannot learn

def test_weak_start_hint_names_the_flags():
    hint = console.weak_start_hint(0.06)
    assert hint.startswith("hint: only 6 % of groups are mixed")
    assert all(len(line) <= 100 for line in hint.splitlines())
    for flag in ("--sft_steps", "--sft_flawed", "--group_size", "--temperature"):
        assert flag in hint
    assert console.weak_start_hint(0.2) == "" and console.weak_start_hint(0.75) == ""


def test_summary_line_never_prints_nan():
    cfg = Config()
    base = {"warm_start_acc": 0.5, "final_acc": 0.5, "seconds": 3.0}
    line = console.summary_line(base, cfg)
    assert "nan" not in line.lower() and "no RL steps run" in line
    assert "mixed groups in RL steps 1-10: 0.75 on average" in console.summary_line(
        dict(base, mixed_at_start=0.75), cfg
    )


def closing(summary, cfg):
    """The run's last lines: the summary, then the ledger's (lab/ledger.py), one per line."""
    return "\n".join([console.summary_line(summary, cfg)] +
                     ledger.ledger_lines(summary, cfg)).splitlines()


def test_summary_closes_with_the_ledger_its_largest_part_and_its_remedy():
    base = {"warm_start_acc": 0.5, "final_acc": 0.9, "seconds": 3.0, "mixed_at_start": 0.6,
            "ledger_steps": 100, "ledger_mass": 2.0, "shared_dlogp_mean": -1e-4,
            "ledger_mixed_steps": 90,
            "ledger_cancelled": 0.6, "ledger_credit": 0.3, "ledger_weights": 0.05,
            "ledger_ratios": 0.0, "ledger_split": 0.0, "ledger_uncentred": 0.0}
    cfg = Config(loss="grpo", rl_steps=100)
    lines = closing(base, cfg)
    assert all(len(line) <= 100 for line in lines)
    row = lambda words: next(line for line in lines if words in line)
    assert row("cancelled inside an optimizer step").split()[-2:] == ["60", "%"]
    weights = row("left by unequal weights of the objective")
    assert "5 %" in weights and weights.endswith("--loss=dapo removes it")
    verdict = lines.index(row("verdict: "))
    assert lines[verdict] == "verdict: the largest cause besides credit is unequal weights of " \
                             "the objective"
    assert lines[verdict + 1] == "  (5 %); --loss=dapo would remove it"
    assert "mean log-prob change -1.0e-04 nats per RL step" in "\n".join(lines)
    # only what this run measured: no other run's result is quoted
    assert not any("committed result" in line or "seeds 0-9" in line for line in lines)
    # a part the flags make zero is marked so, with the flag that would change it
    for words in ("left by ratios and clips of reused data", "left by copies in different steps",
                  "left by advantages not centred in a group"):
        assert row(words).endswith("0 % *"), row(words)
    note = " ".join(line.strip() for line in lines[lines.index(row("* zero by construction")):])
    for flag in ("--epochs=2", "--minibatches=2", "--adv=batch_whiten"):
        assert flag in note
    lines = closing(dict(base, ledger_weights=3e-9), Config(loss="dr_grpo", rl_steps=100))
    assert row("verdict: ") == ("verdict: beyond the rewards' credit nothing was left "
                                "uncancelled (up to float error)")
    assert not any(line.startswith("  left by") and "removes it" in line for line in lines)
    lines = closing(dict(base, ledger_mixed_steps=0), cfg)
    assert "no group was mixed" in lines[2] and "--sft_steps" in lines[3]
    lines = closing(dict(base, ledger_steps=40), cfg)
    assert "cancellation ledger of RL steps 61-100" in lines[2]
    # under reuse no single flag is offered for the weights: it could bring a split group
    lines = closing(base, Config(loss="grpo", rl_steps=100, minibatches=2, epochs=2))
    assert not any(line.startswith("  left by") and "removes it" in line for line in lines)
    assert "no single flag removes it under this run's reuse" in "\n".join(lines)


def test_summary_exch_residual_mean_is_the_mean_of_the_logged_steps(tmp_path, monkeypatch):
    """Read back from metrics.jsonl: the summary's mean is the mean of the per-step values.
    The residual is replaced by known step values (0.01, 0.02, 0.03) so that the check
    does not rest on a run whose residual happens to be 0."""
    import json
    calls = []

    def fake(*args):
        calls.append(1)
        return 0.01 * len(calls)
    monkeypatch.setattr(residuals, "exch_residual", fake)
    flags = [
        "--n_layer=1",
        "--n_head=2",
        "--n_embd=32",
        "--sft_steps=2",
        "--sft_batch=8",
        "--rl_steps=3",
        "--prompts_per_step=2",
        "--group_size=4",
        "--eval_size=8",
        "--device=cpu",
        f"--out_dir={tmp_path}",
    ]
    summary = train.main(parse_args(flags))
    lines = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    logged = [r["exch_residual"] for r in lines if r["phase"] == "rl" and "exch_residual" in r]
    assert logged == pytest.approx([0.01, 0.02, 0.03])
    assert summary["exch_residual_mean"] == pytest.approx(0.02)
    assert lines[-1]["exch_residual_mean"] == pytest.approx(0.02)


def test_a_run_with_few_mixed_groups_prints_the_hint(tmp_path, capsys):
    flags = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=2", "--sft_batch=8",
             "--prompts_per_step=3", "--group_size=4", "--eval_size=8", "--device=cpu"]
    train.main(parse_args(flags + ["--rl_steps=1", f"--out_dir={tmp_path / 'a'}"]))
    out = capsys.readouterr()
    # a 2-step SFT model is never right
    assert "hint: only 0 % of groups are mixed" in out.out + out.err
    assert f"plot the curves: python -m lab.plot {tmp_path / 'a'}" in out.out
    train.main(parse_args(flags + ["--rl_steps=0", f"--out_dir={tmp_path / 'b'}"]))
    assert "nan" not in capsys.readouterr().out.lower()


# ----------------------------------------------------------------------------- quick modes


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(ROOT, ".git")), reason="not a git checkout (a student copy)"
)
def test_quick_mode_writes_to_a_scratch_folder_that_git_ignores():
    from lab.experiments import common
    quick, full = common.default_out(True), common.default_out(False)
    assert full == os.path.join(ROOT, "results")
    assert not (quick + os.sep).startswith(full + os.sep)
    rel = os.path.relpath(quick, ROOT)
    p = subprocess.run(["git", "check-ignore", "-q", os.path.join(rel, "e1_flips.json")], cwd=ROOT)
    assert p.returncode == 0, f"{rel} is not ignored by git"


def test_quick_flag_picks_the_scratch_folder_and_out_overrides(tmp_path):
    from lab.experiments import common
    assert common.parse(["--quick", "--replot"])["out"] == common.default_out(True)
    assert common.parse(["--replot"])["out"] == common.default_out(False)
    assert common.parse(["--quick", f"--out={tmp_path}"])["out"] == str(tmp_path)


# ----------------------------------------------------------------------------- the task registry

def readme_task_code():
    readme = open(os.path.join(ROOT, "docs", "RECIPES.md")).read()
    section = readme.split("## Your own task")[1].split("\n## ")[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def test_readme_task_registers_and_trains(tmp_path, monkeypatch):
    monkeypatch.setattr(toy_tasks, "TASKS", dict(toy_tasks.TASKS))
    code = readme_task_code()
    assert len(code.strip().splitlines()) <= 45
    exec(compile(code, "docs/RECIPES.md:my_task.py", "exec"), {"__name__": "my_task"})
    task = toy_tasks.make_task("digitsum", 3)
    assert task.prompt((4785,)) == "4785=" and task.solution((4785,)) == "24"
    assert task.reward((478,), "19") == 1.0 and task.reward((478,), "12") == 0.0
    assert task.reward((478,), task.flawed((478,))) == 0.0
    assert len(task.categories((478,), "19")) == 3  # two digits and EOS
    cfg = parse_args(["--task=digitsum", "--digits=3", "--n_layer=1", "--n_head=2", "--n_embd=32",
                      "--sft_steps=3", "--sft_batch=8", "--rl_steps=2", "--prompts_per_step=3",
                      "--group_size=4", "--eval_size=8", "--device=cpu", f"--out_dir={tmp_path}"])
    summary = train.main(cfg)
    lines = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    assert [l["step"] for l in lines if l["phase"] == "rl"] == [0, 1, 2]
    assert json.load(open(tmp_path / "config.json"))["task_name"] == "digitsum3"
    assert 0 <= summary["final_acc"] <= 1
    with pytest.raises(CliError, match="no scratchpad"):
        parse_args(["--task=digitsum", "--scratchpad"])
