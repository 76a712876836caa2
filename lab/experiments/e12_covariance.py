"""E12: does GRPO's 1/L_i move a reward-irrelevant choice when length goes with the reward?

Question. The copies of a token that a whole group writes after one history receive
sum_i Â_i w_i = G Cov_g(Â, w) (THEORY.md 2.7): GRPO's w_i = 1/L_i pushes them only where
length co-varies with the reward *inside the group*. A reward-irrelevant choice X made at
that history moves, to first order, by the difference of that covariance between the
rollouts that chose X and those that did not: under 1/L, away from the longer variant
when wrong rollouts are longer (W+), towards it when right ones are (W-), not at all
when lengths vary at random (W0) or the variants have equal length (the null, NC). The
earlier testbeds had right and wrong rollouts of nearly equal length; this one does not.

Testbed: the ``parity_*`` tasks (lab/testbeds.py's make_parity): guess the parity of a 7-digit
sum, then check it digit by digit, then retry (two 8-token retries) when the condition
says so. The guess is a coin the policy cannot learn in one forward pass (accuracy
about 50 % throughout, every group mixed); the retries hang on a comparison the policy
reads off its own check, so the gap lasts. The choice: the first completion token,
``(``, opens a 15-token restatement with p = 0.4 under the teacher.

  condition  task                    length of the rollouts
  W+         parity_wrong_long       wrong ones 16 tokens longer
  W-         parity_right_long       right ones 16 tokens longer
  W0         parity_random_long      0-5 retries at random (x5-6), whatever the reward
  NC         parity_equal_choice     as W+, but the choice is between two 15-token forms
  PC+, PC-   parity_credit_restate,  no retries; the reward is 1 iff the completion
             parity_credit_plain     restates (PC-: does not), whatever its guess: the
                                     choice is credited, the positive control

Arms: ``grpo`` (w = 1/L_i) and ``dapo`` (the same advantages, equal weights), on-policy,
from the condition's warm start with the seed's problem stream and sampling generator
(the arms share the first rollout batch). The positive control runs ``dapo`` only.
``--dr_grpo`` adds the dr_grpo arm (secondary, descriptive).

The design, the primary, the secondaries, the checks, the seeds and the stopping rules
are fixed in results/e12_preregistration.md, from the calibration seeds only
(``--calibrate``, seeds 1000-1001, results/e12_calibration.json); the evaluation seeds are
0 upwards. Outcome of a run: the drift of the choice's log-odds against every other token,
ell = mean over the held-out prompts of log pi(( | prompt) - log(1 - pi(( | prompt)),
from the warm start to the measurement step (> 0: towards restating).

Primary: I = [grpo - dapo]_{W-} - [grpo - dapo]_{W+}, per seed; predicted > 0.

Every run's record (a few kB) is written to results/e12/ (committed), so a full run can be
continued on another machine or after a restart; the warm starts and run folders are
scratch (results/ckpt/, results/runs/, ignored by git). A run stopped half-way is done
again from its start; a record on disk is a finished run.

    python -m lab.experiments.e12_covariance --quick       # seed 1100, W+ and W-, small
    python -m lab.experiments.e12_covariance --calibrate   # seeds 1000-1001
    python -m lab.experiments.e12_covariance               # the evaluation seeds (results/)
    python -m lab.experiments.e12_covariance --replot
"""
import math
import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e12_covariance\n")
    sys.exit(2)
from lab.experiments import common
from lab.experiments import stats
import torch

from lab import diagnostics, lengthcov
from plumbing import checkpoint
import loss as lesson_loss
import toy_tasks

CONDITIONS = {"W+": "wrong_long", "W-": "right_long", "W0": "random_long", "NC": "equal_choice"}
CONTROLS = {"PC+": "credit_restate", "PC-": "credit_plain"}
ARMS = ("grpo", "dapo")
# fixed by the calibration (results/e12_preregistration.md), before any evaluation seed ran
LR = 3e-5          # RL learning rate (AdamW, train.py's): keeps the choice inside 0.1-0.9
STEPS = 20         # the measurement step, chosen by --calibrate: every run stops there
CALIB_STEPS, CANDIDATES = 30, (30, 20)  # the calibration's runs, and the steps it may choose
EVAL_EVERY = 10    # the choice's log-odds every 10 steps (the figure's curve)
SFT_STEPS = 800    # SFT steps of each warm start: the check is learned in a jump, seen
                   # between steps 200 and 300 or later (calibration seed 1000's W-: not by 300)
VALID = 16         # seeds passing the warm-start gate: the power calculation's number
DETECT = 1.0       # nats of I the power calculation is for (results/e12_preregistration.md)
CALIB_SEEDS = (1000, 1001)
QUICK_SEED = 1100
GAP_MIN, GAP_SHARE = 10.0, 0.8  # the manipulation check: |gap| >= 10 in >= 80 % of steps
PC_MIN = 2.0       # the positive control must move the instrument by >= 2 nats
MARGIN = 0.75      # nats: equivalence margin of the W0 and NC contrasts (preregistration)
PRIMARY_MARGIN = 1.0  # nats: the primary's equivalence margin ("no effect" inside it)
VOID_BELOW = 12    # fewer seeds than this passing the manipulation check: the primary is void
INSIDE = (0.1, 0.9)   # the measurable-choice check: sigma(mean ell at STEPS) of each arm
ACCURACY = (0.3, 0.7)  # the accuracy check (descriptive): each run's mean reward
EXTRA = {"seeds": ("0", "the first evaluation seed; seeds follow until --valid pass the gate "
                    "(quick: 1100; calibrate: 1000-1001)"),
         "valid": (VALID, "evaluation seeds whose W+ and W- warm starts pass the gate"),
         "calibrate": (False, "the calibration on seeds 1000-1001 (results/e12_calibration.json)"),
         "dr_grpo": (False, "add the dr_grpo arm (secondary)"),
         "small": (False, "tiny model and batches, for smoke tests")}


# ----------------------------------------------------------------------------- one run

RECORD = dict(common.RUN_FIELDS, cov=common.NUMS_OR_NONE, entropy_end=common.NUM,
              entropy_start=common.NUM)  # a run's record: what one_run writes


def rl_of(ms):
    """The RL steps of a run's metrics lines (step 0 is the warm start's evaluation)."""
    return [m for m in ms if m["phase"] == "rl" and m["step"] >= 1 and "reward" in m]


def manipulation(gaps, cond):
    """The share of steps whose within-group right - wrong gap is at least GAP_MIN tokens
    the way the condition makes it (W+ and NC: wrong longer; W-: right longer); None for
    the conditions without a gap."""
    sign = {"W+": -1, "NC": -1, "W-": 1}.get(cond)
    if sign is None:
        return None
    return sum(g is not None and sign * g >= GAP_MIN for g in gaps) / max(len(gaps), 1)


def choice_entropy(path, task_name, seed, n=256):
    """Mean entropy (nats) of the first completion token at the held-out prompts: the
    group-shared, low-confidence history where the choice is made."""
    model, _ = checkpoint.load_checkpoint(path, common.DEVICE)
    task = toy_tasks.make_task(task_name)
    lp = diagnostics.next_logprobs(model.eval(), task, toy_tasks.eval_problems(task, n, seed))
    return float(-(lp.exp() * lp).sum(1).mean())


def record_of(ms, cond, arm, seed, flags, seconds):
    steps = rl_of(ms)
    evals = [(m["step"], m["choice_log_odds"]) for m in ms
             if m["phase"] == "rl" and "choice_log_odds" in m]
    ell = dict(evals)
    gaps = [m.get("lencov_gap") for m in steps]
    return {
        "seed": seed, "cond": cond, "arm": arm, "flags": flags, "seconds": round(seconds, 1),
        "ell": evals, "drift": ell[max(ell)] - ell[0] if 0 in ell else None,
        "p_end": 1 / (1 + math.exp(-ell[max(ell)])),
        "gap": gaps, "manipulation": manipulation(gaps, cond),
        "push_1L": sum(m.get("lencov_choice_1L") or 0.0 for m in steps),
        "push": sum(m.get("lencov_choice") or 0.0 for m in steps),
        "push_1L_steps": [m.get("lencov_choice_1L") for m in steps],
        "push_steps": [m.get("lencov_choice") for m in steps],
        "cov": [m.get("lencov_cov") for m in steps],
        "reward": [m["reward"] for m in steps],
        "length_incorrect": [m.get("length_incorrect") for m in steps],
        "length_correct": [m.get("length_correct") for m in steps],
    }


def one_run(o, seed, cond, arm, warm):
    """One arm of one condition and seed: its record, cached in <records>/. ``warm``: a
    Warm, trained only if the record is missing (or a path, already trained)."""
    start = warm if isinstance(warm, Warm) else None
    warm = start.path if start else warm
    task = f"parity_{(CONDITIONS | CONTROLS)[cond]}"
    flags = [f"--task={task}", f"--init_from={warm}", f"--seed={seed}", f"--loss={arm}",
             f"--lr={o['lr']}", f"--rl_steps={o['steps']}", f"--eval_every={EVAL_EVERY}"]
    if o["small"]:
        flags += ["--prompts_per_step=4", "--group_size=4", "--eval_size=16"]
    name = f"{cond}_{arm}_s{seed}".replace("+", "p").replace("-", "m")
    cache = os.path.join(o["records"], f"{name}.json")
    rec = common.load_record(cache, ("flags", "drift"))
    # the record names its warm start relative to --out: it stays valid on another machine
    kept = [f"--init_from={os.path.relpath(warm, o['out'])}" if f.startswith("--init_from=")
            else f for f in flags]
    if rec is not None and common.check_record(cache, rec, RECORD)["flags"] == kept:
        return rec
    if start:
        warm = start.train()
    run_dir = os.path.join(o["out"], "runs", "e12", name)
    t0 = time.time()
    ms = common.run(flags, run_dir)
    rec = record_of(ms, cond, arm, seed, kept, time.time() - t0)
    rec["entropy_end"] = choice_entropy(os.path.join(run_dir, "ckpt.pt"), task, seed)
    rec["entropy_start"] = choice_entropy(warm, task, seed)
    common.save_record(cache, rec)  # a record on disk is a finished run
    return rec


class Warm:
    """The condition's warm start for this seed, trained only when something that needs it
    has no record yet: a finished seed continues on another machine without its warm
    starts (scratch, not in git). ``path`` is where it is or will be; ``train()`` makes it
    (once) and records the seconds it took beside the runs."""

    def __init__(self, o, seed, cond):
        self.o, self.seed = o, seed
        self.task = f"parity_{(CONDITIONS | CONTROLS)[cond]}"
        self.size = {"n_layer": 1, "n_embd": 32, "n_head": 2} if o["small"] else {"n_embd": 96}
        self.path = common.warm_start_path(o["out"], seed, self.task, sft_steps=o["sft_steps"],
                                           sft_flawed=0.5, **self.size)

    def train(self):
        if getattr(self, "trained", None):  # once per condition and seed
            return self.trained
        o, cache = self.o, os.path.join(self.o["records"], f"warm_{self.task}_s{self.seed}.json")
        t0 = time.time()
        path = common.warm_start(o["out"], self.seed, self.task, sft_steps=o["sft_steps"],
                                 sft_flawed=0.5, **self.size)
        took = time.time() - t0
        if common.load_record(cache, ("seconds",)) is None:
            common.save_record(cache, {"seed": self.seed, "task": self.task,
                                       "seconds": round(took, 1)})
        self.trained = path
        return path


def warm(o, seed, cond):
    """The condition's warm start for this seed, trained if it is not there yet."""
    return Warm(o, seed, cond).train()


def warm_gap(o, seed, cond, path):
    """The gate of a warm start, before any RL: the within-group right - wrong length gap
    (lencov_gap) of its own rollouts, 32 training problems x 8 at temperature 1 from a
    stream of their own; cached beside the runs. SFT learns the check in a jump that
    some seeds had not made by their last SFT step (calibration), so a warm start whose
    retries do not follow its check is found here, not after its runs."""
    task = f"parity_{(CONDITIONS | CONTROLS)[cond]}"
    cache = os.path.join(o["records"], f"gate_{task}_s{seed}.json")
    rec = common.load_record(cache, ("gap",))
    if rec is not None:
        return common.check_record(cache, rec, common.GATE_FIELDS)["gap"]
    path = path.train() if isinstance(path, Warm) else path
    _, b = common.sample_checkpoint(path, task, seed, 9000 + seed, 4 if o["small"] else 32)
    adv = lesson_loss.advantages(b.rewards, b.group)
    gap = lengthcov.batch_metrics(adv, torch.ones_like(adv), b.group, b.mask.sum(1),
                                  b.rewards)["lencov_gap"]
    common.save_record(cache, {"seed": seed, "task": task, "gap": gap})
    return gap


def gate_passes(gap, cond):
    """A warm start passes if its gap is at least GAP_MIN the way its condition makes it."""
    sign = {"W+": -1, "NC": -1, "W-": 1}.get(cond)
    return sign is None or (gap is not None and sign * gap >= GAP_MIN)


def seed_runs(o, seed, conds, arms, controls=True):
    """Every run of one seed: {cond: {arm: record}}; {"void": cond} instead when the
    warm start of W+ or W- fails its gate. Both gates run before any RL run of the seed,
    so a seed is left out before any of its outcomes exists."""
    warms = {cond: Warm(o, seed, cond) for cond in conds}  # trained when something needs it
    for cond in ("W+", "W-"):
        if cond in conds and not o["quick"] and not gate_passes(
                warm_gap(o, seed, cond, warms[cond]), cond):
            return {"void": cond}
    out = {cond: {arm: one_run(o, seed, cond, arm, warms[cond]) for arm in arms}
           for cond in conds}
    if controls:
        for cond in CONTROLS:
            out[cond] = {"dapo": one_run(o, seed, cond, "dapo", Warm(o, seed, cond))}
    return out


# ----------------------------------------------------------------------------- the analysis

def per_seed(runs, seeds):
    """The per-seed numbers the contrasts read: drifts, the arms' differences, I, the
    positive control, the mechanism's push, and whether the seed's runs are valid."""
    rows = []
    for s in seeds:
        r = runs[s]
        d = lambda c, a: r[c][a]["drift"] if c in r and a in r[c] else None
        diff = lambda c: (None if None in (d(c, "grpo"), d(c, "dapo"))
                          else d(c, "grpo") - d(c, "dapo"))
        ok = lambda c: all((r[c][a]["manipulation"] or 0) >= GAP_SHARE for a in ARMS) \
            if c in r else False
        # a run that fails the manipulation check is void: its condition's difference is
        # left out of the contrasts (and kept in "raw diff" for the descriptive analysis)
        valid = {c: ok(c) for c in ("W+", "W-", "NC")}
        row = {"seed": s, **{f"diff {c}": diff(c) if valid.get(c, True) else None
                             for c in CONDITIONS},
               **{f"raw diff {c}": diff(c) for c in CONDITIONS},
               **{f"valid {c}": v for c, v in valid.items()},
               "pc": (None if "PC+" not in r else d("PC+", "dapo") - d("PC-", "dapo")),
               **{f"push_1L {c}": r[c]["grpo"]["push_1L"] for c in CONDITIONS if c in r}}
        valid = row["valid W+"] and row["valid W-"]
        row["I"] = (diff("W-") - diff("W+")) if valid and None not in (diff("W-"), diff("W+")) \
            else None
        row["I_all"] = (None if None in (diff("W-"), diff("W+")) else diff("W-") - diff("W+"))
        rows.append(row)
    return rows


def analyse(runs, seeds):
    """The registered contrasts (results/e12_preregistration.md)."""
    rows = per_seed(runs, seeds)
    col = lambda k: [row[k] for row in rows]
    primary = {"I = [grpo - dapo]_W- - [grpo - dapo]_W+": stats.contrast(col("I"), 0.0, "> 0",
                                                                         seeds)}
    sec = {
        "[grpo - dapo]_W+": stats.contrast(col("diff W+"), 0.0, "< 0", seeds),
        "[grpo - dapo]_W-": stats.contrast(col("diff W-"), 0.0, "> 0", seeds),
        "[grpo - dapo]_W0": stats.contrast(col("diff W0"), 0.0, "about 0", seeds),
        "[grpo - dapo]_NC": stats.contrast(col("diff NC"), 0.0, "about 0", seeds),
        "wrong-rollout length in W+, grpo - dapo": stats.contrast(
            [mean_of(runs[s]["W+"]["grpo"]["length_incorrect"]) for s in seeds],
            [mean_of(runs[s]["W+"]["dapo"]["length_incorrect"]) for s in seeds], "> 0", seeds),
        "choice entropy change in W+ and W-, grpo - dapo": stats.contrast(
            [ent(runs[s], "grpo") for s in seeds], [ent(runs[s], "dapo") for s in seeds],
            "none", seeds),
    }
    ps = [stats.p_value(c) if c["n"] > 1 else None for c in sec.values()]
    held = [p for p in ps if p is not None]
    adj = iter(stats.holm(held)) if held else iter(())
    for c, p in zip(sec.values(), ps):
        c["p"], c["p_holm"] = p, (next(adj) if p is not None else None)
    for k in ("[grpo - dapo]_W0", "[grpo - dapo]_NC"):
        sec[k]["equivalence"] = stats.verdict(sec[k], MARGIN)
    primary_c = next(iter(primary.values()))
    primary_c["p"] = stats.p_value(primary_c) if primary_c["n"] > 1 else None
    checks = {
        "positive control, PC+ - PC- (dapo)": stats.contrast(col("pc"), 0.0, f">= {PC_MIN}",
                                                             seeds),
        "mechanism: grpo's summed 1/L push on the choice, W+": stats.contrast(
            col("push_1L W+"), 0.0, "< 0", seeds),
        "mechanism: the same, W-": stats.contrast(col("push_1L W-"), 0.0, "> 0", seeds),
        "primary with void runs kept": stats.contrast(col("I_all"), 0.0, "> 0", seeds),
    }
    xs = [row[f"push_1L {c}"] for row in rows for c in CONDITIONS if row.get(f"push_1L {c}")
          is not None and row[f"diff {c}"] is not None]
    ys = [row[f"diff {c}"] for row in rows for c in CONDITIONS if row.get(f"push_1L {c}")
          is not None and row[f"diff {c}"] is not None]
    checks["predicted push against observed grpo - dapo drift (Pearson r)"] = {
        "r": stats.pearson(xs, ys) if len(xs) > 2 else None, "n": len(xs), "predicted": "> 0"}
    return primary, sec, checks, rows


def primary_verdict(c, valid_seeds, pc_passes):
    """The registered reading of the primary (results/e12_preregistration.md): *void* if
    fewer than VOID_BELOW seeds pass the manipulation check; *effect* if the 95 % interval
    lies above 0, *contradicted* if below; *equivalent* (no effect) if it lies inside
    +-PRIMARY_MARGIN and the positive control passed; else *inconclusive*."""
    if valid_seeds < VOID_BELOW:
        return "void", f"{valid_seeds} seeds pass the manipulation check, fewer than {VOID_BELOW}"
    if c["diff"] is None or c["half"] is None or c["half"] != c["half"]:
        return "inconclusive", "too few seeds for an interval"
    lo, hi = c["diff"] - c["half"], c["diff"] + c["half"]
    if lo > 0:
        return "effect", f"the interval [{lo:.2f}, {hi:.2f}] lies above 0, as predicted"
    if hi < 0:
        return "contradicted", f"the interval [{lo:.2f}, {hi:.2f}] lies below 0"
    inside = -PRIMARY_MARGIN < lo and hi < PRIMARY_MARGIN
    if inside and pc_passes:
        return "equivalent", (f"the interval [{lo:.2f}, {hi:.2f}] lies inside "
                              f"+-{PRIMARY_MARGIN:g} nats: no effect of that size")
    why = (f"inside +-{PRIMARY_MARGIN:g}, but the positive control failed: the instrument "
           f"is too weak to read a null as no effect" if inside else
           f"it crosses 0 and +-{PRIMARY_MARGIN:g}; smallest detectable effect "
           f"{c['mde']:.2f} nats")
    return "inconclusive", f"the interval [{lo:.2f}, {hi:.2f}]: {why}"


def decisions(primary, secondary, checks, runs, seeds, arms):
    """Every registered decision, computed: the manipulation check and the void rule, the
    positive control's pass, the measurable-choice (0.1-0.9) and accuracy checks, the
    primary's verdict and the equivalence readings of W0 and NC."""
    rows = per_seed(runs, seeds)
    valid = [r["seed"] for r in rows if r["valid W+"] and r["valid W-"]]
    pc = checks["positive control, PC+ - PC- (dapo)"]
    pc_passes = pc["diff"] is not None and pc["diff"] >= PC_MIN
    inside = {}
    for cond in list(CONDITIONS) + list(CONTROLS):
        for arm in arms:
            ells = [dict(runs[s][cond][arm]["ell"])[STEPS] for s in seeds
                    if cond in runs[s] and arm in runs[s][cond]
                    and STEPS in dict(runs[s][cond][arm]["ell"])]
            if ells:
                p = 1 / (1 + math.exp(-sum(ells) / len(ells)))
                inside[f"{cond} {arm}"] = {"p": p, "inside": INSIDE[0] <= p <= INSIDE[1]}
    # accuracy is the reward of the four parity conditions (the controls reward restating)
    rewards = {f"{c} {a} s{s}": mean_of(runs[s][c][a]["reward"]) for s in seeds
               for c in CONDITIONS if c in runs[s] for a in runs[s][c]
               if runs[s][c][a].get("reward")}
    verdict, why = primary_verdict(next(iter(primary.values())), len(valid), pc_passes)
    equiv = {}
    for k in ("[grpo - dapo]_W0", "[grpo - dapo]_NC"):
        v = stats.verdict(secondary[k], MARGIN)
        if v.startswith("agree") and not pc_passes:  # a weak instrument reads no null
            v = "inconclusive: inside the margin, but the positive control failed"
        equiv[k] = v
    return {
        "primary": {"verdict": verdict, "why": why, "margin": PRIMARY_MARGIN},
        "manipulation": {"valid_seeds": valid, "n_valid": len(valid), "void_below": VOID_BELOW,
                         "primary_void": len(valid) < VOID_BELOW},
        "positive_control": {"nats": pc["diff"], "needs": PC_MIN, "passes": pc_passes},
        "choice_inside": {"range": list(INSIDE), "arms": inside,
                          "saturated": sorted(k for k, v in inside.items() if not v["inside"])},
        "accuracy": {"range": list(ACCURACY), "n_runs": len(rewards),
                     "outside": sorted(k for k, v in rewards.items()
                                       if not ACCURACY[0] <= v <= ACCURACY[1])},
        "equivalence": equiv,
    }


def print_decisions(d):
    """The registered decisions in a few plain lines."""
    print(f"decision: primary {d['primary']['verdict']}: {d['primary']['why']}")
    m = d["manipulation"]
    print(f"decision: {m['n_valid']} seeds pass the manipulation check "
          f"({'void: fewer than' if m['primary_void'] else 'at least'} {m['void_below']})")
    pc = d["positive_control"]
    nats = "n/a" if pc["nats"] is None else f"{pc['nats']:.2f}"
    print(f"decision: positive control {nats} nats, {'passes' if pc['passes'] else 'fails'} "
          f"(needs >= {pc['needs']:g})")
    sat = d["choice_inside"]["saturated"]
    print(f"decision: choice inside 0.1-0.9 at step {STEPS}: "
          + ("every arm" if not sat else "saturated: " + ", ".join(sat)))
    out = d["accuracy"]["outside"]
    print(f"decision: accuracy 0.3-0.7 in {d['accuracy']['n_runs'] - len(out)} of "
          f"{d['accuracy']['n_runs']} runs (descriptive)")
    for k, v in d["equivalence"].items():
        print(f"decision: {k}: {v}")


def mean_of(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def ent(r, arm):
    """The change of the choice's entropy, warm start to the measurement, mean of W+, W-."""
    vals = [r[c][arm]["entropy_end"] - r[c][arm]["entropy_start"] for c in ("W+", "W-")
            if c in r and arm in r[c]]
    return sum(vals) / len(vals) if vals else None


def per_arm_table(runs, seeds, arms):
    """Mean drift, final p, manipulation share and summed push per condition and arm."""
    out = {}
    for cond in list(CONDITIONS) + list(CONTROLS):
        for arm in arms:
            recs = [runs[s][cond][arm] for s in seeds if cond in runs[s] and arm in runs[s][cond]]
            if recs:
                out[f"{cond} {arm}"] = {
                    k: common.ci([r[k] for r in recs])
                    for k in ("drift", "p_end", "manipulation", "push_1L", "seconds")}
                out[f"{cond} {arm}"]["min p_end"] = min(r["p_end"] for r in recs)
                out[f"{cond} {arm}"]["max p_end"] = max(r["p_end"] for r in recs)
    return out


# ----------------------------------------------------------------------------- calibration

def calibrate(o):
    """Seeds 1000-1001 (never evaluation seeds): W+ and W- on each, the positive control
    on the first; the checks the design must pass, the effect's size from theory and from
    the runs, sd(I) and the seeds for 80 % power. (W0 and the null are not calibrated:
    the machine's time went to sd(I); their checks are registered for the evaluation.)"""
    t0 = time.time()
    seeds = list(CALIB_SEEDS)
    s0 = seeds[0]  # the positive control on one seed, after its W+ and W-
    o["steps"] = CALIB_STEPS
    full = {s0: seed_runs(o, s0, ("W+", "W-"), ARMS, controls=False)}
    full.update({s: seed_runs(o, s, ("W+", "W-"), ARMS, controls=False) for s in seeds[1:]})
    full[s0].update({c: {"dapo": one_run(o, s0, c, "dapo", warm(o, s0, c))} for c in CONTROLS})
    trained = lambda s, c: os.path.exists(os.path.join(o["records"],
                                                       f"warm_parity_{CONDITIONS[c]}_s{s}.json"))
    gates = {f"{c} s{s}": warm_gap(o, s, c, warm(o, s, c)) for s in seeds for c in ("W+", "W-")
             if trained(s, c)}
    void = [s for s in seeds if "void" in full[s]]
    seeds = [s for s in seeds if s not in void]
    out = {S: summary_at(o, full, seeds, S) for S in CANDIDATES}
    # the measurement step: the latest candidate at which every calibration run passes the
    # manipulation check and every condition x arm keeps the choice inside 0.1-0.9
    ok = [S for S in CANDIDATES if out[S]["passes"]]
    data = {"experiment": "e12_covariance calibration", "seeds": seeds, "lr": o["lr"],
            "steps_run": CALIB_STEPS, "sft_steps": o["sft_steps"],
            "chosen_step": max(ok) if ok else None, "gates": gates, "void_seeds": void,
            "at_step": {str(S): out[S] for S in CANDIDATES},
            "warm_seconds": {f: common.load_record(os.path.join(o["records"], f), ("seconds",))
                             ["seconds"] for f in sorted(os.listdir(o["records"]))
                             if f.startswith("warm_")},
            "run_seconds": common.ci([full[s][c][a]["seconds"] for s in seeds for c in full[s]
                                      for a in full[s][c]]),
            "seconds": round(time.time() - t0, 1)}
    for S in CANDIDATES:
        print(f"step {S}: " + "  ".join(f"{k} {out[S][k]}" for k in (
            "passes", "positive_control_nats", "theory_I", "calibration_I", "sd_I",
            "effect_to_detect", "seeds_needed")))
    print(f"chosen measurement step: {data['chosen_step']}")
    common.save("e12_calibration", common.clean(data), o["out"])
    return data


def at_step(o, rec, S):
    """A record's numbers as if the run had stopped at step S (its per-step values; a
    record without them reads its run's metrics.jsonl)."""
    steps = rec.get("push_1L_steps")
    if steps is None:
        run = f"{rec['cond']}_{rec['arm']}_s{rec['seed']}".replace("+", "p").replace("-", "m")
        ms = rl_of(common.metrics_lines(os.path.join(o["out"], "runs", "e12", run,
                                                     "metrics.jsonl")))
        rec = dict(rec, push_1L_steps=[m.get("lencov_choice_1L") for m in ms],
                   push_steps=[m.get("lencov_choice") for m in ms])
    ell = dict(rec["ell"])
    return dict(rec, drift=ell[S] - ell[0], p_end=1 / (1 + math.exp(-ell[S])),
                manipulation=manipulation(rec["gap"][:S], rec["cond"]),
                push_1L=sum(x or 0.0 for x in rec["push_1L_steps"][:S]),
                push=sum(x or 0.0 for x in rec["push_steps"][:S]),
                reward=rec["reward"][:S], length_incorrect=rec["length_incorrect"][:S])


def summary_at(o, full, seeds, S):
    """The calibration's numbers had every run stopped at step S."""
    runs = {s: {c: {a: at_step(o, r, S) for a, r in arms.items()} for c, arms in full[s].items()}
            for s in seeds}
    s0 = seeds[0]
    rows = per_seed(runs, seeds)
    Is = [r["I_all"] for r in rows]
    sd_I = stats.paired(Is, [0.0] * len(Is))["sd"]
    pc = rows[0]["pc"]
    # theory: the positive control's credit push against its drift gives nats per unit of
    # summed push; the grpo - dapo difference of push_1L in W- minus W+ scales by it
    pc_push = runs[s0]["PC+"]["dapo"]["push"] - runs[s0]["PC-"]["dapo"]["push"]
    per_unit = pc / pc_push if pc_push else None
    push_I = [runs[s]["W-"]["grpo"]["push_1L"] - runs[s]["W+"]["grpo"]["push_1L"] for s in seeds]
    theory_I = per_unit * mean_of(push_I) if per_unit is not None else None
    cal_I = mean_of(Is)
    # the effect to detect: DETECT nats, about two thirds of the calibration's I at the
    # chosen step (one valid seed); the theory's figure, the positive control's nats per unit
    # of push times the 1/L push, is reported beside it, not used: AdamW's steps do not grow
    # with the push (the control's push was 6 times larger and moved the choice 1.3 times)
    target = DETECT
    # an sd from fewer than two valid seeds does not exist; never below the earlier probe's
    # 1.33 nats (3 RL seeds of a chain variant)
    sd_use = 1.33 if sd_I is None or sd_I != sd_I else max(sd_I, 1.33)
    manip = {f"{c} {a} s{s}": runs[s][c][a]["manipulation"]
             for s in seeds for c in runs[s] for a in runs[s][c]}
    table = per_arm_table(runs, seeds, ARMS)
    inside = all(0.1 <= 1 / (1 + math.exp(-mean_of([math.log(p / (1 - p)) for p in
                                                    [runs[s][c][a]["p_end"] for s in seeds
                                                     if c in runs[s] and a in runs[s][c]]])))
                 <= 0.9 for c in ("W+", "W-", "PC+", "PC-") for a in ARMS
                 if any(c in runs[s] and a in runs[s][c] for s in seeds))
    passes = inside and all(v is None or v >= GAP_SHARE for v in manip.values())
    return {"passes": passes, "choice_inside": inside, "rows": rows, "per_arm": table,
            "manipulation": manip,
            "p_end": {f"{c} {a} s{s}": runs[s][c][a]["p_end"]
                      for s in seeds for c in runs[s] for a in runs[s][c]},
            "positive_control_nats": pc, "pc_push": pc_push, "nats_per_unit_push": per_unit,
            "theory_I": theory_I, "calibration_I": cal_I, "sd_I": sd_I, "sd_used": sd_use,
            "effect_to_detect": target, "seeds_needed": stats.seeds_needed(sd_use, target)}


# ----------------------------------------------------------------------------- main

def main(argv):
    o = common.parse(argv, EXTRA, __doc__, redraw=("e12_covariance", plot),
                     unused=("jobs",), modes=("calibrate", "dr_grpo"))
    o.update(lr=LR, steps=STEPS, sft_steps=SFT_STEPS)
    if o["quick"]:  # a smoke test on a calibration-range seed, small and short
        o.update(seeds=[QUICK_SEED], small=True, steps=6, sft_steps=40)
    o["records"] = os.path.join(o["out"], "e12")
    os.makedirs(o["records"], exist_ok=True)
    if o["calibrate"]:
        return calibrate(o)
    arms = ARMS + (("dr_grpo",) if o["dr_grpo"] else ())
    conds = ("W+", "W-") if o["quick"] else tuple(CONDITIONS)
    t0 = time.time()
    runs, void = {}, {}
    # seeds in order until --valid of them pass the warm-start gate (a seed is left out
    # before any of its RL runs, so the rule cannot look at an outcome)
    seed = o["seeds"][0]
    while len(runs) < (1 if o["quick"] else o["valid"]) and seed < o["seeds"][0] + 3 * o["valid"]:
        r = seed_runs(o, seed, conds, arms, controls=not o["quick"])
        if "void" in r:
            void[seed] = r["void"]
            print(f"seed {seed}: the {r['void']} warm start fails its gate; left out", flush=True)
        else:
            runs[seed] = r
            print(f"seed {seed} done [{time.time() - t0:.0f}s]", flush=True)
        seed += 1
    seeds = sorted(runs)
    if o["quick"]:
        rows = per_seed(runs, seeds)
        print({k: v for k, v in rows[0].items()})
        return rows
    primary, secondary, checks, rows = analyse(runs, seeds)
    data = {"experiment": "e12_covariance", "seeds": seeds, "void_seeds": void,
            "lr": o["lr"], "steps": o["steps"],
            "arms": arms, "margin": MARGIN, "primary": primary, "secondary": secondary,
            "checks": checks, "rows": rows, "per_arm": per_arm_table(runs, seeds, arms),
            "decisions": decisions(primary, secondary, checks, runs, seeds, arms),
            "curves": {f"{c} {a}": [runs[s][c][a]["ell"] for s in seeds]
                       for c in CONDITIONS for a in ARMS},
            "exploratory": {"retries of wrong rollouts at step 20, W+": retries(o, seeds)},
            "seconds": round(time.time() - t0, 1)}
    common.print_contrasts(primary)
    common.print_contrasts(secondary, "secondary")
    common.print_contrasts({k: v for k, v in checks.items() if "diff" in v}, "check")
    print_decisions(data["decisions"])
    data = common.clean(data)
    common.save("e12_covariance", data, o["out"], lambda plt: plot(plt, data))
    return data


def plot(plt, data):
    """The choice's log-odds over RL steps (change from the warm start), grpo against
    dapo, in each condition: the mean over seeds with a 95 % t band."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey=True, layout="constrained")
    colors = {"grpo": "tab:red", "dapo": "tab:green"}
    titles = {"W+": "W+: wrong rollouts 16 tokens longer",
              "W-": "W\u2212: right rollouts 16 tokens longer",
              "W0": "W0: 0-5 retries at random", "NC": "NC: the choice changes no length"}
    for ax, cond in zip(axes.flat, CONDITIONS):
        for arm in ARMS:
            curves = data["curves"].get(f"{cond} {arm}")
            if not curves:
                continue
            steps = [s for s, _ in curves[0]]
            cols = [[c[i][1] - c[0][1] for c in curves] for i in range(len(steps))]
            common.mean_band(ax, steps, cols, colors[arm], arm, lw=1.2)
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_title(titles[cond])
        ax.set_xlabel("RL step (read at 0, 10 and 20)")
        ax.set_ylabel("log-odds of restating, change (nats)")
        ax.legend()
    return fig


def retries(o, seeds):
    """Exploratory (not registered): the mean number of retries in the wrong rollouts of
    each W+ run's final policy, apart from the restatement (Secondary 5's length counts
    both), grpo - dapo over the seeds whose run folders are on this machine. 32 training
    problems x 8, temperature 1, a stream of their own."""
    vals = {}
    for s in seeds:
        per_arm = {}
        for arm in ARMS:
            path = os.path.join(o["out"], "runs", "e12", f"Wp_{arm}_s{s}", "ckpt.pt")
            if not os.path.exists(path):
                break
            task, b = common.sample_checkpoint(path, "parity_wrong_long", s, 9500 + s, 32)
            texts = [task.decode(row[m].tolist()) for row, m in zip(b.tokens, b.mask)]
            wrong = [t for t, r in zip(texts, b.rewards.tolist()) if r == 0]
            per_arm[arm] = {"retries": mean_of([t.count(";") for t in wrong]),
                            "restated": mean_of([float(t.startswith("(")) for t in wrong])}
        if len(per_arm) == len(ARMS):
            vals[s] = per_arm
    got = sorted(vals)
    return {"per_seed": {str(s): vals[s] for s in got},
            "grpo - dapo, retries": stats.contrast(
                [vals[s]["grpo"]["retries"] for s in got],
                [vals[s]["dapo"]["retries"] for s in got], "none (exploratory)", got),
            "grpo - dapo, restated share": stats.contrast(
                [vals[s]["grpo"]["restated"] for s in got],
                [vals[s]["dapo"]["restated"] for s in got], "none (exploratory)", got)}


if __name__ == "__main__":
    common.cli(main)
