"""Hostile input against a finished run: every command here is refused with exit
status 2 and one 'error:' line, no traceback, and the finished run's files are
byte-identical afterwards. Also: one writer per run folder (an OS lock that a
killed process never leaves behind), and resume states that fail their schema."""
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from plumbing import checkpoint
from plumbing import rundir
import train
from plumbing.config import parse_args
from plumbing.errors import CliError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--n_layer=1",
    "--n_head=2",
    "--n_embd=16",
    "--sft_steps=4",
    "--sft_batch=4",
    "--rl_steps=3",
    "--prompts_per_step=2",
    "--group_size=3",
    "--eval_size=4",
    "--eval_every=2",
    "--ckpt_every=2",
    "--device=cpu",
    "--pass_k=1",
]


def command(script):
    """The command line that runs ``script``: a package's module runs with -m from the root."""
    return ["-m", script[:-3].replace("/", ".")] if "/" in script else [script]


def digest(folder):
    return {f: hashlib.sha256(open(os.path.join(folder, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(folder)) if os.path.isfile(os.path.join(folder, f))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run (and a finished one with --sft_steps=0 --beta=0.1)."""
    d = tmp_path_factory.mktemp("hostile")
    train.main(parse_args(TINY + [f"--out_dir={d}/run"]))
    train.main(parse_args(TINY + ["--sft_steps=0", "--beta=0.1", f"--out_dir={d}/nosft"]))
    return d


def copy_run(finished, tmp_path, name="run"):
    dst = tmp_path / name
    shutil.copytree(finished / name, dst)
    return dst


def refused(argv, capsys, message):
    with pytest.raises(SystemExit) as e:
        train.cli(argv)
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert message in err[0], err[0]


HOSTILE = [  # (flags against the finished run D, a piece of the message)
    (["--overwrite", "--clip=higher", "--clip_high=1e300"], "out of range"),
    (["--overwrite", "--clip=higher", "--clip_high=1e39"], "out of range"),
    (["--overwrite", "--diagnostics", "--pass_k=100000"], "GiB"),
    (["--overwrite", "--eval_size=3000000000"], "out of range"),
    (["--overwrite", f"--seed={2 ** 64}"], "--seed"),
    (["--overwrite", "--lr=1e300"], "out of range"),
    (["--overwrite", "--init_from={d}/warm_start.pt"], "would delete --init_from"),
    (["--overwrite", "--init_from={d}/ckpt.pt"], "would delete --init_from"),
    ([], "holds another run"),
    (["--resume", "--task=mul"], "drop --task=mul"),
    (["--resume", "--lr=inf"], "finite"),
    (["--resume", "--overwrite"], "give one"),
]


@pytest.mark.parametrize("flags, message", HOSTILE, ids=[" ".join(f) for f, _ in HOSTILE])
def test_a_refused_command_leaves_the_finished_run_byte_identical(
    finished, tmp_path, capsys, flags, message
):
    d = copy_run(finished, tmp_path)
    before = digest(d)
    refused(TINY + [f.format(d=d) for f in flags] + [f"--out_dir={d}"], capsys, message)
    assert digest(d) == before


def corrupt(ck, change):
    s = ck["resume"]
    change(s, ck)
    return ck


CORRUPT_STATES = {  # name: (change to the checkpoint, a piece of the message naming the field)
    "step is a string": (lambda s, ck: s.update(step="7"), "step"),
    "float seed": (lambda s, ck: ck["config"].update(seed=1.5), "seed"),
    "no param_groups": (lambda s, ck: s["optimizer"].pop("param_groups"), "param_groups"),
    "rng of the wrong size": (
        lambda s, ck: s["streams"][0].update(torch_gen=torch.zeros(7, dtype=torch.uint8)),
        "torch_gen",
    ),
    "python rng of the wrong version": (
        lambda s, ck: s["streams"][0].update(python_random=(99, (1, 2), None)),
        "python_random",
    ),
    "a sum missing": (lambda s, ck: s["sums"].pop("mixed_start_sum"), "sums"),
    "a moment of the wrong shape": (
        lambda s, ck: s["optimizer"]["state"][0].update(exp_avg=torch.zeros(3)),
        "exp_avg",
    ),
    "world of two, streams of one": (lambda s, ck: s.update(world=2), "streams"),
    "metrics longer than the file": (lambda s, ck: s.update(metrics_bytes=10**9), "shorter"),
}


@pytest.mark.parametrize("name", CORRUPT_STATES)
def test_a_resume_state_that_fails_its_schema_is_refused_and_changes_nothing(
    finished, tmp_path, capsys, name
):
    d = copy_run(finished, tmp_path)
    change, message = CORRUPT_STATES[name]
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    torch.save(corrupt(ck, change), d / "ckpt.pt")
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, message)
    assert digest(d) == before


def test_a_resume_under_another_world_size_is_refused(finished, tmp_path, capsys):
    d = copy_run(finished, tmp_path)
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    ck["resume"].update(world=2, streams=ck["resume"]["streams"] * 2)
    torch.save(ck, d / "ckpt.pt")
    before = digest(d)
    refused(["--resume", f"--out_dir={d}"], capsys, "trained by 2 process(es)")
    assert digest(d) == before


def test_a_run_without_sft_but_with_beta_resumes(finished, tmp_path):
    """--sft_steps=0 --beta: the untrained start is written as warm_start.pt, --beta's
    reference, so that a resume finds it."""
    d = copy_run(finished, tmp_path, "nosft")
    assert "warm_start.pt" in os.listdir(d)
    ck = torch.load(d / "ckpt.pt", weights_only=True)
    assert ck["resume"]["phase"] == "rl"
    cut_summary(d)  # so that the resume runs the end of the run again
    assert train.main(parse_args(["--resume", f"--out_dir={d}"]))["final_acc"] is not None


def cut_summary(d):
    lines = [x for x in open(d / "metrics.jsonl") if '"summary"' not in x]
    open(d / "metrics.jsonl", "w").writelines(lines)


def test_the_resume_of_a_finished_run_changes_nothing_and_says_so(finished, tmp_path, capsys):
    d = copy_run(finished, tmp_path)
    before = digest(d)
    train.cli(["--resume", f"--out_dir={d}"])
    out = capsys.readouterr()
    assert out.err == "" and "finished run" in out.out and len(out.out.splitlines()) == 1
    assert digest(d) == before  # its summary line, with its "seconds", is kept
    cut_summary(d)
    train.cli(["--resume", f"--out_dir={d}"])  # a run cut before its summary does resume
    assert "resuming after rl step 3" in capsys.readouterr().out


def test_a_second_writer_is_refused_while_the_lock_is_held(finished, tmp_path, capsys):
    d = copy_run(finished, tmp_path)
    before = digest(d)
    fd = os.open(d, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another writer holds the folder
    try:
        for flags in (["--resume"], ["--overwrite"]):
            refused(flags + TINY * (flags == ["--overwrite"]) + [f"--out_dir={d}"], capsys,
                    f"being written by another process (pid {os.getpid()})")
            assert digest(d) == before
    finally:
        os.close(fd)


def test_a_killed_writer_leaves_no_lock_behind(tmp_path):
    """The lock lives in the kernel: SIGKILL the holder, and the folder is free."""
    d = tmp_path / "run"
    d.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"), str(d)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        cfg = parse_args(TINY + [f"--out_dir={d}"])
        with pytest.raises(CliError, match=f"pid {holder.pid}"):
            rundir.lock_run(cfg, [])
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        rundir.unlock(rundir.lock_run(cfg, []))  # free again
    finally:
        holder.kill()


def test_resume_restores_each_ranks_own_streams(finished):
    """The saved state holds one set of random streams per rank; rank r restores streams[r]."""
    ck = torch.load(finished / "run" / "ckpt.pt", weights_only=True)
    s = ck["resume"]
    assert (
        s["world"] == 1
        and len(s["streams"]) == 1
        and set(s["streams"][0]) == set(checkpoint.STREAMS)
    )


PLOT_SEE = [  # (script, argv, a piece of the message); {d} is the finished run
    ("lab/plot.py", ["{d}", "--out={d}/x.qqq"], "unknown file type"),
    ("lab/plot.py", ["{d}", "--out={d}/ckpt.pt/x.png"], "does not exist"),
    ("lab/plot.py", ["{d}", "--out={d}/nowhere/x.png"], "does not exist"),
    ("lab/plot.py", ["{d}/list"], "not a metrics record"),
    ("lab/see.py", ["--init_from={d}/ckpt.pt", f"--seed={2 ** 64}"], "--seed"),
    ("lab/see.py", ["--init_from={d}/ckpt.pt", "--lr=inf"], "finite"),
    ("lab/see.py", ["--init_from={d}/ckpt.pt", "--out="], "--out is empty"),
    ("lab/see.py", ["--init_from={d}/ckpt.pt", "--out={d}/nowhere/see.png"], "does not exist"),
    ("lab/experiments/scoreboard.py", [f"--seeds={2 ** 64}", "--out={d}/sb"], "out of range"),
    (
        "lab/experiments/e8_objectives.py",
        ["--quick", "--group_size=1", "--out={d}/e8"],
        "at least 2 completions",
    ),
    (
        "sample.py",
        ["--init_from={d}/ckpt.pt", "--num_prompts=4096", "--num_samples=4096", "--temperature=1"],
        "GiB",
    ),
    ("lab/bench.py", ["--ddp_worker"], "internal"),
    ("lab/experiments/multiplicity.py", ["--results={d}/nowhere"], "no such folder"),
]


@pytest.mark.parametrize(
    "script, argv, message", PLOT_SEE, ids=[f"{s} {' '.join(a)}" for s, a, _ in PLOT_SEE]
)
def test_other_entry_points_refuse_hostile_input(finished, tmp_path, capsys, script, argv,
                                                 message):
    """Each entry point's command line function, called as its __main__ calls it, in this
    process (the first case also as a process: a fresh interpreter answers the same)."""
    d = copy_run(finished, tmp_path)
    (d / "list").mkdir()
    (d / "list" / "metrics.jsonl").write_text("[1, 2]\n")
    before = digest(d)
    argv = [a.format(d=d) for a in argv]
    code, err = in_process(script, argv, capsys)
    if (script, message) == PLOT_SEE[0][::2]:
        out = subprocess.run([sys.executable, *command(script)] + argv, cwd=ROOT,
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
        code, err = out.returncode, out.stderr
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert digest(d) == before


def in_process(script, argv, capsys):
    """(exit status, stderr) of an entry point's command line function run in this process."""
    from test_reliability import entry
    name = os.path.basename(script)[:-3]
    cli, _ = entry(name)
    try:
        cli(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def test_memory_estimate_by_hand():
    """n_layer=2, n_embd=8, B*G=3*4=12, eval_size=5, --diagnostics --pass_k=1 (128 rows):
    params 12*2*64 + 8*(64+64) = 2560 -> 16 B each = 40960; activations 12*64*2*8*20*4 = 983040;
    KV of the largest sampling call, 128 rows held twice: 2*128*64*2*8*2*4 = 2097152."""
    from plumbing.config import memory_estimate
    cfg = parse_args(
        [
            "--n_layer=2",
            "--n_head=2",
            "--n_embd=8",
            "--prompts_per_step=3",
            "--group_size=4",
            "--eval_size=5",
            "--diagnostics",
            "--pass_k=1",
        ],
        check=False,
    )
    assert memory_estimate(cfg) == 40960 + 983040 + 2097152
    cfg.diagnostics = False  # then the 12 rollouts are the largest call
    assert memory_estimate(cfg) == 40960 + 983040 + 2 * 12 * 64 * 2 * 8 * 2 * 4


def test_sample_memory_need_by_hand():
    """2 layers, block 64, width 8, 31 outputs, 10 rows: 2 * 10 * (2*2*64*8 + 64*31) * 4 bytes."""
    import sample
    from model import GPTConfig
    c = GPTConfig(vocab_size=32, n_out=31, n_layer=2, n_head=2, n_embd=8, block_size=64)
    assert sample.memory_need(c, 10) == 2 * 10 * (2048 + 1984) * 4 == 322560


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("lab/experiments/e9_drift_mechanism.py", ["--quick", "--seeds=0,0"],
         "seed 0 is given twice"),
        ("lab/experiments/e8_objectives.py", ["--quick", "--seeds=3,1,3"], "seed 3 is given twice"),
        ("lab/experiments/multiplicity.py", ["--results={empty}"], "no experiment's JSON"),
        (
            "lab/experiments/multiplicity.py",
            ["--replot", "--out=/nonexistent/x"],
            "--replot does nothing",
        ),
        (
            "lab/experiments/multiplicity.py",
            ["--quick", "--seeds=5", "--jobs=7"],
            "--quick does nothing",
        ),
        ("lab/experiments/scoreboard.py", ["--jobs=3"], "--jobs does nothing"),
        ("lab/experiments/scoreboard.py", ["--replot"], "--replot does nothing"),
        ("lab/experiments/e1_flips.py", ["--quick", "--out="], "--out is empty"),
        ("lab/experiments/e1_flips.py", ["--quick", "--device=tpu"], "unknown device"),
        (
            ("lab/experiments/e10_length.py", ["--quick", "--device=cuda"], "no CUDA device")
            if not torch.cuda.is_available()
            else ("lab/experiments/e10_length.py", ["--device=tpu"], "unknown device")
        ),
        ("lab/experiments/scoreboard.py", ["--device=cuda"], "--device does nothing"),
        ("lab/experiments/e8_objectives.py", ["--replot", "--out={cut}"], "not readable JSON"),
        ("lab/plot.py", ["{binary}"], "is not text (UTF-8)"),
        ("lab/plot.py", ["{latin}"], "is not a config.json of this project"),
        ("lab/plot.py", ["{hugestep}"], "integer step in [0, 2**53)"),
        ("lab/plot.py", ["{nostep}"], "integer step in [0, 2**53)"),
    ],
)
def test_experiments_refuse_bad_input_and_leave_results_unchanged(tmp_path, capsys, script, args,
                                                                  message):
    """Bad flags and damaged files, for the experiments and plot.py: one line, exit 2,
    results/ and every input file unchanged."""
    (tmp_path / "empty").mkdir()
    folders = {k: tmp_path / k for k in ("cut", "binary", "latin", "hugestep", "nostep")}
    for d in folders.values():
        d.mkdir()
    good = '{"phase": "rl", "step": 1, "reward": 0.5}\n'
    (folders["cut"] / "e8_objectives.json").write_text('{"experiment": "e8", "summary": {')
    (folders["binary"] / "metrics.jsonl").write_bytes(bytes(range(256)) * 2)
    (folders["latin"] / "metrics.jsonl").write_text(good)
    (folders["latin"] / "config.json").write_bytes(b'{"loss": "gr\xe9po"}')
    (folders["hugestep"] / "metrics.jsonl").write_text(
        '{"phase": "rl", "step": 1' + "0" * 300 + "}\n"
    )
    (folders["nostep"] / "metrics.jsonl").write_text(good + '{"phase": "rl", "eval_acc": 0.5}\n')
    before, out_before = digest(os.path.join(ROOT, "results")), sorted(os.listdir(tmp_path))
    inputs = {p: open(p, "rb").read() for d in folders.values() for p in map(str, d.iterdir())}
    argv = [a.format(empty=tmp_path / "empty", **folders) for a in args]
    argv += ["--out=" + str(tmp_path / "x.png")] if script == "lab/plot.py" else []
    code, stderr = in_process(script, argv, capsys)  # as its __main__ calls it
    if message == "seed 0 is given twice":  # and once as a process
        run = subprocess.run([sys.executable, *command(script)] + argv, cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        code, stderr = run.returncode, run.stderr
    err = [x for x in stderr.splitlines() if x.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), stderr
    assert message in err[0]
    assert digest(os.path.join(ROOT, "results")) == before
    assert sorted(os.listdir(tmp_path)) == out_before and not os.listdir(tmp_path / "empty")
    assert inputs == {p: open(p, "rb").read() for p in inputs}
