"""E9: why does an exchangeable objective still drift a choice the verifier does not check?

On ``--task=chain`` the first completion token is a choice the verifier ignores:
restate the problem, ``(``, or not. chain_style found the restate log-odds

    ell = mean over the 256 held-out problems of log pi(a | prompt) - log pi("(" | prompt)

(a: the first token of the unrestated form; > 0: away from restating) growing
by about +1.5 nats in 200 on-policy steps under ``grpo`` and the exchangeable
``dr_grpo`` alike. Equal weights on the copies of the first token make their
*expected* push zero only if restating earns nothing; so either the rewards do
favour a form, or something else in the loop moves the choice. E9 separates the
candidates with arms and controls, and measures at every optimizer step
(drift_probes.py) the choice's real credit, the change of ell split into the
part from the first-token copies (*direct*), from every other token through the
shared parameters (*coupled*) and from AdamW's momentum (*carried*), the KL of
the policy to the one before the step, and the entropy of the choice.

Method: per seed, chain_style's warm start (train.py's chain defaults: SFT 1500
steps, a teacher who restates 40 % of the time), then 200 RL steps of each arm
from it with the seed's problem stream and sampling generator (so the arms share
the first rollout batch), train.py's B = 16 x G = 8, lr 1e-4, clip 0.2, grad clip
1.0; the step is train.optimizer_step's (tests/test_drift_probes.py).

  adamw           dr_grpo, AdamW: chain_style's dr_grpo arm (the reference)
  sgd             dr_grpo, plain SGD at --sgd_lr, fixed by --calibrate (below)
  permuted        dr_grpo, each group's rewards shuffled across its rollouts
                  (--permute_rewards): same reward distribution, no credit; the
                  expected gradient is zero for every token (a uniform shuffle
                  gives rollout i each reward of its group with probability 1/G,
                  so E[Â_i | the group's rollouts] = mean(r) - mean(r) = 0)
  dr_grpo_reuse   dr_grpo, 2 mini-batches x 2 epochs (E8's reuse): the baseline
                  of the next arm (on-policy, dfpo_min *is* dr_grpo, loss.py)
  dfpo_min_reuse  dfpo_min, 2 mini-batches x 2 epochs: Min-Replace acting
  grpo            grpo, AdamW
  teacher60       dr_grpo, AdamW, from a warm start whose teacher restates 60 %
                  of the time (same seed, same problems, same coin flips)

Pre-registration (fixed before the full run). Outcome: the signed restate
drift ell(step 200) - ell(warm start), per seed. Primary contrasts, paired by
seed, Student-t 95 % intervals, Holm's correction over these six:

  1. sgd - adamw:                     < 0  (Adam's per-parameter normalisation
                                            turns a small systematic signal into
                                            full-size steps; SGD's KL is matched)
  2. permuted - adamw:                < 0  (if real credit moves the choice)
  3. dfpo_min_reuse - dr_grpo_reuse:  < 0  (E8: DFPO drifts less than grpo)
  4. dr_grpo_reuse - adamw:           no prediction (reuse alone)
  5. grpo - adamw:                    < 0  (P1's first-order 1/L_i argument;
                                            chain_style found -0.01 +- 0.50)
  6. teacher60 - adamw:               < 0  (sharpening towards the teacher's
                                            majority form flips the sign)

Secondary, exploratory (no correction): the attribution split of adamw's
drift (cumulative direct, coupled, carried against the measured drift, and how
well their sum tracks it), each arm's drift against 0, the cumulative
``credit_cov`` of each arm, the mean per-step KL of sgd against adamw (the
calibration's target: within 20 %), the change of the choice's entropy, and
the final greedy accuracy.

Amendment (made after the full run's seeds 0 and 1 had finished, with every
arm's drift, KL and accuracy for them seen): the seed-100 calibration did not
carry over. At lr 0.0175 SGD's mean per-step KL was 7.1e-5 and 4.3e-5 on
seeds 0 and 1 against adamw's 3.1e-4 and 2.1e-4, a fifth of the target, so the
sgd arm moves the policy less per step and primary 1 cannot separate Adam's
normalisation from step size. One arm is added, outside the family above and
reported as exploratory:

  sgd_kl          dr_grpo, plain SGD at a per-seed lr set from the KLs alone:
                  lr = sgd_lr (KL_adamw / KL_sgd)^(1 / KL_SLOPE), the seed's
                  own mean per-step KLs of adamw and sgd, and KL_SLOPE the
                  log-log slope of KL in lr of the calibration (KL ~ lr^1.21)

with the contrast sgd_kl - adamw (drift; and log KL, to show whether it
matched within 20 %). One measurement is added for the same reason of being
incomplete: on those seeds AdamW's carried momentum was the largest part of
the split, and a carried part says nothing about which tokens' gradients it
holds. The momentum is linear in the gradients, so drift_probes now splits it
by origin too (carried_direct + carried_coupled = carried), giving the two-way
split the question asks for: the first-token copies' whole contribution
(direct + carried_direct) against every other token's (coupled +
carried_coupled). adamw's runs of seeds 0-3 are rerun for it; runs cached
before the change (other arms, seeds 0-3) lack the two keys.

--calibrate fixes --sgd_lr before the full run, on seed 100 (not one of 0-9):
200 steps of adamw and of SGD at each of --calib_lrs (added to the lrs an
earlier --calibrate in --out tried); the lr whose mean per-step KL matches
adamw's, interpolated in log-log between the tried lrs around it. It looks at
the KL only.

    python -m lab.experiments.e9_drift_mechanism --quick       # seed 0, 40 RL steps (out/partial/)
    python -m lab.experiments.e9_drift_mechanism --calibrate
        # the SGD lr (results/e9_calibration.json)
    python -m lab.experiments.e9_drift_mechanism --jobs=2      # seeds 0-9 (results/)
    python -m lab.experiments.e9_drift_mechanism --replot
"""

import contextlib
import math
import os
import sys
import time

import torch

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e9_drift_mechanism\n")
    sys.exit(2)
from lab.experiments import common
from lab.experiments import drift_probes as DP
import batching
from plumbing import checkpoint
from lab.experiments import stats
import toy_tasks
from model import rl_optimizer
from lab.estimators import rollouts
from sampler import evaluate
from lab import estimators

ARMS = {
    "adamw": {"loss": "dr_grpo"},
    "sgd": {"loss": "dr_grpo", "optimizer": "sgd"},
    "permuted": {"loss": "dr_grpo", "permute_rewards": True},
    "dr_grpo_reuse": {"loss": "dr_grpo", "minibatches": 2, "epochs": 2},
    "dfpo_min_reuse": {"loss": "dfpo_min", "minibatches": 2, "epochs": 2},
    "grpo": {"loss": "grpo"},
    "teacher60": {"loss": "dr_grpo"},
    "sgd_kl": {"loss": "dr_grpo", "optimizer": "sgd"},
}  # the amendment: lr per seed, kl_matched_lr
TEACHER = {
    "teacher60": 0.6
}  # the restate rate of an arm's warm-start teacher (else the task's 0.4)
PRIMARY = (
    ("sgd", "adamw", "< 0"),
    ("permuted", "adamw", "< 0"),
    ("dfpo_min_reuse", "dr_grpo_reuse", "< 0"),
    ("dr_grpo_reuse", "adamw", "none"),
    ("grpo", "adamw", "< 0"),
    ("teacher60", "adamw", "< 0"),
)
KL_SLOPE = (
    1.21  # d log KL / d log lr of SGD, least squares over results/e9_calibration.json (tested)
)
PARTS = ("measured", "direct", "coupled", "carried", "carried_direct", "carried_coupled", "exact")
PER_STEP = PARTS + ("kl", "entropy", "credit_gap", "credit_cov", "restated", "reward")
EXTRA = {
    "seeds": ("0,1,2,3,4,5,6,7,8,9", "seeds of the full run"),
    "rl_steps": (200, "RL steps per arm (quick: 40)"),
    "sgd_lr": (0.0175, "the sgd arm's learning rate (from --calibrate)"),
    "calibrate": (False, "fix --sgd_lr: KL-match SGD to adamw on seed 100, print it, exit"),
    "calib_lrs": ("0.03,0.06,0.12", "SGD learning rates --calibrate tries"),
    "calib_steps": (200, "RL steps of each --calibrate run (the full run's length)"),
    "threads": (0, "torch threads (0: all cores in one process, 1 per worker with --jobs > 1)"),
    "small": (False, "tiny model and batches, for smoke tests"),
}


def warm(opts, seed, arm):
    """The warm start of ``arm`` and ``seed`` (trained once by train.py, reused)."""
    size = (
        {"n_layer": 1, "n_embd": 32, "n_head": 2, "sft_steps": 50}
        if opts["small"]
        else {"n_embd": 96}
    )
    sft = size.pop("sft_steps", 1500)
    p = TEACHER.get(arm)
    with common.chain_teacher(p_restate=p) if p else contextlib.nullcontext():
        out = os.path.join(opts["out"], "ckpt", f"teacher{round(100 * p)}") if p else opts["out"]
        return common.warm_start(out, seed, "chain", sft_steps=sft, sft_flawed=0.6, **size)


def rows_of(batch, mb):
    """The rollout batch restricted to the rows ``mb`` (a mini-batch): tensors and the
    prompt list indexed, per-batch scalars (``max_len``) kept."""
    return batch.rows(mb)


def run_arm(opts, seed, arm, rl_steps, lr=None):
    """``rl_steps`` RL steps of ``arm`` from its warm start; per-step records."""
    spec = dict(ARMS[arm])
    small = {"prompts_per_step": 4, "group_size": 4, "eval_size": 16} if opts["small"] else {}
    sgd = spec.get("optimizer") == "sgd"
    cfg = common.Config(
        task="chain",
        seed=seed,
        lr=lr or (opts["sgd_lr"] if sgd else common.Config.lr),
        **spec,
        **small,
    )
    model, _ = checkpoint.load_checkpoint(warm(opts, seed, arm))
    task = toy_tasks.make_task("chain")
    held_out = toy_tasks.eval_problems(task, cfg.eval_size, seed)
    draw = toy_tasks.train_sampler(task, held_out, seed)  # train.py's streams for this seed
    gen = torch.Generator().manual_seed(seed)
    opt = rl_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    acc0 = evaluate(model, task, held_out, cfg, "cpu")
    rec = {k: [] for k in PER_STEP}
    memo = {}  # AdamW's momentum of first-token origin (drift_probes.split_step)
    for _ in range(rl_steps):
        model.train()
        batch = rollouts(model, task, draw, cfg, gen, "cpu")
        batch.max_len = task.max_new_tokens
        lens = batch.mask.sum(1)
        adv = estimators.advantages(batch.rewards, batch.group, cfg.adv, lengths=lens)
        step = {k: 0.0 for k in PARTS + ("kl",)}
        step.update(DP.credit(batch, adv), reward=float(batch.rewards.mean()), entropy=None)
        n = 0
        for _ in range(cfg.epochs):
            for mb in batching.make_minibatches(
                cfg.batching, batch.group, adv, lens, cfg.minibatches, gen
            ):
                out = DP.split_step(
                    model, opt, rows_of(batch, mb), adv[mb], cfg, task, held_out, memo
                )
                n += 1
                step["entropy"] = out["entropy"] if step["entropy"] is None else step["entropy"]
                for k in PARTS + ("kl",):
                    step[k] += out[k]
        step["kl"] /= n  # the mean over the RL step's optimizer steps
        if not all(math.isfinite(v) for v in (step["measured"], step["kl"])):
            raise FloatingPointError(
                f"E9 {arm} seed {seed}: the run diverged (try a smaller learning rate)"
            )
        for k in PER_STEP:
            rec[k].append(step[k])
    with torch.no_grad():
        ell_end, h_end = DP.choice(model, task, held_out)
    return {
        "seed": seed,
        "lr": cfg.lr,
        "acc0": acc0,
        "acc": evaluate(model, task, held_out, cfg, "cpu"),
        "drift": sum(rec["measured"]),
        "entropy_end": h_end,
        "ell_end": float(ell_end),
        **rec,
    }


def warm_credit(opts, seed, arm="adamw", prompts=256, group_size=8):
    """The warm start's sampled accuracy with and without the restatement: 256
    training problems x 8 rollouts, temperature 1, its own sampling stream."""
    _, b = common.sample_checkpoint(warm(opts, seed, arm), "chain", seed, 5000 + seed,
                                   8 if opts["small"] else prompts, group_size)
    out = DP.restate_accuracy(b)
    del out["gap"]  # E9's records (committed) keep the two accuracies, not their gap
    return out


def one_seed(args):
    """Every arm of one seed (each arm's record cached in <out>/runs/e9/, reused)."""
    opts, seed = args
    runs = {
        "warm_credit": {a: warm_credit(opts, seed, a) for a in ("adamw", "teacher60")},
        "fresh": 0,
    }
    for arm in ARMS:
        lr = opts["sgd_lr"] if ARMS[arm].get("optimizer") == "sgd" else common.Config.lr
        lr = kl_matched_lr(lr, runs["adamw"]["kl"], runs["sgd"]["kl"]) if arm == "sgd_kl" else lr
        tag = f"{arm}_s{seed}_steps{opts['rl_steps']}_lr{lr:g}{'_small' if opts['small'] else ''}"
        path = os.path.join(opts["out"], "runs", "e9", tag + ".json")
        rec = common.load_record(path, ("kl",))
        if rec is not None:
            runs[arm] = rec
            continue
        t = time.time()
        runs[arm] = dict(
            run_arm(opts, seed, arm, opts["rl_steps"], lr), seconds=round(time.time() - t, 1)
        )
        runs["fresh"] += 1  # run now, not read from the cache
        common.save_record(path, runs[arm])
    return runs


def kl_matched_lr(lr, kl_target, kl_at_lr):
    """The amendment's per-seed SGD lr: ``lr`` scaled so that, with KL ~ lr^KL_SLOPE,
    the mean per-step KL ``kl_at_lr`` it gave becomes the mean of ``kl_target``
    (``lr`` unchanged where either run did not move: no KL to match)."""
    target, at = sum(kl_target) / len(kl_target), sum(kl_at_lr) / len(kl_at_lr)
    return lr * (target / at) ** (1 / KL_SLOPE) if target > 0 and at > 0 else lr


def calibrate(opts):
    """--calibrate: mean per-step KL of adamw and of SGD at each --calib_lrs on seed
    100; the SGD lr that matches adamw's (log-log interpolation)."""
    seed, n = 100, opts["calib_steps"]
    path = os.path.join(opts["out"], "e9_calibration.json")
    old = common.load_record(path, ("steps", "adamw_kl", "sgd_kl")) or {}
    if not isinstance(old.get("sgd_kl"), dict):  # nothing to reuse
        old = {}
    kls = {float(k): v for k, v in old.get("sgd_kl", {}).items()} if old.get("steps") == n else {}
    target = old["adamw_kl"] if kls else sum(run_arm(opts, seed, "adamw", n)["kl"]) / n
    kls.update(
        {
            lr: sum(run_arm(opts, seed, "sgd", n, lr=lr)["kl"]) / n
            for lr in opts["calib_lrs"]
            if lr not in kls
        }
    )
    print(f"adamw: mean per-step KL {target:.3g}")
    for lr, k in kls.items():
        print(f"sgd lr {lr:g}: mean per-step KL {k:.3g}")
    if not target > 0 or not all(k > 0 for k in kls.values()):
        raise common.CliError(
            "--calibrate: a run did not move (KL 0): its warm start earns no reward to learn from"
        )
    lr = match_lr(kls, target)
    print(f"--sgd_lr={lr:.3g}")
    data = {"experiment": "e9_calibration", "seed": seed, "steps": n, "adamw_kl": target,
            "sgd_kl": {f"{k:g}": v for k, v in kls.items()}, "sgd_lr": lr}
    common.save("e9_calibration", data, opts["out"])
    return data


def match_lr(kls, target):
    """The lr at which log KL, interpolated linearly in log lr between the two
    neighbouring tried lrs whose KLs lie closest around ``target``, equals log target."""
    pts = sorted((math.log(lr), math.log(k)) for lr, k in kls.items())
    (x0, y0), (x1, y1) = min(
        zip(pts, pts[1:]), key=lambda p: abs((p[0][1] + p[1][1]) / 2 - math.log(target))
    )
    return math.exp(x0 + (math.log(target) - y0) * (x1 - x0) / (y1 - y0))


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    o = common.parse(argv, EXTRA, __doc__, redraw=("e9_drift_mechanism", plot),
                     modes=("calibrate",))
    if o["calibrate"]:
        return calibrate(o)
    o["rl_steps"] = min(o["rl_steps"], 40) if o["quick"] else o["rl_steps"]
    if o["jobs"] > 1 and len(o["seeds"]) > 1 and not o["threads"]:
        o["threads"] = 1  # one thread per worker: two workers on two cores
    results, seeds, t0 = common.over_seeds(one_seed, o)
    runs = {arm: [r[arm] for r in results] for arm in ARMS}
    warm_acc = {a: [r["warm_credit"][a] for r in results] for a in ("adamw", "teacher60")}
    per_seed = lambda arm, k: [r[k] for r in runs[arm]]
    primary = {
        f"drift {a} - {b}": stats.contrast(per_seed(a, "drift"), per_seed(b, "drift"), pred, seeds)
        for a, b, pred in PRIMARY
    }
    ps = [stats.p_value(c) for c in primary.values()]
    holm = {n: {"p": p, "p_holm": a} for n, p, a in zip(primary, ps, stats.holm(ps))}
    cum = lambda arm, k: [sum(r[k]) for r in runs[arm]]
    secondary = {
        f"drift {a} vs 0": stats.contrast(per_seed(a, "drift"), 0.0, "none", seeds) for a in ARMS
    }
    secondary.update({f"cumulative {k}, adamw": stats.contrast(cum("adamw", k), 0.0, "none", seeds)
                      for k in ("direct", "coupled", "carried")})
    both = lambda k: [sum(r[k]) + sum(r["carried_" + k]) for r in runs["adamw"]]
    secondary.update(
        {
            f"cumulative {k} incl. its momentum, adamw": stats.contrast(both(k), 0.0, "none", seeds)
            for k in ("direct", "coupled")
        }
    )
    secondary.update(
        {
            f"cumulative credit_cov, {a}": stats.contrast(cum(a, "credit_cov"), 0.0, "none", seeds)
            for a in ARMS
        }
    )
    kl = {a: [sum(r["kl"]) / len(r["kl"]) for r in runs[a]] for a in ARMS}
    for a in ("sgd", "sgd_kl"):
        secondary[f"log mean per-step KL, {a} - adamw"] = stats.contrast(
            [math.log(x) if x > 0 else None for x in kl[a]],
            [math.log(x) if x > 0 else None for x in kl["adamw"]],
            "about 0",
            seeds,
        )
    secondary["drift sgd_kl - adamw (amendment)"] = stats.contrast(
        per_seed("sgd_kl", "drift"), per_seed("adamw", "drift"), "none", seeds
    )
    for a in list(ARMS)[1:]:
        secondary[f"final accuracy, {a} - adamw"] = stats.contrast(
            per_seed(a, "acc"), per_seed("adamw", "acc"), "none", seeds
        )
    tracking = {a: track(runs[a]) for a in ARMS}
    # added after the full run was seen, not registered: across seeds, does the drift go with the
    # credit?
    credit_drift_r = {a: stats.pearson(per_seed(a, "drift"), cum(a, "credit_cov")) for a in ARMS}
    per_arm = {a: summary(runs[a]) for a in ARMS}
    warm_gap = {
        a: stats.contrast(
            [w["acc_restated"] for w in warm_acc[a]],
            [w["acc_not"] for w in warm_acc[a]],
            "none",
            seeds,
        )
        for a in warm_acc
    }
    data = {
        "experiment": "e9_drift_mechanism",
        "seeds": seeds,
        "rl_steps": o["rl_steps"],
        "quick": o["quick"],
        "sgd_lr": o["sgd_lr"],
        "arms": ARMS,
        "primary": primary,
        "holm": holm,
        "secondary": secondary,
        "tracking": tracking,
        "warm_credit": warm_acc,
        "warm_credit_gap": warm_gap,
        "per_arm": per_arm,
        "credit_drift_r": credit_drift_r,
        "mean_kl": {a: stats.ci(v) for a, v in kl.items()},
        "runs": runs,
        "seconds": round(time.time() - t0, 1),
        "jobs": o["jobs"],
        "cpu_s": round(sum(r["seconds"] for a in ARMS for r in runs[a]), 1),
    }  # every run's own time, 1 thread
    sci = lambda mh: (
        "n/a"
        if mh[0] is None
        else f"{mh[0]:.2e}" + (f" ± {mh[1]:.1e}" if mh[1] is not None else "")
    )
    common.table([[a] + [sci(v[k]) if k in ("kl", "lr") else stats.fmt(v[k]) for k in SUMMARY]
                  for a, v in per_arm.items()], ["arm"] + list(SUMMARY))
    common.print_contrasts(primary)
    for name, h in holm.items():
        if h["p"] is not None:
            print(f"  {name}: p {h['p']:.3g}, Holm-adjusted p {h['p_holm']:.3g}")
    common.print_contrasts(secondary, "secondary")
    for a, t in tracking.items():
        print(f"{a}: sum of the parts / measured drift {t['ratio']}, per-step r {t['r']}")
    # throughput of the runs made now (cached ones cost nothing; warm starts trained now are
    # included)
    data["rate"] = common.rate("E9", sum(r["fresh"] for r in results), data["seconds"],
                               min(o["jobs"], len(seeds)), "runs")
    print(
        f"E9: {data['cpu_s']:.0f} CPU seconds in the {len(ARMS) * len(seeds)} runs, one thread each"
    )
    data = common.clean(data)
    common.save("e9_drift_mechanism", data, o["out"], lambda plt: plot(plt, data))
    return data


SUMMARY = (
    "drift",
    "positive",
    "credit_cov",
    "credit_gap",
    "kl",
    "acc0",
    "acc",
    "entropy0",
    "entropy_end",
    "lr",
)


def summary(runs):
    """One arm over seeds, each [mean, 95 % t half-width]: its drift, the share of
    seeds whose drift is > 0, cumulative credit_cov, credit_gap (mean over the
    steps where both forms were sampled), mean per-step KL, accuracy at the warm
    start and at the end, the choice's entropy at the first step and at the end,
    and the learning rate."""
    mean = lambda xs: sum(x for x in xs if x is not None) / max(1, sum(x is not None for x in xs))
    per = {
        "drift": [r["drift"] for r in runs],
        "positive": [float(r["drift"] > 0) for r in runs],
        "credit_cov": [sum(r["credit_cov"]) for r in runs],
        "credit_gap": [mean(r["credit_gap"]) for r in runs],
        "kl": [sum(r["kl"]) / len(r["kl"]) for r in runs],
        "acc0": [r["acc0"] for r in runs],
        "acc": [r["acc"] for r in runs],
        "entropy0": [r["entropy"][0] for r in runs],
        "entropy_end": [r["entropy_end"] for r in runs],
        "lr": [r["lr"] for r in runs],
    }
    return {k: stats.ci(v) for k, v in per.items()}


def track(runs):
    """How well direct + coupled + carried tracks the measured drift: the ratio of
    their totals (mean over seeds) and the correlation of the per-step values
    (pooled over seeds)."""
    pred = [p for r in runs for p in (sum(x) for x in zip(r["direct"], r["coupled"], r["carried"]))]
    meas = [m for r in runs for m in r["measured"]]
    ratios = [
        sum(d + c + k for d, c, k in zip(r["direct"], r["coupled"], r["carried"])) / r["drift"]
        for r in runs
        if r["drift"]
    ]
    r = stats.pearson(pred, meas)
    return {"ratio": stats.ci(ratios) if ratios else None, "r": None if r is None else round(r, 4),
            "n_steps": len(pred)}


def plot(plt, data):
    """Top: signed drift per arm, and adamw's drift split into direct, coupled and
    carried (mean and 95 % t band). Bottom: the primary contrasts, and each arm's
    cumulative credit (within-group covariance of restating with the advantage).

    Long because: it draws one figure panel by panel; split, one figure's layout would be
    scattered over several functions."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 9.5))
    fig.suptitle(
        f"E9: what drives the restate drift on chain ({data['rl_steps']} RL steps from the warm "
        "start)",
        fontsize=12,
    )
    colors = dict(
        zip(
            ARMS,
            (
                "tab:blue",
                "tab:orange",
                "tab:gray",
                "tab:cyan",
                "tab:green",
                "tab:red",
                "tab:purple",
                "tab:olive",
            ),
        )
    )
    cumsum = lambda xs: [sum(xs[:i + 1]) for i in range(len(xs))]

    def band(ax, curves, color, label, style="-"):
        cols = list(zip(*curves))
        m = [common.ci(list(c)) for c in cols]
        xs = range(1, len(cols) + 1)
        ax.plot(xs, [a for a, _ in m], style, color=color, label=label, lw=1.5)
        ax.fill_between(
            xs, [a - (b or 0) for a, b in m], [a + (b or 0) for a, b in m], color=color, alpha=0.12
        )
    (drift, split), (contrasts, credit) = axes
    for arm, runs in data["runs"].items():
        band(drift, [cumsum(r["measured"]) for r in runs], colors[arm], arm)
        band(credit, [cumsum(r["credit_cov"]) for r in runs], colors[arm], arm)
    runs = data["runs"]["adamw"]
    band(split, [cumsum(r["measured"]) for r in runs], "k", "measured")
    for k, c in (("direct", "tab:green"), ("coupled", "tab:red")):
        band(split, [cumsum([a + b for a, b in zip(r[k], r["carried_" + k])]) for r in runs], c,
             f"{k}, incl. its momentum", "--")
        band(split, [cumsum(r[k]) for r in runs], c, f"{k}, this step's gradient only", ":")
    for ax, title in (
        (drift, "signed restate drift, every arm"),
        (split, "adamw: the drift split, first order"),
    ):
        ax.set_ylabel("Δ restate log-odds since warm start (nats)\n> 0: away from restating")
        ax.set_title(title, fontsize=11)
    credit.set_ylabel(
        "cumulative credit_cov (units of the arm's Â)\n> 0: the advantage favours restating"
    )
    credit.set_title("real credit: Σ over steps of cov(restated, Â) within groups", fontsize=11)
    for ax in (drift, split, credit):
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("RL step")
        ax.legend(fontsize=8, ncol=2)
    lo, hi = split.get_ylim()
    split.set_ylim(lo, hi + 0.45 * (hi - lo))  # room for the legend above the bands
    split.legend(fontsize=8, ncol=1, loc="upper left")
    short = {k.replace("drift ", "").replace(" - ", " − "): c for k, c in data["primary"].items()}
    common.contrast_panel(contrasts, short, "difference of the signed drift (nats)")
    contrasts.set_xticks(range(len(short)), list(short), fontsize=8.5, rotation=22, ha="right")
    contrasts.set_title("primary contrasts, paired by seed\n(predicted < 0; no prediction for "
                        "dr_grpo_reuse − adamw)", fontsize=11)
    n = len(data["seeds"])
    common.caption(
        fig,
        "Top and bottom right: cumulative change over RL steps; ell = log pi(unrestated first "
        "token) - log pi('(') averaged over 256 held-out problems. Lines: mean over "
        f"{n} seed{'s' if n > 1 else ''}; bands: 95 % Student-t interval over seeds"
        + (f" (t with {n - 1} degrees of freedom)." if n > 1 else " (none with one seed).")
        + " Top right: the first-order parts of each step's change (direct: the first-token "
        "copies; coupled: every other token), each with AdamW's momentum of the same origin "
        "from earlier steps (dashed) and without it (dotted). "
        "Bottom left: paired differences per seed (grey dots) and their mean with a 95 % t "
        "interval, not Holm-adjusted (the adjusted p-values are in the JSON and the report). "
        "Bottom right: in units of each arm's own advantage (grpo's is divided by the "
        "group's standard deviation, so its scale is larger).",
    )
    return fig


if __name__ == "__main__":
    common.cli(main)
