"""lab/gpu_check.sh, the GPU's prepared check: it parses, and every command it runs takes
its flags (checked here on the CPU, without a GPU)."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "lab", "gpu_check.sh")


def test_the_script_parses_and_stays_under_ten_minutes():
    assert subprocess.run(["bash", "-n", SCRIPT]).returncode == 0
    limits = [int(x) for x in re.findall(r"^\s*part \w+ (\d+) ", open(SCRIPT).read(), re.M)]
    assert len(limits) == 6 and sum(limits) < 600 - 60, limits  # a minute for start-up


def test_every_train_command_of_the_script_parses():
    from plumbing.config import parse_args
    text = open(SCRIPT).read()
    for line in re.findall(r'"\$PY" train\.py (.*)$', text, re.M):
        flags = [f for f in line.split() if f.startswith("--") and "$OUT" not in f]
        cfg = parse_args(flags + ["--out_dir=x"], check=False)
        assert cfg.device == "cuda"


def test_the_bridge_step_runs_on_a_small_model_on_the_cpu(tmp_path, capsys):
    """gpu_step's path, with a width and depth a CPU runs in seconds: five runs (a warm-up,
    then the ledger on, off, on, off), their ratio, and the flags refused in one line."""
    import json
    import pytest
    pytest.importorskip("trl")
    from trl_bridge import gpu_step
    out = tmp_path / "bridge"
    d = gpu_step.main([f"--out={out}", "--width=64", "--layers=1", "--steps=1"])
    assert json.load(open(out / "gpu_step.json")) == d
    assert list(d["runs"]) == ["warm-up", "on 1", "off 1", "on 2", "off 2"]
    assert [r["ledger_every"] for r in d["runs"].values()] == [0, 1, 0, 1, 0]
    on = sum(d["runs"][k]["seconds"] for k in ("on 1", "on 2"))
    off = sum(d["runs"][k]["seconds"] for k in ("off 1", "off 2"))
    assert d["ratio"] == round(on / off, 3) and d["params"] > 0
    assert f"with the ledger {on / 2:.1f} s, without {off / 2:.1f} s" in capsys.readouterr().out
    for bad, words in ((["--out=" + str(out)], "exists"), (["--width=100", "--out=y"], "64"),
                       (["--steps=0", "--out=z"], "--steps"), (["--steps=2", "--steps=3"], "twice"),
                       (["--gpu"], "unknown flag")):
        with pytest.raises(gpu_step.CliError, match=words):
            gpu_step.parse(bad)
