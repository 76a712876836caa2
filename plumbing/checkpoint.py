"""checkpoint.py: atomic checkpoints, and what a run needs to resume exactly.

What it teaches
---------------
1. **An atomic write.** A file is first written to a temp file in the same folder
   (``ckpt.pt.tmp<pid>``), flushed and ``fsync``-ed, and only then ``os.replace``-d
   over the old one: a reader, or a run killed at any instant, sees the old file or
   the new one, never half of one. Every file the project writes goes this way, and a
   full disk is one OSError naming the file and the bytes it needs (``no_space``).
2. **What a resumable state holds.** The weights alone restart a *different* run. To
   continue one so that it is the same, to the bit, a checkpoint also holds the
   optimizer state, the phase and last step, every random stream of every rank (the
   rollouts' generator, torch's and python's global ones, the problem stream, the SFT
   teacher's), the running sums, and how many bytes of metrics.jsonl belong to it.
3. **Validation.** ``load_checkpoint`` turns a corrupt or foreign file into one line
   naming the field: torch's ``load_state_dict(strict=True)`` checks the weights' keys
   and shapes; the rest (sizes, random states, the optimizer's moments) is checked here
   by trying each on a throwaway copy, so a refused resume has changed nothing.
"""

import contextlib
import errno
import io
import os
import random
import re
import shutil
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

import toy_tasks
from model import GPT, GPTConfig
from plumbing.errors import CliError

KINDS = ("warm_start", "sft", "rl")
# the temp files of the atomic writes: checkpoints, JSON records and figures
TEMP = re.compile(r".+\.(pt|json|png|pdf|svg|jpg|jpeg)\.tmp(\d+)$")


# ----------------------------------------------------------------------------- atomic writes

def _atomic_write(path, mode, write):
    """write(f) on a temp file next to ``path``, flushed, fsync-ed and os.replace-d onto
    ``path``, then the folder fsync-ed; the temp file never outlives a failure."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if interrupted(e):  # Ctrl-C inside torch's writer surfaces as a RuntimeError of its own
            raise KeyboardInterrupt from None
        # torch.save reports a failed write as a RuntimeError of its own, without the cause
        need = _size(mode, write) if isinstance(e, (OSError, RuntimeError)) else None
        if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or (
                isinstance(e, RuntimeError) and need is not None and need > _free(path)):
            raise no_space(path, need) from None
        raise
    with contextlib.suppress(OSError):  # the rename is durable once the folder's entry is
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def interrupted(e):
    """Whether ``e`` is, or was raised while handling, a KeyboardInterrupt (Ctrl-C)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _size(mode, write):
    """Bytes that write(f) writes, measured in memory (None if it fails there too)."""
    buf = io.BytesIO() if "b" in mode else io.StringIO()
    try:
        write(buf)
    except Exception:
        return None
    return len(buf.getvalue() if "b" in mode else buf.getvalue().encode())


def _free(path):
    with contextlib.suppress(OSError):
        return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    return 0


def size_text(n):
    return f"{n} bytes" if n < 10 ** 4 else f"{n / 2 ** 20:.2f} MiB"


def no_space(path, need=None):
    """The OSError of a full disk: it names the path and, when known, the space needed."""
    why = "No space left on device" + (
        f" (it needs {size_text(need)}, {size_text(_free(path))} free)" if need else "")
    return OSError(errno.ENOSPC, why, path)


def atomic_save(obj, path):  # torch.save, atomically
    _atomic_write(path, "wb", lambda f: torch.save(obj, f))


def atomic_write_text(text, path):  # a small text file: config.json, an experiment's JSON
    _atomic_write(path, "w", lambda f: f.write(text))


def atomic_write_bytes(data, path):  # bytes: a figure, drawn into memory first
    _atomic_write(path, "wb", lambda f: f.write(data))


def clear_stale_temps(folder):
    """Remove the temp files of the atomic writes whose process is gone; return their names."""
    gone = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        m = TEMP.match(name)
        if m and not _alive(int(m.group(2))):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, name))
                gone.append(name)
    return gone


def _alive(pid):
    if pid == os.getpid():
        return False  # ours, from an earlier attempt of this very process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        pass
    return True


# ----------------------------------------------------------------------------- save / load

def non_finite(model):
    """Name of the first parameter with a NaN or inf, or None. One read back for the whole
    model (a read per parameter would make a GPU wait per parameter)."""
    named = list(model.named_parameters())
    finite = torch.stack([torch.isfinite(p).all() for _, p in named]).tolist()
    return next((name for (name, _), ok in zip(named, finite) if not ok), None)


def check_finite(model, where):
    """Raise FloatingPointError naming ``where`` (phase and step) if a weight is not finite."""
    bad = non_finite(model)
    if bad is not None:
        raise FloatingPointError(f"{where}: weight {bad} is not finite; the run diverged "
                                 f"(try a smaller learning rate)")


def save_checkpoint(path, model, cfg, kind, step, state=None):
    """Weights, model sizes, task and config (and, if given, a resume state), atomically.
    Refuses non-finite weights: the last good checkpoint stays."""
    bad = non_finite(model)
    if bad is not None:
        raise FloatingPointError(f"{kind} step {step}: weight {bad} is not finite; "
                                 f"{os.path.basename(path)} not written")
    ck = {"kind": kind, "step": step, "model_cfg": vars(model.cfg),
          "task": {"task": cfg.task, "digits": cfg.digits, "scratchpad": cfg.scratchpad},
          "model": model.state_dict(), "config": vars(cfg)}
    atomic_save(ck if state is None else dict(ck, resume=state), path)


def _need(d, key, types, where="checkpoint"):
    """d[key], of one of ``types`` (a bool is no int here), or a ValueError naming it."""
    if key not in d:
        raise ValueError(f"{where} has no {key!r}")
    if not isinstance(d[key], types) or (isinstance(d[key], bool) and types is not bool):
        raise ValueError(f"{where}[{key!r}] is a {type(d[key]).__name__}")
    return d[key]


def build(ck, device="cpu"):
    """The model of a loaded checkpoint dict, every field checked: ValueError (one line)
    on the first violation. The sizes are checked before anything is allocated."""
    if not isinstance(ck, dict):
        raise ValueError(f"it holds a {type(ck).__name__}, not a dict")
    if _need(ck, "kind", str) not in KINDS:
        raise ValueError(f"unknown kind {ck['kind']!r}")
    if _need(ck, "step", int) < 0:
        raise ValueError(f"negative step {ck['step']}")
    if not isinstance(_need(ck, "config", dict).get("seed", 0), int):
        raise ValueError("config seed is not an integer")
    t = _need(ck, "task", dict)
    name, digits = _need(t, "task", str, "task"), _need(t, "digits", int, "task")
    if name not in toy_tasks.TASKS or not 1 <= digits <= 20:
        raise ValueError(f"unknown task {name!r} with digits={digits}")
    task = toy_tasks.make_task(name, digits, _need(t, "scratchpad", bool, "task"))
    m = _need(ck, "model_cfg", dict)
    for k, v in m.items():  # GPTConfig's own check: unknown or missing keys (TypeError)
        if k != "dropout" and not (type(v) is int and 1 <= v <= 1 << 16):
            raise ValueError(f"model_cfg {k}={v!r} is not a size")
    mcfg = GPTConfig(**m)
    if not 0 <= mcfg.dropout < 1:
        raise ValueError(f"model_cfg dropout={mcfg.dropout!r}")
    if (mcfg.vocab_size, mcfg.n_out) != (toy_tasks.VOCAB_SIZE, toy_tasks.N_OUT):
        raise ValueError(f"vocabulary {mcfg.vocab_size}/{mcfg.n_out} is not this tokenizer's "
                         f"{toy_tasks.VOCAB_SIZE}/{toy_tasks.N_OUT}")
    if mcfg.n_embd % mcfg.n_head:
        raise ValueError(f"n_embd={mcfg.n_embd} is not divisible by n_head={mcfg.n_head}")
    need = toy_tasks.longest_prompt(task) + task.max_new_tokens
    if need > mcfg.block_size:
        raise ValueError(f"block_size={mcfg.block_size} is too short for task {task.name} "
                         f"(needs {need})")
    sd = _need(ck, "model", dict)
    try:  # torch's check (every key, no other, each of its parameter's shape) on a model
        with torch.device("meta"), warnings.catch_warnings():  # that holds no memory
            warnings.simplefilter("ignore")  # (copying into it does nothing, and says so)
            GPT(mcfg).load_state_dict(sd)
    except RuntimeError as e:  # its first line names no key; the second does
        raise ValueError((str(e).splitlines()[1:] or [str(e)])[0].strip()) from None
    model = GPT(mcfg).to(device)
    model.load_state_dict(sd)
    if non_finite(model):
        raise ValueError(f"weight {non_finite(model)} is not finite")
    if "resume" in ck:
        validate_state(ck["resume"], [p.shape for p in model.parameters()])
    return model


STREAMS = ("torch_gen", "torch_global", "python_random", "problems", "solutions")


def is_cuda_generator_state(v):
    """A CUDA generator's state: its seed and its offset, 8 bytes each (a CPU one's is
    the whole Mersenne Twister, about 5 KB)."""
    return v.dtype == torch.uint8 and v.shape == (16,)


def validate_state(s, shapes=None):
    """The resume state's schema: every field ``RunState.restore`` and the loop read.
    Each random state is tried on a throwaway generator; ValueError names the field."""
    if not isinstance(s, dict):
        raise ValueError("resume state is not a dict")
    if _need(s, "phase", str, "resume") not in ("sft", "rl"):
        raise ValueError(f"resume phase {s['phase']!r}")
    for k in ("step", "metrics_bytes", "world"):
        if _need(s, k, int, "resume") < (k == "world"):
            raise ValueError(f"resume {k}={s[k]} is out of range")
    if len(_need(s, "streams", list, "resume")) != s["world"]:
        raise ValueError(f"resume streams: {len(s['streams'])} for a world of {s['world']}")
    for r, st in enumerate(s["streams"]):
        where = f"resume streams[{r}]"
        if not isinstance(st, dict) or set(st) != set(STREAMS):
            raise ValueError(f"{where} does not hold {', '.join(STREAMS)}")
        for k in STREAMS:
            try:
                if k in ("torch_gen", "torch_global"):  # a GPU's (16 bytes) is tried there
                    v = _need(st, k, torch.Tensor, where).cpu()
                    if k == "torch_global" or not is_cuda_generator_state(v):
                        torch.Generator().set_state(v)
                else:
                    random.Random().setstate(_tuples(_need(st, k, (tuple, list), where)))
            except (RuntimeError, TypeError, ValueError):
                raise ValueError(f"{where}[{k!r}] is not a random state") from None
    sums = _need(s, "sums", dict, "resume")
    if not set(new_sums()) <= set(sums):  # the run's own; others' are theirs to check
        raise ValueError(f"resume sums has keys {sorted(sums)}, expected {sorted(new_sums())}")
    for k, v in sums.items():  # numbers, or a dict of them (a reference), or None
        ok = (dict, float, int, type(None))
        if not isinstance(v, ok) or isinstance(v, bool) or (isinstance(v, float) and v != v):
            raise ValueError(f"resume sums[{k!r}]={v!r}")
    opt = _need(s, "optimizer", dict, "resume")
    groups, state = (_need(opt, k, t, "resume optimizer")
                     for k, t in (("param_groups", list), ("state", dict)))
    if shapes is None:
        return
    ids = [i for g in groups if isinstance(g, dict) for i in g.get("params", [])]
    if len(groups) != 1 or ids != list(range(len(shapes))):
        raise ValueError("resume optimizer param_groups do not cover this model's parameters")
    if not isinstance(groups[0].get("lr"), (float, int)):
        raise ValueError("resume optimizer param_groups[0] has no learning rate")
    for i, st in state.items():  # a step count, or a moment of its parameter's shape
        if not isinstance(i, int) or not 0 <= i < len(shapes) or not isinstance(st, dict):
            raise ValueError(f"resume optimizer state[{i!r}] is not a parameter's state")
        for k, v in st.items():
            if isinstance(v, torch.Tensor) and v.dim() and v.shape != shapes[i]:
                raise ValueError(f"resume optimizer state[{i}][{k!r}] has shape "
                                 f"{tuple(v.shape)}, not the parameter's {tuple(shapes[i])}")


def check_optimizer(saved, build, what):
    """A saved optimizer state_dict against the optimizer ``build(params)`` makes (``what``):
    the same hyperparameters (lr aside) and per parameter the state it keeps (AdamW: a step
    and two moments; SGD: a buffer or nothing). ValueError names the first difference:
    another optimizer would load it silently and fail at its first step."""
    p = torch.nn.Parameter(torch.zeros(1, device="cpu"))
    fresh = build([p])
    p.grad = torch.zeros(1, device="cpu")
    fresh.step()  # one step of a one-number parameter: the state this optimizer keeps
    ref = fresh.state_dict()
    want = {k: v for k, v in ref["param_groups"][0].items() if k not in ("params", "lr")}
    for k, v in ((k, v) for g in saved["param_groups"] for k, v in g.items()
                 if k not in ("params", "lr")):
        if k not in want:
            raise ValueError(f"its optimizer state has {k}={v!r}, which {what} does not have")
        if v != want[k]:
            raise ValueError(f"its optimizer state has {k}={v!r}, where {what} has {want[k]!r}")
    keys = set(ref["state"].get(0, {}))
    for i, st in saved["state"].items():
        if set(st) != keys:
            raise ValueError(f"its optimizer state[{i}] holds {sorted(st) or 'nothing'}, "
                             f"where {what} keeps {sorted(keys) or 'nothing'}")


def load_checkpoint(path, device="cpu"):
    """Load and validate a checkpoint -> (model, dict); raise CliError with one line if bad."""
    if not path:
        raise CliError("checkpoint path is empty")
    if os.path.isdir(path):
        raise CliError(f"checkpoint {path!r} is a folder, not a file")
    if not os.path.isfile(path):
        raise CliError(f"checkpoint {path!r} does not exist")
    bad = f"checkpoint {path!r} is corrupt or not a checkpoint of this project"
    try:
        ck = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # truncated, empty, foreign pickle
        raise CliError(f"{bad} ({type(e).__name__})") from None
    try:
        return build(ck, device), ck
    except (ValueError, TypeError, KeyError) as e:
        raise CliError(f"{bad}: {(str(e) or type(e).__name__).splitlines()[0]}") from None


# ----------------------------------------------------------------------------- resume state

def new_sums():
    """The running sums of a run: the last evaluation and the warm start's, and the mixed
    fraction at the start of RL. Whoever else keeps a running sum (the lab's instruments)
    adds its own keys; the checkpoint saves and restores them all alike."""
    return {"acc0": None, "acc": None, "mixed_at_start": None, "mixed_start_sum": 0.0}


@dataclass
class RunState:
    """Everything besides the weights that decides the steps after ``step`` of
    ``phase``: the random streams, the running sums, and the saved state a resumed
    run starts from (None for a new run)."""
    problems: Callable       # toy_tasks.train_sampler: the problem stream (its .rng)
    sol_rng: random.Random   # SFT: which teacher writes each solution
    gen: torch.Generator     # rollouts and mini-batch cuts
    saved: dict = None       # ckpt.pt's "resume" entry, put back by restore()
    phase: str = "sft"
    step: int = 0            # the last finished step of phase
    sums: dict = field(default_factory=new_sums)

    def __post_init__(self):
        if self.saved is not None:
            self.phase, self.step = self.saved["phase"], self.saved["step"]

    def streams(self):
        """This rank's random streams (each rank draws its own problems and samples)."""
        return {"torch_gen": self.gen.get_state(), "torch_global": torch.get_rng_state(),
                "python_random": random.getstate(), "problems": self.problems.rng.getstate(),
                "solutions": self.sol_rng.getstate()}

    def capture(self, opt, metrics_bytes, streams):
        """The state after ``self.step``, as a dict of tensors and plain values;
        ``streams``: every rank's ``streams()``, in rank order."""
        return {"phase": self.phase, "step": self.step, "optimizer": opt.state_dict(),
                "world": len(streams), "streams": streams,
                "sums": dict(self.sums), "metrics_bytes": metrics_bytes}

    def restore(self, opt, rank=0):
        """Put the saved state back into the optimizer, this rank's random streams and the sums."""
        s, st = self.saved, self.saved["streams"][rank]
        opt.load_state_dict(s["optimizer"])
        self.gen.set_state(st["torch_gen"].cpu())
        torch.set_rng_state(st["torch_global"].cpu())
        random.setstate(_tuples(st["python_random"]))
        self.problems.rng.setstate(_tuples(st["problems"]))
        self.sol_rng.setstate(_tuples(st["solutions"]))
        self.sums = dict(self.sums, **s["sums"])  # a sum the run did not save starts at 0


def _tuples(x):
    """random.setstate wants tuples all the way down."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x
