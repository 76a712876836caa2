"""E11: the optimizer's part in E9's restate drift, and credit against majority sharpening.

Question. On ``--task=chain`` E9 measured the signed restate drift (ell: the log-odds of
not restating against restating, over 256 held-out prompts) growing by about +1.7 nats
in 200 dr_grpo steps with AdamW, and 1.56 +- 0.75 nats less with plain SGD. Four things
were left open: that SGD's per-step KL was 0.30x AdamW's, so step size was not matched;
plain SGD lacks both of Adam's additions, momentum and a per-parameter step size; E9's
split held Adam's denominator fixed, so coupling through the second moment (built from
every token's squared gradients) was never measured; and its null-credit control
(shuffled rewards) collapsed at 4.3x AdamW's KL, while its 60 % teacher did not reverse
the restatement's credit, so credit and sharpening towards the majority form were not
separated. E11 crosses momentum with normalisation at matched KL, measures the second
moment's part, runs the null control where it does not collapse, and reverses the
credit at the start.

Testbed: E9's. Per seed, the chain warm start (SFT 1500 steps, flawed teacher 0.6, a
teacher who restates 40 % of the time, n_embd 96: E9's files are reused), then 200
on-policy RL steps of ``dr_grpo`` (B = 16 x G = 8, clip 0.2, grad clip 1.0) with the
seed's problem stream and sampling generator, measured at every optimizer step by
drift_probes.split_step. Arms:

  adamw          AdamW, betas (0.9, 0.99), lr 1e-4: E9's reference arm
  adam_b1_0      AdamW with beta1 = 0: per-parameter normalisation, no momentum
  sgd_momentum   SGD, momentum 0.9: momentum, no normalisation
  sgd            plain SGD: neither
  permuted       AdamW with each group's rewards shuffled across its rollouts
                 (--permute_rewards): no credit, the same reward distribution
  reversed       AdamW, lr 1e-4, from a warm start whose flawed teacher restates less
                 often than the right one (toy_tasks.make_chain's p_restate_flawed), so
                 that at the start a restated completion is right *more* often, while
                 not restating stays the majority form (the teacher restates at most 40 %)

Calibration (``--calibrate``, on seeds 100, 101 and 102 only, before any run on seeds
0-9; 200 steps per run, the full run's length):
* the learning rate of adam_b1_0, sgd_momentum, sgd and permuted: each arm runs at
  each lr of its grid (CALIB_LRS) on the three seeds, and adamw once per seed; the lr
  is where the least-squares line log KL = a_seed + b log lr (one slope, one intercept
  per seed) meets the mean over the seeds of adamw's log KL (KL: the run's mean
  per-step KL(pi_new || pi_old) on its sampled tokens). A calibration run that diverges
  is reported and left out of the fit. The full run reports each seed's KL ratio to
  adamw's; a seed outside 0.8-1.2 (within 20 %) is reported, not dropped;
* the reversed teacher: the warm start's restate credit (warm_credit: sampled accuracy
  of restated minus unrestated completions, 256 prompts x 8) for p_restate_flawed in
  TEACHER_GRID; chosen: the largest rate whose mean gap over the three seeds is at
  least +3 points with every seed's gap > 0 (E9's warm starts had -2.8 +- 2.0 points),
  else the one with the largest mean gap, reported as such.
The choices are saved in <out>/e11_calibration.json; the full run refuses to start
without it.

Outcome: a run's drift, ell(step 200) - ell(warm start) in nats (> 0: away from
restating), per seed.

Primary contrasts (fixed before any run on seeds 0-9; one Holm family of five; paired
Student t over seeds 0-9, two-sided p):
  1. adam_b1_0 - sgd       > 0  per-parameter normalisation raises the drift at matched KL
                                (it turns a small systematic gradient into full-size steps)
  2. sgd_momentum - sgd    > 0  momentum raises it (it accumulates the systematic part of
                                the gradient and averages out the rest)
  3. adamw - sgd           > 0  both (E9's contrast with the step size matched)
  4. reversed, against 0   < 0  credit drives the drift: reversed credit, reversed drift.
                                Sharpening towards the majority form (not restating, in
                                every arm) predicts > 0 instead
  5. permuted, equivalent to 0 within +-0.5 nats: without credit, no drift. Two one-sided
                                tests (stats.tost_p); margin 0.5 nats, about a third of
                                E9's adamw drift, fixed here
Secondary (exploratory; Holm within them shown by multiplicity.py):
* every arm's drift against 0;
* reversed - adamw (< 0 if the credit moves the drift at all, whichever dominates);
* the interaction (adamw - adam_b1_0) - (sgd_momentum - sgd), no prediction;
* log mean per-step KL, arm - adamw (the calibration's target: about 0);
* second-moment coupling: for adamw and adam_b1_0, the cumulative first-token path
  (direct + carried_direct) under a denominator of first-token gradients alone, minus
  the same under the optimizer's own denominator (no prediction);
* the reversed warm start's restate credit against adamw's (measured before the runs);
* final greedy accuracy, arm - adamw (no prediction).

    python -m experiments.e11_optimizer --calibrate  # seeds 100-102 (results/e11_calibration.json)
    python -m experiments.e11_optimizer --quick         # seed 100, 40 RL steps (out/quick/)
    python -m experiments.e11_optimizer --jobs=2        # seeds 0-9 (results/)
    python -m experiments.e11_optimizer --replot
"""

import contextlib
import json
import math
import os
import sys
import time

import torch

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m experiments.e11_optimizer\n")
    sys.exit(2)
from experiments import common
from experiments import drift_probes as DP
from experiments import stats
import advantage
import batching
from plumbing import checkpoint
import toy_tasks
from model import rl_optimizer
from sampler import evaluate, rollouts

ARMS = {
    "adamw": {"optimizer": "adamw"},
    "adam_b1_0": {"optimizer": "adam_b1_0"},
    "sgd_momentum": {"optimizer": "sgd_momentum"},
    "sgd": {"optimizer": "sgd"},
    "permuted": {"optimizer": "adamw", "permute_rewards": True},
    "reversed": {"optimizer": "adamw"},
}
CALIBRATED = ("adam_b1_0", "sgd_momentum", "sgd", "permuted")
CALIB_SEEDS = (100, 101, 102)
CALIB_LRS = {  # the grids --calibrate tries (E9: SGD's KL ~ lr^1.21; momentum 0.9 ~ 10x lr)
    "adam_b1_0": (3e-5, 1e-4, 3e-4),
    "sgd_momentum": (0.003, 0.01, 0.03),
    "sgd": (0.03, 0.1, 0.3),
    "permuted": (1e-5, 3e-5, 1e-4),
}
TEACHER_GRID = (0.3, 0.2, 0.1)  # p_restate_flawed the calibration tries (the right one: 0.4)
MIN_GAP = 0.03  # the reversed warm start's mean restate credit the calibration asks for
MARGIN = 0.5  # nats: primary 5's equivalence margin
QUICK_SEED = 100
PRIMARY = (
    ("adam_b1_0", "sgd", "> 0"),
    ("sgd_momentum", "sgd", "> 0"),
    ("adamw", "sgd", "> 0"),
    ("reversed", None, "< 0"),
    ("permuted", None, "about 0"),
)
PARTS = ("measured", "direct", "coupled", "carried", "carried_direct", "carried_coupled",
         "direct_own_v", "carried_direct_own_v")
PER_STEP = PARTS + ("kl", "entropy", "credit_gap", "credit_cov", "restated", "reward")
EXTRA = {
    "seeds": ("0,1,2,3,4,5,6,7,8,9", "seeds of the full run (quick: 100)"),
    "rl_steps": (200, "RL steps per arm (quick: 40)"),
    "calibrate": (False, "fix the calibrated lrs and the reversed teacher on seeds 100-102"),
    "threads": (0, "torch threads (0: all cores in one process, 1 per worker with --jobs > 1)"),
    "small": (False, "tiny model and batches, for smoke tests"),
}


@contextlib.contextmanager
def chain_teacher(p_restate_flawed):
    """toy_tasks' chain task whose flawed teacher restates ``p_restate_flawed`` of the time,
    for train.py's SFT inside the block (the right teacher keeps 0.4)."""
    make = toy_tasks.TASKS["chain"]
    toy_tasks.TASKS["chain"] = lambda digits=2, scratchpad=False: toy_tasks.make_chain(
        digits, scratchpad, p_restate_flawed=p_restate_flawed)
    try:
        yield
    finally:
        toy_tasks.TASKS["chain"] = make


def warm(opts, seed, p_restate_flawed=None):
    """The warm start of a seed: E9's (and its files), or the reversed teacher's."""
    size = ({"n_layer": 1, "n_embd": 32, "n_head": 2, "sft_steps": 50} if opts["small"]
            else {"n_embd": 96})
    sft = size.pop("sft_steps", 1500)
    if p_restate_flawed is None:
        return common.warm_start(opts["out"], seed, "chain", sft_steps=sft, sft_flawed=0.6,
                                 **size)
    out = os.path.join(opts["out"], "ckpt", f"restate_flawed{round(100 * p_restate_flawed)}")
    with chain_teacher(p_restate_flawed):
        return common.warm_start(out, seed, "chain", sft_steps=sft, sft_flawed=0.6, **size)


def run_arm(opts, seed, arm, rl_steps, lr, p_restate_flawed=None):
    """``rl_steps`` on-policy RL steps of ``arm`` from its warm start, every optimizer step
    split by drift_probes.split_step; the per-step records."""
    small = {"prompts_per_step": 4, "group_size": 4, "eval_size": 16} if opts["small"] else {}
    cfg = common.Config(task="chain", seed=seed, lr=lr, loss="dr_grpo", **ARMS[arm], **small)
    model, _ = checkpoint.load_checkpoint(warm(opts, seed, p_restate_flawed))
    task = toy_tasks.make_task("chain")
    held_out = toy_tasks.eval_problems(task, cfg.eval_size, seed)
    draw = toy_tasks.train_sampler(task, held_out, seed)  # train.py's streams for this seed
    gen = torch.Generator().manual_seed(seed)
    opt = rl_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    acc0 = evaluate(model, task, held_out, cfg, "cpu")
    rec = {k: [] for k in PER_STEP}
    memo = {}  # momentum of first-token origin, and Adam's first-token-only second moment
    for _ in range(rl_steps):
        model.train()
        batch = rollouts(model, task, draw, cfg, gen, "cpu")
        batch.max_len = task.max_new_tokens
        lens = batch.mask.sum(1)
        adv = advantage.advantages(batch.rewards, batch.group, cfg.adv, lengths=lens)
        mb = batching.make_minibatches(cfg.batching, batch.group, adv, lens, 1, gen)[0]
        out = DP.split_step(model, opt, batch.rows(mb), adv[mb], cfg, task, held_out, memo)
        if not all(math.isfinite(out[k]) for k in ("measured", "kl")):
            raise FloatingPointError(f"E11 {arm} seed {seed} lr {lr:g}: the run diverged")
        step = dict(DP.credit(batch, adv), reward=float(batch.rewards.mean()))
        step.update({k: out[k] for k in PARTS + ("kl", "entropy")})
        for k in PER_STEP:
            rec[k].append(step[k])
    with torch.no_grad():
        ell_end, h_end = DP.choice(model, task, held_out)
    return {"seed": seed, "arm": arm, "lr": lr, "p_restate_flawed": p_restate_flawed,
            "acc0": acc0, "acc": evaluate(model, task, held_out, cfg, "cpu"),
            "drift": sum(rec["measured"]), "entropy_end": h_end, "ell_end": float(ell_end),
            **rec}


def cached_run(opts, seed, arm, rl_steps, lr, p_restate_flawed=None):
    """run_arm, cached in <out>/runs/e11/ under everything that defines the run."""
    tag = (f"{arm}_s{seed}_steps{rl_steps}_lr{lr:g}"
           + (f"_rf{p_restate_flawed:g}" if p_restate_flawed is not None else "")
           + ("_small" if opts["small"] else ""))
    path = os.path.join(opts["out"], "runs", "e11", tag + ".json")
    if os.path.exists(path):
        return dict(json.load(open(path)), fresh=False)
    t = time.time()
    rec = dict(run_arm(opts, seed, arm, rl_steps, lr, p_restate_flawed),
               seconds=round(time.time() - t, 1))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    checkpoint._atomic_write(path, "w", lambda f: json.dump(common.clean(rec), f))
    return dict(rec, fresh=True)


def warm_credit(opts, seed, p_restate_flawed=None, prompts=256, group_size=8):
    """The warm start's sampled accuracy of restated and of unrestated completions (256
    training problems x 8, temperature 1, its own sampling stream), and their gap."""
    model, _ = checkpoint.load_checkpoint(warm(opts, seed, p_restate_flawed))
    task = toy_tasks.make_task("chain")
    draw = toy_tasks.train_sampler(
        task, toy_tasks.eval_problems(task, common.Config.eval_size, seed), 5000 + seed)
    n = 8 if opts["small"] else prompts
    with torch.no_grad():
        b = common.rollout_batch(model, task, draw, n, group_size,
                                 torch.Generator().manual_seed(5000 + seed))
    x, r = DP.restated(b), b.rewards
    acc = lambda sel: float(r[sel].mean()) if bool(sel.any()) else None
    out = {"rollouts": len(r), "restated": int(x.sum()), "acc_restated": acc(x),
           "acc_not": acc(~x)}
    out["gap"] = (None if None in (out["acc_restated"], out["acc_not"])
                  else out["acc_restated"] - out["acc_not"])
    return out


def mean_kl(run):
    return sum(run["kl"]) / len(run["kl"])


def fit_lr(points, target):
    """The lr where log KL = a_seed + b log lr (least squares: one slope b, one intercept
    per seed, over ``points`` [(seed, lr, kl)]) meets ``target``, the mean over the seeds
    of the reference's log KL: lr = exp((target - mean_seed a_seed) / b)."""
    seeds = sorted({s for s, _, _ in points})
    x = {s: [math.log(lr) for t, lr, _ in points if t == s] for s in seeds}
    y = {s: [math.log(k) for t, _, k in points if t == s] for s in seeds}
    mx = {s: sum(v) / len(v) for s, v in x.items()}
    my = {s: sum(v) / len(v) for s, v in y.items()}
    sxy = sum((a - mx[s]) * (b - my[s]) for s in seeds for a, b in zip(x[s], y[s]))
    sxx = sum((a - mx[s]) ** 2 for s in seeds for a in x[s])
    b = sxy / sxx
    a = sum(my[s] - b * mx[s] for s in seeds) / len(seeds)
    return math.exp((target - a) / b), b


def calibrate(opts):
    """--calibrate: the calibrated arms' lrs and the reversed teacher, on seeds 100-102."""
    n = opts["rl_steps"]
    seeds = CALIB_SEEDS
    for s in seeds:  # the warm starts first, here: workers must not train one twice at once
        warm(opts, s)
    items = ([(opts, s, "adamw", n, common.Config.lr, None) for s in seeds]
             + [(opts, s, arm, n, lr, None) for arm in CALIBRATED for lr in CALIB_LRS[arm]
                for s in seeds])
    done = common.pool(_cached_run_item, items, opts["jobs"], opts["threads"], "runs")
    diverged = [(r["arm"], r["seed"], r["lr"]) for r in done if r.get("diverged")]
    for arm, s, lr in diverged:
        print(f"{arm} seed {s} lr {lr:g}: diverged, left out of the fit")
    runs = [r for r in done if not r.get("diverged")]
    if len([r for r in runs if r["arm"] == "adamw"]) < len(seeds) or any(
            len({r["lr"] for r in runs if r["arm"] == a}) < 2 for a in CALIBRATED):
        raise common.CliError("--calibrate: too many runs diverged to fit a line; try a lower grid")
    if any(mean_kl(r) <= 0 for r in runs):
        raise common.CliError("--calibrate: a run did not move (KL 0): its warm start earns no "
                              "reward to learn from")
    target = sum(math.log(mean_kl(r)) for r in runs[:len(seeds)]) / len(seeds)
    out = {"experiment": "e11_calibration", "seeds": list(seeds), "steps": n,
           "adamw_kl": {r["seed"]: mean_kl(r) for r in runs[:len(seeds)]}, "arms": {},
           "diverged": [{"arm": a, "seed": s, "lr": lr} for a, s, lr in diverged]}
    for arm in CALIBRATED:
        pts = [(r["seed"], r["lr"], mean_kl(r)) for r in runs[len(seeds):] if r["arm"] == arm]
        lr, slope = fit_lr(pts, target)
        out["arms"][arm] = {"lr": lr, "slope": slope,
                            "kl": [{"seed": s, "lr": x, "kl": k} for s, x, k in pts]}
        print(f"{arm}: KL ~ lr^{slope:.2f}; lr {lr:.3g} matches adamw's mean log KL")
    gaps = {p: [warm_credit(opts, s, p)["gap"] for s in seeds] for p in TEACHER_GRID}
    base = [warm_credit(opts, s)["gap"] for s in seeds]
    ok = [p for p in TEACHER_GRID if None not in gaps[p] and min(gaps[p]) > 0
          and sum(gaps[p]) / len(seeds) >= MIN_GAP]
    mean = lambda xs: sum(x for x in xs if x is not None) / max(1, sum(x is not None for x in xs))
    chosen = max(ok) if ok else max(TEACHER_GRID, key=lambda p: mean(gaps[p]))
    out["teacher"] = {"gaps": {f"{p:g}": g for p, g in gaps.items()}, "baseline_gaps": base,
                      "p_restate_flawed": chosen, "met_the_rule": bool(ok)}
    print(f"reversed teacher: p_restate_flawed {chosen:g} (restate credit "
          f"{mean(gaps[chosen]):+.3f} on seeds {list(seeds)}; E9's teacher "
          f"{mean(base):+.3f}){'' if ok else '; no rate met the rule'}")
    common.save("e11_calibration", out, opts["out"])
    return out


def _cached_run_item(item):
    """cached_run of one calibration item; a run that diverges is a record that says so."""
    try:
        return cached_run(*item)
    except FloatingPointError:
        _, seed, arm, _, lr, _ = item
        return {"seed": seed, "arm": arm, "lr": lr, "diverged": True}


def one_seed(args):
    """Every arm of one seed, each from the cache if it ran before."""
    opts, seed = args
    cal, n = opts["calibration"], opts["rl_steps"]
    rf = cal["teacher"]["p_restate_flawed"]
    runs = {"warm_credit": {"adamw": warm_credit(opts, seed), "reversed": warm_credit(opts, seed,
                                                                                       rf)}}
    for arm in ARMS:
        lr = cal["arms"][arm]["lr"] if arm in CALIBRATED else common.Config.lr
        runs[arm] = cached_run(opts, seed, arm, n, lr, rf if arm == "reversed" else None)
    return runs


def own_v_gap(run):
    """Second-moment coupling of one run: the cumulative first-token path under a
    denominator of first-token gradients alone, minus under the optimizer's own."""
    own = sum(a + b for a, b in zip(run["direct_own_v"], run["carried_direct_own_v"]))
    return own - sum(a + b for a, b in zip(run["direct"], run["carried_direct"]))


def analyse(runs, seeds):
    """The registered contrasts and the secondaries, from per-arm lists of runs."""
    drift = lambda arm: [r["drift"] for r in runs[arm]]
    primary = {}
    for a, b, pred in PRIMARY:
        name = f"drift {a} - {b}" if b else f"drift {a} vs 0"
        primary[name] = stats.contrast(drift(a), drift(b) if b else 0.0, pred, seeds)
    primary["drift permuted vs 0"]["tost_margin"] = MARGIN
    ps = [stats.p_value(c) for c in primary.values()]
    holm = {n: {"p": p, "p_holm": h} for n, p, h in zip(primary, ps, stats.holm(ps))}
    secondary = {f"drift {a} vs 0": stats.contrast(drift(a), 0.0, "none", seeds) for a in ARMS}
    secondary["drift reversed - adamw"] = stats.contrast(drift("reversed"), drift("adamw"), "< 0",
                                                         seeds)
    secondary["interaction (adamw - adam_b1_0) - (sgd_momentum - sgd)"] = stats.contrast(
        [w - x - y + z for w, x, y, z in zip(drift("adamw"), drift("adam_b1_0"),
                                             drift("sgd_momentum"), drift("sgd"))],
        0.0, "none", seeds)
    log_kl = lambda arm: [math.log(mean_kl(r)) if mean_kl(r) > 0 else None for r in runs[arm]]
    for a in ARMS:
        if a != "adamw":
            secondary[f"log mean per-step KL, {a} - adamw"] = stats.contrast(
                log_kl(a), log_kl("adamw"), "about 0", seeds)
            secondary[f"final accuracy, {a} - adamw"] = stats.contrast(
                [r["acc"] for r in runs[a]], [r["acc"] for r in runs["adamw"]], "none", seeds)
    for a in ("adamw", "adam_b1_0"):
        secondary[f"second-moment coupling, {a}"] = stats.contrast(
            [own_v_gap(r) for r in runs[a]], 0.0, "none", seeds)
    kl_ratio = {a: [mean_kl(r) / mean_kl(b) if mean_kl(b) > 0 else None
                    for r, b in zip(runs[a], runs["adamw"])] for a in ARMS}
    outside = {a: [s for s, x in zip(seeds, v) if x is None or not 0.8 <= x <= 1.2]
               for a, v in kl_ratio.items()}
    return primary, holm, secondary, kl_ratio, outside


def main(argv):
    """Long because: it is the experiment read top to bottom (its calibration, the runs,
    the contrasts, the report), in the order they happen."""
    o = common.parse(argv, EXTRA, __doc__, redraw=("e11_optimizer", plot))
    if o["jobs"] > 1 and not o["threads"]:
        o["threads"] = 1  # one thread per worker: two workers on two cores
    if o["calibrate"]:
        return calibrate(o)
    if o["quick"]:  # the evaluation seeds are not looked at before the full run
        o["seeds"] = [QUICK_SEED] if not any(a.startswith("--seeds=") for a in argv) else o["seeds"]
        o["rl_steps"] = min(o["rl_steps"], 40)
    cal_path = os.path.join(o["out"], "e11_calibration.json")
    if o["quick"] and not os.path.exists(cal_path):  # a quick run uses the committed one
        cal_path = os.path.join(common.default_out(False), "e11_calibration.json")
    if not os.path.exists(cal_path):
        raise common.CliError(f"no calibration at {cal_path}: run --calibrate first (seeds "
                              "100-102)")
    o["calibration"] = json.load(open(cal_path))
    results, seeds, t0 = common.over_seeds(one_seed, o)
    runs = {a: [r[a] for r in results] for a in ARMS}
    primary, holm, secondary, kl_ratio, outside = analyse(runs, seeds)
    warm_gap = {k: [r["warm_credit"][k]["gap"] for r in results] for k in ("adamw", "reversed")}
    secondary["warm restate credit, reversed - adamw"] = stats.contrast(
        warm_gap["reversed"], warm_gap["adamw"], "> 0", seeds)
    data = {
        "experiment": "e11_optimizer", "seeds": seeds, "rl_steps": o["rl_steps"],
        "quick": o["quick"], "calibration": o["calibration"], "arms": ARMS,
        "primary": primary, "holm": holm, "secondary": secondary, "margin": MARGIN,
        "kl_ratio": kl_ratio, "kl_ratio_outside_band": outside,
        "warm_credit": {k: [r["warm_credit"][k] for r in results] for k in ("adamw", "reversed")},
        "per_arm": {a: {k: stats.ci([r[k] for r in runs[a]]) for k in ("drift", "acc0", "acc")}
                    for a in ARMS},
        "runs": {a: [{k: v for k, v in r.items() if k != "fresh"} for r in runs[a]]
                 for a in ARMS},
        "seconds": round(time.time() - t0, 1), "jobs": o["jobs"],
        "cpu_s": round(sum(r.get("seconds", 0) for a in ARMS for r in runs[a]), 1),
    }
    common.print_contrasts(primary)
    for name, h in holm.items():
        if h["p"] is not None:
            print(f"  {name}: p {h['p']:.3g}, Holm-adjusted p {h['p_holm']:.3g}")
    common.print_contrasts(secondary, "secondary")
    for a, v in kl_ratio.items():
        shown = ", ".join("n/a" if x is None else f"{x:.2f}" for x in v)
        print(f"{a}: KL / adamw's per seed {shown}"
              + (f"; outside 0.8-1.2 on seeds {outside[a]}" if outside[a] else ""))
    data["rate"] = common.rate("E11", sum(r[a]["fresh"] for r in results for a in ARMS),
                               data["seconds"], min(o["jobs"], len(seeds)), "runs")
    data = common.clean(data)
    common.save("e11_optimizer", data, o["out"], lambda plt: plot(plt, data))
    return data


def plot(plt, data):
    """Left: each arm's drift per seed (dots) with its mean and 95 % t interval. Right:
    each arm's mean per-step KL over adamw's, per seed, with the 0.8-1.2 band."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5))
    arms = list(data["runs"])
    for i, a in enumerate(arms):
        d = [r["drift"] for r in data["runs"][a]]
        m, h = stats.ci(d)
        left.plot([i] * len(d), d, "o", color="0.6", ms=4)
        if m is not None:
            left.errorbar([i], [m], yerr=[[h or 0], [h or 0]], fmt="s", color="k", capsize=4)
        ratios = [x for x in data["kl_ratio"][a] if x is not None and x > 0]
        right.plot([i] * len(ratios), ratios, "o", color="tab:blue", ms=4)
    for ax in (left, right):
        ax.set_xticks(range(len(arms)), arms, rotation=25, ha="right", fontsize=10)
    left.axhline(0, color="k", lw=0.6)
    left.axhspan(-data["margin"], data["margin"], color="tab:green", alpha=0.1)
    left.set_ylabel("signed restate drift (nats)\n> 0: away from restating")
    left.set_title("drift per arm (dots: seeds; square: mean, 95 % t)", fontsize=11)
    right.axhspan(0.8, 1.2, color="tab:green", alpha=0.15)
    right.set_yscale("log")
    right.set_ylabel("mean per-step KL / adamw's (per seed)")
    right.set_title("step size matched? (band: 0.8-1.2)", fontsize=11)
    n = len(data["seeds"])
    fig.suptitle(f"E11: the optimizer's part in the restate drift ({data['rl_steps']} RL steps, "
                 f"{n} seed{'s' if n > 1 else ''})", fontsize=12)
    common.caption(fig, "Green band, left: the equivalence margin of the permuted arm's primary "
                   "(+-0.5 nats). KL: the run's mean over its steps of KL(pi_new || pi_old) on "
                   "its sampled tokens.", width=130)
    return fig


if __name__ == "__main__":
    common.cli(main)
