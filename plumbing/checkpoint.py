"""checkpoint.py: atomic checkpoints, their schema, and what a run needs to resume exactly.

What it teaches
---------------
1. **An atomic write.** A checkpoint is first written to a temp file in the
   same folder (``ckpt.pt.tmp<pid>``); the file is flushed and ``fsync``-ed,
   so its bytes are on disk, and only then ``os.replace``-d over the old one.
   ``os.replace`` is atomic on one file system: a reader (or a run killed at
   any instant) sees either the old checkpoint or the new one, never half of
   one. The folder is fsync-ed as well, so that the rename itself survives a
   power cut. On any failure the temp file is removed; temp files that a
   killed process left behind are cleared when the next run starts. Every
   file the project writes goes this way (config.json, the experiments' JSON,
   figures: ``atomic_savefig``), and a full disk is one OSError naming the
   file and the bytes it needs (``no_space``): the earlier file stays whole.

2. **What a resumable state holds.** The weights alone restart a *different*
   run. To continue a run so that it is the same, to the bit, as one that
   was never stopped, a checkpoint must also hold everything that decides the
   next step:

   * the optimizer state (AdamW's moments and step counts);
   * the phase (``sft`` or ``rl``) and the last finished step;
   * every random state: the torch generator that samples rollouts and
     mini-batch cuts, torch's global generator, python's ``random``, the
     problem stream (toy_tasks.train_sampler's ``random.Random``) and the SFT
     solution generator, *of every rank*: under torchrun each process draws
     its own problems and samples, so rank 0 saves all ranks' streams
     (gathered) and each rank restores its own; ``world`` records how many;
   * running sums (the learning tax's ``tax_sum``, the last evaluation, the
     summary so far);
   * how many bytes of ``metrics.jsonl`` belong to it: lines written after the
     checkpoint are cut away on resume and written again, identically.

3. **Validation.** ``load_checkpoint`` checks the whole schema (keys, types,
   sizes against the task's block size and vocabulary, finite weights, and the
   resume state: step, world, every random stream, the sums, the optimizer's
   moments against the parameters' shapes) and turns each violation into one
   line (config.CliError) naming the field, so that a corrupt or foreign file
   never ends in a traceback, and a resume it refuses has changed nothing.
   ``check_optimizer`` compares a saved optimizer state with the optimizer
   the run would load it into (rundir.py calls it on --resume).
"""

import errno
import io
import os
import random
import re
import shutil
from dataclasses import dataclass, field
from typing import Callable

import torch

import toy_tasks
from plumbing.errors import CliError
from model import GPT, GPTConfig

KINDS = ("warm_start", "sft", "rl")
# the temp files of the atomic writes: checkpoints, JSON records and figures
TEMP = re.compile(r".+\.(pt|json|png|pdf|svg|jpg|jpeg)\.tmp(\d+)$")


# ----------------------------------------------------------------------------- atomic writes

def _atomic_write(path, mode, write):
    """Call write(f) on a temp file next to ``path``, flush and fsync it, os.replace
    it onto ``path``, then fsync the folder; the temp file never outlives a failure.
    A full disk is one OSError naming ``path`` and the space it needs (no_space):
    the earlier file is left as it was."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with _quiet():
            os.remove(tmp)
        # torch.save reports a failed write as a RuntimeError of its own, without the cause
        if isinstance(e, (OSError, RuntimeError)) and _disk_full(e, path, mode, write):
            raise no_space(path, _size(mode, write)) from None
        raise
    with _quiet():  # the rename is durable once the folder's entry is
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _size(mode, write):
    """Bytes that write(f) writes, measured in memory (None if it fails there too)."""
    buf = io.BytesIO() if "b" in mode else io.StringIO()
    try:
        write(buf)
    except Exception:
        return None
    data = buf.getvalue()
    return len(data if isinstance(data, bytes) else data.encode())


def _free(path):
    try:
        return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    except OSError:
        return 0


def _disk_full(e, path, mode, write):
    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    need = _size(mode, write)  # a RuntimeError of torch.save: full if its bytes do not fit
    return need is not None and need > _free(path)


def size_text(n):
    return f"{n} bytes" if n < 10 ** 4 else f"{n / 2 ** 20:.2f} MiB"


def no_space(path, need=None):
    """The OSError of a full disk: it names the path and, when known, the space needed."""
    free = _free(path)
    why = "No space left on device" + (
        f" (it needs {size_text(need)}, {size_text(free)} free)" if need is not None else "")
    return OSError(errno.ENOSPC, why, path)


def atomic_save(obj, path):
    """torch.save ``obj`` to ``path`` atomically: temp file, flush, fsync, os.replace."""
    _atomic_write(path, "wb", lambda f: torch.save(obj, f))


def atomic_write_text(text, path):
    """The same for a small text file (config.json, an experiment's JSON)."""
    _atomic_write(path, "w", lambda f: f.write(text))


def atomic_write_bytes(data, path):
    """The same for bytes (a figure, drawn into memory first)."""
    _atomic_write(path, "wb", lambda f: f.write(data))


def atomic_savefig(fig, path, **savefig):
    """A matplotlib figure's fig.savefig(path), atomically: drawn into memory, then
    written as above. A failed write (a full disk) leaves the earlier figure whole."""
    buf = io.BytesIO()
    fig.savefig(buf, format=os.path.splitext(path)[1].lstrip(".").lower() or "png", **savefig)
    atomic_write_bytes(buf.getvalue(), path)


def clear_stale_temps(folder):
    """Remove the temp files of atomic_save whose process is gone; return their names."""
    gone = []
    if not os.path.isdir(folder):
        return gone
    for name in sorted(os.listdir(folder)):
        m = TEMP.match(name)
        if m and not _alive(int(m.group(2))):
            with _quiet():
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
        return True
    return True


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, typ, e, tb):
        return typ is not None and issubclass(typ, OSError)


# ----------------------------------------------------------------------------- finite weights

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


# ----------------------------------------------------------------------------- save / load

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
    if state is not None:
        ck["resume"] = state
    atomic_save(ck, path)


def _need(ck, key, types, where="checkpoint"):
    if key not in ck:
        raise ValueError(f"{where} has no {key!r}")
    v = ck[key]
    if not isinstance(v, types) or (isinstance(v, bool) and types is not bool):
        raise ValueError(f"{where}[{key!r}] is a {type(ck[key]).__name__}")
    return ck[key]


def validate(ck):
    """Check the schema of a loaded checkpoint dict; raise ValueError (one line) on the
    first violation. Returns (GPTConfig, Task)."""
    if not isinstance(ck, dict):
        raise ValueError(f"it holds a {type(ck).__name__}, not a dict")
    kind = _need(ck, "kind", str)
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    if _need(ck, "step", int) < 0:
        raise ValueError(f"negative step {ck['step']}")
    if not isinstance(_need(ck, "config", dict).get("seed", 0), int):
        raise ValueError("config seed is not an integer")
    t = _need(ck, "task", dict)
    name, digits, pad = (_need(t, "task", str, "task"), _need(t, "digits", int, "task"),
                         _need(t, "scratchpad", bool, "task"))
    if name not in toy_tasks.TASKS or not 1 <= digits <= 20:
        raise ValueError(f"unknown task {name!r} with digits={digits}")
    task = toy_tasks.make_task(name, digits, pad)
    m = _need(ck, "model_cfg", dict)
    fields = GPTConfig.__dataclass_fields__
    if set(m) != set(fields):
        raise ValueError(f"model_cfg has keys {sorted(m)}, expected {sorted(fields)}")
    for k, v in m.items():
        if k == "dropout":
            if not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ValueError(f"model_cfg dropout={v!r}")
        elif not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 1 << 16:
            raise ValueError(f"model_cfg {k}={v!r} is not a size")
    mcfg = GPTConfig(**m)
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
    with torch.device("meta"):
        ref = GPT(mcfg).state_dict()
    if set(sd) != set(ref):
        extra, missing = sorted(set(sd) - set(ref)), sorted(set(ref) - set(sd))
        raise ValueError(
            f"weights {'missing ' + missing[0] if missing else 'unexpected ' + extra[0]}"
        )
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor) or v.shape != ref[k].shape or not v.is_floating_point():
            raise ValueError(f"weight {k} has shape {tuple(getattr(v, 'shape', ()))}, "
                             f"expected {tuple(ref[k].shape)}")
        if not bool(torch.isfinite(v).all()):
            raise ValueError(f"weight {k} is not finite")
    if "resume" in ck:
        validate_state(ck["resume"], mcfg)
    return mcfg, task


STREAMS = ("torch_gen", "torch_global", "python_random", "problems", "solutions")


def is_cuda_generator_state(v):
    """A CUDA generator's state: its seed and its offset, 8 bytes each (a CPU one's is
    the whole Mersenne Twister, about 5 KB)."""
    return v.dtype == torch.uint8 and v.shape == (16,)


def validate_state(s, model_cfg=None):
    """The resume state's schema: every field that ``RunState.restore`` and the
    loop read, with its type, and where a size is known, its size. ValueError
    names the first bad field."""
    if not isinstance(s, dict):
        raise ValueError("resume state is not a dict")
    phase = _need(s, "phase", str, "resume")
    if phase not in ("sft", "rl"):
        raise ValueError(f"resume phase {phase!r}")
    for k in ("step", "metrics_bytes", "world"):
        if _need(s, k, int, "resume") < (1 if k == "world" else 0):
            raise ValueError(f"resume {k}={s[k]} is out of range")
    streams = _need(s, "streams", list, "resume")
    if len(streams) != s["world"]:
        raise ValueError(f"resume streams: {len(streams)} for a world of {s['world']}")
    for r, st in enumerate(streams):
        where = f"resume streams[{r}]"
        if not isinstance(st, dict) or set(st) != set(STREAMS):
            raise ValueError(f"{where} does not hold {', '.join(STREAMS)}")
        for k in ("torch_gen", "torch_global"):  # a state of the wrong size or version fails here
            v = _need(st, k, torch.Tensor, where).cpu()
            if k == "torch_gen" and is_cuda_generator_state(v):  # a run sampled on a GPU
                continue
            try:
                torch.Generator().set_state(v)
            except (RuntimeError, TypeError):
                raise ValueError(f"{where}[{k!r}] is not a torch generator state") from None
        for k in ("python_random", "problems", "solutions"):
            try:
                random.Random().setstate(_tuples(_need(st, k, (tuple, list), where)))
            except (TypeError, ValueError):
                raise ValueError(f"{where}[{k!r}] is not a random.Random state") from None
    sums = _need(s, "sums", dict, "resume")
    # a run saved before the ledger existed resumes with its ledger counted from there on
    if not set(new_sums()) - LEDGER_SUMS <= set(sums) <= set(new_sums()):
        raise ValueError(f"resume sums has keys {sorted(sums)}, expected {sorted(new_sums())}")
    for k, v in sums.items():
        ok = (dict, type(None)) if k == "diag_ref" else (float, int, type(None))
        if not isinstance(v, ok) or isinstance(v, bool) or (isinstance(v, float) and v != v):
            raise ValueError(f"resume sums[{k!r}]={v!r}")
    _validate_optimizer(_need(s, "optimizer", dict, "resume"), model_cfg)


def _validate_optimizer(opt, model_cfg):
    """An optimizer's state_dict (AdamW here; SGD in some tests): one param group
    over every parameter, with a learning rate, and per parameter tensors that are
    either scalars (a step count) or of the parameter's shape (AdamW's moments)."""
    groups = _need(opt, "param_groups", list, "resume optimizer")
    state = _need(opt, "state", dict, "resume optimizer")
    if model_cfg is None:
        return
    with torch.device("meta"):
        shapes = [p.shape for p in GPT(model_cfg).parameters()]
    ids = [i for g in groups if isinstance(g, dict) for i in g.get("params", [])]
    if len(groups) != 1 or ids != list(range(len(shapes))):
        raise ValueError("resume optimizer param_groups do not cover this model's parameters")
    if not isinstance(groups[0].get("lr"), (float, int)):
        raise ValueError("resume optimizer param_groups[0] has no learning rate")
    for i, st in state.items():
        if not isinstance(i, int) or not 0 <= i < len(shapes) or not isinstance(st, dict):
            raise ValueError(f"resume optimizer state[{i!r}] is not a parameter's state")
        for k, v in st.items():
            if isinstance(v, torch.Tensor) and v.dim() and v.shape != shapes[i]:
                raise ValueError(f"resume optimizer state[{i}][{k!r}] has shape {tuple(v.shape)}, "
                                 f"not the parameter's {tuple(shapes[i])}")


def check_optimizer(saved, build, what):
    """A saved optimizer state_dict against the optimizer ``build(params)`` makes (``what``
    names it): the same hyperparameters in every param group (the learning rate aside:
    the run's config is compared with it), no key that optimizer lacks, and per parameter
    the state it keeps (AdamW: a step count and two moments; SGD with momentum: a buffer;
    plain SGD: nothing). Raises ValueError naming the first difference. Without this check
    another optimizer loads the state silently and fails at its first step (KeyError)."""
    p = torch.nn.Parameter(torch.zeros(1, device="cpu"))
    fresh = build([p])
    p.grad = torch.zeros(1, device="cpu")
    fresh.step()  # one step of a one-number parameter: the state this optimizer keeps
    ref = fresh.state_dict()
    want = {k: v for k, v in ref["param_groups"][0].items() if k not in ("params", "lr")}
    for g in saved["param_groups"]:
        for k, v in g.items():
            if k in ("params", "lr"):
                continue
            if k not in want:
                raise ValueError(f"its optimizer state has {k}={v!r}, which {what} does not have")
            if v != want[k]:
                raise ValueError(f"its optimizer state has {k}={v!r}, where {what} has "
                                 f"{want[k]!r}")
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
    try:
        ck = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # truncated, empty, foreign pickle
        raise CliError(f"checkpoint {path!r} is corrupt or not a checkpoint of this project "
                       f"({type(e).__name__})") from None
    try:
        mcfg, _ = validate(ck)
    except (ValueError, TypeError, KeyError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CliError(f"checkpoint {path!r} is corrupt or not a checkpoint of this project: "
                       f"{msg}") from None
    model = GPT(mcfg).to(device)
    model.load_state_dict(ck["model"])
    return model, ck


# ----------------------------------------------------------------------------- resume state

# the cancellation ledger's running sums (ledger.py): its mass and parts, the summed
# shared_dlogp, the number of RL steps they cover and of those with a mixed group
LEDGER_SUMS = frozenset({"ledger_mass", "ledger_cancelled", "ledger_credit", "ledger_weights",
                         "ledger_ratios", "ledger_split", "ledger_uncentred", "shared_dlogp_sum",
                         "ledger_steps", "ledger_mixed_steps"})


def new_sums():
    """The running sums of a run: the last evaluation, the warm start's accuracy, the
    mixed fraction at the start of RL (and its running sum), the learning tax so far, the summed
    exch_residual (the summary's mean), the warm start's diagnostics (the
    reference of drift), and the cancellation ledger's sums (LEDGER_SUMS)."""
    return {"acc0": None, "acc": None, "mixed_at_start": None, "mixed_start_sum": 0.0,
            "tax_sum": 0.0, "tax_interior_sum": 0.0,
            "exch_sum": 0.0, "diag_ref": None, **{k: 0.0 for k in sorted(LEDGER_SUMS)}}


@dataclass
class RunState:
    """Everything besides the weights that decides the steps after ``step`` of
    ``phase`` (see the docstring): the random streams, the running sums, and the
    saved state a resumed run starts from (None for a new run)."""
    draw: Callable           # toy_tasks.train_sampler: the problem stream (draw.rng)
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
                "python_random": random.getstate(), "problems": self.draw.rng.getstate(),
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
        self.draw.rng.setstate(_tuples(st["problems"]))
        self.sol_rng.setstate(_tuples(st["solutions"]))
        self.sums = dict(new_sums(), **s["sums"])


def _tuples(x):
    """random.setstate wants tuples all the way down."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x
