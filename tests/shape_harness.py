"""shape_harness.py: does a restructure of train.py change nothing but the shape?

It runs small configurations of train.py, each a few seconds on one CPU thread, and
records, for each, the hash of the final weights (ckpt.pt's model), every key and value
of every metrics.jsonl line (the run's seconds left out: they are the clock's) and the
printed lines (times masked). ``record`` writes them to a JSON file before the change;
``compare`` runs them again after it and names every difference. The weights must be
bit-identical and every number the same.

    python tests/shape_harness.py record OUT.json [NAME ...]
    python tests/shape_harness.py compare OUT.json [NAME ...]

Not a test of the suite (it takes minutes): a tool for whoever reshapes the lesson.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--n_layer=1", "--n_embd=32", "--n_head=2", "--sft_steps=60", "--sft_lr=0.01",
        "--temperature=1.5", "--rl_steps=3", "--prompts_per_step=4", "--group_size=4",
        "--eval_size=16", "--eval_every=1", "--device=cpu"]
# one-digit sums without a scratchpad: the tiny warm start is right sometimes, so that
# groups come out mixed and RL moves the weights (an all-wrong batch would hide a change)
ADD = ["--digits=1", "--scratchpad=false"]
CONFIGS = {
    "demo": [],
    "plain": ["--instruments=false"],
    "dr_grpo": ["--loss=dr_grpo"],
    "dapo": ["--loss=dapo"],
    "dfpo_min": ["--loss=dfpo_min"],
    "dfpo_orth": ["--loss=dfpo_orth", "--minibatches=2", "--micro_batch=1"],
    "dfpo_min_split": ["--loss=dfpo_min", "--micro_batch=3", "--epochs=2"],
    "gspo": ["--loss=gspo"],
    "cispo": ["--loss=cispo"],
    "clip_cov": ["--loss=clip_cov"],
    "dro": ["--loss=dro", "--dro_beta=0.1"],
    "bnpo_micro": ["--loss=bnpo", "--micro_batch=3"],
    "rloo_plain": ["--loss=rloo", "--instruments=false"],
    "minibatches": ["--minibatches=2"],
    "epochs": ["--epochs=2", "--minibatches=2", "--batching=query"],
    "micro": ["--micro_batch=3"],
    "local": ["--norm=local", "--micro_batch=3"],
    "beta": ["--beta=0.1"],
    "beta_plain": ["--beta=0.1", "--kl_loss_type=k1", "--instruments=false"],
    "switches": ["--entropy_coef=0.01", "--agg=token-sum", "--dual_clip=3"],
    "top_entropy": ["--top_entropy_quantile=0.5", "--off_policy_mask_threshold=0.1",
                    "--epochs=2"],
    "clip_none": ["--clip=none"],
    "clip_higher": ["--clip=higher", "--epochs=2"],
    "adv": ["--adv=rloo", "--optimizer=sgd"],
    "remax": ["--adv=remax"],
    "permuted": ["--permute_rewards"],
    "static": ["--static_decode=true", "--adv=remax"],  # the fixed-shape decoder on a CPU
    "diagnostics": ["--diagnostics"],
    "chain": ["--task=chain"],
    "primes": ["--task=primes"],
    "parity": ["--task=parity_wrong_long"],
    "resume": ["--rl_steps=4", "--ckpt_every=2"],  # stopped in RL step 3, then resumed
    "torchrun": ["--micro_batch=1"],  # 2 processes (gloo)
    "torchrun_plain": ["--instruments=false", "--loss=dfpo_orth"],
    "torchrun_controls": ["--adv=remax", "--permute_rewards"],
}

# resume: the run stops (Ctrl-C) inside RL step 3, after step 2's checkpoint, and resumes
STOP_AND_RESUME = """
import sys, train
from plumbing.config import parse_args
real = train.rl_step
def stop_at_3(run, *a):
    if run.state.step == 3:
        raise KeyboardInterrupt
    return real(run, *a)
train.rl_step = stop_at_3
try:
    train.main(parse_args(sys.argv[1:]))
except KeyboardInterrupt:
    pass
train.rl_step = real
train.main(parse_args(["--resume", [a for a in sys.argv if a.startswith("--out_dir=")][0]]))
"""


def run(name, out):
    """Run configuration ``name`` into folder ``out``; its printed lines (stdout)."""
    own = CONFIGS[name]
    flags = TINY + ([] if any(f.startswith("--task=") for f in own) else ADD) + own \
        + [f"--out_dir={out}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    if name == "resume":
        cmd = [sys.executable, "-c", STOP_AND_RESUME] + flags
    elif name.startswith("torchrun"):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "train.py"] + flags
    else:
        cmd = [sys.executable, "train.py"] + flags
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{name} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def digest(out):
    """The final weights' sha256 (ckpt.pt's model, every tensor's bytes in key order)."""
    sd = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["model"]
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(sd[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def record_one(name):
    out = tempfile.mkdtemp(prefix=f"shape_{name}_")
    try:
        printed = run(name, os.path.join(out, "run"))
        with open(os.path.join(out, "run", "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        for line in lines:
            line.pop("seconds", None)  # the clock's
        printed = re.sub(r"\[\d+s\]|in \d+ s|\d+(\.\d+)?s/it|\d+(\.\d+)?it/s", "<t>", printed)
        printed = printed.replace(out, "<out>")
        return {"weights": digest(os.path.join(out, "run")), "metrics": lines,
                "printed": printed.splitlines()}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main(argv):
    mode, path, names = argv[0], argv[1], argv[2:] or list(CONFIGS)
    if mode == "record":
        old = json.load(open(path)) if os.path.exists(path) else {}
        for name in names:
            old[name] = record_one(name)
            print(f"{name}: {old[name]['weights'][:16]}", flush=True)
            with open(path, "w") as f:
                json.dump(old, f, indent=1, sort_keys=True)
        return 0
    before, bad = json.load(open(path)), 0
    for name in names:
        now = record_one(name)
        diffs = [k for k in ("weights", "metrics", "printed") if now[k] != before[name][k]]
        print(f"{name}: {'same' if not diffs else 'DIFFERENT ' + ', '.join(diffs)}", flush=True)
        for k in diffs:
            if k == "weights":
                continue
            a, b = before[name][k], now[k]
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    print(f"  {k}[{i}]:\n    before {x}\n    after  {y}")
                    break
            if len(a) != len(b):
                print(f"  {k}: {len(a)} lines before, {len(b)} after")
        bad += bool(diffs)
    print("identical" if not bad else f"{bad} configuration(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
