"""E13: the law of the push. How far does GRPO's 1/L_i move a reward-irrelevant choice, as a
function of how much longer wrong (or right) rollouts are, and how much of it is the optimizer?

Question. E12 found, at one in-group length gap (16 tokens), that 1/L_i moves a choice the
reward ignores: I = [grpo - dapo]_{W-} - [grpo - dapo]_{W+} = +1.58 nats in 20 AdamW
steps, about 4.4 times what the first-order formula (THEORY.md 2.7) predicts. E13 measures
I at gaps of 8, 16 and 24 tokens (1, 2 and 3 retries tied to the outcome), and the ratio of
observed to predicted drift under plain SGD, Adam with beta1 = 0 and AdamW.

Testbed: E12's (lab/testbeds.py's make_parity), with ``units`` retries of 8 tokens each: the tasks
``parity_wrong_long<k>`` (W+k: a wrong guess is followed by k retries) and
``parity_right_long<k>`` (W-k: a right one), k = 1, 2, 3; ``parity_wrong_long0`` (D0, no
retries) is the zero dose of both directions. The positive control (PC+, PC-: the reward is
1 iff the completion restates, or does not) has D0's teacher: its warm starts are D0's,
relabelled (the SFT data are the same text, so training them again would give the same
weights; tests/test_e13.py checks it).

Arms: ``grpo`` (w = 1/L_i) and ``dapo`` (the same advantages, equal weights), on-policy, from
the condition's warm start with the seed's problem stream and sampling generator: AdamW at
every dose; at k = 2, also plain SGD and Adam with beta1 = 0, each at the learning rate the
calibration matched to AdamW's KL. The positive control runs dapo under each optimizer.

Outcome of a run: the drift of the choice's log-odds (E12's), warm start to step STEPS. Its
first-order prediction: the positive control gives the optimizer's nats per unit of summed
push on the choice, kappa = [drift PC+ - drift PC-] / [push PC+ - push PC-] (lencov_choice,
summed over steps); the predicted I is kappa * [push_1L W- - push_1L W+] of the grpo runs,
the part of the push that 1/L alone makes (lab/lengthcov.py).

The design, the primaries, the checks and the seeds are fixed in
results/e13_preregistration.md, from the calibration seeds only (``--calibrate``, seeds
2000-2001); the evaluation seeds are 200-211, in two interleaved streams (even, odd).
The dose is the gap each run measures (lencov_gap): a warm start that learned its retries
weakly gives a smaller dose, not a void seed. ``--stream=even`` or ``odd`` runs one stream
(two one-thread processes share 2 cores without slowing each other); the analysis runs
when both streams' records are there. Records go to results/e13/ (committed), warm starts
and run folders to results/ckpt/ and results/runs/ (scratch).

    python -m lab.experiments.e13_dose --quick                   # small, scratch only
    python -m lab.experiments.e13_dose --calibrate --stream=even # seed 2000 (odd: 2001)
    python -m lab.experiments.e13_dose --stream=even --threads=1 # the even seeds
    python -m lab.experiments.e13_dose                           # both streams, then analysis
"""
import math
import os
import shutil
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e13_dose\n")
    sys.exit(2)
from lab.experiments import common
from lab.experiments import stats
from lab.experiments.e12_covariance import rl_of
import torch

from lab import lengthcov
from model import completion_logprobs
from plumbing import checkpoint
import loss as lesson_loss
import toy_tasks

DOSES = (1, 2, 3)        # retries tied to the outcome; 8 tokens each (D0 is the zero dose)
TOKENS = 8               # tokens per retry: ';' and the 7-digit check
ARMS = ("grpo", "dapo")
OPTIMIZERS = ("adamw", "sgd", "adam_b1_0")  # the last two at k = 2 only
OPT_DOSE = 2
LR = {"adamw": 3e-5}     # E12's; the others are set by the calibration (LR_OF below)
STEPS = 20               # E12's measurement step
EVAL_EVERY = 10
SFT_STEPS = 800          # E12's warm starts
GATE_PER_RETRY = 5.0     # gate and manipulation check: |gap| >= 5 tokens per retry (E12: 10 at 2)
GAP_SHARE = 0.8          # ... in >= 80 % of the RL steps
CALIB_SEEDS = (2000, 2001)
QUICK_SEED = 2100
FIRST_SEED = 200
SGD_LRS = (0.03, 0.1, 0.3, 1.0, 3.0)      # the calibration's grids
B1_LRS = (1.5e-5, 3e-5, 6e-5)
CALIB_FILE = "e13_calibration.json"
# fixed by the pre-registration (results/e13_preregistration.md) from the calibration seeds
RATIO_MARGIN = 1.5       # primary 2: observed / predicted inside [1/1.5, 1.5]
VOID_BELOW = 6           # fewer seeds whose SGD runs kept the gap: primary 2 is void
D0_MARGIN = 0.75         # nats: [grpo - dapo] at no retries, about 0 (E12's margin)
PC_MIN = 0.5             # nats: the positive control's interval must lie above it
KL_MARGIN = 2.0          # the matched KL within a factor 2 of AdamW's
DEMO_GAP, E12_GAP = 0.3, 16.0  # tokens: the demo's right - wrong gap, E12's
STREAMS = {"even": 0, "odd": 1, "both": None}
EXTRA = {"seeds": (str(FIRST_SEED), "the first evaluation seed (quick: 2100)"),
         "n": (12, "evaluation seeds (half per stream)"),
         "stream": ("both", "run one stream only: even (seeds 200, 202, ...; calibration 2000) "
                           "or odd (201, ...; 2001); both: both, then the analysis"),
         "calibrate": (False, "the calibration on seeds 2000-2001 (results/e13_calibration.json)"),
         "small": (False, "tiny model and batches, for smoke tests")}


def task_of(cond):
    """D0, W+k, W-k, PC+, PC- -> the task name."""
    if cond == "D0":
        return "parity_wrong_long0"
    if cond in ("PC+", "PC-"):
        return {"PC+": "parity_credit_restate", "PC-": "parity_credit_plain"}[cond]
    return f"parity_{'wrong' if cond[1] == '+' else 'right'}_long{cond[2:]}"


def retries_of(cond):
    return int(cond[2:]) if cond[:2] in ("W+", "W-") else 0


def sign_of(cond):
    """The sign of the right - wrong gap the condition makes (None: no gap)."""
    return {"W+": -1, "W-": 1}.get(cond[:2])


def manipulation(gaps, cond):
    """Share of steps whose in-group gap is >= GATE_PER_RETRY per retry, the condition's way."""
    s = sign_of(cond)
    if s is None:
        return None
    need = GATE_PER_RETRY * retries_of(cond)
    return sum(g is not None and s * g >= need for g in gaps) / max(len(gaps), 1)


RECORD = dict(common.RUN_FIELDS, opt=common.STR, lr=common.NUM, kl=common.NUM)  # a run's


def tag(cond, arm, opt, seed):
    return f"{cond}_{arm}_{opt}_s{seed}".replace("+", "p").replace("-", "m")


# ----------------------------------------------------------------------------- warm starts

class Warm:
    """A condition's warm start for a seed, trained only when a run without a record needs it
    (PC+ and PC- are D0's warm start, relabelled)."""

    def __init__(self, o, seed, cond):
        self.o, self.seed, self.cond = o, seed, cond
        self.base = "D0" if cond in ("PC+", "PC-") else cond
        self.size = {"n_layer": 1, "n_embd": 32, "n_head": 2} if o["small"] else {"n_embd": 96}
        self.path = self.where(task_of(cond))

    def where(self, task):
        return common.warm_start_path(self.o["out"], self.seed, task,
                                      sft_steps=self.o["sft_steps"], sft_flawed=0.5, **self.size)

    def train(self):
        if os.path.exists(self.path):
            return self.path
        task = task_of(self.base)
        cache = os.path.join(self.o["records"], f"warm_{task}_s{self.seed}.json")
        t0 = time.time()
        path = common.warm_start(self.o["out"], self.seed, task, sft_steps=self.o["sft_steps"],
                                 sft_flawed=0.5, **self.size)
        if common.load_record(cache, ("seconds",)) is None:
            common.save_record(cache, {"seed": self.seed, "task": task,
                                       "seconds": round(time.time() - t0, 1)})
        if path != self.path:
            relabel(path, self.path, task_of(self.cond))
        return self.path


def relabel(src, dst, task):
    """A copy of checkpoint src that names ``task``: for a task whose SFT data are src's."""
    ck = torch.load(src, map_location="cpu", weights_only=True)  # tensors and plain data only
    ck["task"] = dict(ck["task"], task=task)
    ck["config"] = dict(ck["config"], task=task)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    checkpoint.atomic_save(ck, dst)


def gate(o, seed, cond, warm):
    """The warm start's own in-group right - wrong gap (32 training problems x 8, temperature
    1, a stream of its own), before any RL of the seed; cached beside the runs."""
    cache = os.path.join(o["records"], f"gate_{task_of(cond)}_s{seed}.json")
    rec = common.load_record(cache, ("gap",))
    if rec is not None:
        common.check_record(cache, rec, common.GATE_FIELDS)
    else:
        _, b = common.sample_checkpoint(warm.train(), task_of(cond), seed, 9000 + seed,
                                        4 if o["small"] else 32)
        adv = lesson_loss.advantages(b.rewards, b.group)
        gap = lengthcov.batch_metrics(adv, torch.ones_like(adv), b.group, b.mask.sum(1),
                                      b.rewards)["lencov_gap"]
        rec = {"seed": seed, "task": task_of(cond), "gap": gap}
        common.save_record(cache, rec)
    s, need = sign_of(cond), GATE_PER_RETRY * retries_of(cond)
    return rec["gap"] is not None and s * rec["gap"] >= need


# ----------------------------------------------------------------------------- one run

def run_kl(warm, final, task_name, seed, prompts=32):
    """KL(pi_warm || pi_final) per completion token, averaged over the warm start's own
    rollouts (prompts x 4, temperature 1, a stream of their own): how far the run moved."""
    task, b = common.sample_checkpoint(warm, task_name, seed, 9700 + seed, prompts, 4)
    lps = []
    with torch.no_grad():
        for path in (warm, final):
            model, _ = checkpoint.load_checkpoint(path)
            _, h = completion_logprobs(model.eval(), b.prompts, b.tokens, b.mask,
                                       toy_tasks.PAD, return_hidden=True)
            lps.append(torch.log_softmax(model.lm_head(h).double(), -1))
    kl = (lps[0].exp() * (lps[0] - lps[1])).sum(-1)
    return float((kl * b.mask).sum() / b.mask.sum())


def one_run(o, seed, cond, arm, opt, lr=None, run=True):
    """One run: its record, cached in <records>/ (a record on disk is a finished run);
    with run=False, None where there is none yet."""
    lr = lr or o["lr"][opt]
    warm = Warm(o, seed, cond)
    task = task_of(cond)
    flags = [f"--task={task}", f"--init_from={warm.path}", f"--seed={seed}", f"--loss={arm}",
             f"--optimizer={opt}", f"--lr={lr:g}", f"--rl_steps={o['steps']}",
             f"--eval_every={EVAL_EVERY}"]
    if o["small"]:
        flags += ["--prompts_per_step=4", "--group_size=4", "--eval_size=16"]
    name = tag(cond, arm, opt, seed) + ("" if lr == o["lr"].get(opt) else f"_lr{lr:g}")
    cache = os.path.join(o["records"], f"{name}.json")
    kept = [f"--init_from={os.path.relpath(warm.path, o['out'])}"
            if f.startswith("--init_from=") else f for f in flags]
    rec = common.load_record(cache, ("flags", "drift"))
    if rec is not None and common.check_record(cache, rec, RECORD)["flags"] == kept:
        return rec
    if not run:
        return None
    warm.train()
    run_dir = os.path.join(o["out"], "runs", "e13", name)
    t0 = time.time()
    ms = common.run(flags, run_dir)
    steps = rl_of(ms)
    ell = {m["step"]: m["choice_log_odds"] for m in ms
           if m["phase"] == "rl" and "choice_log_odds" in m}
    gaps = [m.get("lencov_gap") for m in steps]
    rec = {"seed": seed, "cond": cond, "arm": arm, "opt": opt, "lr": lr, "flags": kept,
           "seconds": round(time.time() - t0, 1), "ell": sorted(ell.items()),
           "drift": ell[max(ell)] - ell[0], "p_end": 1 / (1 + math.exp(-ell[max(ell)])),
           "gap": gaps, "manipulation": manipulation(gaps, cond),
           "push_1L": sum(m.get("lencov_choice_1L") or 0.0 for m in steps),
           "push": sum(m.get("lencov_choice") or 0.0 for m in steps),
           "push_steps": [m.get("lencov_choice") for m in steps],
           "push_1L_steps": [m.get("lencov_choice_1L") for m in steps],
           "reward": [m["reward"] for m in steps],
           "length_correct": [m.get("length_correct") for m in steps],
           "length_incorrect": [m.get("length_incorrect") for m in steps],
           "kl": run_kl(warm.path, os.path.join(run_dir, "ckpt.pt"), task, seed,
                        4 if o["small"] else 32)}
    common.save_record(cache, rec)
    return rec


def plan():
    """Every run of a seed: (cond, arm, optimizer)."""
    conds = ["D0"] + [f"W{d}{k}" for k in DOSES for d in "+-"]
    out = [(c, a, "adamw") for c in conds for a in ARMS]
    out += [(c, a, opt) for opt in OPTIMIZERS[1:] for c in (f"W+{OPT_DOSE}", f"W-{OPT_DOSE}")
            for a in ARMS]
    return out + [(c, "dapo", opt) for opt in OPTIMIZERS for c in ("PC+", "PC-")]


def seed_runs(o, seed):
    """{(cond, arm, opt): record}. The gates run first, on every warm start (descriptive:
    the dose is the gap each run measures, so no seed is left out for a weak one)."""
    for k in DOSES:
        for d in "+-":
            if not o["quick"]:
                gate(o, seed, f"W{d}{k}", Warm(o, seed, f"W{d}{k}"))
    return {(c, a, opt): one_run(o, seed, c, a, opt) for c, a, opt in plan()}


# ----------------------------------------------------------------------------- the analysis

def slope(xs, ys):
    """Least-squares slope of ys on xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def mean_gap(rec):
    """A run's mean in-group right - wrong gap over its steps (tokens)."""
    g = [x for x in rec["gap"] if x is not None]
    return sum(g) / len(g) if g else 0.0


def per_seed(r):
    """One seed's numbers: at each dose (AdamW) I and the gap the runs measured (half the
    right - wrong gap of W- minus W+'s, over both arms: the dose's strength), I's slope
    against that gap; per optimizer at k = 2 whether its runs kept the gap (the
    manipulation check), the observed I, kappa, the predicted I and their log ratio."""
    d = lambda c, a, opt: r[(c, a, opt)]["drift"]
    diff = lambda c, opt="adamw": d(c, "grpo", opt) - d(c, "dapo", opt)
    row = {f"I {k}": diff(f"W-{k}") - diff(f"W+{k}") for k in DOSES}
    row.update({f"gap {k}": sum(mean_gap(r[(f"W-{k}", a, "adamw")])
                                - mean_gap(r[(f"W+{k}", a, "adamw")]) for a in ARMS) / 4
                for k in DOSES})
    row.update({f"diff W+{k}": diff(f"W+{k}") for k in DOSES})
    row.update({f"diff W-{k}": diff(f"W-{k}") for k in DOSES})
    row["diff D0"] = diff("D0")
    row["slope"] = slope([row[f"gap {k}"] for k in DOSES], [row[f"I {k}"] for k in DOSES])
    for opt in OPTIMIZERS:
        row[f"valid {opt}"] = all((r[(f"W{s}{OPT_DOSE}", a, opt)]["manipulation"] or 0)
                                  >= GAP_SHARE for s in "+-" for a in ARMS)
    for opt in OPTIMIZERS:
        k = OPT_DOSE
        pc = d("PC+", "dapo", opt) - d("PC-", "dapo", opt)
        pc_push = r[("PC+", "dapo", opt)]["push"] - r[("PC-", "dapo", opt)]["push"]
        kappa = pc / pc_push if pc_push else None
        push = r[(f"W-{k}", "grpo", opt)]["push_1L"] - r[(f"W+{k}", "grpo", opt)]["push_1L"]
        obs = diff(f"W-{k}", opt) - diff(f"W+{k}", opt)
        pred = kappa * push if kappa is not None else None
        ok = row[f"valid {opt}"] and pred and obs / pred > 0
        row.update({f"pc {opt}": pc, f"kappa {opt}": kappa, f"observed {opt}": obs,
                    f"predicted {opt}": pred,
                    f"log ratio {opt}": math.log(obs / pred) if ok else None,
                    f"kl {opt}": sum(r[(c, a, opt)]["kl"] for c in (f"W+{k}", f"W-{k}")
                                     for a in ARMS) / 4})
    return row


# ----------------------------------------------------------------------------- calibration

def fit_lr(o, opt, lrs, target):
    """The learning rate at which ``opt``'s KL meets ``target`` (a mean log KL), from the
    grid's W+2 and W-2 grpo runs at the learning rates where every calibration run kept its
    gap (larger ones collapsed the policy: the KL of a collapse says nothing of step size).
    Two or more such rates: least squares log KL = a_seed + b log lr (one slope, one
    intercept per seed), solved at the mean intercept. One: KL grows as lr^2 (the KL of a
    small step is quadratic in it). Returns (lr, the fit)."""
    runs = {lr: [one_run(o, s, c, "grpo", opt, lr, run=False) for s in CALIB_SEEDS
                 for c in (f"W+{OPT_DOSE}", f"W-{OPT_DOSE}")] for lr in lrs}
    kept = [lr for lr in lrs if all(r["manipulation"] >= GAP_SHARE for r in runs[lr])]
    kept = kept[:next((i for i, lr in enumerate(kept) if lr != lrs[i]), len(kept))]
    pts = [(r["seed"], math.log(lr), math.log(r["kl"])) for lr in kept for r in runs[lr]]
    if not pts:
        raise common.CliError(f"{opt}: every learning rate of the grid lost the gap")
    mean = {s: [sum(v[i] for t, *v in pts if t == s) / sum(t == s for t, *_ in pts)
                for i in (0, 1)] for s in CALIB_SEEDS}
    sxx = sum((x - mean[s][0]) ** 2 for s, x, _ in pts)
    b = sum((x - mean[s][0]) * (y - mean[s][1]) for s, x, y in pts) / sxx if sxx else 2.0
    a = sum(mean[s][1] - b * mean[s][0] for s in CALIB_SEEDS) / len(CALIB_SEEDS)
    lr = math.exp((target - a) / b)
    return float(f"{lr:.2g}"), {"slope": b, "assumed_slope": not sxx, "intercept": a,
                                "kept_lrs": kept, "points": pts}


def calibrate(o):
    """Seeds 2000-2001 (never evaluation seeds). Phase 1, per stream: every warm start and
    gate, AdamW's runs of the design, and the SGD and beta1 = 0 grids at k = 2 (grpo). Phase
    2, once both seeds' phase 1 is there: the learning rates matched on KL, the optimizer
    arms at them; then the summary (results/e13_calibration.json)."""
    seeds = CALIB_SEEDS if o["stream"] == "both" else (CALIB_SEEDS[STREAMS[o["stream"]]],)
    t0 = time.time()
    for s in seeds:
        for k in DOSES:
            for d in "+-":
                gate(o, s, f"W{d}{k}", Warm(o, s, f"W{d}{k}"))
        for c, a, opt in plan():
            if opt == "adamw":
                one_run(o, s, c, a, opt)
        for opt, lrs in (("sgd", SGD_LRS), ("adam_b1_0", B1_LRS)):
            for lr in lrs:
                for c in (f"W+{OPT_DOSE}", f"W-{OPT_DOSE}"):
                    one_run(o, s, c, "grpo", opt, lr)
        print(f"calibration seed {s}: phase 1 done [{time.time() - t0:.0f}s]", flush=True)
    adam = [one_run(o, s, c, "grpo", "adamw", run=False) for s in CALIB_SEEDS
            for c in (f"W+{OPT_DOSE}", f"W-{OPT_DOSE}")]
    grids = [one_run(o, s, c, "grpo", opt, lr, run=False) for s in CALIB_SEEDS
             for opt, lrs in (("sgd", SGD_LRS), ("adam_b1_0", B1_LRS)) for lr in lrs
             for c in (f"W+{OPT_DOSE}", f"W-{OPT_DOSE}")]
    if None in adam + grids:
        print("phase 2 waits for the other stream's phase 1", flush=True)
        return None
    target = sum(math.log(r["kl"]) for r in adam) / len(adam)
    fits = {opt: fit_lr(o, opt, lrs, target) for opt, lrs in
            (("sgd", SGD_LRS), ("adam_b1_0", B1_LRS))}
    o["lr"].update({opt: f[0] for opt, f in fits.items()})
    for s in seeds:  # phase 2: the optimizer arms at the matched learning rates
        for c, a, opt in plan():
            one_run(o, s, c, a, opt)
    runs = {s: {(c, a, opt): one_run(o, s, c, a, opt, run=False) for c, a, opt in plan()}
            for s in CALIB_SEEDS}
    if any(None in r.values() for r in runs.values()):
        print("the summary waits for the other stream's phase 2", flush=True)
        return None
    data = calibration_summary(o, runs, target, fits)
    common.save(CALIB_FILE[:-5], common.clean(data), o["out"])
    return data


def calibration_summary(o, runs, target, fits):
    """What the pre-registration is fixed from."""
    rows = {s: per_seed(runs[s]) for s in CALIB_SEEDS}
    gates = {f"{task_of(f'W{d}{k}')} s{s}": common.load_record(os.path.join(
        o["records"], f"gate_{task_of(f'W{d}{k}')}_s{s}.json"), ("gap",))["gap"]
        for s in CALIB_SEEDS for k in DOSES for d in "+-"}
    p_end = {}
    for key in plan():
        ps = [runs[s][key]["p_end"] for s in CALIB_SEEDS]
        p_end[" ".join(key)] = 1 / (1 + math.exp(-sum(math.log(p / (1 - p)) for p in ps)
                                                 / len(ps)))
    manip = {f"{' '.join(key)} s{s}": runs[s][key]["manipulation"] for s in CALIB_SEEDS
             for key in plan() if runs[s][key]["manipulation"] is not None}
    sd = lambda k: stats.paired([rows[s][k] for s in CALIB_SEEDS if rows[s][k] is not None],
                                [0.0] * sum(rows[s][k] is not None for s in CALIB_SEEDS))["sd"]
    data = {"experiment": "e13_dose calibration", "seeds": list(CALIB_SEEDS), "steps": o["steps"],
            "lr": o["lr"], "kl_target_log": target, "kl_target": math.exp(target),
            "fits": fits, "gates": gates, "rows": {str(s): rows[s] for s in CALIB_SEEDS},
            "p_end": p_end, "inside": all(0.1 <= p <= 0.9 for p in p_end.values()),
            "manipulation": manip,
            "kl": {opt: [rows[s][f"kl {opt}"] for s in CALIB_SEEDS] for opt in OPTIMIZERS},
            "sd": {k: sd(k) for k in ("slope", "log ratio sgd", "log ratio adamw",
                                      "log ratio adam_b1_0", "I 1", "I 2", "I 3")}}
    for k, v in data["sd"].items():
        print(f"calibration: sd of {k} over the two seeds: {v}")
    for s in CALIB_SEEDS:
        print(f"seed {s}: " + ", ".join(f"{k} {v:.3g}" for k, v in rows[s].items()
                                        if isinstance(v, float)))
    print("learning rates: " + ", ".join(f"{k} {v:g}" for k, v in o["lr"].items()))
    return data


# ----------------------------------------------------------------------------- evaluation

def calibrated_lr(o):
    """The learning rates the calibration matched on KL (refused without it)."""
    for folder in (o["out"], common.RESULTS):
        path = os.path.join(folder, CALIB_FILE)
        data = common.load_record(path, ("lr",))
        if data is not None:
            lr = data["lr"] if isinstance(data["lr"], dict) else {}
            if set(lr) != set(OPTIMIZERS) or not all(common.holds(v, common.NUM) and v > 0
                                                     for v in lr.values()):
                raise common.CliError(f"{path}: its 'lr' is not one positive number per "
                                      f"optimizer ({', '.join(OPTIMIZERS)})")
            return {k: float(v) for k, v in lr.items()}
    raise common.CliError(f"{CALIB_FILE} is missing: run --calibrate first")


def stream_runs(o, which):
    """One stream's seeds in order (every other seed, --n / 2 of them): {seed: runs}."""
    runs, t0 = {}, time.time()
    for seed in range(o["seeds"][0] + which, o["seeds"][0] + o["n"], 2):
        runs[seed] = seed_runs(o, seed)
        print(f"seed {seed} done [{time.time() - t0:.0f}s]", flush=True)
    return runs


def dose_name(k):
    return f"I at {k} retr{'y' if k == 1 else 'ies'} ({TOKENS * k} tokens nominal)"


PRIMARIES = {
    "slope of I against the measured gap (nats per token)": ("slope", "> 0", None),
    "log(observed / predicted I), SGD": ("log ratio sgd", f"inside +-log {RATIO_MARGIN:g}",
                                         math.log(RATIO_MARGIN)),
}
SECONDARIES = {
    **{dose_name(k): (f"I {k}", "> 0") for k in DOSES},
    "log(observed / predicted I), AdamW": ("log ratio adamw", "> 0"),
    "log ratio, AdamW - SGD": (("log ratio adamw", "log ratio sgd"), "> 0"),
    "log ratio, AdamW - Adam beta1 = 0": (("log ratio adamw", "log ratio adam_b1_0"), "> 0"),
    "log ratio, Adam beta1 = 0 - SGD": (("log ratio adam_b1_0", "log ratio sgd"), "> 0"),
}


def column(rows, key):
    if isinstance(key, tuple):
        return [None if None in (r[key[0]], r[key[1]]) else r[key[0]] - r[key[1]] for r in rows]
    return [r[key] for r in rows]


def analyse(rows):
    """The registered contrasts, Holm within each family. A ratio is read only on the seeds
    whose runs of that optimizer kept the gap (per_seed leaves the others None)."""
    seeds = [r["seed"] for r in rows]
    primary = {}
    for name, (key, pred, margin) in PRIMARIES.items():
        c = stats.contrast(column(rows, key), 0.0, pred, seeds)
        if margin is not None:
            c["tost_margin"] = margin
        primary[name] = c
    secondary = {name: stats.contrast(column(rows, key), 0.0, pred, seeds)
                 for name, (key, pred) in SECONDARIES.items()}
    for fam in (primary, secondary):
        ps = [stats.p_value(c) for c in fam.values()]
        for c, p, h in zip(fam.values(), ps, stats.holm(ps)):
            c["p"], c["p_holm"] = p, h
    checks = {"[grpo - dapo]_D0": stats.contrast(column(rows, "diff D0"), 0.0,
                                                 f"inside +-{D0_MARGIN:g}", seeds)}
    checks["[grpo - dapo]_D0"]["verdict"] = stats.verdict(checks["[grpo - dapo]_D0"], D0_MARGIN)
    for opt in OPTIMIZERS:
        checks[f"positive control, {opt}"] = stats.contrast(column(rows, f"pc {opt}"), 0.0,
                                                            f"above {PC_MIN:g}", seeds)
        checks[f"log KL ratio, {opt} / adamw"] = stats.contrast(
            [math.log(r[f"kl {opt}"] / r["kl adamw"]) for r in rows], 0.0,
            f"inside +-log {KL_MARGIN:g}", seeds)
    return primary, secondary, checks


def decisions(primary, secondary, checks, rows):
    """The registered decisions, as coded before the analysis read an evaluation seed."""
    n_valid = {opt: sum(r[f"valid {opt}"] for r in rows) for opt in OPTIMIZERS}
    p1, p2 = primary.values()
    lo = lambda c: None if c["diff"] is None or c["half"] != c["half"] else c["diff"] - c["half"]
    hi = lambda c: None if lo(c) is None else c["diff"] + c["half"]
    v1 = ("inconclusive" if p1["p_holm"] is None or p1["p_holm"] >= 0.05 else
          "effect" if p1["diff"] > 0 else "contradicted")
    m = math.log(RATIO_MARGIN)
    if n_valid["sgd"] < VOID_BELOW:
        v2 = "void"
    elif p2["p_holm"] is not None and p2["p_holm"] < 0.05:
        v2 = "first order holds"
    elif lo(p2) is not None and (lo(p2) > m or hi(p2) < -m):
        v2 = "first order fails"
    else:
        v2 = "inconclusive"
    # the fewest retries whose I is above 0 after Holm: where 1/L's push becomes detectable
    found = [k for k in DOSES if (secondary[dose_name(k)]["p_holm"] or 1) < 0.05
             and secondary[dose_name(k)]["diff"] > 0]
    pc = {opt: checks[f"positive control, {opt}"] for opt in OPTIMIZERS}
    kl = {opt: checks[f"log KL ratio, {opt} / adamw"] for opt in OPTIMIZERS[1:]}
    return {"n_seeds": len(rows), "kept the gap at 2 retries": n_valid,
            "void_below": VOID_BELOW, "primary 1": v1, "primary 2": v2,
            "fewest retries detected": min(found) if found else None,
            "positive control passes": {k: v["diff"] is not None and v["half"] is not None
                                        and v["diff"] - v["half"] > PC_MIN
                                        for k, v in pc.items()},
            "kl matched": {k: v["diff"] is not None and abs(v["diff"]) + (v["half"] or 0)
                           < math.log(KL_MARGIN) for k, v in kl.items()},
            "D0": checks["[grpo - dapo]_D0"]["verdict"]}


def evaluate(o):
    o["lr"].update(calibrated_lr(o))
    streams = (["even", "odd"] if o["stream"] == "both" else [o["stream"]])
    runs = {}
    for which in streams:
        runs.update(stream_runs(o, STREAMS[which]))
    if o["stream"] != "both":
        return None
    seeds = sorted(runs)
    rows = [dict(per_seed(runs[s]), seed=s) for s in seeds]
    primary, secondary, checks = analyse(rows)
    data = {"experiment": "e13_dose", "seeds": seeds, "lr": o["lr"], "gates": gates(o, seeds),
            "steps": o["steps"], "primary": primary, "secondary": secondary, "checks": checks,
            "decisions": decisions(primary, secondary, checks, rows), "rows": rows,
            "curve": curve(runs, rows), "per_run": {
                "|".join(k): [runs[s][k]["drift"] for s in seeds] for k in plan()}}
    common.print_contrasts(primary)
    common.print_contrasts(secondary, "secondary")
    common.print_contrasts(checks, "check")
    for k, v in data["decisions"].items():
        print(f"decision: {k}: {v}")
    data = common.clean(data)
    common.save("e13_dose", data, o["out"], lambda plt: plot(plt, data))
    return data


def gates(o, seeds):
    """Each warm start's own gap before RL (descriptive): {task s<seed>: tokens}."""
    return {f"{task_of(f'W{d}{k}')} s{s}": (common.load_record(os.path.join(
        o["records"], f"gate_{task_of(f'W{d}{k}')}_s{s}.json"), ("gap",)) or {}).get("gap")
        for s in seeds for k in DOSES for d in "+-"}


def curve(runs, rows):
    """Per dose: the measured gap (tokens, |right - wrong| over W+ and W-, and as a share of
    the mean length), I, and the first-order line kappa_AdamW x push."""
    ok = rows
    out = []
    for k in DOSES:
        gaps, shares = [], []
        for r in ok:
            for c in (f"W+{k}", f"W-{k}"):
                rec = runs[r["seed"]][(c, "grpo", "adamw")]
                g = [abs(x) for x in rec["gap"] if x is not None]
                lens = [(a + b) / 2 for a, b in zip(rec["length_correct"], rec["length_incorrect"])
                        if a is not None and b is not None]
                gaps.append(sum(g) / len(g))
                shares.append(gaps[-1] / (sum(lens) / len(lens)))
        pred = [r["kappa adamw"] * (runs[r["seed"]][(f"W-{k}", "grpo", "adamw")]["push_1L"]
                                    - runs[r["seed"]][(f"W+{k}", "grpo", "adamw")]["push_1L"])
                for r in ok if r["kappa adamw"] is not None]
        out.append({"retries": k, "gap": stats.ci(gaps), "share": stats.ci(shares),
                    "I": stats.ci([r[f"I {k}"] for r in ok]), "first_order": stats.ci(pred)})
    return out


def plot(plt, data):
    """I against the in-group gap with the first-order line; observed / predicted per
    optimizer at 16 tokens. Grey dots: one seed each."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")
    a.scatter([r[f"gap {k}"] for r in data["rows"] for k in DOSES],
              [r[f"I {k}"] for r in data["rows"] for k in DOSES], s=12, color="0.6",
              label="one seed")
    xs = [c["gap"][0] for c in data["curve"]]
    for key, color, label in (("I", "tab:red", "observed I (mean, 95 % t band)"),
                              ("first_order", "0.3", "first-order prediction (AdamW)")):
        ys = [c[key][0] for c in data["curve"]]
        hs = [c[key][1] or 0.0 for c in data["curve"]]
        a.errorbar(xs, ys, yerr=hs, color=color, marker="o", capsize=3, label=label)
    a.plot([0], [0], marker="o", mfc="white", color="k", ls="", label="no retries: 0 by design")
    for x, name in ((DEMO_GAP, "demo"), (E12_GAP, "E12")):
        a.axvline(x, color="tab:blue", ls=":", lw=1)
        a.text(x, -0.95, f" {name}", color="tab:blue", va="bottom")
    a.axhline(0, color="0.7", lw=0.8)
    a.set_ylim(-1.0, 2.6)
    a.set_xlabel("in-group length gap |right - wrong| (tokens)")
    a.set_ylabel("I = [grpo - dapo] W- minus W+ (nats)")
    a.set_title("1/L's push on a choice the reward ignores")
    a.legend(loc="upper left", ncols=2, fontsize="small")
    names = {"sgd": "SGD", "adam_b1_0": "Adam, beta1 = 0", "adamw": "AdamW"}
    b.axhspan(1 / RATIO_MARGIN, RATIO_MARGIN, color="0.9", label="first order within x1.5")
    for i, opt in enumerate(OPTIMIZERS):
        col = [r[f"log ratio {opt}"] for r in data["rows"]]
        got = [math.exp(v) for v in col if v is not None]
        b.scatter([i + 0.15] * len(got), got, s=12, color="0.6",
                  label="one seed" if i == 0 else None)
        m, h = stats.ci(col)
        if m is None:
            continue
        b.errorbar([i], [math.exp(m)], yerr=[[math.exp(m) - math.exp(m - (h or 0))],
                                             [math.exp(m + (h or 0)) - math.exp(m)]],
                   marker="o", capsize=4, color="k", label="mean, 95 % t band" if i == 0 else None)
    b.axhline(1, color="0.5", lw=0.8)
    b.set_yscale("log")
    ticks = (0.5, 1, 1.5, 2, 3, 5, 8)
    b.set_yticks(ticks, [f"{t:g}" for t in ticks])
    b.minorticks_off()
    b.set_ylim(0.5, 8)
    b.set_xticks(range(len(OPTIMIZERS)), [names[o] for o in OPTIMIZERS])
    b.set_xlim(-0.5, len(OPTIMIZERS) - 0.5)
    b.set_ylabel("observed / predicted I (log scale)")
    b.set_title(f"observed / predicted, each in its own yardstick, at {TOKENS * OPT_DOSE} tokens")
    b.legend(loc="lower left", fontsize="small")
    return fig


# ----------------------------------------------------------------------------- main

def check(o):
    """The flags' own checks, before --out is created: the stream, and (for the evaluation)
    the calibration's learning rates."""
    if o["stream"] not in STREAMS:
        raise common.CliError(f"--stream takes {', '.join(STREAMS)}, got {o['stream']!r}")
    if not (o["calibrate"] or o["quick"] or o["replot"]):
        calibrated_lr(o)


def main(argv):
    o = common.parse(argv, EXTRA, __doc__, redraw=("e13_dose", plot),
                     modes=("calibrate", "stream"), unused=("jobs",), check=check)
    o.update(lr=dict(LR), steps=STEPS, sft_steps=SFT_STEPS)
    if o["quick"]:
        o.update(seeds=[QUICK_SEED], small=True, steps=4, sft_steps=40)
    o["records"] = os.path.join(o["out"], "e13")
    os.makedirs(o["records"], exist_ok=True)
    if o["calibrate"]:
        return calibrate(o)
    if o["quick"]:
        o["lr"].update(sgd=0.3, adam_b1_0=3e-5)
        r = seed_runs(o, QUICK_SEED)
        row = per_seed(r)
        print({k: v for k, v in row.items()})
        return row
    return evaluate(o)


if __name__ == "__main__":
    common.cli(main)
