"""A run survives a real SIGKILL and resumes to the bit; checkpoints are atomic and
validated; a second run never clobbers the first; and every entry point answers
bad input with one 'error:' line and exit status 2, before doing any work."""
import dataclasses
import importlib
import json
import os
import random
import signal
import subprocess
import sys

import pytest
import torch

import model as model_module
from plumbing import checkpoint
import toy_tasks
import train
from plumbing.config import parse_args
from plumbing.errors import CliError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SFT, RL, EVERY = 8, 6, 3
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=16", f"--sft_steps={SFT}", "--sft_batch=4",
        f"--rl_steps={RL}", "--prompts_per_step=2", "--group_size=3", "--eval_size=4",
        "--eval_every=2", f"--ckpt_every={EVERY}", "--device=cpu", "--pass_k=1", "--lr=1e-2"]

# A child process: the tiny model is never right, so the verifier rewards even-length
# completions (groups then carry both signs and RL moves the weights); it SIGKILLs
# itself at the chosen point: inside SFT step k, inside RL step k, or inside the n-th
# write of an RL ckpt.pt (half of the temp file written).
CHILD = r"""
import dataclasses, os, signal, sys
sys.path.insert(0, os.getcwd())
import torch; torch.set_num_threads(1)
import toy_tasks
make = toy_tasks.make_task
toy_tasks.make_task = lambda *a, **k: dataclasses.replace(
    make(*a, **k), reward=lambda p, t: float(len(t) % 2 == 0))
import train
from plumbing import checkpoint
where, k = sys.argv[1], int(sys.argv[2])
calls = {"n": 0}

def kill():
    os.kill(os.getpid(), signal.SIGKILL)
def counting(fn, name):
    def wrapped(*a, **kw):
        calls["n"] += 1
        if calls["n"] == k:
            kill()
        return fn(*a, **kw)
    setattr(train, name, wrapped)
if where == "sft":  # the k-th forward pass of SFT is its step k
    counting(train.completion_logprobs, "completion_logprobs")
elif where == "rl":
    counting(train.rollouts, "rollouts")
elif where == "save":
    real = torch.save
    def save(obj, f, *a, **kw):
        if isinstance(obj, dict) and obj.get("kind") == "rl" and "resume" in obj:
            calls["n"] += 1
            if calls["n"] == k:
                real(obj, f, *a, **kw)
                f.flush(); f.truncate(f.tell() // 2); f.flush()
                kill()
        return real(obj, f, *a, **kw)
    checkpoint.torch.save = save
train.cli(sys.argv[3:])
"""


def command(script):
    """The command line that runs ``script``: a package's module runs with -m from the root."""
    return ["-m", script[:-3].replace("/", ".")] if "/" in script else [script]


@pytest.fixture
def mixed(monkeypatch):
    make = toy_tasks.make_task
    monkeypatch.setattr(toy_tasks, "make_task", lambda *a, **k: dataclasses.replace(
        make(*a, **k), reward=lambda p, text: float(len(text) % 2 == 0)))


def child(where, k, flags):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", CHILD, where, str(k)] + flags, cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)


def lines(d):
    """metrics.jsonl without its wall-time field."""
    out = [json.loads(x) for x in open(os.path.join(d, "metrics.jsonl"))]
    return [{k: v for k, v in m.items() if k != "seconds"} for m in out]


def weights(path):
    return torch.load(path, weights_only=True)["model"]


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("diag", [False, True])
def test_killed_run_resumes_to_the_same_bits(tmp_path, mixed, diag):
    """SIGKILL inside a random SFT step; resume and SIGKILL again inside an RL step
    (without diagnostics) or inside the write of an RL checkpoint (with them); resume
    to the end. metrics.jsonl equals the uninterrupted run's line for line (but
    wall time), and both checkpoints hold bit-identical weights."""
    flags = TINY + [f"--diagnostics={diag}"]
    ref, d = str(tmp_path / "ref"), str(tmp_path / "run")
    train.main(parse_args(flags + [f"--out_dir={ref}"]))
    rng = random.Random()
    k_sft = rng.randint(1, SFT)  # <= EVERY: killed before the first checkpoint
    out = child("sft", k_sft, flags + [f"--out_dir={d}"])
    assert out.returncode == -signal.SIGKILL, out.stderr
    # SFT writes its lines when it reads its losses back: a clean prefix of the run's, none
    # of the killed step
    assert lines(d) == lines(ref)[:len(lines(d))] and len(lines(d)) <= k_sft - 1
    if diag:  # kill inside the write of the RL checkpoint of step 6 (the 2nd); last good: step 3
        out = child("save", 2, flags + [f"--out_dir={d}", "--resume"])
        assert out.returncode == -signal.SIGKILL, out.stderr
        assert any(".pt.tmp" in f for f in os.listdir(d))  # the half-written temp file
        _, ck = checkpoint.load_checkpoint(os.path.join(d, "ckpt.pt"))
        assert (ck["kind"], ck["step"]) == ("rl", EVERY)
    else:
        k_rl = rng.randint(1, RL)
        out = child("rl", k_rl, flags + [f"--out_dir={d}", "--resume"])
        assert out.returncode == -signal.SIGKILL, out.stderr
    train.main(parse_args(flags + [f"--out_dir={d}", "--resume"]))
    assert not [f for f in os.listdir(d) if ".tmp" in f]
    assert lines(d) == lines(ref), f"killed at SFT step {k_sft}"
    for name in ("ckpt.pt", "warm_start.pt"):
        assert same_weights(weights(os.path.join(d, name)), weights(os.path.join(ref, name))), name
    first_rl = weights(os.path.join(ref, "warm_start.pt"))
    assert not same_weights(first_rl, weights(os.path.join(ref, "ckpt.pt")))  # RL moved the weights


def test_refused_second_run_leaves_the_first_untouched(tmp_path):
    d = str(tmp_path)
    train.main(parse_args(TINY + ["--sft_steps=2", "--rl_steps=1", f"--out_dir={d}"]))
    before = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
    for extra in ([], ["--lr=0.5"], ["--task=mul"]):
        with pytest.raises(CliError, match="--resume or replace it with --overwrite"):
            train.main(parse_args(TINY + [f"--out_dir={d}"] + extra))
    with pytest.raises(CliError, match="configured in"):  # a resumed run keeps its flags
        train.main(parse_args(TINY + [f"--out_dir={d}", "--resume", "--lr=0.5"]))
    assert {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)} == before
    train.main(
        parse_args(TINY + ["--sft_steps=2", "--rl_steps=1", f"--out_dir={d}", "--overwrite"])
    )
    assert sorted(os.listdir(d)) == sorted(before)


def test_atomic_save_cleans_up_and_never_saves_non_finite_weights(tmp_path):
    m, _ = build(tmp_path)
    path = str(tmp_path / "c.pt")
    checkpoint.save_checkpoint(path, m, parse_args([]), "rl", 1)
    good = open(path, "rb").read()
    (tmp_path / "c.pt.tmp999999999").write_bytes(b"half")  # a dead process's temp file
    (tmp_path / "keep.tmp1").write_bytes(b"not ours")
    assert checkpoint.clear_stale_temps(str(tmp_path)) == ["c.pt.tmp999999999"]
    assert (tmp_path / "keep.tmp1").exists()
    with torch.no_grad():
        next(m.parameters())[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="rl step 2: weight .* not finite"):
        checkpoint.save_checkpoint(path, m, parse_args([]), "rl", 2)
    with torch.no_grad():
        next(m.parameters())[0, 0] = 0.0

    def boom(*a, **k):
        raise OSError(28, "No space left on device")
    real, checkpoint.torch.save = checkpoint.torch.save, boom
    try:
        with pytest.raises(OSError):
            checkpoint.save_checkpoint(path, m, parse_args([]), "rl", 3)
    finally:
        checkpoint.torch.save = real
    assert open(path, "rb").read() == good and sorted(os.listdir(tmp_path)) == ["c.pt", "keep.tmp1"]


def test_diverged_run_stops_naming_phase_and_step_and_keeps_the_last_checkpoint(tmp_path, mixed):
    """A huge --lr: the run stops with a FloatingPointError that names the RL step,
    and ckpt.pt (if any) holds finite weights."""
    d = str(tmp_path)
    with pytest.raises(FloatingPointError, match=r"RL step \d+: .*not finite"):
        train.main(parse_args(TINY + ["--sft_steps=1", "--rl_steps=30", "--lr=1e6",
                                      "--ckpt_every=1", f"--out_dir={d}"]))
    for f in ("ckpt.pt", "warm_start.pt"):
        if os.path.exists(os.path.join(d, f)):
            checkpoint.load_checkpoint(os.path.join(d, f))  # validates: finite weights


def build(tmp_path):
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1,
                      n_head=2, n_embd=16))
    return m, str(tmp_path / "good.pt")


def test_sampler_refuses_non_finite_logits(tmp_path):
    from sampler import sample
    m, _ = build(tmp_path)
    with torch.no_grad():
        m.lm_head.weight.fill_(float("inf"))
    for temp in (1.0, 0.0):
        with pytest.raises(FloatingPointError, match="not finite"):
            sample(m, [toy_tasks.encode("12+34=")], 2, 4, temp, generator=torch.Generator())


# -------------------------------------------------------------------------- bad input, table-driven

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A good checkpoint and one corrupt file of every kind, a run folder, a plain file."""
    d = tmp_path_factory.mktemp("bad")
    m, good = build(d)
    checkpoint.save_checkpoint(
        good, m, parse_args(["--n_layer=1", "--n_head=2", "--n_embd=16"]), "rl", 1
    )
    ck = torch.load(good, weights_only=True)

    def variant(name, change):
        c = {
            **ck,
            "model": dict(ck["model"]),
            "model_cfg": dict(ck["model_cfg"]),
            "task": dict(ck["task"]),
        }
        change(c)
        torch.save(c, d / name)
    variant("nokind.pt", lambda c: c.pop("kind"))
    variant("kind.pt", lambda c: c.update(kind="banana"))
    variant("step.pt", lambda c: c.update(step="7"))
    variant("task.pt", lambda c: c["task"].update(task="div"))
    variant("digits.pt", lambda c: c["task"].update(digits=10 ** 9))
    variant("vocab.pt", lambda c: c["model_cfg"].update(vocab_size=99))
    variant("block.pt", lambda c: c["model_cfg"].update(block_size=4))
    variant("shape.pt", lambda c: c["model"].update({"lm_head.weight": torch.zeros(3, 3)}))
    variant("missing.pt", lambda c: c["model"].pop("lm_head.weight"))
    variant(
        "nan.pt",
        lambda c: c["model"].update(
            {"lm_head.weight": c["model"]["lm_head.weight"] * float("nan")}
        ),
    )
    variant("resume.pt", lambda c: c.update(resume={"phase": "rl"}))
    torch.save([1, 2], d / "list.pt")
    torch.save({"weights": m.state_dict()}, d / "foreign.pt")
    (d / "junk.pt").write_bytes(b"\x00garbage")
    (d / "empty.pt").write_bytes(b"")
    (d / "trunc.pt").write_bytes(open(good, "rb").read()[:200])
    (d / "afile").write_text("x")
    (d / "ckdir.pt").mkdir()
    run = d / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    (run / "config.json").write_text("{}")
    return d


def fmt(args, d):
    return [a.format(d=d) for a in args]


T_OUT = "--out_dir={d}/fresh"
CORRUPT = ["nokind", "kind", "step", "task", "digits", "vocab", "block", "shape", "missing", "nan",
           "resume", "list", "foreign", "junk", "empty", "trunc"]
BAD = [  # (entry point, argv, a piece of the one-line message)
    ("train", ["--lr=nan"], "finite"),
    ("train", ["--lr=inf"], "finite"),
    ("train", ["--sft_lr=-1"], "positive"),
    ("train", ["--temperature=1e6"], "sane"),
    ("train", ["--temperature=0"], "greedy"),
    ("train", ["--digits=21"], "block"),
    ("train", ["--digits=1000000000"], "block"),
    ("train", ["--task=add", "--digits=20", "--scratchpad"], "block size"),
    ("train", ["--task=primes", "--scratchpad"], "no scratchpad"),
    ("train", ["--seed=-1"], "--seed"),
    ("train", ["--n_layer=100000", "--n_embd=8192", "--n_head=8"], "GiB"),
    ("train", ["--n_embd=30", "--n_head=4"], "divisible"),
    ("train", ["--ckpt_every=0"], "at least 1"),
    ("train", ["--device=tpu"], "unknown device"),
    ("train", ["--resume", "--overwrite"], "give one"),
    ("train", ["--out_dir={d}/afile"], "is a file"),
    ("train", ["--out_dir={d}/afile/sub"], "is a file"),
    ("train", ["--out_dir=/proc/version/sub"], "is a file"),
    ("train", ["--out_dir=/sys/fs/x"], "cannot write"),
    ("train", ["--out_dir={d}/run"], "--resume or replace it with --overwrite"),
    ("train", ["--resume", T_OUT], "holds no run"),
    ("train", ["--resume", "--out_dir={d}/run"], "not a config"),
    ("train", ["--init_from={d}/good.pt", "--n_layer=3", T_OUT], "contradicts"),
    ("train", ["--init_from={d}/good.pt", "--task=mul", T_OUT], "trained on task"),
    ("train", ["--init_from={d}/ckdir.pt", T_OUT], "is a folder"),
    ("train", ["--init_from=", "--resume", T_OUT], "holds no run"),
    ("train", ["stray"], "unexpected argument"),
    ("train", ["--lr"], "needs a value"),
    *[("train", [f"--init_from={{d}}/{n}.pt", T_OUT], "corrupt") for n in CORRUPT],
    *[("sample", [f"--init_from={{d}}/{n}.pt"], "corrupt") for n in CORRUPT],
    ("sample", [], "required"),
    ("sample", ["--init_from={d}/good.pt", "--temperature=nan"], "temperature"),
    ("sample", ["--init_from={d}/good.pt", "--temperature=-1"], "temperature"),
    ("sample", ["--init_from={d}/good.pt", "--num_samples=0"], "num_samples"),
    ("sample", ["--init_from={d}/good.pt", "--num_prompts=100000"], "num_prompts"),
    ("sample", ["--init_from={d}/good.pt", "--prompt=1+a="], "alphabet"),
    ("sample", ["--init_from={d}/good.pt", "--prompt=" + "1" * 80], "too long"),
    ("sample", ["--init_from={d}/ckdir.pt"], "is a folder"),
    ("sample", ["--bogus=1"], "unknown flag"),
    ("bench", ["--bogus"], "unknown argument"),
    ("bench", ["--device=tpu"], "unknown device"),
    ("bench", ["--quick=maybe"], "true or false"),
    ("bench", ["--out={d}"], "is a folder"),
    ("bench", ["--out={d}/nowhere/b.jsonl"], "does not exist"),
    ("bench", ["--out=/sys/fs/b.jsonl"], "cannot write"),
    ("bench", ["--out"], "needs a value"),
    ("bench", ["quick"], "unknown argument"),
    ("see", [], "required"),
    ("see", ["--init_from={d}/good.pt", "--losses=ppo"], "unknown loss"),
    ("see", ["--init_from={d}/good.pt", "--lr=-1"], "positive"),
    ("see", ["--init_from={d}/good.pt"], "style points"),
    ("see", ["--init_from={d}/ckdir.pt"], "is a folder"),
    *[("see", [f"--init_from={{d}}/{n}.pt"], "corrupt") for n in CORRUPT],
    ("plot", [], "name at least one run folder"),
    ("plot", ["{d}"], "does not exist"),
    ("plot", ["--bogus=1", "{d}"], "unknown flag"),
]
EXPERIMENTS = ["e1_flips", "e2_coupling", "e3_masked", "e4_categories", "e5_value", "e6_group_size",
               "e7_schedulers", "e8_objectives"]
BAD += [
    ("chain_style", ["--seeds=a"], "list of integers"),
    ("chain_style", ["--rl_steps=0"], "at least 1"),
    ("chain_style", ["--sft_steps=x"], "an integer"),
    ("chain_style", ["--out={d}/afile"], "is a file"),
]
BAD += [
    ("e9_drift_mechanism", ["--sgd_lr=0"], "> 0"),
    ("e9_drift_mechanism", ["--calib_lrs=0.1,x"], "numbers"),
    ("e9_drift_mechanism", ["--rl_steps=0"], "at least 1"),
    ("e9_drift_mechanism", ["--seeds=a"], "integers"),
    ("e9_drift_mechanism", ["--calibrate=maybe"], "true or false"),
    ("e9_drift_mechanism", ["--out={d}/afile"], "is a file"),
]
BAD += [("scoreboard", ["--nope=1"], "unknown flag"), ("scoreboard", ["--groups=0"], "at least 1"),
        ("scoreboard", ["--seeds=x"], "list of integers")]
for e in EXPERIMENTS:
    BAD += [(e, ["--seeds=a,b"], "list of integers"), (e, ["--seeds="], "at least one"),
            (e, ["--seeds=-1"], "at least 0"), (e, ["--sft_steps=0"], "at least 1"),
            (e, ["--quick=perhaps"], "true or false"), (e, ["--out={d}/afile"], "is a file"),
            (e, ["--out=/sys/fs/x"], "cannot write"), (e, ["--nope=1"], "unknown flag"),
            (e, ["--threads=-1"], "at least 0"), (e, ["--sft_steps=x"], "an integer")]
BAD += [(e, ["--batches=0"], "at least 1") for e in EXPERIMENTS[:6]]
BAD += [(e, ["--digits=0"], "digits") for e in EXPERIMENTS[:6]]
BAD += [(e, ["--task=div"], "unknown task") for e in EXPERIMENTS[:6]]
BAD += [
    ("e1_flips", ["--eps=nan"], "finite"),
    ("e5_value", ["--sgd_lr=0"], "> 0"),
    ("e5_value", ["--K=0"], "at least 1"),
    ("e6_group_size", ["--group_sizes=2,x"], "list of integers"),
    ("e6_group_size", ["--prompt_counts=0,4"], "at least 1"),
    ("e7_schedulers", ["--minibatches=17"], "exceeds the 16 groups"),
    ("e7_schedulers", ["--rl_steps=0"], "at least 1"),
    ("e8_objectives", ["--small=2"], "true or false"),
    ("e8_objectives", ["--arm_set=gspo"], "unknown set"),
    ("e8_objectives", ["--clip=higher"], "not none or sym"),
    ("e8_objectives", ["--lr=0"], "> 0"),
    ("e8_objectives", ["--task=chain"], "unknown flag"),
]
BAD += [
    ("e3_masked", ["--sgd_lrs=1e-1,x"], "list of numbers"),
    ("e3_masked", ["--sgd_lrs=0,1e-1"], "> 0"),
    ("e3_masked", ["--sgd_lrs=1e-2", "--primary_lr=0.1"], "not one of --sgd_lrs"),
]
BAD += [
    ("e4_categories", ["--scratchpad"], "does not apply"),
    ("e4_categories", ["--rl_step=0"], "at least 1"),
    ("e4_categories", ["--adam_lr=0"], "> 0"),
]


def entry(name):
    """The command line function of an entry point: (cli, module)."""
    if name in ("train", "sample"):
        mod = __import__(name)
        return mod.cli, mod
    if name in ("bench", "see", "plot"):
        mod = importlib.import_module("lab." + name)
        return mod.cli, mod
    from lab.experiments import common
    mod = importlib.import_module("lab.experiments." + name)
    return (lambda argv: (setattr(sys, "argv", [name] + argv), common.cli(mod.main))), common


@pytest.mark.parametrize("name, argv, message", BAD, ids=[f"{n}:{' '.join(a)}" for n, a, _ in BAD])
def test_bad_input_is_one_error_line_and_status_2(name, argv, message, files, capsys, monkeypatch):
    """In-process (an uncaught exception fails the test as a traceback would); the
    functions that start real work are replaced by ones that fail, so bad input must
    be refused before them."""
    def work(*a, **k):
        raise AssertionError("work started before the input was refused")
    monkeypatch.setattr(toy_tasks, "eval_problems", work)  # train.main's first step after writing
    from lab import bench
    monkeypatch.setattr(bench, "matmul_peak", work)
    from lab.experiments import common
    for f in ("warm_start", "diag_setup", "run"):
        monkeypatch.setattr(common, f, work)
    argv = fmt(argv, files)
    if name == "train" and not any(a.startswith("--out_dir") for a in argv):
        argv.append(f"--out_dir={files}/fresh")
    if name.startswith("e") and not any(a.startswith("--out") for a in argv):
        argv.append(f"--out={files}/eout")
    cli, _ = entry(name)
    monkeypatch.setattr(sys, "argv", [name] + argv)
    with pytest.raises(SystemExit) as e:
        cli(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not os.path.exists(os.path.join(files, "fresh"))  # nothing written


@pytest.mark.parametrize(
    "script, argv",
    [
        ("train.py", ["--lr=inf"]),
        ("sample.py", ["--init_from=x"]),
        ("lab/bench.py", ["--device=tpu"]),
        ("lab/experiments/e7_schedulers.py", ["--seeds=x"]),
    ],
)
def test_bad_input_from_a_real_process(script, argv):
    out = subprocess.run(
        [sys.executable, *command(script)] + argv, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith(
        "error: "
    ), out.stderr


@pytest.mark.parametrize("script", ["lab/experiments/e1_flips.py",
                                    "lab/experiments/multiplicity.py", "exercises/check.py"])
def test_a_package_module_run_as_a_file_says_how_to_run_it(script):
    out = subprocess.run([sys.executable, script], cwd=ROOT, capture_output=True, text=True)
    module = script[:-3].replace("/", ".")
    assert out.returncode == 2 and out.stderr == (
        f"error: run it from the repository root as python -m {module}\n"), out.stderr


def test_config_json_states_what_ran_with_init_from(tmp_path, capsys):
    """Model sizes come from the checkpoint; SFT flags are ignored with a warning."""
    m, good = build(tmp_path)
    checkpoint.save_checkpoint(good, m, parse_args([]), "warm_start", 1)
    d = str(tmp_path / "o")
    train.main(parse_args(TINY + ["--n_layer=4", "--n_embd=128", "--n_head=4", "--rl_steps=0",
                                  "--sft_steps=5", f"--init_from={good}", f"--out_dir={d}"]))
    conf = json.load(open(os.path.join(d, "config.json")))
    assert (conf["n_layer"], conf["n_embd"], conf["n_head"]) == (1, 16, 2)
    assert conf["sft_steps_run"] == 0 and conf["params"] == m.num_params()
    assert "warning: --sft_steps" in capsys.readouterr().err


def test_interrupted_init_from_run_resumes_to_the_same_bits(tmp_path, mixed, monkeypatch):
    """An RL-only run (--init_from) stopped inside RL step 4 resumes from its step-3
    checkpoint without the --init_from file, and ends as the uninterrupted run."""
    m, good = build(tmp_path)
    checkpoint.save_checkpoint(good, m, parse_args([]), "warm_start", 1)
    ref, d = interrupted_at_step_4(tmp_path, monkeypatch, TINY + [f"--init_from={good}",
                                                                 "--diagnostics"])
    os.remove(good)  # the resumed run needs only its own folder
    train.main(parse_args(TINY + [f"--out_dir={d}", "--resume"]))
    assert lines(d) == lines(ref)
    assert same_weights(weights(os.path.join(d, "ckpt.pt")), weights(os.path.join(ref, "ckpt.pt")))


def interrupted_at_step_4(tmp_path, monkeypatch, flags):
    """A finished run of ``flags`` (ref) and the same run interrupted inside RL step 4 (d)."""
    ref, d = str(tmp_path / "ref"), str(tmp_path / "run")
    train.main(parse_args(flags + [f"--out_dir={ref}"]))
    real, calls = train.rollouts, []

    def stop_at_4(*a, **k):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(train, "rollouts", stop_at_4)
    with pytest.raises(KeyboardInterrupt):
        train.main(parse_args(flags + [f"--out_dir={d}"]))
    monkeypatch.setattr(train, "rollouts", real)
    return ref, d


@pytest.mark.parametrize("name", [n for n in model_module.OPTIMIZERS if n != "adamw"])
def test_every_optimizer_resumes_to_the_same_bits(tmp_path, mixed, monkeypatch, name):
    """Each --optimizer of the registry (momentum buffers, Adam's moments with beta1 = 0)
    is saved with the run and continues exactly after an interruption in RL step 4."""
    m, good = build(tmp_path)
    checkpoint.save_checkpoint(good, m, parse_args([]), "warm_start", 1)
    ref, d = interrupted_at_step_4(tmp_path, monkeypatch, TINY + [f"--init_from={good}",
                                                                 f"--optimizer={name}"])
    train.main(parse_args(TINY + [f"--out_dir={d}", "--resume"]))
    assert lines(d) == lines(ref)
    assert same_weights(weights(os.path.join(d, "ckpt.pt")), weights(os.path.join(ref, "ckpt.pt")))


def test_the_optimizer_registry_builds_what_it_says():
    """sgd: no momentum; sgd_momentum: 0.9; adam_b1_0: betas (0, 0.99); adamw: (0.9, 0.99)."""
    p = [torch.nn.Parameter(torch.zeros(2))]
    build_ = model_module.rl_optimizer
    assert build_(p, "sgd", 0.1).param_groups[0]["momentum"] == 0
    assert build_(p, "sgd_momentum", 0.1).param_groups[0]["momentum"] == 0.9
    assert build_(p, "adam_b1_0", 0.1).param_groups[0]["betas"] == (0.0, 0.99)
    assert build_(p, "adamw", 0.1).param_groups[0]["betas"] == (0.9, 0.99)
    with pytest.raises(ValueError, match="unknown optimizer"):
        build_(p, "lion", 0.1)
