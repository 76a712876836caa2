"""rundir.py: a run's folder. Who may write it, what a new run may replace, and how a run resumes.

What it teaches: a run finished yesterday must survive anything typed today.

1. **One writer.** A process that writes an --out_dir holds an exclusive ``flock`` on
   the folder itself. The lock lives in the kernel, not in a file: it goes away when
   the process dies, however it dies, and taking it writes nothing. A second writer is
   refused with one line naming the holder's pid (read from /proc/locks).
2. **Validate, then write.** ``open_run`` checks every flag, the checkpoint (against
   config.json and --optimizer), the resume state and the lock while the folder is
   untouched. Only then does ``start_writing`` delete an old run (--overwrite) or cut
   metrics.jsonl back to the checkpoint (--resume). --overwrite refuses to delete a file
   the run is about to read (--init_from in the folder, also through a link).
3. **Resume continues the same run.** The saved config rules (a flag that contradicts it
   is an error); each rank's random streams are restored, so the world size must match.
   A finished run has no step left: its resume changes nothing and says so.
"""

import contextlib
import errno
import fcntl
import json
import os
import random
import sys
import textwrap
import time
from dataclasses import dataclass, field, fields, replace

import torch

import toy_tasks
from model import GPT, GPTConfig, rl_optimizer
from plumbing import checkpoint, dist_utils, fast_decode
from plumbing.config import Config, default_of
from plumbing.config import validate as validate_config
from plumbing.errors import CliError

RUN_FILES = ("config.json", "metrics.jsonl", "ckpt.pt", "warm_start.pt")
KEEP = ("out_dir", "resume", "overwrite")  # flags a resumed run may change


class Finished(Exception):
    """--resume of a run that reached its end: there is nothing to do, and nothing is
    written. Its message is the one line to print; ``summary`` is the run's."""

    def __init__(self, out_dir, summary):
        super().__init__(f"{out_dir} holds a finished run (its summary is in metrics.jsonl); "
                         f"--resume has no step left to run and changed nothing")
        self.summary = summary


def holds_run(out_dir):
    """The files of a run already in out_dir."""
    return [f for f in RUN_FILES if os.path.exists(os.path.join(out_dir, f))]


def own_adv(loss):
    """What --adv=auto means for --loss=loss (loss.OWN_ADV, as Config resolves it)."""
    return Config(loss=loss).adv


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
    for f in (f for f in fields(Config) if f.name in saved):
        v = saved[f.name]
        if not (isinstance(v, (int, float) if f.type is float else f.type)
                and isinstance(v, bool) == (f.type is bool)):
            raise CliError(f"--resume: {path} says {f.name}={json.dumps(v)}, which is not "
                           f"a value of --{f.name} ({f.type.__name__})")
        saved[f.name] = float(v) if f.type is float else v
    return saved


def resumed_config(cfg, given=None):
    """The config of the run in cfg.out_dir, from its config.json alone. A flag given now
    (``given``, the command line's; None: those that differ from their defaults) that
    differs from the saved value is refused, also one set back to its default; a flag the
    run predates takes its default, as the older version did (--adv: the loss's own)."""
    path = os.path.join(cfg.out_dir, "config.json")
    saved = saved_config(path)
    if given is None:
        given = {f.name: getattr(cfg, f.name) for f in fields(Config)
                 if getattr(cfg, f.name) != default_of(f.name, cfg.task)}
    values, their_adv = {}, own_adv(saved.get("loss", Config.loss))
    for name in (f.name for f in fields(Config)):
        if name in KEEP:
            values[name] = getattr(cfg, name)
            continue
        theirs = saved.get(name, their_adv if name == "adv" else default_of(name, saved["task"]))
        mine = their_adv if name == "adv" and given.get(name) == "auto" else given.get(name)
        if name in given and mine != theirs:
            raise CliError(f"--resume continues the run as configured in {path}, where "
                           f"{name}={flag_text(theirs)}; drop --{name}={flag_text(mine)}")
        if name in saved or name != "adv":  # adv the run predates: auto, resolved by Config
            values[name] = theirs
    new = Config(**values)
    validate_config(new)
    return new


def flag_text(v):
    """A flag's value as it is typed: true and false for a bool."""
    return str(v).lower() if isinstance(v, bool) else v


def init_from_checks(cfg, model, ck):
    """--init_from: the task must match; model sizes come from the checkpoint; SFT flags
    are ignored (a warning), size flags that contradict the checkpoint are an error."""
    same_task(cfg, ck, "checkpoint")
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


def same_task(cfg, ck, where):
    t = ck["task"]
    if (t["task"], t["digits"], t["scratchpad"]) != (cfg.task, cfg.digits, cfg.scratchpad):
        raise CliError(f"{where} was trained on task {t}, not on task={cfg.task} "
                       f"digits={cfg.digits} scratchpad={cfg.scratchpad}")


def inside(path, folder):
    """Whether file ``path`` lies in ``folder``, as named or through any chain of links."""
    real = os.path.realpath(folder)
    return real in (os.path.realpath(os.path.dirname(os.path.abspath(path))),
                    os.path.dirname(os.path.realpath(path)))


# ----------------------------------------------------------------------------- a run's folder

def open_run(cfg, world=1, given=None):
    """Check --out_dir, --resume and --overwrite before anything is written. Returns
    (cfg, device, found, model, saved): the config and device to run on (a resumed run's
    own: its random streams belong to that device), the run files already there, and for
    --resume its model and resume state (else None). Finished: a finished run's resume."""
    found = holds_run(cfg.out_dir) if os.path.isdir(cfg.out_dir) else []
    if found and not (cfg.resume or cfg.overwrite):
        raise CliError(f"--out_dir={cfg.out_dir} holds another run ({', '.join(found)}); "
                       f"continue it with --resume or replace it with --overwrite")
    if cfg.resume and "config.json" not in found:
        raise CliError(f"--resume: --out_dir={cfg.out_dir} holds no run to resume")
    if cfg.overwrite and cfg.init_from and found and inside(cfg.init_from, cfg.out_dir):
        raise CliError(f"--overwrite would delete --init_from={cfg.init_from} before the run reads "
                       f"it; copy it out of --out_dir first")
    if cfg.resume:  # the saved config names the device the run was on ("cpu" or "cuda")
        cfg = resumed_config(cfg, given)
    device = dist_utils.resolve_device(cfg.device)
    if cfg.resume and "ckpt.pt" not in found and summary_of(cfg.out_dir):
        raise CliError(f"--resume: {cfg.out_dir} holds a finished run whose ckpt.pt is missing; "
                       f"resuming would start it again over its metrics.jsonl: put ckpt.pt "
                       f"back, or start again with --overwrite")
    if not (cfg.resume and "ckpt.pt" in found):
        return cfg, device, found, None, None
    where = f"--resume: {cfg.out_dir}/ckpt.pt"
    model, ck = checkpoint.load_checkpoint(os.path.join(cfg.out_dir, "ckpt.pt"), device)
    if "resume" not in ck:
        raise CliError(f"{where} holds no resume state")
    saved = ck["resume"]
    for st in saved["streams"]:  # the sampling generator lives on one device
        if checkpoint.is_cuda_generator_state(st["torch_gen"].cpu()) != (device == "cuda"):
            raise CliError(f"{where} was sampled on another device than this run's {device}, "
                           f"so its random streams cannot continue")
    same_task(cfg, ck, where)
    if saved["world"] != world:
        raise CliError(f"--resume: the run was trained by {saved['world']} process(es) and this "
                       f"is {world}; each process restores its own random streams, so resume "
                       f"with " + (f"torchrun --nproc_per_node={saved['world']}"
                                   if saved["world"] > 1 else "one process"))
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
    summary = summary_of(cfg.out_dir)
    if summary:  # no flag that sets the length may change: a finished run has no step left
        if dist_utils.env_world()[0] == 0:  # a writer at work is refused, as for any resume
            unlock(lock_run(cfg, found))
        raise Finished(cfg.out_dir, summary)
    return cfg, device, found, model, saved


def summary_of(out_dir):
    """The summary line of the run's metrics.jsonl (it reached its end), or None."""
    try:
        with open(os.path.join(out_dir, "metrics.jsonl"), "rb") as f:
            lines = [line for line in f if b'"phase": "summary"' in line]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def finished(out_dir):
    """Whether the run's metrics.jsonl holds its summary line (the run reached its end)."""
    return summary_of(out_dir) is not None


def check_saved_config(cfg, theirs, out_dir):
    """config.json (``cfg``) against the config ckpt.pt was written with (``theirs``), but
    KEEP and --device (kept as given: "auto"): a config.json edited by hand would continue
    the run under flags it was not trained with."""
    for name in (f.name for f in fields(Config) if f.name not in KEEP + ("device",)):
        mine, old = getattr(cfg, name), theirs.get(name, default_of(name, cfg.task))
        if name == "adv":  # "auto" is the objective's own estimator
            mine, old = (own_adv(cfg.loss) if v == "auto" else v for v in (mine, old))
        if mine != old:
            raise CliError(f"--resume: {out_dir}/config.json says {name}={flag_text(mine)}, "
                           f"but ckpt.pt was written with {name}={flag_text(old)}; put "
                           f"config.json back as it was")


def check_saved_optimizer(cfg, saved, out_dir):
    """The checkpoint's optimizer state against the optimizer the run would load it into:
    --optimizer at --lr in RL, SFT's AdamW at --sft_lr (as train.sft builds it) in SFT."""
    if saved["phase"] == "rl":
        lr, what = cfg.lr, f"--optimizer={cfg.optimizer}"
        build = lambda p: rl_optimizer(p, cfg.optimizer, cfg.lr)  # noqa: E731
    else:
        lr, what = cfg.sft_lr, "SFT's AdamW"
        build = lambda p: torch.optim.AdamW(p, lr=cfg.sft_lr, weight_decay=0.0)  # noqa: E731
    try:
        checkpoint.check_optimizer(saved["optimizer"], build, what)
    except ValueError as e:
        raise CliError(f"--resume: {out_dir}/ckpt.pt does not fit {what}: {e}") from None
    old = saved["optimizer"]["param_groups"][0]["lr"]
    if old != lr:
        raise CliError(f"--resume: {out_dir}/ckpt.pt's optimizer runs at lr {old:g}, the "
                       f"run's config at {lr:g}; put config.json back as it was")


def lock_run(cfg, found):
    """The last check before writing: an exclusive flock on --out_dir (made if needed), held
    until the process ends or ``unlock``; refused if another process holds it or the run
    files changed since ``open_run`` looked. Returns the locked file descriptor."""
    os.makedirs(cfg.out_dir, exist_ok=True)
    fd = os.open(cfg.out_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise CliError(f"--out_dir={cfg.out_dir} is being written by another process "
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
        with open("/proc/locks") as f:
            return next(f"pid {p[-4]}" for p in map(str.split, f) if "FLOCK" in p and p[-3] == ino)
    except (OSError, IndexError, StopIteration):
        return "pid unknown"


def start_writing(cfg, found, resolved, saved):
    """The first writes of a run (rank 0): clear stale temp files, replace the old
    run (--overwrite) or cut metrics.jsonl back to the checkpoint (--resume), write
    config.json (the resolved config: what actually runs) and print it."""
    checkpoint.clear_stale_temps(cfg.out_dir)
    for f in found if cfg.overwrite else ():
        os.remove(os.path.join(cfg.out_dir, f))
    os.makedirs(cfg.out_dir, exist_ok=True)
    if not cfg.resume:
        checkpoint.atomic_write_text(json.dumps(resolved, indent=1),
                                     os.path.join(cfg.out_dir, "config.json"))
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

    def __init__(self, cfg, model, master):
        self.cfg, self.model, self.master = cfg, model, master
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
            checkpoint.save_checkpoint(os.path.join(self.cfg.out_dir, name), self.model, self.cfg,
                                       state.phase, state.step,
                                       state.capture(opt, self.metrics.tell(), streams))

    def warm_start(self, step):
        """warm_start.pt: the end of SFT, the start of RL (and --beta's reference)."""
        if self.master:
            checkpoint.save_checkpoint(os.path.join(self.cfg.out_dir, "warm_start.pt"),
                                       self.model, self.cfg, "warm_start", step)

    def close(self):
        if self.master:
            self.metrics.close()


@dataclass
class Run:
    """What every phase of one run shares, made once by ``started``: the flags, the
    models, the task, the resumable state, the run folder, this process's place, and the
    lab's hooks (train.hooks_for sets them)."""
    cfg: object
    model: object                # what backward runs through: DDP-wrapped under torchrun
    unwrapped: object            # the plain module (no DDP wrapper): sampling,
                                 # evaluation, checkpoints
    task: object
    held_out: list               # evaluation problems, disjoint from training
    state: checkpoint.RunState   # step, random streams, running sums: what resume restores
    out: RunDir                  # metrics.jsonl and checkpoints (rank 0 writes)
    device: str
    rank: int
    world: int
    hooks: object = None
    decoder: object = None       # the sampler's fixed-shape decode step (GPU), or None
    sft_steps: int = 0           # SFT steps of the run (0 with --init_from)
    t0: float = field(default_factory=time.time)

    @property
    def master(self):  # rank 0 evaluates, logs and writes
        return self.rank == 0


@contextlib.contextmanager
def started(cfg, given=None):
    """The run of ``cfg``, ready for its phases: every check (``open_run``), the model (a
    new one, --init_from's or ckpt.pt's), the folder's lock, the process group, config.json,
    the problems and the random streams. On leaving, the lock and the process group go (a
    barrier first only after a clean run). Finished: a finished run's --resume."""
    # one process, or one of torchrun's: torchrun sets RANK, LOCAL_RANK, WORLD_SIZE
    rank, local_rank, world = dist_utils.env_world()
    dist_utils.check_world(cfg, world)
    # every check before anything is written; on --resume, the saved config, device and model
    cfg, device, found, model, saved = open_run(cfg, world, given)
    task = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad)
    # the same initial model on every rank: DDP assumes the replicas start equal
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    if model is None:  # else it is ckpt.pt's (--resume)
        cfg, model = initial_model(cfg, device, task)
    lock = lock_run(cfg, found) if rank == 0 else None  # the last check: one writer
    clean = False
    try:
        yield new_run(cfg, model, task, found, saved, rank, local_rank, world, device)
        clean = True
    finally:
        unlock(lock)
        dist_utils.teardown(clean=clean)


def initial_model(cfg, device, task=None):
    """A new model of --n_layer/--n_head/--n_embd, or --init_from's (whose sizes win); its
    block is 64 tokens, or what ``task``'s longest prompt and completion need if more."""
    if cfg.init_from:
        model, ck = checkpoint.load_checkpoint(cfg.init_from, device)
        return init_from_checks(cfg, model, ck), model
    # an untied output layer of N_OUT rows: the unembedding is a parameter of its own, so
    # the coupling of two tokens through it can be measured (lab/probes.py, THEORY.md 4)
    gpt = GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=cfg.n_layer,
                    n_head=cfg.n_head, n_embd=cfg.n_embd, block_size=max(
                        64, toy_tasks.longest_prompt(task) + task.max_new_tokens if task else 0))
    return cfg, GPT(gpt).to(device)


def new_run(cfg, model, task, found, saved, rank, local_rank, world, device):
    """After every check: join the process group, write config.json, and make the Run:
    the held-out problems and each rank's random streams."""
    model, unwrapped = dist_utils.wrap(model, cfg, device, local_rank, world)
    sft_steps = 0 if cfg.init_from else cfg.sft_steps
    resolved = dict(vars(cfg), device=device, task_name=task.name, params=unwrapped.num_params(),
                    sft_steps_run=sft_steps, torch=torch.__version__, world_size=world)
    if rank == 0:  # config.json: the run as it resolved (defaults, device, sizes, versions)
        start_writing(cfg, found, resolved, saved)
    held_out = toy_tasks.eval_problems(task, cfg.eval_size, cfg.seed)
    # every rank draws its own problems and samples: its own streams, seeded by rank
    state = checkpoint.RunState(
        problems=toy_tasks.train_sampler(task, held_out, cfg.seed + rank),
        sol_rng=random.Random(cfg.seed + 1 + rank),
        gen=torch.Generator(device=device).manual_seed(cfg.seed + rank),
        saved=saved,
    )
    return Run(cfg, model, unwrapped, task, held_out, state, RunDir(cfg, unwrapped, rank == 0),
               device, rank, world, decoder=fast_decode.for_run(cfg, device), sft_steps=sft_steps)
