"""The bridge from a researcher's own folder: docs/REFERENCE.md's snippet and train_lm, run
from a temporary folder (PYTHONPATH names the repository, as the docs say) that holds a
model.py and a loss.py of the researcher's own. They stay the researcher's; the bridge
uses the lesson's. Skipped where the TRL extra is not installed."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("trl")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DECOY = "DECOY = True  # a researcher's own {}: the lesson's has no DECOY\n"

CHECKS = '''
import os, sys
import trl_bridge.trainer as bridge
root = {root!r}
assert loss.DECOY, "the script's own loss.py"
assert bridge.loss.__file__ == os.path.join(root, "loss.py"), bridge.loss.__file__
assert bridge.objectives.model.__file__ == os.path.join(root, "model.py")
assert not hasattr(bridge.loss, "DECOY") and bridge.loss.LOSSES
import model  # imported after the bridge: still the script's own
assert model.DECOY, model.__file__
assert trainer.state.global_step == 2
from trl_bridge import train_lm  # the script, as `python -m trl_bridge.train_lm` runs it here
train_lm.main(["--out=run", "--steps=1", "--batch=4", "--group_size=4", "--accumulation=1",
               "--steps_per_generation=1"])
print("checked")
'''


def snippet():
    text = open(os.path.join(ROOT, "docs", "REFERENCE.md"), encoding="utf-8").read()
    section = text.split("## Beyond the toy")[1].split("\n## ")[0]
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", section, re.S)
               if "CancellationGRPOTrainer" in c]
    return code


def test_the_snippet_and_train_lm_run_from_a_folder_with_decoys(tmp_path):
    for name in ("model", "loss"):
        (tmp_path / f"{name}.py").write_text(DECOY.format(name + ".py"), encoding="utf-8")
    script = "import loss  # the researcher's own, imported first\n" + snippet() + \
        CHECKS.format(root=ROOT)
    (tmp_path / "my_script.py").write_text(script, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    run = subprocess.run([sys.executable, "my_script.py"], cwd=tmp_path, env=env, text=True,
                         capture_output=True, timeout=300)
    assert run.returncode == 0 and "checked" in run.stdout, run.stderr[-3000:]
    assert (tmp_path / "run" / "model.safetensors").is_file()
