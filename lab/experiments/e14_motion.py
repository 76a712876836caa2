"""E14: which part of the step carries 1/L's drift of a choice the reward ignores?

Question. E12 found that GRPO's 1/L_i moves the choice ``(`` (the first completion token of
the ``parity_*`` tasks) away from the longer variant when wrong rollouts are longer (W+)
and towards it when right ones are (W-): I = [grpo - dapo]_{W-} - [grpo - dapo]_{W+} =
+1.58 nats in 20 AdamW steps. What carried it? The choice's motion (lab/choice_motion.py)
splits each step's change of the choice's log-odds at the step's prompts into the pushes of
the decision's own coefficients (own and history at the prompt, peers at the other
prompts: the first-order push of THEORY.md 2.7, carried by shared parameters), the rest of
the completions' tokens (same, other: [P2]'s coupling) and the optimizer's memory, which
the first tokens' own momentum splits into the decision's part and the rest's.

Testbed and arms: E13's at two retries (W+2, W-2: E12's 16-token gap; lab/testbeds.py),
``grpo`` against ``dapo`` on-policy from the condition's warm start, under AdamW (E12's lr),
plain SGD and Adam with beta1 = 0 (E13's KL-matched learning rates); the positive control
PC+ against PC- (the reward is restating: the choice is credited) under dapo and AdamW.
Every run measures every step (--motion_every=1).

Primary (results/e14_preregistration.md): per seed, x = I_decision - I_motion / 2 under
AdamW. I_motion = [grpo - dapo]_{W-} - [grpo - dapo]_{W+} of the choice's motion summed over
the steps; I_decision its part that the first tokens' coefficients made (own + history +
peers, and the memory they left in the momentum). x > 0: the decision's own coefficients
carry more than half of the difference; x < 0: the rest of the completions' tokens do.

    python -m lab.experiments.e14_motion --quick       # seed 4100, tiny, scratch only
    python -m lab.experiments.e14_motion --calibrate   # seeds 4000-4001
    python -m lab.experiments.e14_motion               # the evaluation seeds (results/)
"""
import math
import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e14_motion\n")
    sys.exit(2)
from lab.experiments import common
from lab.experiments import stats
from lab.experiments import e13_dose as e13
from lab.experiments.e12_covariance import rl_of
from lab import choice_motion

ARMS = ("grpo", "dapo")
OPTIMIZERS = ("adamw", "sgd", "adam_b1_0")  # AdamW's is the primary; the others secondaries
CONDS = ("W+2", "W-2")
CONTROLS = ("PC+", "PC-")
STEPS, EVAL_EVERY, SFT_STEPS = 20, 10, 800  # E12's and E13's
CALIB_SEEDS, QUICK_SEED, FIRST_SEED = (4000, 4001), 4100, 400
# the parts of the choice's motion that the analysis reads (choice_motion.py): the decision's
# coefficients (its first tokens, now or carried by momentum) against the rest of the
# completions' tokens (now or carried); and their pieces
GROUPS = {"decision": ("own", "history", "peers", "memory_first"),
          "rest": ("same", "other", "memory_rest", "decay"),
          "now": ("own", "history", "peers"), "tabular": ("own", "history"),
          "coupling": ("same", "other"), "memory": ("memory",)}
# fixed by the pre-registration (results/e14_preregistration.md) from the calibration seeds
N_SEEDS = 6        # evaluation seeds passing the warm-start gate: the power calculation's
MOST_SEEDS = 18    # at most this many tried
AGREEMENT = 0.01   # the instrument's check: sum |gap| / sum |change| of a run at most this
VOID_BELOW = 5     # fewer valid seeds than this: the primary is void
EXTRA = {"seeds": (str(FIRST_SEED), "the first evaluation seed (quick: 4100; calibrate: "
                                    "4000-4001)"),
         "calibrate": (False, "the calibration on seeds 4000-4001 (results/e14_calibration.json)"),
         "small": (False, "tiny model and batches, for smoke tests")}
RECORD = {"seed": common.INT, "cond": common.STR, "arm": common.STR, "opt": common.STR,
          "lr": common.NUM, "flags": common.STRS, "seconds": common.NUM, "ell": common.STEPS,
          "drift": common.NUM, "gap": common.NUMS_OR_NONE, "manipulation": common.NUM_OR_NONE,
          "reward": common.NUMS}  # a run's record (record_of), with "motion" and "steps"


# ----------------------------------------------------------------------------- one run

def tag(cond, arm, opt, seed):
    return f"{cond}_{arm}_{opt}_s{seed}".replace("+", "p").replace("-", "m")


def one_run(o, seed, cond, arm, opt):
    """One run's record, cached in <records>/ (a record on disk is a finished run)."""
    lr = o["lr"][opt]
    warm = e13.Warm(o, seed, cond)
    flags = [f"--task={e13.task_of(cond)}", f"--init_from={warm.path}", f"--seed={seed}",
             f"--loss={arm}", f"--optimizer={opt}", f"--lr={lr:g}", f"--rl_steps={o['steps']}",
             f"--eval_every={EVAL_EVERY}", "--motion_every=1"]
    if o["small"]:
        flags += ["--prompts_per_step=4", "--group_size=4", "--eval_size=16"]
    name = tag(cond, arm, opt, seed)
    cache = os.path.join(o["records"], f"{name}.json")
    kept = [f"--init_from={os.path.relpath(warm.path, o['out'])}"
            if f.startswith("--init_from=") else f for f in flags]
    rec = common.load_record(cache, ("flags", "drift"))
    if rec is not None and checked(cache, rec)["flags"] == kept:
        return rec
    warm.train()
    run_dir = os.path.join(o["out"], "runs", "e14", name)
    t0 = time.time()
    ms = common.run(flags, run_dir)
    rec = record_of(ms, seed, cond, arm, opt, lr, kept, time.time() - t0)
    common.save_record(cache, rec)
    return rec


def checked(path, rec):
    """A cached record as record_of wrote it (common.check_record's rule), its summed motion
    and per-step lists included: else one line naming it, never dropped."""
    common.check_record(path, rec, RECORD, optional=())
    keys = ("dlo", *choice_motion.PARTS, "gap", "abs", "abs_gap", "memory_first")
    for field, kind in (("motion", common.NUM_OR_NONE), ("steps", common.NUMS_OR_NONE)):
        got = rec.get(field)
        bad = next((k for k in keys if not isinstance(got, dict) or k not in got
                    or not common.holds(got[k], kind)), None)
        if bad is not None:
            raise common.CliError(f"record {path} has no {kind} in {field}[{bad!r}]: it is not "
                                  f"what the experiment wrote; restore it (git checkout) or "
                                  f"delete it to run it again")
    return rec


def record_of(ms, seed, cond, arm, opt, lr, flags, seconds):
    steps = rl_of(ms)
    ell = {m["step"]: m["choice_log_odds"] for m in ms
           if m["phase"] == "rl" and "choice_log_odds" in m}
    summary = next((m for m in ms if m["phase"] == "summary"), {})
    keys = ("dlo", *choice_motion.PARTS, "gap", "abs", "abs_gap", "memory_first")
    per_step = {k: [m.get(f"choice_motion_{k}") for m in steps] for k in keys}
    gaps = [m.get("lencov_gap") for m in steps]
    motion = {k: None if None in v else sum(v) for k, v in per_step.items()}
    if motion["memory_first"] is not None and motion["memory"] is not None:
        motion["memory_rest"] = motion["memory"] - motion["memory_first"]
    return {"seed": seed, "cond": cond, "arm": arm, "opt": opt, "lr": lr, "flags": flags,
            "seconds": round(seconds, 1), "ell": sorted(ell.items()),
            "drift": ell[max(ell)] - ell[0], "gap": gaps,
            "manipulation": e13.manipulation(gaps, cond),
            "reward": [m["reward"] for m in steps], "steps": per_step,
            "motion": motion,  # summed over the steps; None where a step lacks it
            # the group-shared tokens' motion ledger (the run's summary, motion.py)
            "shared": {k: v for k, v in summary.items() if k.startswith("motion_")}}


def agreement(rec):
    """The instrument's check of one run: sum over steps of mean |gap| / mean |change|."""
    m = rec["motion"]
    return m["abs_gap"] / m["abs"] if m["abs"] else None


def plan():
    """Every run of a seed: (cond, arm, optimizer)."""
    out = [(c, a, opt) for opt in OPTIMIZERS for c in CONDS for a in ARMS]
    return out + [(c, "dapo", "adamw") for c in CONTROLS]


def seed_runs(o, seed):
    """{(cond, arm, opt): record}, or {"void": cond} when a warm start fails its gate (both
    gates run before any RL run of the seed, as in E12)."""
    if not o["quick"]:
        for cond in CONDS:
            if not e13.gate(o, seed, cond, e13.Warm(o, seed, cond)):
                return {"void": cond}
    return {(c, a, opt): one_run(o, seed, c, a, opt) for c, a, opt in plan()}


# ----------------------------------------------------------------------------- the analysis

def part(rec, name):
    """A run's summed motion of a group of parts (GROUPS), or of one part, or "dlo"; None
    where a step did not log it (memory's split needs every step followed)."""
    xs = [rec["motion"].get(p) for p in GROUPS.get(name, (name,))]
    return None if None in xs else sum(xs)


def per_seed(r):
    """One seed's numbers: per optimizer, I of the summed motion and of each part and group
    of parts (W- minus W+ of grpo - dapo), x = I_decision - I_motion / 2, whether its runs
    pass both checks; the positive control's PC+ - PC- of each; the held-out I (E12's)."""
    row = {}
    minus = lambda a, b: None if None in (a, b) else a - b
    for opt in OPTIMIZERS:
        diff = lambda c, k: minus(part(r[(c, "grpo", opt)], k), part(r[(c, "dapo", opt)], k))
        for k in ("dlo", *choice_motion.PARTS, "memory_first", "memory_rest", *GROUPS):
            row[f"I {k} {opt}"] = minus(diff("W-2", k), diff("W+2", k))
        half = row[f"I dlo {opt}"] / 2
        row[f"x {opt}"] = minus(row[f"I decision {opt}"], half)
        row[f"held-out I {opt}"] = (r[("W-2", "grpo", opt)]["drift"] - r[("W-2", "dapo", opt)]
                                    ["drift"]) - (r[("W+2", "grpo", opt)]["drift"]
                                                  - r[("W+2", "dapo", opt)]["drift"])
        runs = [r[(c, a, opt)] for c in CONDS for a in ARMS]
        row[f"valid {opt}"] = all((x["manipulation"] or 0) >= e13.GAP_SHARE for x in runs) \
            and all((agreement(x) or 0) <= AGREEMENT for x in runs) \
            and row[f"x {opt}"] is not None
    for k in ("dlo", *GROUPS):
        row[f"pc {k}"] = minus(part(r[("PC+", "dapo", "adamw")], k),
                               part(r[("PC-", "dapo", "adamw")], k))
    row["pc x"] = minus(row["pc decision"], row["pc dlo"] / 2)
    return row


def share_interval(a, b, q=None):
    """Fieller's 95 % interval of mean(a) / mean(b) over paired seeds: the shares s at which
    the paired t-test of a - s b does not reject. None where b's mean is not clearly != 0
    (the set is then unbounded)."""
    n = len(a)
    if n < 2:
        return None
    q = q or stats.t_quantile(n - 1)
    ma, mb = sum(a) / n, sum(b) / n
    cov = lambda x, mx, y, my: sum((u - mx) * (v - my) for u, v in zip(x, y)) / (n - 1)
    saa, sbb, sab = cov(a, ma, a, ma), cov(b, mb, b, mb), cov(a, ma, b, mb)
    k = q * q / n
    A, B, C = mb * mb - k * sbb, ma * mb - k * sab, ma * ma - k * saa
    disc = B * B - A * C
    if A <= 0 or disc < 0:
        return None
    return ((B - math.sqrt(disc)) / A, (B + math.sqrt(disc)) / A)


PRIMARY = "x = I_decision - I_motion / 2, AdamW"  # the JSON's name of the primary contrast
SECONDARY = {  # one Holm family: (per-seed key, predicted); each against 0
    "I_own, AdamW: the choice's own copies' net push": ("I own adamw", "> 0"),
    "I_peers, AdamW: the decision's push at the other prompts": ("I peers adamw", "> 0"),
    "I_memory_first, AdamW: the decision's pushes carried by momentum":
        ("I memory_first adamw", "> 0"),
    "I_coupling, AdamW: the rest of the completions' tokens, in the step":
        ("I coupling adamw", "none"),
    "I_memory_rest, AdamW: the rest, carried by momentum": ("I memory_rest adamw", "none"),
    "x under SGD": ("x sgd", "> 0"),
    "x under Adam, beta1 = 0": ("x adam_b1_0", "> 0"),
}


def analyse(runs):
    """The registered contrasts (results/e14_preregistration.md) over the seeds whose runs
    pass both checks (per optimizer), and every registered decision."""
    good = {s: r for s, r in runs.items() if "void" not in r}
    rows = {s: per_seed(r) for s, r in good.items()}
    seeds = sorted(rows)
    col = lambda k, opt=None: [rows[s][k] if opt is None or rows[s][f"valid {opt}"] else None
                               for s in seeds]
    primary = stats.contrast(col("x adamw", "adamw"), 0.0, "> 0", seeds)
    primary["p"] = stats.p_value(primary) if primary["n"] > 1 else None
    valid = [s for s in seeds if rows[s]["valid adamw"]]
    a = [rows[s]["I decision adamw"] for s in valid]
    b = [rows[s]["I dlo adamw"] for s in valid]
    share = {"share": sum(a) / sum(b) if b and sum(b) else None,
             "interval": share_interval(a, b)}
    sec = {}
    for name, (key, pred) in SECONDARY.items():
        opt = key.split()[-1]
        sec[name] = stats.contrast(col(key, opt), 0.0, pred, seeds)
    ps = [stats.p_value(c) if c["n"] > 1 else None for c in sec.values()]
    adj = iter(stats.holm([p for p in ps if p is not None]))
    for c, p in zip(sec.values(), ps):
        c["p"], c["p_holm"] = p, (next(adj) if p is not None else None)
    pc = stats.contrast(col("pc decision"), 0.0, "> 0", seeds)
    checks = {"positive control: PC+ - PC- of the decision's part (dapo, AdamW)": pc,
              "positive control: its x": stats.contrast(col("pc x"), 0.0, "> 0", seeds),
              "held-out I (E12's outcome), AdamW": stats.contrast(col("held-out I adamw",
                                                                      "adamw"), 0.0, "> 0",
                                                                  seeds),
              "I of the summed motion, AdamW": stats.contrast(col("I dlo adamw", "adamw"), 0.0,
                                                              "> 0", seeds)}
    return {"primary": {PRIMARY: primary}, "share": share, "secondary": sec, "checks": checks,
            "rows": rows, "dapo": dapo_motion(good), "per_part": per_part(rows),
            "decisions": decisions(primary, share, pc, rows, runs)}


def per_part(rows):
    """Descriptive: per optimizer, each part's I over the seeds whose runs pass both checks
    (mean and 95 % t half-width)."""
    out = {}
    for opt in OPTIMIZERS:
        keep = [r for r in rows.values() if r[f"valid {opt}"]]
        for k in ("dlo", *choice_motion.PARTS, "memory_first", "memory_rest", *GROUPS):
            col = [r[f"I {k} {opt}"] for r in keep if r[f"I {k} {opt}"] is not None]
            out[f"{k} {opt}"] = list(stats.ci(col)) + [len(col)] if col else None
    return out


def dapo_motion(runs):
    """Descriptive (the critique: equal weights do not stop motion): under dapo, per
    optimizer, the W+2 and W-2 runs' summed motion of the choice, its mean |.|, and the mean
    of the decision's and the rest's parts."""
    out = {}
    for opt in OPTIMIZERS:
        recs = [r[(c, "dapo", opt)] for r in runs.values() for c in CONDS]
        if not recs:
            continue
        n = len(recs)
        mean = lambda xs: sum(xs) / len(xs) if xs else None
        out[opt] = {"runs": n, "abs_motion": mean([abs(x["motion"]["dlo"]) for x in recs]),
                    "motion": mean([x["motion"]["dlo"] for x in recs]),
                    **{k: mean([v for v in (part(x, k) for x in recs) if v is not None])
                       for k in ("decision", "rest", "now", "coupling", "memory")},
                    "abs_decision": mean([abs(v) for v in (part(x, "decision") for x in recs)
                                          if v is not None]),
                    "abs_rest": mean([abs(v) for v in (part(x, "rest") for x in recs)
                                      if v is not None])}
    return out


def decisions(primary, share, pc, rows, runs):
    """Every registered decision, computed: the void rule, the positive control's pass, the
    primary's verdict (beside it the share, which lies above 1/2 exactly when x's interval
    lies above 0)."""
    n_valid = sum(r["valid adamw"] for r in rows.values())
    pc_passes = pc["n"] > 1 and pc["diff"] - pc["half"] > 0
    c = primary
    if n_valid < VOID_BELOW:
        verdict, why = "void", f"{n_valid} seeds pass both checks, fewer than {VOID_BELOW}"
    elif c["half"] is None or c["half"] != c["half"]:
        verdict, why = "inconclusive", "too few seeds for an interval"
    else:
        lo, hi = c["diff"] - c["half"], c["diff"] + c["half"]
        if lo > 0:
            verdict, why = "decision", (f"x's interval [{lo:.3g}, {hi:.3g}] lies above 0: the "
                                        f"decision's own coefficients carry most of I")
        elif hi < 0 and pc_passes:
            verdict, why = "rest", (f"x's interval [{lo:.3g}, {hi:.3g}] lies below 0: the rest "
                                    f"of the completions' tokens carry most of I")
        elif hi < 0:
            verdict, why = "inconclusive", (f"x's interval [{lo:.3g}, {hi:.3g}] lies below 0, "
                                            f"but the positive control failed")
        else:
            verdict, why = "inconclusive", (f"x's interval [{lo:.3g}, {hi:.3g}] crosses 0; "
                                            f"smallest detectable x {c['mde']:.3g}")
    agree = [agreement(rec) for r in runs.values() if "void" not in r for rec in r.values()]
    return {"primary": {"verdict": verdict, "why": why, "share": share["share"],
                        "share_interval": share["interval"]},
            "valid_seeds": n_valid, "void_below": VOID_BELOW,
            "void_seeds": sorted(s for s, r in runs.items() if "void" in r),
            "positive_control": {"passes": pc_passes, "diff": pc["diff"], "half": pc["half"]},
            "agreement": {"band": AGREEMENT, "worst": max((x for x in agree if x is not None),
                                                          default=None),
                          "outside": sum(1 for x in agree if x is None or x > AGREEMENT)}}


BARS = (("dlo", "the choice's motion, I", "0.25"), ("now", "decision, in the step", "tab:red"),
        ("memory_first", "decision, carried by momentum", "salmon"),
        ("coupling", "other tokens, in the step", "tab:blue"),
        ("memory_rest", "other tokens, carried", "lightsteelblue"))
NAMES = {"adamw": "AdamW", "sgd": "SGD", "adam_b1_0": "Adam, beta1 = 0"}


def plot(plt, data):
    """Per optimizer, I of the choice's motion and of its parts (mean over the seeds whose
    runs pass both checks, 95 % t band; grey dots: one seed each)."""
    fig, ax = plt.subplots(figsize=(10, 5.4), layout="constrained")
    rows, width = list(data["rows"].values()), 0.16
    for i, opt in enumerate(OPTIMIZERS):
        keep = [r for r in rows if r[f"valid {opt}"]]
        for j, (k, label, color) in enumerate(BARS):
            x = i + (j - 2) * width
            col = [r[f"I {k} {opt}"] for r in keep if r[f"I {k} {opt}"] is not None]
            if not col or (k.startswith("memory") and opt != "adamw"):
                continue  # (without momentum, memory is 0 by construction: no bar)
            m, h = stats.ci(col)
            ax.bar([x], [m], width * 0.9, color=color, label=label if i == 0 else None,
                   yerr=[[h or 0.0], [h or 0.0]], capsize=3)
            ax.scatter([x] * len(col), col, s=8, color="0.35", zorder=3,
                       label="one seed" if i == j == 0 else None)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xticks(range(len(OPTIMIZERS)), [NAMES[o] for o in OPTIMIZERS])
    ax.set_ylabel("I: [grpo - dapo], W- minus W+ (nats)")
    ax.set_title("what carried 1/L's drift of the choice: the decision's coefficients, or the rest")
    ax.set_ylim(-0.4, 2.2)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=3, fontsize="small")
    return fig


def evaluate(o):
    """The evaluation seeds, in order until N_SEEDS pass the gate, then the analysis."""
    runs = seeds_of(o, o["seeds"][0], MOST_SEEDS, N_SEEDS)
    out = analyse(runs)
    out.update(experiment="e14_motion", seeds=sorted(runs))
    common.save("e14_motion", out, o["out"], lambda plt: plot(plt, out))
    d = out["decisions"]
    print(f"decision: primary {d['primary']['verdict']}: {d['primary']['why']}")
    print(f"decision: {d['valid_seeds']} seeds pass both checks; positive control "
          f"{'passes' if d['positive_control']['passes'] else 'fails'}; agreement worst "
          f"{d['agreement']['worst']}")
    return out


def seeds_of(o, first, most, need):
    """Seeds in order from ``first`` until ``need`` pass the gate (at most ``most`` tried):
    {seed: runs or {"void": cond}}."""
    runs, t0, valid = {}, time.time(), 0
    for seed in range(first, first + most):
        runs[seed] = seed_runs(o, seed)
        valid += "void" not in runs[seed]
        print(f"seed {seed} {'void' if 'void' in runs[seed] else 'done'} "
              f"[{time.time() - t0:.0f}s]", flush=True)
        if valid >= need:
            break
    return runs


def calibrate(o):
    """Seeds 4000 upwards until two pass the gate: the per-seed numbers, each run's
    agreement and seconds, the sd of x (the power calculation's), in e14_calibration.json."""
    runs = seeds_of(o, CALIB_SEEDS[0], 4, len(CALIB_SEEDS))
    good = {s: r for s, r in runs.items() if "void" not in r}
    rows = {s: per_seed(r) for s, r in good.items()}
    recs = [rec for r in good.values() for rec in r.values()]
    xs = [row["x adamw"] for row in rows.values()]
    out = {"experiment": "e14_motion calibration", "seeds": sorted(runs),
           "void": {s: r["void"] for s, r in runs.items() if "void" in r},
           "rows": rows,
           "agreement": {tag(x["cond"], x["arm"], x["opt"], x["seed"]): agreement(x)
                         for x in recs},
           "seconds": {tag(x["cond"], x["arm"], x["opt"], x["seed"]): x["seconds"]
                       for x in recs},
           "sd_x": stats.paired(xs, [0.0] * len(xs))["sd"] if len(xs) > 1 else None}
    common.save("e14_calibration", out, o["out"])
    for s, row in rows.items():
        print(f"seed {s}: " + ", ".join(f"{k} {v:+.3g}" for k, v in row.items()
                                        if isinstance(v, float)))
    return out


def main(argv):
    o = common.parse(argv, EXTRA, __doc__, redraw=("e14_motion", plot), modes=("calibrate",),
                     unused=("jobs",))
    o.update(lr=e13.calibrated_lr(o), steps=STEPS, sft_steps=SFT_STEPS)
    if o["quick"]:
        o.update(seeds=[QUICK_SEED], small=True, steps=3, sft_steps=40)
    o["records"] = os.path.join(o["out"], "e14")
    os.makedirs(o["records"], exist_ok=True)
    if o["calibrate"]:
        return calibrate(o)
    if o["quick"]:
        row = per_seed(seed_runs(o, QUICK_SEED))
        print({k: v for k, v in row.items()})
        return row
    return evaluate(o)


if __name__ == "__main__":
    common.cli(main)
