"""docs/RECIPES.md: every block saved as the file its first line names and run as that line
says, from a folder that stands for the repository's root (the root is on PYTHONPATH,
as it is for a file saved in it), with flags that make the run tiny."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=3", "--sft_batch=8",
        "--rl_steps=2", "--prompts_per_step=4", "--group_size=4", "--eval_size=8",
        "--device=cpu"]


def recipes():
    """[(file name, the command of its first line, its code)] of docs/RECIPES.md."""
    text = open(os.path.join(ROOT, "docs", "RECIPES.md"), encoding="utf-8").read()
    out = []
    for code in re.findall(r"```python\n(.*?)```", text, re.S):
        m = re.match(r"# (\w+\.py): python (\w+\.py)(.*)\n", code)
        assert m and m.group(1) == m.group(2), code.splitlines()[0]
        out.append((m.group(1), m.group(3).split(), code))
    return out


def test_there_are_three_recipes():
    assert [name for name, _, _ in recipes()] == ["my_task.py", "my_objective.py",
                                                  "my_scheduler.py"]


@pytest.mark.parametrize("name, flags, code", recipes(), ids=[r[0] for r in recipes()])
def test_each_recipe_runs_as_pasted(tmp_path, name, flags, code):
    (tmp_path / name).write_text(code)
    proc = subprocess.run([sys.executable, name, *flags, *TINY, f"--out_dir={tmp_path}/out"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr
    assert "warm start acc" in proc.stdout
    config = open(tmp_path / "out" / "config.json").read()
    for flag in flags:  # the run used what the recipe added
        key, value = flag[2:].split("=")
        assert f'"{key}": ' in config and value in config
