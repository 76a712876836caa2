"""The lesson runs without the lab: a copy of the top-level files and plumbing/, with no
lab/, trains with --instruments=false exactly as the whole project does, and a flag that
needs the lab is one 'error:' line."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--instruments=false", "--n_layer=1", "--n_embd=32", "--n_head=2", "--sft_steps=20",
        "--rl_steps=2", "--prompts_per_step=4", "--group_size=4", "--eval_size=16",
        "--device=cpu"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def lesson_copy(d):
    """The lesson's files and its plumbing, without lab/ (nor anything else)."""
    os.makedirs(d)
    for f in os.listdir(ROOT):
        if f.endswith(".py"):
            shutil.copy(os.path.join(ROOT, f), d)
    shutil.copytree(os.path.join(ROOT, "plumbing"), os.path.join(d, "plumbing"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return d


def train(cwd, *flags):
    return subprocess.run([sys.executable, "train.py", *flags], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=300)


def trains(*runs):
    """train(cwd, *flags) of each (cwd, flags) run, the processes side by side (each waits
    on its own); their CompletedProcess-like results, in order."""
    procs = [subprocess.Popen([sys.executable, "train.py", *flags], cwd=cwd, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cwd, flags in runs]
    done = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def lines(path):
    with open(path) as f:
        return [{k: v for k, v in json.loads(x).items() if k != "seconds"} for x in f]


def test_the_lesson_trains_without_the_lab_as_with_it(tmp_path):
    alone = lesson_copy(tmp_path / "alone")
    assert not os.path.exists(alone / "lab")
    p, q = trains((alone, TINY + [f"--out_dir={tmp_path}/a"]),
                  (ROOT, TINY + [f"--out_dir={tmp_path}/b"]))
    assert p.returncode == 0, p.stderr
    assert q.returncode == 0, q.stderr
    assert lines(tmp_path / "a" / "metrics.jsonl") == lines(tmp_path / "b" / "metrics.jsonl")


def test_a_flag_of_the_lab_without_it_is_one_line(tmp_path):
    alone = lesson_copy(tmp_path / "alone")
    cases = (TINY + ["--loss=gspo"], TINY + ["--beta=0.1"], TINY + ["--task=chain"],
             TINY + ["--permute_rewards"], TINY + ["--adv=remax"],  # the lab's controls
             TINY[1:])  # --task=chain: a testbed of the lab's; TINY[1:]: the instruments
    for p in trains(*[(alone, flags + [f"--out_dir={tmp_path}/o{i}"])
                      for i, flags in enumerate(cases)]):
        err = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2 and len(err) == 1 and "need the lab (lab/)" in err[0], err
    assert train(alone, "--help").returncode == 0
