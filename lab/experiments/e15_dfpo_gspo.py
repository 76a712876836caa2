"""E15: does Min-Replace beat GSPO off-policy, and more so as the group grows? [P1]

Claim [P1, arXiv 2604.13088, abstract]: its transforms "stabilize training, improve sample
efficiency, and enhance final performance". Its Table 1, as a third-party reading reports it:
on Qwen3-32B, AIME25, GSPO 76.9 against Min-Replace 82.5, and the gain grows with the group
size G, +3.1 at G = 2 to +5.7 at G = 16.

Why off-policy. GSPO weights every token of completion i by one sequence ratio s_i =
exp(mean_t log rho_{i,t}); with reused data the copies of a shared token carry different s_i,
which breaks exchangeability (lab/objectives.py). Min-Replace gives the group one weight,
min_j s_j, with no gradient through the weight (loss.py). On-policy s_i = 1 and both
transforms do nothing.

Arms (each from the seed's warm start, with the seed's first rollout batch):
  gspo       s_i Â_i / (N L_i), clipped per sequence, Â = (r - mu) / sigma   (GSPO)
  dfpo_min   sg(min_j clip(s_j)) Â_i / (N L_max), Â = r - mu                 (Min-Replace)
  dfpo_orth  w~_i Â_i / (N L_max), sum_i Â_i w~_i = 0                         (Adv-Orthogonal)
  dfpo_raw   sg(clip(s_i)) Â_i / (N L_max): dfpo_min without the transform   (the isolator)
dfpo_min - dfpo_raw is the transform's own part; dfpo_raw - gspo is everything else the pair
changes (sigma, 1/L_i against 1/L_max, a clip on the gradient against a truncated weight).

Design (results/e15_preregistration.md): ``add`` with 4 digits (a 700-step SFT warm start that
RL does not saturate), G in {2, 4, 8, 16} with B = 32 / G prompts, so that every step samples
32 completions: the compute and the number of completions the gradient averages are the same
at every G; only how they split into groups changes. Reuse: two mini-batches and two epochs
(4 optimizer steps per batch), groups kept whole (``--batching=query``), so only the
objective decides whether a shared token cancels. One lr and one clip for every arm, fixed by
the stability rule on probe seeds: 1 +- 0.2, which bounds GSPO's sequence ratio and DFPO's
weights alike. ``gspo_ref`` (amendment 1) is gspo with GSPO's own sequence clip (3e-4, 4e-4).
The positive control is gspo at a third of the lr (G = 8).

Primary (paired by seed): D_G = final accuracy of dfpo_min - gspo (the mean of the last two
greedy evaluations on 256 held-out problems); (1) mean over G of D_G, (2) the slope of D_G
against log2 G. [P1] predicts both > 0.

    python -m lab.experiments.e15_dfpo_gspo --quick       # one seed, tiny, out/partial/
    python -m lab.experiments.e15_dfpo_gspo --calibrate   # probe seeds 4500-4501
    python -m lab.experiments.e15_dfpo_gspo               # the evaluation seeds (results/)
"""
import math
import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e15_dfpo_gspo\n")
    sys.exit(2)
from lab.experiments import common
from lab.experiments import stats
from lab import diagnostics, objectives
from plumbing import checkpoint
import toy_tasks

ARMS = ("gspo", "dfpo_min", "dfpo_orth", "dfpo_raw")
GROUP_SIZES = (2, 4, 8, 16)
COMPLETIONS = 32           # per RL step, at every G: B = COMPLETIONS / G prompts
TASK, DIGITS, SFT_STEPS = "add", 4, 700
STEPS, EVAL_EVERY, LAST = 100, 25, 2  # final accuracy: the mean of the LAST evaluations
REUSE = ["--minibatches=2", "--epochs=2", "--batching=query"]
CONTROL = ("gspo_slow", "gspo", 8, 1 / 3)  # (name, objective, G, lr factor): the positive control
REF = "gspo_ref"  # gspo with GSPO's own clip (its record's eps), at every G (amendment 1)
CALIB_SEEDS, QUICK_SEED, FIRST_SEED = (4500, 4501), 4600, 500
CANDIDATES = ((1e-5, 0.2), (5e-6, 0.2))  # (lr, clip), tried in order (calibrate)
SATURATED = 0.90           # a candidate where gspo ends at this or above is rejected
STABLE_FALL = 0.10         # the rule: no evaluation more than this below an earlier best ...
P1_GAIN = 0.056            # [P1]'s gain, 82.5 - 76.9 points: the effect the power is for
# fixed by the pre-registration (results/e15_preregistration.md) from the calibration
LR, CLIP = 1e-5, 0.2
N_SEEDS = 6                # evaluation seeds: the power calculation's, within the budget
RATIOS_MIN = 0.0008        # the manipulation check: gspo's ledger_ratios share at least this
VOID_BELOW = 4             # fewer valid seeds than this: the primaries are void
MARGIN = {"mean": 0.03, "slope": 0.0044}  # equivalence margins (accuracy; per doubling of G:
# half of [P1]'s 0.0087, amendment 2)
EXTRA = {"seeds": (str(FIRST_SEED), "the first evaluation seed (quick: 4600; calibrate: "
                                    "4500-4501)"),
         "calibrate": (False, "the stability rule and the power calculation on seeds "
                              "4500-4501 (results/e15_calibration.json)"),
         "small": (False, "tiny model and batches, for smoke tests")}
RECORD = {"seed": common.INT, "G": common.INT, "arm": common.STR, "lr": common.NUM,
          "flags": common.STRS, "seconds": common.NUM, "acc": common.STEPS,
          "final": common.NUM, "auc": common.NUM, "entropy": common.NUM,
          "ratios": common.NUM, "clip_frac": common.NUM, "reward": common.NUMS}


# ----------------------------------------------------------------------------- one run

def tag(arm, G, seed):
    return f"{arm}_G{G}_s{seed}"


def plan():
    """Every run of a seed: (arm, G), the positive control last."""
    return ([(a, G) for G in GROUP_SIZES for a in ARMS] + [(REF, G) for G in GROUP_SIZES]
            + [(CONTROL[0], CONTROL[2])])


def flags_of(o, seed, arm, G, lr, clip, warm):
    objective, factor = (CONTROL[1], CONTROL[3]) if arm == CONTROL[0] else (arm, 1.0)
    clips = ["--clip=sym", f"--clip_low={clip:g}"]
    if arm == REF:
        objective, (lo, hi) = "gspo", objectives.OBJECTIVES["gspo"].eps
        clips = ["--clip=higher", f"--clip_low={lo:g}", f"--clip_high={hi:g}"]
    flags = [f"--task={TASK}", f"--digits={DIGITS}", f"--init_from={warm}", f"--seed={seed}",
             f"--loss={objective}", *clips,
             f"--lr={lr * factor:g}", f"--rl_steps={o['steps']}",
             f"--eval_every={o['eval_every']}", f"--group_size={G}",
             f"--prompts_per_step={o['completions'] // G}", *REUSE]
    return flags + (["--eval_size=16"] if o["small"] else [])


def one_run(item):
    """One run's record, cached in <records>/ (a record on disk is a finished run)."""
    o, seed, arm, G, lr, clip = item
    warm = warm_start(o, seed)
    flags = flags_of(o, seed, arm, G, lr, clip, warm)
    kept = [f"--init_from={os.path.relpath(warm, o['out'])}"
            if f.startswith("--init_from=") else f for f in flags]
    cache = os.path.join(o["records"], f"{tag(arm, G, seed)}_lr{lr:g}.json")
    rec = common.load_record(cache, ("flags", "final"))
    if rec is not None and common.check_record(cache, rec, RECORD, ())["flags"] == kept:
        return rec
    run_dir = os.path.join(o["out"], "runs", "e15", f"{tag(arm, G, seed)}_lr{lr:g}")
    t0 = time.time()
    ms = common.run(flags, run_dir)
    rec = record_of(ms, run_dir, o, seed, arm, G, lr, kept, time.time() - t0)
    common.save_record(cache, rec)
    return rec


def warm_item(item):
    """warm_start in a worker: the seeds' warm starts train side by side."""
    return warm_start(*item)


def warm_start(o, seed):
    size = {"n_layer": 1, "n_embd": 32, "n_head": 2} if o["small"] else {}
    return common.warm_start(o["out"], seed, TASK, DIGITS, True, o["sft_steps"], **size)


def record_of(ms, run_dir, o, seed, arm, G, lr, flags, seconds):
    """A run's numbers: its accuracy curve, final accuracy (the mean of the last LAST
    evaluations), its mean accuracy after the warm start (auc), the mean token entropy of
    greedy completions at the end, the ledger's share of shared-token mass left by ratios."""
    rl = [m for m in ms if m["phase"] == "rl"]
    summary = next(m for m in ms if m["phase"] == "summary")
    acc = [[m["step"], m["eval_acc"]] for m in rl if "eval_acc" in m]
    later = [a for s, a in acc if s > 0]
    clips = [m["clip_frac"] for m in rl if "clip_frac" in m]
    return {"seed": seed, "G": G, "arm": arm, "lr": lr, "flags": flags,
            "seconds": round(seconds, 1), "acc": acc,
            "final": sum(a for _, a in acc[-LAST:]) / len(acc[-LAST:]),
            "auc": sum(later) / len(later), "entropy": end_entropy(run_dir, o, seed),
            "ratios": summary.get("ledger_ratios") or 0.0,
            "clip_frac": sum(clips) / len(clips) if clips else 0.0,
            "reward": [m["reward"] for m in rl if "reward" in m]}


def end_entropy(run_dir, o, seed):
    """Mean token entropy (nats) of the final policy's greedy completions on 64 held-out
    problems (lab/diagnostics.py)."""
    model, cfg = checkpoint.load_checkpoint(os.path.join(run_dir, "ckpt.pt"))
    task = toy_tasks.make_task(TASK, DIGITS, True)
    probs = toy_tasks.eval_problems(task, 16 if o["small"] else 64, seed)
    model.eval()
    return diagnostics.mean_token_entropy(model, task, probs)


def seed_runs(o, seed, lr=None, clip=None, runs=None):
    """{(arm, G): record} of one seed (every run of ``runs``, default the plan)."""
    warm_start(o, seed)  # here, once: two workers must not train the same warm start
    items = [(keep(o), seed, a, G, lr or LR, clip or CLIP) for a, G in (runs or plan())]
    recs = common.pool(one_run, items, o["jobs"], o["threads"], desc=f"seed {seed}")
    return {(r["arm"], r["G"]): r for r in recs}


def keep(o):
    return {k: o[k] for k in ("out", "records", "steps", "eval_every", "completions",
                              "sft_steps", "small")}


# ----------------------------------------------------------------------------- the analysis

def slope(ys, xs=tuple(math.log2(G) for G in GROUP_SIZES)):
    """Least-squares slope of ys against xs (per doubling of G, with xs = log2 G)."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def valid(r):
    """A seed's runs pass the manipulation check: every gspo run's ratios share is at least
    RATIOS_MIN (reuse made the sequence ratios differ within a group, as designed)."""
    return all(r[("gspo", G)]["ratios"] >= RATIOS_MIN for G in GROUP_SIZES)


def per_seed(r):
    """One seed's numbers: D_G per G, their mean and slope (the primaries), each arm pair's
    mean over G of final accuracy, auc and entropy; the positive control's difference."""
    diff = lambda a, b, k, G: r[(a, G)][k] - r[(b, G)][k]
    row = {f"D G{G}": diff("dfpo_min", "gspo", "final", G) for G in GROUP_SIZES}
    row["mean D"] = sum(row[f"D G{G}"] for G in GROUP_SIZES) / len(GROUP_SIZES)
    row["slope D"] = slope([row[f"D G{G}"] for G in GROUP_SIZES])
    row["slope transform"] = slope([diff("dfpo_min", "dfpo_raw", "final", G)
                                    for G in GROUP_SIZES])
    for a, b in PAIRS:
        for k in ("final", "auc", "entropy"):
            row[f"{a} - {b} {k}"] = sum(diff(a, b, k, G) for G in GROUP_SIZES) / len(GROUP_SIZES)
    row["pc"] = diff("gspo", CONTROL[0], "final", CONTROL[2])
    row["ratios gspo"] = sum(r[("gspo", G)]["ratios"] for G in GROUP_SIZES) / len(GROUP_SIZES)
    row["ratios dfpo_min"] = sum(r[("dfpo_min", G)]["ratios"] for G in GROUP_SIZES) / 4
    row["valid"] = valid(r)
    return row


PAIRS = (("dfpo_min", "gspo"), ("dfpo_min", "dfpo_raw"), ("dfpo_raw", "gspo"),
         ("dfpo_orth", "gspo"), ("dfpo_min", REF), ("gspo", REF))
PRIMARY = {"mean over G of D_G = final accuracy, dfpo_min - gspo": ("mean D", "mean"),
           "slope of D_G against log2 G": ("slope D", "slope")}
SECONDARY = {  # one Holm family: (per-seed key, predicted)
    "dfpo_min - dfpo_raw, final accuracy (the transform's own part)":
        ("dfpo_min - dfpo_raw final", "> 0"),
    "dfpo_raw - gspo, final accuracy (all but the transform)": ("dfpo_raw - gspo final", "none"),
    "dfpo_orth - gspo, final accuracy": ("dfpo_orth - gspo final", "> 0"),
    "dfpo_min - gspo, mean accuracy over the run (sample efficiency)":
        ("dfpo_min - gspo auc", "> 0"),
    "dfpo_min - gspo, token entropy at the end": ("dfpo_min - gspo entropy", "> 0"),
    "D at G = 16": ("D G16", "> 0"),
    # amendment 1 (results/e15_preregistration.md), before any evaluation record was read
    "dfpo_min - gspo_ref, final accuracy (GSPO with its own clip)":
        ("dfpo_min - gspo_ref final", "> 0"),
    "slope of dfpo_min - dfpo_raw against log2 G (the transform's part, by G)":
        ("slope transform", "> 0"),
}


def analyse(runs):
    """The registered contrasts (results/e15_preregistration.md) over the valid seeds, and
    every registered decision."""
    rows = {s: per_seed(r) for s, r in runs.items()}
    seeds = sorted(s for s in rows if rows[s]["valid"])
    col = lambda k: [rows[s][k] for s in seeds]
    primary = {name: stats.contrast(col(k), 0.0, "> 0", seeds) for name, (k, _) in PRIMARY.items()}
    family(primary)
    secondary = {name: stats.contrast(col(k), 0.0, pred, seeds)
                 for name, (k, pred) in SECONDARY.items()}
    family(secondary)
    pc = stats.contrast(col("pc"), 0.0, "> 0", seeds)
    per_arm = {f"{a} G{G}": stats.ci([runs[s][(a, G)]["final"] for s in seeds])
               for a in (*ARMS, REF) for G in GROUP_SIZES}
    per_arm[CONTROL[0]] = stats.ci([runs[s][(CONTROL[0], CONTROL[2])]["final"] for s in seeds])
    checks = {"manipulation: gspo's ratios share (mean over G)": stats.ci(col("ratios gspo")),
              "dfpo_min's ratios share (mean over G)": stats.ci(col("ratios dfpo_min")),
              "positive control: gspo - gspo at lr / 3, G = 8": pc}
    runs_of = lambda a, G: [runs[s][(a, G)] for s in seeds]
    described = {f"{a} G{G}": {k: stats.ci([x[k] for x in runs_of(a, G)])
                               for k in ("clip_frac", "ratios", "entropy", "auc")}
                 for a in (*ARMS, REF) for G in GROUP_SIZES}
    return {"primary": primary, "secondary": secondary, "checks": checks, "per_arm": per_arm,
            "described": described, "rows": rows, "decisions": decisions(primary, pc, rows)}


def family(contrasts):
    """Two-sided paired-t p and Holm's adjustment within the family, in place."""
    ps = [stats.p_value(c) if c["n"] > 1 else None for c in contrasts.values()]
    adj = iter(stats.holm([p for p in ps if p is not None]))
    for c, p in zip(contrasts.values(), ps):
        c["p"], c["p_holm"] = p, (next(adj) if p is not None else None)


def tost(c, margin):
    """The TOST p of a contrast (1 where it has none: too few seeds)."""
    p = stats.tost_p(c, margin)
    return 1.0 if p is None else p


def decisions(primary, pc, rows):
    """Each primary's verdict: [P1]'s sign ("agrees") or the opposite ("contradicts") where
    Holm's p < 0.05; "equivalent" where the TOST against its margin gives p < 0.05 and the
    positive control passes; else "inconclusive", with the smallest detectable effect."""
    n_valid = sum(r["valid"] for r in rows.values())
    pc_passes = pc["n"] > 1 and pc["diff"] - pc["half"] > 0
    out = {"valid_seeds": n_valid, "void_below": VOID_BELOW,
           "invalid_seeds": sorted(s for s, r in rows.items() if not r["valid"]),
           "positive_control": {"passes": pc_passes, "diff": pc["diff"], "half": pc["half"]}}
    for name, (_, kind) in PRIMARY.items():
        c, margin = primary[name], MARGIN[kind]
        if n_valid < VOID_BELOW:
            v, why = "void", f"{n_valid} valid seeds, fewer than {VOID_BELOW}"
        elif c["p_holm"] is not None and c["p_holm"] < 0.05:
            v = "agrees" if c["diff"] > 0 else "contradicts"
            why = f"{c['diff']:+.3g} ± {c['half']:.2g}, Holm p = {c['p_holm']:.2g}"
        elif tost(c, margin) < 0.05 and pc_passes:
            v = "equivalent"
            why = f"{c['diff']:+.3g} ± {c['half']:.2g} within ±{margin:g} (TOST)"
        else:
            v = "inconclusive"
            why = (f"{c['diff']:+.3g} ± {c['half']:.2g}; smallest detectable {c['mde']:.2g}"
                   + ("" if pc_passes else "; the positive control failed"))
        out[kind] = {"verdict": v, "why": why, "margin": margin}
    return out


# ----------------------------------------------------------------------------- the runs

def stable(rec, warm_acc):
    """The stability rule: no evaluation falls more than STABLE_FALL below an earlier best,
    and the run ends at or above its warm start."""
    accs = [a for _, a in rec["acc"]]
    falls = [max(accs[:i]) - accs[i] for i in range(1, len(accs))]
    return max(falls, default=0.0) <= STABLE_FALL and accs[-1] >= warm_acc


def calibrate(o):
    """The rule on probe seeds 4500-4501 at G = 2 and 16, candidates in order: gspo first,
    and a candidate at which gspo ends at SATURATED or above in any probe run is rejected
    (the arms could not differ); then every arm, and the first candidate whose runs are all
    stable is taken. At it: the ratios shares, the seconds per run and the sd of D_G (the
    power calculation's), in e15_calibration.json."""
    ends = (GROUP_SIZES[0], GROUP_SIZES[-1])
    out = {"experiment": "e15_dfpo_gspo calibration", "seeds": list(CALIB_SEEDS),
           "candidates": []}
    for lr, clip in CANDIDATES:
        runs = {s: seed_runs(o, s, lr, clip, [("gspo", G) for G in ends]) for s in CALIB_SEEDS}
        cand = {"lr": lr, "clip": clip, "gspo_final": {
            tag("gspo", G, s): runs[s][("gspo", G)]["final"] for s in CALIB_SEEDS for G in ends}}
        out["candidates"].append(cand)
        print(f"lr {lr:g}: gspo's final accuracy {cand['gspo_final']}", flush=True)
        if max(cand["gspo_final"].values()) >= SATURATED:
            cand["rejected"] = f"gspo ends at {SATURATED:g} or above: the task saturates"
            continue
        shaky = [k for k, r in ((tag("gspo", G, s), runs[s][("gspo", G)]) for s in CALIB_SEEDS
                                for G in ends) if not stable(r, r["acc"][0][1])]
        if shaky:  # the rule needs every run stable: gspo's already decide it
            cand["rejected"] = f"not stable: {', '.join(shaky)}"
            print(f"lr {lr:g}: {cand['rejected']}", flush=True)
            continue
        for s in CALIB_SEEDS:
            runs[s].update(seed_runs(o, s, lr, clip, [(a, G) for G in ends for a in ARMS[1:]]))
        recs = [rec for r in runs.values() for rec in r.values()]
        cand.update(
            stable={tag(x["arm"], x["G"], x["seed"]): stable(x, x["acc"][0][1]) for x in recs},
            final={tag(x["arm"], x["G"], x["seed"]): x["final"] for x in recs},
            warm={s: r[("gspo", 2)]["acc"][0][1] for s, r in runs.items()},
            ratios={tag(x["arm"], x["G"], x["seed"]): x["ratios"] for x in recs},
            seconds={tag(x["arm"], x["G"], x["seed"]): x["seconds"] for x in recs})
        d = [r[("dfpo_min", G)]["final"] - r[("gspo", G)]["final"] for r in runs.values()
             for G in ends]
        cand.update(D=d, sd_D=stats.paired(d, [0.0] * len(d))["sd"])
        cand["seeds_for_p1"] = stats.seeds_needed(cand["sd_D"], P1_GAIN)
        for k, v in cand.items():
            print(f"lr {lr:g}: {k}: {v}", flush=True)
        if all(cand["stable"].values()):
            break
        cand["rejected"] = "a run is not stable"
    common.save("e15_calibration", out, o["out"])
    return out


def evaluate(o):
    """The evaluation seeds FIRST_SEED, ... (N_SEEDS of them), then the analysis."""
    runs, t0 = {}, time.time()
    seeds = list(range(o["seeds"][0], o["seeds"][0] + N_SEEDS))
    common.pool(warm_item, [(keep(o), s) for s in seeds], o["jobs"], o["threads"], "warm starts")
    for seed in seeds:
        runs[seed] = seed_runs(o, seed)
        print(f"seed {seed} done [{time.time() - t0:.0f}s]", flush=True)
    out = analyse(runs)
    out.update(experiment="e15_dfpo_gspo", seeds=sorted(runs), lr=LR, clip=CLIP,
               completions=COMPLETIONS, group_sizes=list(GROUP_SIZES), steps=o["steps"])
    common.save("e15_dfpo_gspo", out, o["out"], lambda plt: plot(plt, out))
    for name, c in {**out["primary"], **out["secondary"]}.items():
        print(f"{name}: {stats.fmt([c['diff'], c['half']])} (p_holm {c['p_holm']})")
    d = out["decisions"]
    print(f"decision: mean {d['mean']['verdict']} ({d['mean']['why']}); slope "
          f"{d['slope']['verdict']} ({d['slope']['why']}); positive control "
          f"{'passes' if d['positive_control']['passes'] else 'fails'}")
    return out


COLORS = {"gspo": "tab:blue", "dfpo_min": "tab:red", "dfpo_orth": "tab:orange",
          "dfpo_raw": "tab:gray", REF: "tab:cyan"}


def plot(plt, data):
    """Final accuracy against G per arm (mean over the valid seeds, 95 % t bars), and D_G
    per seed with its mean."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")
    xs = [math.log2(G) for G in GROUP_SIZES]
    for i, a in enumerate((*ARMS, REF)):
        ms = [data["per_arm"][f"{a} G{G}"] for G in GROUP_SIZES]
        ax.errorbar([x + (i - 2) * 0.05 for x in xs], [m[0] for m in ms],
                    yerr=[m[1] or 0.0 for m in ms], marker="o", capsize=3, color=COLORS[a],
                    label=a)
    ax.set_xticks(xs, [str(G) for G in GROUP_SIZES])
    ax.set_xlabel(f"group size G ({data['completions']} completions per step)")
    ax.set_ylabel("final greedy accuracy (256 held-out problems)")
    ax.set_title("every arm, off-policy (4 optimizer steps per batch)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    rows = [r for r in data["rows"].values() if r["valid"]]
    for r in rows:
        bx.plot(xs, [r[f"D G{G}"] for G in GROUP_SIZES], color="0.7", lw=0.8)
    ms = [stats.ci([r[f"D G{G}"] for r in rows]) for G in GROUP_SIZES]
    bx.errorbar(xs, [m[0] for m in ms], yerr=[m[1] or 0.0 for m in ms], marker="o",
                capsize=3, color="tab:red", label="mean over seeds")
    bx.axhline(0, color="0.4", lw=0.8)
    bx.set_xticks(xs, [str(G) for G in GROUP_SIZES])
    bx.set_xlabel("group size G")
    bx.set_ylabel("D_G: dfpo_min - gspo (accuracy)")
    bx.set_title("Min-Replace minus GSPO, paired by seed (grey: one seed)")
    bx.legend(fontsize="small")
    bx.grid(alpha=0.3)
    return fig


def main(argv):
    o = common.parse(argv, EXTRA, __doc__, redraw=("e15_dfpo_gspo", plot), modes=("calibrate",))
    o.update(steps=STEPS, eval_every=EVAL_EVERY, completions=COMPLETIONS, sft_steps=SFT_STEPS)
    if o["quick"]:
        o.update(seeds=[QUICK_SEED], small=True, steps=4, eval_every=2, sft_steps=40)
    o["records"] = os.path.join(o["out"], "e15")
    os.makedirs(o["records"], exist_ok=True)
    if o["calibrate"]:
        return calibrate(o)
    if o["quick"]:
        runs = {QUICK_SEED: seed_runs(o, QUICK_SEED)}
        row = per_seed(runs[QUICK_SEED])
        print({k: v for k, v in row.items()})
        return row
    return evaluate(o)


if __name__ == "__main__":
    common.cli(main)
