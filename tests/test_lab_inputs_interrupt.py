"""Ctrl-C while a lab command is still importing ends in one line, 'error: interrupted', and
exit status 2, not a KeyboardInterrupt traceback (plumbing/errors.py's hook: no ``cli`` is
running yet to catch it). So does Ctrl-C while train.py writes a checkpoint, whose last
checkpoint still loads. The interrupt is raised at the command's first import, which is
where a Ctrl-C in its first seconds lands once the lab package has loaded; the commands
run side by side, one process each."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# three of them: every `python -m lab...` command loads the package first, and the package
# installs the hook (test_the_lab_package_installs_the_hook)
COMMANDS = ["lab.see_length", "lab.ledger_plot", "lab.experiments.e13_dose"]
DRIVER = """
import builtins, runpy, sys
mod, real = sys.argv[1], builtins.__import__
def cut(name, globals=None, *args, **kwargs):  # the command's own first import: Ctrl-C
    if (globals or {}).get("__name__") == "__main__":
        raise KeyboardInterrupt
    return real(name, globals, *args, **kwargs)
builtins.__import__ = cut
sys.argv = [mod]
runpy.run_module(mod, run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_during_a_lab_command_s_imports_is_one_line():
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = {m: subprocess.Popen([sys.executable, "-c", DRIVER, m], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for m in COMMANDS}
    for m, p in procs.items():
        out, err = p.communicate(timeout=300)
        assert (p.returncode, out, err) == (2, "", "error: interrupted\n"), (m, err[-300:])


def test_the_lab_package_installs_the_hook():
    code = "import sys, lab\nprint(getattr(sys.excepthook, 'one_line', False))"
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert p.stdout == "True\n", p.stderr[-300:]


def test_other_uncaught_errors_keep_their_traceback():
    code = "import plumbing.errors\nraise ValueError('kept')"
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    assert p.returncode == 1 and "Traceback" in p.stderr and "ValueError: kept" in p.stderr


CUT_SAVE = """
import io, sys
from plumbing import checkpoint
import train
real_open, saves = open, [0]
class Cut(io.FileIO):  # the third write into torch's zip writer meets Ctrl-C
    n = 0
    def write(self, b):
        Cut.n += 1
        if Cut.n == 3:
            raise KeyboardInterrupt
        return super().write(b)
def cut_second(path, mode="r", *args, **kwargs):
    if "ckpt.pt" in str(path) and "w" in mode:
        saves[0] += 1
        if saves[0] == 2:
            return Cut(path, "w")
    return real_open(path, mode, *args, **kwargs)
checkpoint.open = cut_second
train.cli(sys.argv[1:])
"""


def test_ctrl_c_while_train_py_writes_a_checkpoint_is_one_line(tmp_path):
    out = tmp_path / "run"
    flags = ["--sft_steps=2", "--rl_steps=3", "--ckpt_every=1", "--n_layer=1", "--n_embd=32",
             "--n_head=2", "--eval_size=8", "--prompts_per_step=2", "--group_size=4",
             f"--out_dir={out}"]
    p = subprocess.run([sys.executable, "-c", CUT_SAVE, *flags], cwd=ROOT, capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert (p.returncode, p.stderr) == (2, "error: interrupted\n"), p.stderr[-500:]
    assert not [f for f in os.listdir(out) if ".tmp" in f]
    from plumbing import checkpoint
    _, ck = checkpoint.load_checkpoint(str(out / "ckpt.pt"))  # the one written before
    assert ck["resume"]["step"] == 1
