"""Every script's --help: it exits 0, lists its flags with their defaults, and
mentions no flag the script does not take. train.py's shows the defaults of the
task asked for."""
import dataclasses
import glob
import importlib
import os
import re
import subprocess
import sys

import pytest

from plumbing import config
from plumbing.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENTS = sorted(
    os.path.basename(p)[:-3]
    for p in glob.glob(os.path.join(ROOT, "experiments", "*.py"))
    if open(p).read().count('if __name__ == "__main__"')
)
FLAG = re.compile(r"(?<![\w-])--([A-Za-z][A-Za-z_0-9]*)")
TRAIN_FLAGS = {f.name for f in dataclasses.fields(Config)}


def help_of(call, capsys):
    with pytest.raises(SystemExit) as e:
        call()
    assert e.value.code in (0, None)
    return capsys.readouterr().out


def mentioned(text):
    """Flags named in a help text ("--key=value" itself names none)."""
    return set(FLAG.findall(text)) - {"help", "key"}


def strangers(text, takes):
    """Flags a help text names that the script does not take; a line that names
    train.py may name train.py's flags."""
    return {f for line in text.splitlines() for f in mentioned(line)
            if f not in takes and not ("train.py" in line and f in TRAIN_FLAGS)}


def test_train_help_by_subprocess_lists_every_flag_and_chain_defaults():
    out = subprocess.run(
        [sys.executable, "train.py", "--task=chain", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stderr == ""
    for name, value in config.TASK_DEFAULTS["chain"].items():
        assert f"--{name}={value} " in out.stdout, name
    assert mentioned(out.stdout) <= {f.name for f in dataclasses.fields(Config)}
    assert {f.name for f in dataclasses.fields(Config)} <= mentioned(out.stdout)


def test_train_help_defaults_are_what_a_run_takes(capsys):
    for task in ("add", "chain"):
        text = help_of(lambda: config.parse_args([f"--task={task}", "--help"]), capsys)
        cfg = config.parse_args([f"--task={task}"], check=False)
        for f in dataclasses.fields(Config):
            # clip: none for the objectives without one; adv: the loss's own
            if f.name not in ("clip", "adv"):
                assert f"--{f.name}={getattr(cfg, f.name)} " in text, (task, f.name)
        assert "--adv=auto " in text and cfg.adv == "grpo"


@pytest.mark.parametrize("script", ["sample", "see"])
def test_dataclass_scripts_help(script, capsys):
    mod = importlib.import_module(script if script == "sample" else "lab." + script)
    cls = {"sample": "SampleConfig", "see": "SeeConfig"}[script]
    fields = {f.name for f in dataclasses.fields(getattr(mod, cls))}
    text = help_of(
        lambda: config.parse_args(["--help"], getattr(mod, cls), doc=mod.__doc__), capsys
    )
    assert not strangers(text, fields), strangers(text, fields)
    assert fields <= mentioned(text)


def test_plot_and_bench_help_list_their_flags(capsys):
    from lab import bench
    from lab import plot
    text = help_of(lambda: plot.parse(["--help"]), capsys)
    assert mentioned(text) == {"out"} and "OUT_DIR" in text
    text = help_of(lambda: bench.parse(["--help"]), capsys)
    assert mentioned(text) == {"quick", "ddp", "device", "out"}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_help(name, capsys, monkeypatch):
    common = importlib.import_module("lab.experiments.common")
    mod = importlib.import_module("lab.experiments." + name)
    real, seen_extra, seen_unused = common.help_text, {}, set()

    def capture(doc, extra=None, unused=()):
        seen_extra.update(extra or {})
        seen_unused.update(unused)
        return real(doc, extra, unused)
    monkeypatch.setattr(common, "help_text", capture)
    text = help_of(lambda: mod.main(["--help"]), capsys)
    # the shared flags, less those the script refuses (they do nothing in it), and its own
    takes = ({"quick", "seeds", "out", "threads", "jobs", "replot", "device"} - seen_unused) \
        | set(seen_extra)
    doc, flags = text.split("\nflags:\n")
    assert mentioned(flags) == takes
    # an experiment runs train.py: its description may name train.py's flags
    assert (
        not mentioned(doc) - takes - TRAIN_FLAGS
    ), f"{name} --help mentions {sorted(mentioned(doc) - takes)}"
