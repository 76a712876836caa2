"""A full disk, Ctrl-C, special output paths and flags given twice, at every entry point
(train.py, the experiments, lab.plot, lab.see, lab.bench, sample.py): one 'error:' line,
exit status 2, the earlier file whole and no partial folder left behind. The full disk
is a 2 MiB tmpfs (skipped where it cannot be mounted); the entry points run in-process,
the modules through runpy as ``python -m`` runs them."""
import errno
import importlib
import importlib.util
import json
import os
import runpy
import shutil
import signal
import sys
import warnings

import pytest

import train
from lab.experiments import common, output
from plumbing import checkpoint
from plumbing.config import parse_args
from tests.test_hostile import TINY, digest

pytestmark = pytest.mark.usefixtures("unchanged")
RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def one_line(capsys, run, message):
    """run() exits with status 2 and prints one 'error:' line holding ``message``."""
    try:
        run()
        code = None
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:  # would stop the whole test session: fail this test alone
        pytest.fail("KeyboardInterrupt escaped: a traceback, not one line")
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), (code, err)
    assert message in err[0], err[0]
    return err[0]


def module(name, argv, monkeypatch):
    """``python -m name argv``, in this process."""
    def run():
        monkeypatch.setattr(sys, "argv", [name] + argv)
        with warnings.catch_warnings():  # runpy's: the module was imported before (by a test)
            warnings.simplefilter("ignore", RuntimeWarning)
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    return run


@pytest.fixture
def disk(full_disk):
    """The tmpfs, emptied after the test; fill(leave) takes all but ``leave`` bytes."""
    def fill(leave=0):
        with open(full_disk / "filler", "wb") as f:
            try:
                f.write(b"\0" * max(0, shutil.disk_usage(full_disk).free - leave))
            except OSError:
                pass
    yield full_disk, fill
    for name in os.listdir(full_disk):
        p = full_disk / name
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else os.remove(p)


def metrics_folder(d, n=30):
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(
        json.dumps({"phase": "rl", "step": s, "reward": s / n}) + "\n" for s in range(n)))
    return d


def temps(d):
    return [f for f in os.listdir(d) if ".tmp" in f]


# figures need matplotlib, an optional extra (requirements-plots.txt): without it, the
# figure tests are skipped (the refusal without it is tests/test_handout.py's)
NEEDS_MPL = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                               reason="matplotlib is not installed (requirements-plots.txt)")


@NEEDS_MPL
def test_plot_on_a_full_disk_keeps_the_earlier_figure(disk, capsys, monkeypatch):
    root, fill = disk
    d = metrics_folder(root / "run")
    (d / "curves.png").write_bytes(b"an earlier figure" * 1000)
    fill()
    line = one_line(capsys, module("lab.plot", [str(d)], monkeypatch), "No space left on device")
    assert str(d / "curves.png") in line and "needs" in line
    assert (d / "curves.png").read_bytes() == b"an earlier figure" * 1000 and not temps(d)


@NEEDS_MPL
def test_e10_replot_on_a_full_disk_keeps_the_earlier_figure(disk, capsys, monkeypatch):
    root, fill = disk
    d = root / "e10"
    d.mkdir()
    shutil.copy(os.path.join(RESULTS, "e10_length.json"), d)
    (d / "e10_length.png").write_bytes(b"earlier")
    fill()
    before = digest(d)
    line = one_line(capsys, module("lab.experiments.e10_length", ["--replot", f"--out={d}"],
                                   monkeypatch), "No space left on device")
    assert str(d / "e10_length.png") in line
    assert digest(d) == before


def test_an_experiments_json_on_a_full_disk_keeps_the_earlier_one(disk):
    root, fill = disk
    (root / "x.json").write_text('{"earlier": 1}')
    fill()
    with pytest.raises(OSError) as e:
        output.save("x", {"big": "y" * 100_000}, str(root))
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(root / "x.json")
    assert "needs" in e.value.strerror
    assert (root / "x.json").read_text() == '{"earlier": 1}' and not temps(root)


def test_a_warm_start_on_a_full_disk_is_one_line_and_leaves_no_folder(disk, capsys, monkeypatch):
    root, fill = disk
    fill(leave=16 * 1024)  # config.json and the log fit; the first checkpoint does not
    one_line(capsys, module("lab.experiments.e10_length", [
        "--small", "--seeds=100", "--sft_steps=4", "--rl_steps=1", f"--out={root}/e10"],
        monkeypatch), "No space left on device")
    assert os.listdir(root / "e10") == []  # the warm start's folder went with it


@pytest.fixture
def stopped_on_tmpfs(disk):
    """A tiny run on the tmpfs, stopped by Ctrl-C inside RL step 3 (checkpoint: step 2)."""
    root, fill = disk
    real = train.rl_step

    def stop_at_3(run, opt):
        if run.state.step == 3:
            raise KeyboardInterrupt
        return real(run, opt)
    train.rl_step = stop_at_3
    try:
        with pytest.raises(KeyboardInterrupt):
            train.main(parse_args(TINY + [f"--out_dir={root}/run"]))
    finally:
        train.rl_step = real
    return root / "run", fill


def test_train_and_its_resume_on_a_full_disk_are_one_line(stopped_on_tmpfs, capsys):
    d, fill = stopped_on_tmpfs
    ckpt = (d / "ckpt.pt").read_bytes()
    fill()
    line = one_line(capsys, lambda: train.cli(["--resume", f"--out_dir={d}"]),
                    "No space left on device")
    assert str(d) in line
    assert (d / "ckpt.pt").read_bytes() == ckpt and not temps(d)  # the last good checkpoint
    os.remove(d.parent / "filler")
    fill(leave=8 * 1024)
    one_line(capsys, lambda: train.cli(TINY + [f"--out_dir={d.parent}/new"]),
             "No space left on device")


# ----------------------------------------------------------------------------- Ctrl-C

def interrupt(*a, **k):
    raise KeyboardInterrupt


@pytest.mark.parametrize("name, argv, where", [
    ("train", TINY + ["--out_dir={tmp}/run2"], ("sampler", "sft_texts")),
    ("lab.plot", ["{tmp}/run"], ("lab.files", "atomic_savefig")),
    ("lab.see", ["--init_from={tmp}/x.pt", "--out={tmp}/see.png"], ("lab.see", "load_checkpoint")),
    ("sample", ["--init_from={tmp}/x.pt"], ("sample", "load_checkpoint")),
    ("lab.bench", ["--quick", "--device=cpu", "--ddp=false"], ("lab.bench", "matmul_peak")),
    ("lab.experiments.e10_length", ["--quick", "--out={tmp}/e10"], ("lab.experiments.common",
                                                                    "warm_start")),
    ("lab.experiments.scoreboard", ["--quick", "--out={tmp}/sb"],
     ("lab.experiments.scoreboard", "score")),
])
def test_ctrl_c_anywhere_is_one_line(tmp_path, capsys, monkeypatch, name, argv, where):
    """Ctrl-C inside the work of each entry point, called as its __main__ calls it."""
    if name == "lab.plot" and importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed: lab.plot stops before its work")
    metrics_folder(tmp_path / "run")
    monkeypatch.setattr(importlib.import_module(where[0]), where[1], interrupt)
    mod, argv = importlib.import_module(name), [a.format(tmp=tmp_path) for a in argv]
    if name.startswith("lab.experiments."):
        monkeypatch.setattr(sys, "argv", [name] + argv)
        one_line(capsys, lambda: common.cli(mod.main), "interrupted")
    else:
        one_line(capsys, lambda: mod.cli(argv), "interrupted")


def test_a_pool_worker_leaves_ctrl_c_to_the_parent(monkeypatch):
    """Ctrl-C reaches every process of the terminal: the workers ignore it (else each prints
    a KeyboardInterrupt traceback), and the parent says 'interrupted' once; and a worker's
    progress bars hold no multiprocessing semaphore, which the resource tracker would report
    as leaked when the pool ends the worker."""
    from tqdm import tqdm
    monkeypatch.setattr(common, "DEVICE", common.DEVICE)
    old, lock = signal.getsignal(signal.SIGINT), tqdm.get_lock()
    try:
        common._init_worker(0, "cpu")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert "multiprocessing" not in type(tqdm.get_lock()).__module__
        assert not getattr(tqdm.get_lock(), "mp_lock", None)
    finally:
        signal.signal(signal.SIGINT, old)
        tqdm.set_lock(lock)


# ----------------------------------------------------------------------------- bad paths, flags

@pytest.fixture
def fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe.png")
    os.mkfifo(tmp_path / "pipe.jsonl")
    return tmp_path


BAD = [  # (module, argv, a piece of the message); {d}: a folder with a run's metrics
    ("lab.plot", ["{d}/run", "--out=/proc/curves.png"], "cannot write in /proc"),
    ("lab.plot", ["{d}/run", "--out={d}/pipe.png"], "not a regular file"),
    ("lab.plot", ["{d}/run", "--out={d}/a.png", "--out={d}/b.png"], "--out is given twice"),
    ("lab.see", ["--init_from={d}/x.pt", "--out=/proc/see.png"], "cannot write in /proc"),
    ("lab.see", ["--init_from={d}/x.pt", "--out={d}/pipe.png"], "not a regular file"),
    ("lab.see", ["--init_from={d}/x.pt", "--optimizer=sgd", "--optimizer=adam"],
     "--optimizer is given twice"),
    ("lab.bench", ["--quick", "--out=/proc/bench.jsonl"], "cannot write in /proc"),
    ("lab.bench", ["--quick", "--out={d}/pipe.jsonl"], "not a regular file"),
    ("lab.bench", ["--quick", "--quick=false"], "--quick is given twice"),
    ("lab.bench", ["--jobs=2"], "unknown argument"),
    ("lab.experiments.e10_length", ["--quick", "--out=/proc/e10"], "cannot write in /proc"),
    ("lab.experiments.e10_length", ["--quick", "--out=/dev/null"], "is a file, not a folder"),
    ("lab.experiments.e10_length", ["--quick", "--seeds=100", "--seeds=101"],
     "--seeds is given twice"),
    ("lab.experiments.e11_optimizer", ["--quick", "--calibrate", "--calibrate"],
     "--calibrate is given twice"),
    ("lab.experiments.multiplicity", ["--results={d}", "--results={d}"],
     "--results is given twice"),
]


@pytest.mark.parametrize("name, argv, message", BAD, ids=[f"{n} {' '.join(a)}" for n, a, _ in BAD])
def test_bad_paths_and_flags_given_twice_are_one_line(fifo, capsys, monkeypatch, name, argv,
                                                      message):
    metrics_folder(fifo / "run")
    before = digest(fifo / "run")
    one_line(capsys, module(name, [a.format(d=fifo) for a in argv], monkeypatch), message)
    assert digest(fifo / "run") == before and not temps(fifo)


@pytest.mark.parametrize("script, argv", [
    ("train", ["--optimizer=sgd", "--optimizer=adamw", "--out_dir={d}/t"]),
    ("train", ["--diagnostics", "--diagnostics=false", "--out_dir={d}/t"]),
    ("train", ["--instruments=false", "--instruments=false", "--out_dir={d}/t"]),
    ("sample", ["--init_from={d}/a.pt", "--init_from={d}/b.pt"]),
])
def test_top_level_scripts_refuse_a_flag_given_twice(tmp_path, capsys, script, argv):
    import importlib
    argv = [a.format(d=tmp_path) for a in argv]
    one_line(capsys, lambda: importlib.import_module(script).cli(argv), "is given twice")
    assert os.listdir(tmp_path) == []


def test_train_refuses_an_out_dir_in_proc(capsys):
    one_line(capsys, lambda: train.cli(TINY + ["--out_dir=/proc/run"]), "cannot write in /proc")


def test_a_full_disk_error_names_the_path_and_the_space_needed(tmp_path):
    e = checkpoint.no_space(str(tmp_path / "x.png"), 12345)
    assert e.errno == errno.ENOSPC and e.filename == str(tmp_path / "x.png")
    assert "needs 0.01 MiB" in e.strerror and "free" in e.strerror
