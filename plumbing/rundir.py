"""rundir.py: a run's folder. Who may write it, what a new run may replace, and how a run resumes.

What it teaches
---------------
A run finished yesterday must survive anything typed today. Three rules:

1. **One writer.** A process that writes an --out_dir holds an exclusive
   ``flock`` on the folder itself for as long as it runs. The lock lives in the
   kernel, not in a file: it goes away when the process dies, however it dies,
   so a killed run never leaves a stale lock, and taking it writes nothing. A
   second writer (a fresh run, --resume or --overwrite) is refused with one
   line naming the holder's pid (read from /proc/locks).
2. **Validate, then write.** ``open_run`` checks every flag, the checkpoint
   (against config.json: every flag it was written with, and its optimizer
   state against --optimizer), the resume state and the lock while the folder
   is untouched. Only then does ``start_writing`` delete an old run
   (--overwrite) or cut metrics.jsonl back to the checkpoint (--resume).
   --overwrite refuses to delete a file the run is about to read (--init_from
   inside the folder).
3. **Resume continues the same run.** ``resumed_config`` takes the saved
   config (a flag that contradicts it is an error), and the checkpoint's resume
   state (checkpoint.py) must match the number of processes: each rank's
   random streams are saved and restored, so a different world size could not
   continue them and is refused.
"""

import errno
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field, fields, replace

import torch

from lab import objectives
from model import rl_optimizer
from plumbing import checkpoint, dist_utils
from plumbing.config import Config, default_of
from plumbing.config import validate as validate_config
from plumbing.errors import CliError

# ----------------------------------------------------------------------------- runs in an --out_dir

RUN_FILES = ("config.json", "metrics.jsonl", "ckpt.pt", "warm_start.pt")
KEEP = ("out_dir", "resume", "overwrite")  # flags a resumed run may change


def holds_run(out_dir):
    """The files of a run already in out_dir."""
    return [f for f in RUN_FILES if os.path.exists(os.path.join(out_dir, f))]


def saved_config(path):
    """The config.json of a run, checked for type before anything uses it: every value
    of a known flag has that flag's type (a float flag takes an integer too)."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError):
        raise CliError(f"--resume: {path} is missing or not JSON") from None
    if not isinstance(saved, dict) or not {"task", "seed", "out_dir"} <= set(saved):
        raise CliError(f"--resume: {path} is not a config of this project")
    for f in fields(Config):
        if f.name not in saved:
            continue
        v = saved[f.name]
        ok = {bool: isinstance(v, bool), str: isinstance(v, str),
              int: isinstance(v, int) and not isinstance(v, bool),
              float: isinstance(v, (int, float)) and not isinstance(v, bool)}[f.type]
        if not ok:
            raise CliError(f"--resume: {path} says {f.name}={json.dumps(v)}, which is not "
                           f"a value of --{f.name} ({f.type.__name__})")
        saved[f.name] = float(v) if f.type is float else v
    return saved


def resumed_config(cfg, given=None):
    """The config of the run in cfg.out_dir, from its config.json alone. A flag given
    now (``given``: {name: value}, the command line's) that differs from the saved
    value is refused, also one set back to its default; a flag the run predates takes
    its default, which is what the older version did (``--adv=auto`` resolves to the
    saved objective's own estimator). Without ``given`` (a Config built in code), the
    flags that differ from their defaults count as given."""
    path = os.path.join(cfg.out_dir, "config.json")
    saved = saved_config(path)
    if given is None:
        given = {f.name: getattr(cfg, f.name) for f in fields(Config)
                 if getattr(cfg, f.name) != default_of(f.name, cfg.task)}
    values = {}
    for f in fields(Config):
        name = f.name
        if name in KEEP:
            values[name] = getattr(cfg, name)
            continue
        if name in given:
            mine = given[name]
            if name == "adv" and mine == "auto":  # what auto means for the run's own objective
                mine = objectives.own_estimator(saved.get("loss", Config.loss))
            theirs = saved.get(name, default_of(name, saved["task"]))
            if name == "adv" and name not in saved:
                theirs = objectives.own_estimator(saved.get("loss", Config.loss))
            if mine != theirs:
                raise CliError(f"--resume continues the run as configured in {path}, where "
                               f"{name}={flag_text(theirs)}; drop --{name}={flag_text(mine)}")
        if name in saved:
            values[name] = saved[name]
        elif name != "adv":  # adv: left at auto, resolved from the saved objective
            values[name] = default_of(name, saved["task"])
    new = Config(**values)  # flags the run predates: their defaults (adv: auto, resolved)
    validate_config(new)
    return new


def flag_text(v):
    """A flag's value as it is typed: true and false for a bool."""
    return str(v).lower() if isinstance(v, bool) else v


def init_from_checks(cfg, model, ck):
    """--init_from: the task must match; model sizes come from the checkpoint; SFT flags
    are ignored (a warning), size flags that contradict the checkpoint are an error."""
    t = ck["task"]
    if (t["task"], t["digits"], t["scratchpad"]) != (cfg.task, cfg.digits, cfg.scratchpad):
        raise CliError(f"checkpoint was trained on task {t}, not on "
                       f"task={cfg.task} digits={cfg.digits} scratchpad={cfg.scratchpad}")
    for k in ("n_layer", "n_head", "n_embd"):
        mine, theirs = getattr(cfg, k), getattr(model.cfg, k)
        if mine != theirs and mine != default_of(k, cfg.task):
            raise CliError(f"--{k}={mine} contradicts --init_from={cfg.init_from} ({k}={theirs}); "
                           f"model sizes come from the checkpoint")
    ignored = [k for k in ("sft_steps", "sft_batch", "sft_lr", "sft_flawed")
               if getattr(cfg, k) != default_of(k, cfg.task)]
    if ignored:
        print(f"warning: {', '.join('--' + k for k in ignored)} ignored: --init_from skips SFT",
              file=sys.stderr)
    return replace(cfg, n_layer=model.cfg.n_layer, n_head=model.cfg.n_head, n_embd=model.cfg.n_embd)


# ----------------------------------------------------------------------------- a run's folder

def open_run(cfg, world=1, given=None):
    """Check --out_dir, --resume and --overwrite before anything is written.
    Returns (cfg, device, found, model, saved): the config to run (a resumed run's own),
    the device it runs on (a resumed run's own: its random streams belong to that
    device), the run files already there, and for --resume with a ckpt.pt its model
    and resume state (else None, None)."""
    found = holds_run(cfg.out_dir) if os.path.isdir(cfg.out_dir) else []
    if found and not (cfg.resume or cfg.overwrite):
        raise CliError(f"--out_dir={cfg.out_dir} holds another run ({', '.join(found)}); "
                       f"continue it with --resume or replace it with --overwrite")
    if cfg.resume and "config.json" not in found:
        raise CliError(f"--resume: --out_dir={cfg.out_dir} holds no run to resume")
    if cfg.overwrite and cfg.init_from and found and deletes(cfg.init_from, cfg.out_dir, found):
        raise CliError(f"--overwrite would delete --init_from={cfg.init_from} before the run reads "
                       f"it; copy it out of --out_dir first")
    if cfg.resume:  # the saved config names the device the run was on ("cpu" or "cuda")
        cfg = resumed_config(cfg, given)
    device = dist_utils.resolve_device(cfg.device)
    if cfg.compile:
        check_compiler()
    if cfg.resume and "ckpt.pt" not in found and finished(cfg.out_dir):
        raise CliError(f"--resume: {cfg.out_dir} holds a finished run whose ckpt.pt is missing; "
                       f"resuming would start it again over its metrics.jsonl: put ckpt.pt "
                       f"back, or start again with --overwrite")
    if not (cfg.resume and "ckpt.pt" in found):
        return cfg, device, found, None, None
    model, ck = checkpoint.load_checkpoint(os.path.join(cfg.out_dir, "ckpt.pt"), device)
    if "resume" not in ck:
        raise CliError(f"--resume: {cfg.out_dir}/ckpt.pt holds no resume state")
    saved = ck["resume"]
    for r, st in enumerate(saved["streams"]):  # the sampling generator lives on one device
        if checkpoint.is_cuda_generator_state(st["torch_gen"].cpu()) != (device == "cuda"):
            raise CliError(f"--resume: {cfg.out_dir}/ckpt.pt was sampled on another device "
                           f"than this run's {device}, so its random streams cannot continue")
    t = ck["task"]
    if (t["task"], t["digits"], t["scratchpad"]) != (cfg.task, cfg.digits, cfg.scratchpad):
        raise CliError(f"--resume: {cfg.out_dir}/ckpt.pt was trained on task {t}, not on this "
                       f"run's task={cfg.task} digits={cfg.digits} scratchpad={cfg.scratchpad}")
    if saved["world"] != world:
        raise CliError(
            f"--resume: the run was trained by {saved['world']} process(es) and this "
            f"is {world}; each process restores its own random streams, so resume with "
            + (f"torchrun --nproc_per_node={saved['world']}" if saved["world"] > 1
               else "one process")
        )
    check_saved_config(cfg, ck["config"], cfg.out_dir)
    check_saved_optimizer(cfg, saved, cfg.out_dir)
    if cfg.beta and saved["phase"] == "rl":  # --beta's reference must load before anything changes
        ref = cfg.init_from or os.path.join(cfg.out_dir, "warm_start.pt")
        if checkpoint.load_checkpoint(ref, device)[0].cfg != model.cfg:
            raise CliError(f"--resume: --beta's reference {ref} is a model of other sizes than "
                           f"{cfg.out_dir}/ckpt.pt")
    path = os.path.join(cfg.out_dir, "metrics.jsonl")
    have = os.path.getsize(path) if os.path.exists(path) else 0
    if have < saved["metrics_bytes"]:
        raise CliError(f"--resume: {path} is shorter ({have} bytes) than its "
                       f"checkpoint says ({saved['metrics_bytes']})")
    return cfg, device, found, model, saved


def check_compiler():
    """--compile: torch.compile builds C++ (and, on a GPU, Triton's launchers) with the
    compiler inductor finds. It compiles lazily, at the first forward pass, when the run
    folder is already written; so find that compiler now and build a one-line program
    with it: a machine without one is one line, and nothing is written."""
    try:
        from torch._inductor import cpp_builder
        cxx = cpp_builder.get_cpp_compiler()
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "probe.cpp"), "w") as f:
                f.write("int main() { return 0; }\n")
            subprocess.run([cxx, os.path.join(d, "probe.cpp"), "-o", os.path.join(d, "probe")],
                           check=True, capture_output=True, timeout=300)
    except Exception as e:  # whatever the reason, torch.compile would fail the same way
        raise CliError(f"--compile needs a working C++ compiler, and none was found or it "
                       f"failed ({type(e).__name__}); install g++, or leave --compile out"
                       ) from None


def deletes(path, out_dir, found):
    """Whether --overwrite, deleting the run files ``found`` in ``out_dir``, would delete
    ``path``: a file in that folder, or one a link (or a chain of links) leads to there.
    Real paths are compared: a link's own folder says nothing of where its file lies."""
    real = os.path.realpath(path)
    here = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    return here == os.path.realpath(out_dir) or any(
        real == os.path.realpath(os.path.join(out_dir, f)) for f in found)


def finished(out_dir):
    """Whether the run's metrics.jsonl holds its summary line (the run reached its end)."""
    try:
        with open(os.path.join(out_dir, "metrics.jsonl"), "rb") as f:
            return any(b'"phase": "summary"' in line for line in f)
    except OSError:
        return False


def finished_summary(cfg, found, master=True):
    """--resume of a run that reached its end: nothing is left to run, so nothing is
    written (its summary line, "seconds" too, stays as it was). Returns that summary (the
    dict train.main returns at a run's end) after one line that says so, or None for any
    other run."""
    if not (cfg.resume and finished(cfg.out_dir)):
        return None
    summary = {}
    fd = lock_run(cfg, found) if master else None  # a writer at work: refused, as any resume
    try:
        with open(os.path.join(cfg.out_dir, "metrics.jsonl"), "rb") as f:
            for line in f:
                if b'"phase": "summary"' in line:
                    try:
                        summary = {k: v for k, v in json.loads(line).items()
                                   if k not in ("phase", "step")}
                    except (ValueError, AttributeError):
                        summary = {}
    finally:
        unlock(fd)
    if master:
        print(f"--resume: {cfg.out_dir} holds a finished run (RL step {cfg.rl_steps} of "
              f"{cfg.rl_steps}); nothing to run, nothing changed")
    return summary


def check_saved_config(cfg, theirs, out_dir):
    """config.json (``cfg``, as resumed_config read it) against the config its ckpt.pt was
    written with (``theirs``), every flag but those a resume may change and --device (the
    checkpoint keeps it as given: "auto"): a config.json edited by hand would continue
    the run under flags it was not trained with."""
    for f in fields(Config):
        if f.name in KEEP or f.name == "device":
            continue
        mine, old = getattr(cfg, f.name), theirs.get(f.name, default_of(f.name, cfg.task))
        if f.name == "adv":  # "auto" is the objective's own estimator
            mine, old = (objectives.own_estimator(cfg.loss) if v == "auto" else v
                         for v in (mine, old))
        if mine != old:
            raise CliError(f"--resume: {out_dir}/config.json says {f.name}={flag_text(mine)}, "
                           f"but ckpt.pt was written with {f.name}={flag_text(old)}; put "
                           f"config.json back as it was")


def check_saved_optimizer(cfg, saved, out_dir):
    """The checkpoint's optimizer state against the optimizer the run would load it into:
    --optimizer at --lr in RL, SFT's AdamW at --sft_lr (as train.sft builds it) in SFT."""
    if saved["phase"] == "rl":
        lr, what = cfg.lr, f"--optimizer={cfg.optimizer}"
        build = lambda p: rl_optimizer(p, cfg.optimizer, cfg.lr)
    else:
        lr, what = cfg.sft_lr, "SFT's AdamW"
        build = lambda p: torch.optim.AdamW(p, lr=cfg.sft_lr, weight_decay=0.0)
    try:
        checkpoint.check_optimizer(saved["optimizer"], build, what)
    except ValueError as e:
        raise CliError(f"--resume: {out_dir}/ckpt.pt does not fit {what}: {e}") from None
    old = saved["optimizer"]["param_groups"][0]["lr"]
    if old != lr:
        raise CliError(f"--resume: {out_dir}/ckpt.pt's optimizer runs at lr {old:g}, the "
                       f"run's config at {lr:g}; put config.json back as it was")


def lock_run(cfg, found):
    """The last check before writing: create --out_dir if needed and take an
    exclusive flock on it (held until the process ends or ``unlock``). Refuses
    if another process holds it, or if the folder's run files changed since
    ``open_run`` looked. Returns the locked file descriptor."""
    os.makedirs(cfg.out_dir, exist_ok=True)
    fd = os.open(cfg.out_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise CliError(
            f"--out_dir={cfg.out_dir} is being written by another process "
            f"({_holder(cfg.out_dir)}); wait for it or choose another --out_dir"
        ) from None
    if sorted(holds_run(cfg.out_dir)) != sorted(found):
        os.close(fd)
        raise CliError(f"--out_dir={cfg.out_dir} changed while this run was starting; try again")
    return fd


def unlock(fd):
    if fd is not None:
        os.close(fd)


def _holder(folder):
    """'pid N' of the process holding a lock on ``folder`` (from /proc/locks), if known."""
    try:
        st = os.stat(folder)
        ino = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in open("/proc/locks"):
            parts = line.split()
            if "FLOCK" in parts and parts[-3] == ino:
                return f"pid {parts[-4]}"
    except (OSError, IndexError):
        pass
    return "pid unknown"


def start_writing(cfg, found, resolved, saved):
    """The first writes of a run (rank 0): clear stale temp files, replace the old
    run (--overwrite) or cut metrics.jsonl back to the checkpoint (--resume), write
    config.json (the resolved config: what actually runs) and print it."""
    checkpoint.clear_stale_temps(cfg.out_dir)
    if cfg.overwrite:
        for f in found:
            os.remove(os.path.join(cfg.out_dir, f))
    os.makedirs(cfg.out_dir, exist_ok=True)
    if not cfg.resume:
        checkpoint.atomic_write_text(
            json.dumps(resolved, indent=1), os.path.join(cfg.out_dir, "config.json")
        )
    # every flag as it resolved, wrapped at 100 characters (config.json holds the same)
    print(textwrap.fill(" ".join(f"{k}={v}" for k, v in resolved.items()), width=100,
                        initial_indent="config: ", subsequent_indent="  ",
                        break_long_words=False, break_on_hyphens=False))
    if cfg.resume:
        metrics = os.path.join(cfg.out_dir, "metrics.jsonl")
        os.truncate(metrics, saved["metrics_bytes"]) if saved else open(metrics, "w").close()
        print(f"resuming after {saved['phase']} step {saved['step']}" if saved else
              "resuming from the start: the run had written no checkpoint")


class RunDir:
    """Where rank 0 writes as a run goes: metrics.jsonl (one JSON object a line,
    flushed) and the checkpoints. On the other ranks every call does nothing."""

    def __init__(self, cfg, raw, master):
        self.cfg, self.raw, self.master = cfg, raw, master
        self.metrics = open(os.path.join(cfg.out_dir, "metrics.jsonl"), "a") if master else None

    def log(self, d):
        if self.master:
            try:
                self.metrics.write(json.dumps(d) + "\n")
                self.metrics.flush()
            except OSError as e:  # a full disk: say which file (the write's error does not)
                path = os.path.join(self.cfg.out_dir, "metrics.jsonl")
                raise (checkpoint.no_space(path) if e.errno == errno.ENOSPC
                       else OSError(e.errno, e.strerror, path)) from None

    def checkpoint(self, state, opt, name="ckpt.pt"):
        """ckpt.pt with the resume state after ``state.step`` of ``state.phase``.
        Every rank calls it: each contributes its own random streams."""
        streams = dist_utils.gather_objects(state.streams())
        if self.master:
            checkpoint.save_checkpoint(
                os.path.join(self.cfg.out_dir, name),
                self.raw,
                self.cfg,
                state.phase,
                state.step,
                state.capture(opt, self.metrics.tell(), streams),
            )

    def warm_start(self, step):
        """warm_start.pt: the end of SFT, the start of RL (and --beta's reference)."""
        if self.master:
            checkpoint.save_checkpoint(
                os.path.join(self.cfg.out_dir, "warm_start.pt"),
                self.raw,
                self.cfg,
                "warm_start",
                step,
            )

    def close(self):
        if self.master:
            self.metrics.close()


@dataclass
class Run:
    """What every phase of one run shares, made once by train.run_phases: the flags, the
    models, the task, the resumable state, the run folder, this process's place, and the
    lab's instruments (None with --instruments=false)."""
    cfg: object
    model: object                # what backward runs through: DDP-wrapped under torchrun
    raw: object                  # the plain module: sampling, evaluation, checkpoints
    task: object
    held_out: list               # evaluation problems, disjoint from training
    state: checkpoint.RunState   # step, random streams, running sums: what resume restores
    out: RunDir                  # metrics.jsonl and checkpoints (rank 0 writes)
    device: str
    rank: int
    world: int
    inst: object = None
    t0: float = field(default_factory=time.time)

    @property
    def master(self):  # rank 0 evaluates, logs and writes
        return self.rank == 0
