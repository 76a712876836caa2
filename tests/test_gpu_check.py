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
    assert len(limits) == 5 and sum(limits) < 600 - 60, limits  # a minute for start-up


def test_every_train_command_of_the_script_parses():
    from plumbing.config import parse_args
    text = open(SCRIPT).read()
    for line in re.findall(r'"\$PY" train\.py (.*)$', text, re.M):
        flags = [f for f in line.split() if f.startswith("--") and "$OUT" not in f]
        cfg = parse_args(flags + ["--out_dir=x"], check=False)
        assert cfg.device == "cuda"
