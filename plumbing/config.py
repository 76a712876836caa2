"""config.py: every flag of train.py, with its default and meaning, and its checks.

Flags are ``--key=value`` (as in nanoGPT's configurator and TRL's scripts): one
dataclass field each, parsed by argparse. A bad flag, value or combination exits
with one line on stderr and status 2, before anything is written.

The lab owns some flags' names and rules (--loss, --adv, --agg, --kl_loss_type: its
catalogue of objectives). This folder imports nothing of the lab: the lab fills the
registries below when it is imported (lab/checks.py), and ``validate`` runs them. Until
then the lesson's own names stand (loss.LOSSES, loss.ADVANTAGES; --adv=auto is
loss.OWN_ADV), and ``needs_lab`` says whether a run's flags turn the lab on.
"""

import argparse
import dataclasses
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, fields

import batching
import loss
import model
import toy_tasks
from plumbing.errors import CliError

# ----------------------------------------------------------------------------- the lab's part
# flag -> the names it takes (a live registry: --help reads it each time): the lesson's,
# and the lab's catalogue once it is imported
CHOICES = {"loss": loss.LOSSES, "adv": loss.ADVANTAGES}
IMPLIED = []  # fn(values) -> {flag: value}: what a --loss implies for flags not given
CHECKS = []   # fn(cfg), raising CliError: the objectives' own rules, run by validate
# the flags only the lab reads (its catalogue's switches, its diagnostics): one of them
# given turns the lab on (``needs_lab``), as does an objective loss.py does not hold
LAB_FLAGS = ("agg", "dual_clip", "beta", "kl_loss_type", "entropy_coef", "dro_beta",
             "top_entropy_quantile", "off_policy_mask_threshold", "diagnostics", "pass_k",
             "permute_rewards")


def _f(default, help, choices=None):
    """A flag: its default, its help, and (a function giving) the names it accepts,
    read from the registry each time --help is printed."""
    return field(default=default, metadata={"help": help, "choices": choices})


def help_text(f):
    """A flag's help, with its choices filled in from their registry ("{choices}")."""
    choices = f.metadata.get("choices") or (lambda: CHOICES.get(f.name, ()))
    return f.metadata.get("help", "").replace("{choices}", " | ".join(choices()))


@dataclass
class Config:
    # Defaults for every task. A task's own (TASK_DEFAULTS below) replace them where the command
    # line does not set the flag: `python train.py` (add, the demo) runs scratchpad=True,
    # sft_steps=400 and rl_steps=100; --help shows the defaults of the --task it is given.
    # task
    task: str = _f("add", "task: {choices} (toy_tasks.py; chain and parity_*: lab/testbeds.py)",
                   lambda: toy_tasks.TASKS)
    digits: int = _f(2, "operand digits for add and mul")
    scratchpad: bool = _f(False, "work the columns / partial products before the answer")
    # model
    n_layer: int = _f(4, "transformer blocks")
    n_head: int = _f(4, "attention heads")
    n_embd: int = _f(128, "model width")
    # phase 1: SFT warm start
    sft_steps: int = _f(1000, "SFT steps on canonical solutions (skipped with --init_from)")
    sft_batch: int = _f(64, "SFT batch size")
    sft_lr: float = _f(1e-3, "SFT learning rate (AdamW)")
    sft_flawed: float = _f(0.7, "fraction of SFT solutions written by a flawed teacher "
                           "(e.g. one who forgets carries)")
    # phase 2: RL
    rl_steps: int = _f(600, "RL steps (rollout batches)")
    prompts_per_step: int = _f(16, "B: prompts per rollout batch")
    group_size: int = _f(8, "G: completions per prompt")
    temperature: float = _f(1.0, "sampling temperature (the loss uses the same)")
    top_k: int = _f(0, "sample from the top k tokens only (0: off)")
    lr: float = _f(1e-4, "RL learning rate")
    optimizer: str = _f("adamw", "RL optimizer: {choices}", lambda: [
        f"{name} ({what})" for name, (what, _) in model.OPTIMIZERS.items()])
    grad_clip: float = _f(1.0, "gradient-norm clip")
    loss: str = _f("grpo", "objective: {choices} (loss.py, lab/objectives.py)")
    adv: str = _f("auto", "advantage estimator: auto (the --loss's own) | {choices} "
                  "(lab/estimators.py)")
    agg: str = _f("auto", "token aggregation (verl loss_agg_mode): auto (the --loss's own) | "
                  "{choices}")
    clip: str = _f("sym", "ratio clip: {choices}", lambda: [
        f"{name} ({what})" if name != "none" else name for name, what in loss.CLIPS.items()])
    clip_low: float = _f(0.2, "lower clip epsilon (and both sides with --clip=sym)")
    clip_high: float = _f(0.28, "upper clip epsilon with --clip=higher")
    dual_clip: float = _f(0.0, "C > 1: A<0 tokens with ratio > C lose their gradient "
                          "(verl clip_ratio_c; 0: off)")
    beta: float = _f(0.0, "KL penalty towards the frozen warm start (TRL beta, verl "
                     "kl_loss_coef; 0: off)")
    kl_loss_type: str = _f("k3", "--beta's KL estimator (verl kl_loss_type): {choices} "
                           "(+: k2's gradient)")
    entropy_coef: float = _f(0.0, "minus this times the mean token entropy (0: off)")
    dro_beta: float = _f(0.0, "--loss=dro's quadratic log-ratio coefficient (verl "
                         "policy_loss.dro_beta; required)")
    top_entropy_quantile: float = _f(1.0, "q < 1: only the top q of each micro-batch's tokens "
                                     "by entropy keep their gradient (TRL; 1: all)")
    off_policy_mask_threshold: float = _f(0.0, "d > 0: A<0 sequences with mean log(pi_old/pi) "
                                          "> d lose their gradient (TRL; 0: off)")
    batching: str = _f("shuffle", "mini-batch scheduler: {choices} (batching.py)",
                       lambda: batching.SCHEDULERS)
    minibatches: int = _f(1, "M: optimizer steps per rollout batch and epoch")
    epochs: int = _f(1, "passes over each rollout batch")
    micro_batch: int = _f(0, "K >= 1: rollouts per micro-batch, gradients accumulate into one "
                          "optimizer step (left out: each mini-batch's share in one pass)")
    norm: str = _f("global", "denominators of a step: global (the whole mini-batch's, however "
                   "it is split) | local (each micro-batch's and process's own: a lesson, not "
                   "a recommendation)")
    # run
    seed: int = _f(0, "seed of problems, init and sampling (CPU runs are reproducible)")
    device: str = _f("auto", "auto | cpu | cuda")
    bf16: str = _f("auto", "bf16 autocast: auto (on with cuda) | true | false")
    compile: bool = _f(False, "torch.compile the model's forward pass")
    static_decode: str = _f("auto", "decode with fixed shapes, replayed as a CUDA graph: auto (on "
                            "with cuda) | true | false (plumbing/fast_decode.py)")
    out_dir: str = _f("out", "where config.json, metrics.jsonl and checkpoints go")
    resume: bool = _f(False, "continue the run in --out_dir from its last checkpoint (ckpt.pt)")
    overwrite: bool = _f(False, "replace the run in --out_dir (its files are deleted)")
    ckpt_every: int = _f(50, "steps between checkpoints (SFT and RL; also at each phase's end)")
    init_from: str = _f("", "start from this checkpoint (skips SFT)")
    eval_every: int = _f(50, "RL steps between held-out evaluations")
    eval_size: int = _f(256, "held-out problems (disjoint from training, fixed by seed)")
    permute_rewards: bool = _f(False, "null-reward control: shuffle each group's rewards across "
                               "its rollouts before the advantages (same rewards, none earned "
                               "by its own rollout)")
    instruments: bool = _f(True, "measure cancellation in every RL step: the ledger, residuals "
                           "and learning tax (lab/instruments.py; false: the plain loop, no "
                           "extra pass)")
    motion_every: int = _f(4, "the motion ledger (lab/motion.py): what moved the group-shared "
                           "tokens, in RL steps 1, 1 + this, ... (0: never; off without "
                           "--instruments)")
    diagnostics: bool = _f(False, "also log answer drift, entropy and pass@k at evaluations "
                           "(lab/diagnostics.py)")
    pass_k: int = _f(4, "k of pass@k with --diagnostics (from 2k samples per problem)")

    def __post_init__(self):  # --adv=auto resolved (and logged): the --loss's own (loss.py)
        if self.adv == "auto":
            self.adv = loss.OWN_ADV.get(self.loss, "auto")


# --help shows Config's flags in these groups, in this order. A flag that is in
# no group is still shown, under "other", so a new flag is never hidden.
GROUPS = {title: names.split() for title, names in {
    "task": "task digits scratchpad",
    "model": "n_layer n_head n_embd",
    "SFT warm start": "sft_steps sft_batch sft_lr sft_flawed",
    "RL": "rl_steps prompts_per_step group_size temperature top_k lr optimizer grad_clip "
          "permute_rewards",
    "objective": "loss adv agg clip clip_low clip_high dual_clip beta kl_loss_type entropy_coef "
                 "dro_beta top_entropy_quantile off_policy_mask_threshold",
    "schedule (mini-batches, micro-batches, processes)": "batching minibatches epochs "
                                                         "micro_batch norm",
    "the lab's measures and evaluation": "instruments motion_every diagnostics pass_k "
                                       "eval_every eval_size",
    "run": "seed device bf16 compile static_decode out_dir init_from resume overwrite "
           "ckpt_every",
}.items()}

EXAMPLES = """examples:
  python train.py                                        # the demo: SFT warm start, then GRPO
  python train.py --loss=dfpo_orth --minibatches=4 --epochs=2 --batching=query
  python train.py --task=chain --diagnostics --out_dir=out-chain && python -m lab.plot out-chain"""


def usage(cls, doc="", groups=None, examples="", defaults=None):
    """The --help text: the doc's first line, the flags by group with the defaults
    they run with (``defaults`` overrides the dataclass's, e.g. a task's), examples."""
    by_name, defaults, groups = {f.name: f for f in fields(cls)}, defaults or {}, groups or {}
    grouped = {n for names in groups.values() for n in names}
    sections = [(t, [n for n in names if n in by_name]) for t, names in groups.items()]
    sections.append(("other" if groups else "flags", [n for n in by_name if n not in grouped]))
    lines = [doc.strip().splitlines()[0] if doc else ""]
    for title, names in (s for s in sections if s[1]):
        lines += ["", f"{title}:"] + [
            f"  {'--' + n + '=' + str(defaults.get(n, by_name[n].default)):<28} "
            f"{help_text(by_name[n])}" for n in names]
    bools = sorted((f.name for f in fields(cls) if f.type is bool),
                   key=lambda n: n != "diagnostics")
    lines += ["", "flags are --key=value"
              + (f"; a bool flag alone (--{bools[0]}) means true" if bools else "")]
    return "\n".join(lines + (["", examples] if examples else []))


# ----------------------------------------------------------------------------- parsing

class Parser(argparse.ArgumentParser):
    """argparse, with its usage-and-message exit turned into the project's one line."""

    def error(self, message):
        flag, _, why = message.removeprefix("argument ").partition(": ")
        if why == "expected one argument":
            why = f"needs a value: {flag}=VALUE"
        raise CliError(f"{flag} {why}")


BOOLS = {"1": True, "true": True, "yes": True, "on": True,
         "0": False, "false": False, "no": False, "off": False}


def _typed(typ):
    """argparse's type= for a field: a bool reads true/false, a number says what it takes."""
    def convert(raw):
        try:
            return BOOLS[raw.lower()] if typ is bool else typ(raw)
        except (KeyError, ValueError):
            what = {bool: "true or false", int: "an integer", float: "a number"}[typ]
            raise argparse.ArgumentTypeError(f"takes {what}, got {raw!r}") from None
    return convert


def parser(cls):
    """One --key=value option per field; a flag not given is absent from the result
    (SUPPRESS), so the result is exactly what the command line says."""
    p = Parser(add_help=False, allow_abbrev=False, argument_default=argparse.SUPPRESS)
    for f in fields(cls):
        p.add_argument("--" + f.name, type=_typed(f.type), **(
            {"nargs": "?", "const": True} if f.type is bool else {}))  # --flag alone: true
    return p


def once(argv):
    """argv, checked that it gives no flag twice (CliError): on a command line the last one
    would win without a word. (A list built in code may override a flag by appending it.)"""
    keys = [a[2:].partition("=")[0] for a in argv if a.startswith("--")]
    for key in keys:
        if keys.count(key) > 1:
            raise CliError(f"--{key} is given twice; give it once")
    return argv


def given_flags(argv, cls=Config):
    """{name: value} of the flags written on the command line (``--resume`` compares
    exactly these with the saved run, whatever their defaults); a flag given twice is
    refused (``once``)."""
    return vars(parser(cls).parse_known_args(once(argv))[0])


def needs_lab(values):
    """Whether a run turns the lab on: its instruments (--instruments, the default), a
    --loss or --adv loss.py does not hold, or a flag only the lab reads (LAB_FLAGS).
    ``values``: a Config (a lab flag counts where it is not its default), or {name: value}
    of the flags given (a lab flag counts where it is given)."""
    v = values if isinstance(values, dict) else {
        k: x for k, x in vars(values).items() if k not in LAB_FLAGS or x != getattr(Config, k)}
    return (v.get("instruments", Config.instruments) or any(k in v for k in LAB_FLAGS)
            or any(v.get(k, "auto") not in loss.LESSON | {"auto"} for k in ("loss", "adv")))


def asks_help(argv):
    return any(a in ("-h", "--help") for a in argv)


def lab_wanted(argv):
    """Whether a command line turns the lab on (needs_lab of its flags); --help does too,
    since it lists the lab's choices (the lesson's alone without lab/)."""
    if asks_help(argv):
        return True
    given = vars(parser(Config).parse_known_args(argv)[0])
    return needs_lab(given) or given.get("task", Config.task) not in toy_tasks.LESSON


def parse_args(argv, cls=Config, doc="", check=True):
    """--key=value flags -> a Config. --help prints every flag and exits 0."""
    if asks_help(argv):  # --task=chain --help: chain's defaults
        task = next((a.partition("=")[2] for a in argv if a.startswith("--task=")), Config.task)
        print(usage(cls, doc) if cls is not Config else usage(
            cls, doc, GROUPS, EXAMPLES, TASK_DEFAULTS.get(task))
            + (f"\n\ndefaults shown for --task={task}" if task in TASK_DEFAULTS else ""))
        sys.exit(0)
    ns, extra = parser(cls).parse_known_args(argv)
    for a in extra:
        if a.startswith("--"):
            raise CliError(f"unknown flag --{a[2:].partition('=')[0]} (see --help)")
        raise CliError(f"unexpected argument {a!r}; flags look like --key=value (see --help)")
    values = vars(ns)
    if cls is Config:
        task = values.get("task", Config.task)
        for key in TASK_FLAGS_UNUSED.get(task, ()):
            if key in values:
                raise CliError(f"--{key} does not apply to --task={task}")
        values = {**TASK_DEFAULTS.get(task, {}), **values}  # flags given win over task defaults
        for implied in IMPLIED:  # e.g. --clip=none for an objective without a clip
            values = {**implied(values), **values}
        if values.get("micro_batch", 1) < 1:
            raise CliError(f"--micro_batch must be at least 1, got {values['micro_batch']} "
                           f"(leave it out to take each mini-batch in one pass)")
    cfg = cls(**values)
    if check:
        validate(cfg)
    return cfg


# Defaults that differ by task: the values `python train.py --task=NAME` runs with
# unless a flag says otherwise. add's scratchpad makes SFT learn the columns
# without the late, CPU-dependent drop in loss of the bare answer (docs/NOTES.md and
# results/README.md: how they were chosen).
TASK_DEFAULTS = {
    "add": {"scratchpad": True, "sft_steps": 400, "rl_steps": 100},  # the demo
}  # the lab's testbeds add theirs (lab/testbeds.py)


def default_of(name, task):
    """The value flag ``name`` takes when not given, for ``--task=task``."""
    return TASK_DEFAULTS.get(task, {}).get(name, Config.__dataclass_fields__[name].default)


# Flags a task has no use for: giving one is an error, not a silent no-op.
TASK_FLAGS_UNUSED = {"primes": ("digits",)}  # and the lab's testbeds

# ----------------------------------------------------------------------------- checks

BLOCK_SIZE = 64  # tokens of prompt + completion the model sees (train.py builds it so)
MAX_BLOCK = 128  # a task that needs more than BLOCK_SIZE gets its own block, up to this
FLOAT_MAX = 1e6  # no float flag needs more; fp32 overflows at 3.4e38
INT_MAX = 2 ** 31 - 1


def check_numbers(cfg):
    """Every number of a flag dataclass in a range torch holds, before any other check:
    floats finite and at most FLOAT_MAX in size, ints at most INT_MAX, a seed in [0, 2**63)."""
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, float) and not math.isfinite(v):
            raise CliError(f"--{f.name} must be a finite number, got {v}")
        if isinstance(v, float) and abs(v) > FLOAT_MAX:
            raise CliError(f"--{f.name}={v:g} is out of range: at most {FLOAT_MAX:g} in size")
        if f.name == "seed" and isinstance(v, int) and not 0 <= v < 2 ** 63:
            raise CliError(f"--seed must be in [0, 2**63), got {v}")
        if isinstance(v, int) and not isinstance(v, bool) and f.name != "seed" and abs(v) > INT_MAX:
            raise CliError(f"--{f.name}={v} is out of range: at most {INT_MAX}")


def validate(cfg):
    """Names, counts and combinations that cannot work, in the order --help lists them;
    the lab's rules (CHECKS) between the ranges and the schedule."""
    if not CHECKS and needs_lab(dataclasses.replace(cfg, instruments=False)):
        # the lab not imported: the lesson's own names, and no flag only the lab reads
        raise CliError(f"--loss={cfg.loss} --adv={cfg.adv} or a flag of the lab's needs the "
                       f"lab (lab/); the lesson holds --loss and --adv "
                       f"{' | '.join(sorted(loss.LESSON))}")
    check_numbers(cfg)
    if not 1 <= cfg.digits <= 20:  # before make_task: a huge --digits would hang it
        raise CliError(f"--digits={cfg.digits} does not fit a {BLOCK_SIZE}-token block; "
                       f"use 1 to 20")
    check_names(cfg)
    check_ranges(cfg)
    for check in CHECKS:
        check(cfg)
    check_schedule(cfg)
    check_fits(cfg)


def check_names(cfg):
    """Every name a flag takes is one its registry holds: each library names its
    own choices, and config turns its ValueError into the one-line error."""
    for lookup in (lambda: toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad),
                   lambda: loss.clip_bounds(cfg.clip, 0.2, 0.2),
                   lambda: batching.scheduler(cfg.batching)):
        try:
            lookup()
        except ValueError as e:
            raise CliError(str(e)) from None
    for name in ("static_decode", "bf16"):
        if getattr(cfg, name) not in ("auto", "true", "false"):
            raise CliError(f"--{name} takes auto, true or false, got {getattr(cfg, name)!r}")
    for name, names in (("device", ("auto", "cpu", "cuda")), ("optimizer", model.OPTIMIZERS),
                        ("norm", ("global", "local"))):
        if getattr(cfg, name) not in names:
            raise CliError(f"unknown {name} {getattr(cfg, name)!r}; choose one of "
                           f"{', '.join(names)}")
    if cfg.diagnostics and not cfg.instruments:
        raise CliError("--diagnostics is one of the lab's measures; it needs --instruments=true")


COUNTS = ("digits", "n_layer", "n_head", "n_embd", "sft_batch", "prompts_per_step",
          "group_size", "minibatches", "epochs", "eval_every", "eval_size", "pass_k", "ckpt_every")


def check_ranges(cfg):
    """Counts, rates and fractions in their ranges."""
    def refuse_if(bad, name, what):
        if bad:
            raise CliError(f"--{name} {what}, got {getattr(cfg, name)}")
    for name in COUNTS:
        refuse_if(getattr(cfg, name) < 1, name, "must be at least 1")
    for name in ("sft_steps", "rl_steps", "motion_every"):
        refuse_if(getattr(cfg, name) < 0, name, "must be 0 or more")
    for name in ("lr", "sft_lr", "grad_clip"):
        refuse_if(not getattr(cfg, name) > 0, name, "must be positive")
    for name in ("sft_flawed", "top_entropy_quantile"):
        refuse_if(not 0 <= getattr(cfg, name) <= 1, name, "is a fraction in [0, 1]")
    if cfg.temperature == 0:
        raise CliError("--temperature=0 is greedy: every rollout of a group would be the same "
                       "and no group would carry a signal; use a positive temperature")
    refuse_if(not 0 < cfg.temperature <= 10, "temperature", "is not a sane sampling "
              "temperature; use (0, 10]")
    for name in ("top_k", "beta", "entropy_coef", "off_policy_mask_threshold"):
        refuse_if(getattr(cfg, name) < 0, name, "must be 0 (off) or positive")
    if cfg.n_embd % cfg.n_head:
        raise CliError(f"--n_embd={cfg.n_embd} is not divisible by --n_head={cfg.n_head}")
    refuse_if(not 0 < cfg.clip_low < 1, "clip_low", "must be in (0, 1)")
    refuse_if(cfg.clip_high <= 0, "clip_high", "must be positive")
    refuse_if(cfg.dual_clip and cfg.dual_clip <= 1, "dual_clip", "must be above 1 (or 0: off)")
    if cfg.dual_clip and cfg.clip == "none":
        raise CliError("--dual_clip bounds a clipped ratio; it needs --clip=sym or --clip=higher")
    if cfg.clip == "higher" and cfg.clip_high < cfg.clip_low:
        raise CliError(f"--clip=higher needs --clip_high >= --clip_low, got {cfg.clip_high} < "
                       f"{cfg.clip_low}")


def check_schedule(cfg):
    """Mini-batches, micro-batches and the scheduler fit the rollout batch."""
    n = cfg.prompts_per_step * cfg.group_size
    if cfg.minibatches > n:
        raise CliError(f"--minibatches={cfg.minibatches} exceeds the {n} rollouts of a batch")
    if cfg.micro_batch < 0:
        raise CliError(f"--micro_batch must be at least 1 (or 0: no split), got {cfg.micro_batch}")
    if cfg.micro_batch > n // cfg.minibatches:
        raise CliError(f"--micro_batch={cfg.micro_batch} is larger than a mini-batch "
                       f"({n} rollouts / {cfg.minibatches} mini-batches)")
    if cfg.batching == "full" and cfg.minibatches != 1:
        raise CliError("--batching=full takes the whole batch in one step; it needs "
                       "--minibatches=1")
    if batching.keeps_groups_whole(cfg.batching) and cfg.minibatches > cfg.prompts_per_step:
        raise CliError(f"--batching={cfg.batching} keeps groups whole: --minibatches="
                       f"{cfg.minibatches} exceeds the {cfg.prompts_per_step} groups of a batch")


def check_fits(cfg):
    """The task fits the block, the run fits the memory, --compile has a compiler, and
    --out_dir can be written."""
    task = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad)
    need = toy_tasks.longest_prompt(task) + task.max_new_tokens
    if need > MAX_BLOCK:
        raise CliError(f"--task={cfg.task} --digits={cfg.digits} --scratchpad={cfg.scratchpad} "
                       f"needs {need} tokens of prompt + completion, more than the largest "
                       f"block size {MAX_BLOCK}")
    gib, have = memory_estimate(cfg) / 2 ** 30, available_memory() / 2 ** 30
    if gib > have:
        raise CliError(f"this model and batch need about {gib:.1f} GiB, more than the "
                       f"{have:.1f} GiB here; use smaller --n_layer/--n_embd/--prompts_per_step/"
                       f"--group_size/--eval_size/--pass_k")
    if cfg.compile and not compiler_works():  # torch.compile would fail at the first step
        raise CliError("--compile=true needs a working C++ compiler (torch.compile builds its "
                       "kernels with it; $CXX, else g++): install one, or leave --compile out")
    if cfg.resume and cfg.overwrite:
        raise CliError("--resume continues the run in --out_dir and --overwrite replaces it: "
                       "give one")
    check_out_dir(cfg.out_dir, "--out_dir")


def compiler_works():
    """Whether the C++ compiler torch.compile would use ($CXX, else g++, c++, clang++)
    builds a one-line program (in a temp folder that vanishes)."""
    cxx = os.environ.get("CXX") or next(filter(shutil.which, ("g++", "c++", "clang++")), None)
    if not cxx:
        return False
    try:
        with tempfile.TemporaryDirectory() as d:
            return subprocess.run([cxx, "-x", "c++", "-", "-o", os.path.join(d, "a")],
                                  input="int main() { return 0; }\n", capture_output=True,
                                  text=True, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def memory_estimate(cfg):
    """Bytes a run needs, roughly: weights, grads and AdamW's moments (16 B a parameter),
    one rollout batch's activations (about 20 floats per layer, token and width), and
    the KV cache of the largest sampling call, held twice while a prompt's is copied."""
    params = 12 * cfg.n_layer * cfg.n_embd ** 2 + cfg.n_embd * (2 * 32 + BLOCK_SIZE)
    acts = cfg.prompts_per_step * cfg.group_size * BLOCK_SIZE * cfg.n_layer * cfg.n_embd * 20 * 4
    rows = max(cfg.prompts_per_step * cfg.group_size, cfg.eval_size,
               64 * 2 * cfg.pass_k if cfg.diagnostics else 0)
    kv = 2 * rows * BLOCK_SIZE * cfg.n_layer * cfg.n_embd * 2 * 4
    return 16 * params + acts + kv


def available_memory():
    """Physical memory of this machine, or of its largest CUDA device if that is larger."""
    import torch
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 2 ** 40
    return max([ram] + [torch.cuda.get_device_properties(i).total_memory
                        for i in range(torch.cuda.device_count())])


def check_writable(flag, path, d):
    """A file can be created in folder d, probed with a temp file that vanishes at once
    (os.access says yes to root, also in /proc)."""
    try:
        tempfile.TemporaryFile(dir=d).close()
    except OSError as e:
        raise CliError(f"{flag}={path}: cannot write in {d} ({e.strerror})") from None


def check_out_dir(path, flag):
    """A folder we may write in: an existing folder, or one whose nearest existing
    parent is a writable folder. Creates nothing."""
    if not path:
        raise CliError(f"{flag} is empty")
    if os.path.exists(path) and not os.path.isdir(path):
        raise CliError(f"{flag}={path} is a file, not a folder")
    d = os.path.abspath(path)
    while not os.path.exists(d):
        d = os.path.dirname(d)
    if not os.path.isdir(d):
        raise CliError(f"{flag}={path}: {d} is a file, not a folder")
    check_writable(flag, path, d)
