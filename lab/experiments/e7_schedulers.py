"""E7: does the mini-batch cut decide how far GRPO drifts where no reward asks? [P2, arXiv
2605.08666]

Claim [P2, abstract]: "Guided by this view, we implement two batching
interventions to encourage or preserve cancellation in critic-free RL
training: query-preserved mini-batching and reward-balanced batching. Despite
their simplicity, these interventions improve RLVR training across multiple
model scales". Figure 6's text gives the mechanism: "Cancellation relies on
the co-occurrence of positive and negative rollouts within each update";
Figure 8: "Query-preserved mini-batching (QB) and reward-balanced batching
(RB) stabilize GRPO"; Figure 7(a): partitioning mini-batches by reward sign
is the control that blocks it. Here ``query`` is QB, ``balanced`` RB,
``shuffle`` TRL's random cut, ``sign`` the control (batching.py).

Method (``--task=chain``): per seed, the cached chain warm start (1500 SFT
steps, sft_flawed 0.6, n_embd 96), then ``--rl_steps`` GRPO steps (B = 16
prompts x G = 8) with ``--minibatches=8`` under each scheduler, in two
settings: one epoch and ``--epochs=2``. Every run of a seed starts from the
same warm start with the same seed (so the same first rollout batch).
``--diagnostics`` logs, per RL step, ``tax_interior`` (KL(pi_new || pi_old)
summed over the step's optimizer steps, at histories strictly before a
group's divergence point: the verifier does not check it) and its
running sum; at ``--evals`` equally spaced evaluations, greedy accuracy on
``--eval_size`` = 1024 held-out problems and the style drift on 256 of them.

Fairness of ``full``: it takes 1 optimizer step per rollout batch against 8
(16 with two epochs), so at equal lr it moves the policy by about 1/8 of the
lr * steps. It is therefore run only in the one-epoch setting, as the
on-policy reference, and enters no contrast: every contrast compares
mini-batched arms with each other (same M, lr, epochs, data, optimizer steps).

Primary contrasts (fixed before any result), per setting, paired by seed:
(1) |restate drift| (``style_drift_restate``: mean over problems of |change
of log pi(no restatement) - log pi("(")| since the warm start; the first
completion token, a history every rollout of a group shares, and a choice
the verifier ignores) at the last evaluation, and (2) ``tax_interior_sum``
at the last step, of ``query``, ``balanced`` and ``sign`` minus ``shuffle``.
[P2] predicts < 0 for query and balanced (a group's positives and negatives
meet in one step, so shared tokens cancel) and > 0 for sign. The unsigned
drift is used because blocked cancellation makes the log-odds random-walk
further in either direction; the signed drift moves away from restating
under grpo and dr_grpo alike (chain_style), for reasons no scheduler is
predicted to change.
Secondary: held-out accuracy averaged over the last 3 evaluations, the same
pairs (predicted > 0 for query and balanced, < 0 for sign); signed restate
drift (predicted about 0).

Seeds. chain_style measured ~1.5 nats of restate drift after 200 on-policy
steps, per-arm seed sd ~0.8, paired-difference sd ~0.7 (10 seeds). A 20 %
difference (0.3 nats) at that sd needs n = 45 pairs (the smallest n with
(t_0.975,n-1 + 0.84) * 0.7 / sqrt(n) <= 0.3: common.seeds_needed); 10 seeds
(the cached warm starts; more would need their own SFT runs, which the
budget has no room for) detect (t_0.975,9 + 0.84) * 0.7 / sqrt(10) = 0.69
nats, ~45 % of 1.5. A 3-point accuracy difference is detected at n = 10 if
the paired sd is <= 3.06 points. The JSON stores each contrast's smallest
detectable effect ("mde", from the measured paired sd; that is what a verdict
may claim) and, under "seeds_needed", the seeds that a 20 % difference (of
shuffle's mean) in drift or tax, or 3 points of accuracy, would need at it.

Cost, measured as each run's CPU time at one torch thread (``cpu_seconds``
in the JSON; seed 0, while the machine was busy with other work): with 4
evaluations, a run of 18 RL steps took 30-33 s with one epoch (full
included) and 37-42 s with two; 24 steps: 33 s and 43-48 s. On the then
quiet machine one RL step with M = 8 took 0.57 s. Fitted: ~5 s per
evaluation (greedy on 1024 problems plus the diagnostics on 256), ~1 s
start-up, ~0.6 s per RL step with one epoch (full too: one step on 128
rollouts costs about what 8 steps on 16 do) and ~1.05 s with two. Full mode,
40 steps and 5 evaluations: one-epoch run 40 x 0.6 + 5 x 5 + 1 = 50 s,
two-epoch run 40 x 1.05 + 26 = 68 s; per seed 5 x 50 + 4 x 68 = 522 s; 10
seeds 5220 s of one core, ~44 min with --jobs=2 on 2 idle cores (budget 60).
Quick (18 steps, 4 evaluations, one seed): 320 CPU-s, ~2.7 min with --jobs=2.

    python -m lab.experiments.e7_schedulers --quick     # seed 0, 18 RL steps (out/partial/)
    python -m lab.experiments.e7_schedulers             # seeds 0-9, 40 RL steps (results/)
    python -m lab.experiments.e7_schedulers --replot
        # redraw results/e7_schedulers.png from its JSON
"""

import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e7_schedulers\n")
    sys.exit(2)
from lab.experiments import common
from plumbing.errors import CliError

MINI = ("shuffle", "query", "balanced", "sign")  # the mini-batched arms; full is the reference
PREDICTED = {"query": "<", "balanced": "<", "sign": ">"}  # drift and tax, against shuffle
METRICS = (
    "style_drift_restate",
    "style_drift_signed_restate",
    "style_drift",
    "tax_interior_sum",
    "eval_acc",
)
EXTRA = {
    "seeds": ("0,1,2,3,4,5,6,7,8,9", "seeds of the full run (each its own warm start)"),
    "rl_steps": (40, "RL steps per run (quick: 18)"),
    "evals": (
        4,
        "evaluations after the warm start, equally spaced (quick: 3); accuracy: mean of the last 3",
    ),
    "eval_size": (1024, "held-out problems for accuracy"),
    "minibatches": (8, "M: mini-batches per rollout batch (arms other than full)"),
    "sft_steps": (1500, "SFT steps of the chain warm start"),
    "threads": (1, "torch threads per worker"),
    "small": (False, "tiny model and batches, for smoke tests"),
}


def settings():
    """[(name, epochs, arms)]: full only in the one-epoch setting (the on-policy reference)."""
    return [("1 epoch", 1, ("full",) + MINI), ("2 epochs", 2, MINI)]


def warm(o, seed):
    size = {"n_layer": 1, "n_embd": 32, "n_head": 2} if o["small"] else {"n_embd": 96}
    return common.warm_start(
        o["out"], seed, "chain", sft_steps=o["sft_steps"], sft_flawed=0.6, **size
    )


def unit(item):
    """One train.py run: (options, seed, epochs, arm) -> its per-run record."""
    o, seed, epochs, arm = item
    t0, c0 = time.time(), time.process_time()
    batch = ["--prompts_per_step=8", "--group_size=2"] if o["small"] else []
    d = os.path.join(o["out"], "runs", "e7", f"chain_e{epochs}_{arm}_s{seed}")
    ms = common.run(
        [
            "--task=chain",
            f"--init_from={warm(o, seed)}",
            f"--seed={seed}",
            f"--rl_steps={o['rl_steps']}",
            f"--eval_every={o['eval_every']}",
            f"--eval_size={o['eval_size']}",
            f"--batching={arm}",
            f"--minibatches={1 if arm == 'full' else o['minibatches']}",
            f"--epochs={epochs}",
            "--diagnostics=true",
        ]
        + batch,
        d,
    )
    evals = [m for m in ms if m["phase"] == "rl" and "eval_acc" in m]
    rec = {"seed": seed, "arm": arm, "epochs": epochs, "steps": [m["step"] for m in evals]}
    for k in METRICS:
        rec[k] = [
            m.get(k, 0.0 if k == "tax_interior_sum" else None) for m in evals
        ]  # step 0: no tax yet
    rec["acc_last3"] = last3(rec["eval_acc"])
    rec["seconds"] = round(time.time() - t0, 1)
    rec["cpu_seconds"] = round(
        time.process_time() - c0, 1
    )  # one thread: the cost on a core of its own
    return rec


def last3(acc):
    """Mean accuracy over the last 3 evaluations after the warm start (fewer if there are fewer)."""
    after = acc[1:][-3:]
    return sum(after) / len(after) if after else None


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    o = common.parse(argv, EXTRA, __doc__, redraw=("e7_schedulers", plot))  # --replot: redraw, exit
    if o["quick"]:
        o["rl_steps"], o["evals"] = min(o["rl_steps"], 18), min(o["evals"], 3)
    prompts = 8 if o["small"] else 16
    if o["small"]:  # smoke tests: one evaluation after the warm start, on 16 problems
        o["eval_size"], o["evals"] = min(o["eval_size"], 16), 1
    if o["minibatches"] > prompts:
        raise CliError(f"--minibatches={o['minibatches']} exceeds the {prompts} groups of a batch "
                       f"(query keeps groups whole)")
    o["eval_every"] = max(o["rl_steps"] // o["evals"], 1)
    for seed in o["seeds"]:  # train missing warm starts here, not twice in parallel workers
        warm(o, seed)
    t0 = time.time()
    plan = [(s, e, arm) for _, e, arms in settings() for arm in arms for s in o["seeds"]]
    plan.sort(key=lambda p: -p[1])  # the longer two-epoch runs first: better packing over workers
    opts = {
        k: o[k]
        for k in ("out", "rl_steps", "eval_every", "eval_size", "minibatches", "sft_steps", "small")
    }
    recs = common.pool(
        unit, [(opts, s, e, arm) for s, e, arm in plan], o["jobs"], o["threads"], desc="runs"
    )
    seconds = time.time() - t0
    runs = {
        name: {
            arm: sorted(
                [r for r in recs if r["epochs"] == e and r["arm"] == arm], key=lambda r: r["seed"]
            )
            for arm in arms
        }
        for name, e, arms in settings()
    }
    seeds = o["seeds"]
    last = lambda name, arm, k: [r[k][-1] for r in runs[name][arm]]
    primary, secondary, per_arm, rows = {}, {}, {}, []
    for name, e, arms in settings():
        for arm, sign in PREDICTED.items():
            for k, label in (
                ("style_drift_restate", "|restate drift|"),
                ("tax_interior_sum", "tax_interior_sum"),
            ):
                primary[f"{name}: {label} {arm} - shuffle"] = common.contrast(
                    last(name, arm, k), last(name, "shuffle", k), f"{sign} 0", seeds)
            acc = lambda a: [r["acc_last3"] for r in runs[name][a]]
            secondary[f"{name}: accuracy (last 3 evals) {arm} - shuffle"] = common.contrast(
                acc(arm), acc("shuffle"), f"{'>' if sign == '<' else '<'} 0", seeds)
            secondary[f"{name}: signed restate drift {arm} - shuffle"] = common.contrast(
                last(name, arm, "style_drift_signed_restate"),
                last(name, "shuffle", "style_drift_signed_restate"),
                "about 0",
                seeds,
            )
        per_arm[name] = {}
        for arm in arms:
            s = {k: common.ci(last(name, arm, k)) for k in METRICS}
            s["acc_last3"] = common.ci([r["acc_last3"] for r in runs[name][arm]])
            per_arm[name][arm] = s
            rows.append(
                [
                    name,
                    arm,
                    common.fmt(s["style_drift_restate"]),
                    common.fmt(s["style_drift_signed_restate"]),
                    common.fmt(s["tax_interior_sum"]),
                    common.fmt(s["acc_last3"]),
                ]
            )
    needed = (
        {}
    # seeds a 20 % drift / tax difference or a 3-point accuracy difference would need at the
    # measured sd
    )
    for name in list(primary) + list(secondary):
        c = primary.get(name) or secondary[name]
        setting = name.split(":")[0]
        k = next((k for k, label in TARGETS if label in name), None)
        if k is None:
            continue
        target = 0.03 if k == "acc_last3" else 0.2 * abs(per_arm[setting]["shuffle"][k][0])
        needed[name] = {"target": target, "sd": c["sd"], "n": common.seeds_needed(c["sd"], target)}
    common.table(
        rows,
        [
            "setting",
            "batching",
            "|restate drift|",
            "signed restate drift",
            "tax_interior_sum",
            "acc (last 3 evals)",
        ],
    )
    common.print_contrasts(primary)
    common.print_contrasts(secondary, "secondary")
    for name, x in sorted(needed.items()):
        if x["n"] is not None:
            print(
                f"seeds for {name} to detect {x['target']:.3g}: {x['n']} (paired sd {x['sd']:.3g})"
            )
    rate = common.rate("E7", len(recs), seconds, o["jobs"], "runs")
    cost = {
        name: {
            arm: round(sum(r["cpu_seconds"] for r in rs) / len(rs), 1) for arm, rs in arms.items()
        }
        for name, arms in runs.items()
    }
    print(
        "CPU seconds per run (one thread): "
        + "; ".join(
            f"{name}: " + ", ".join(f"{a} {c:.0f}" for a, c in arms.items())
            for name, arms in cost.items()
        )
    )
    data = {
        "experiment": "E7 schedulers",
        "task": "chain",
        "seeds": seeds,
        "rl_steps": o["rl_steps"],
        "eval_every": o["eval_every"],
        "eval_size": o["eval_size"],
        "minibatches": o["minibatches"],
        "quick": o["quick"],
        "seconds": round(seconds, 1),
        "rate": rate,
        "cpu_seconds_per_run": cost,
        "primary": primary,
        "secondary": secondary,
        "seeds_needed": needed,
        "per_arm": per_arm,
        "runs": runs,
    }
    data = common.clean(data)
    common.save("e7_schedulers", data, o["out"], lambda plt: plot(plt, data))
    return data


TARGETS = (("style_drift_restate", "|restate drift|"), ("tax_interior_sum", "tax_interior_sum"),
           ("acc_last3", "accuracy"))
COLORS = {
    "full": "0.45",
    "shuffle": "tab:blue",
    "query": "tab:green",
    "balanced": "tab:orange",
    "sign": "tab:red",
}
PANELS = (
    ("style_drift_restate", "|restate drift| (nats)"),
    ("tax_interior_sum", "tax_interior_sum (nats)"),
    ("eval_acc", "held-out greedy accuracy"),
)


def plot(plt, data):
    """Rows 1-2: curves per setting (mean over seeds, 95 % t band); row 3: paired contrasts
    against shuffle.

    Long because: it draws one figure panel by panel; split, one figure's layout would be
    scattered over several functions."""
    names = list(data["runs"])
    fig, axes = plt.subplots(len(names) + 1, 3, figsize=(15, 4.0 * (len(names) + 1)))
    n = len(data["seeds"])
    for row, name in enumerate(names):
        for ax, (k, ylabel) in zip(axes[row], PANELS):
            for arm, runs in data["runs"][name].items():
                steps = runs[0]["steps"]
                zero = k != "eval_acc"  # drift and tax are 0 at the warm start by definition
                cols = [
                    [
                        0.0 if zero and not i else r[k][i]
                        for r in runs
                        if r[k][i] is not None or zero and not i
                    ]
                    for i in range(len(steps))
                ]
                pts = [(s, *common.ci(c)) for s, c in zip(steps, cols) if c]
                xs, mean, half = (
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    [p[2] or 0.0 for p in pts],
                )
                ax.plot(xs, mean, marker="o", ms=3, color=COLORS[arm], label=arm)
                if n > 1:
                    ax.fill_between(
                        xs,
                        [a - b for a, b in zip(mean, half)],
                        [a + b for a, b in zip(mean, half)],
                        color=COLORS[arm],
                        alpha=0.12,
                        lw=0,
                    )
            if k == "eval_acc":
                start = data["runs"][name]["shuffle"]
                ax.axhline(
                    sum(r["eval_acc"][0] for r in start) / len(start),
                    color="k",
                    ls=":",
                    lw=1,
                    label="warm start",
                )
            else:
                ax.axhline(0, color="k", lw=0.6)
            ax.set_xlabel("RL step")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{name}, M = {data['minibatches']}: {ylabel.split(' (')[0]}", fontsize=10)
            ax.grid(alpha=0.3)
    for ax, (k, label, unit) in zip(
        axes[-1],
        (
            ("|restate drift|", "|restate drift|", "nats"),
            ("tax_interior_sum", "tax_interior_sum", "nats"),
            ("accuracy", "accuracy (last 3 evals)", "fraction"),
        ),
    ):
        table = data["primary"] if k != "accuracy" else data["secondary"]
        xs, labels = 0, []
        for j, name in enumerate(names):
            for arm in PREDICTED:
                key = next(
                    c
                    for c in table
                    if c.startswith(f"{name}: {k}") and c.endswith(f"{arm} - shuffle")
                )
                c = table[key]
                if c["diff"] is not None:
                    ax.errorbar(
                        [xs],
                        [c["diff"]],
                        yerr=[[c["half"] or 0.0], [c["half"] or 0.0]],
                        fmt="o",
                        color=COLORS[arm],
                        capsize=4,
                    )
                labels.append(f"{arm}\n{name}")
                xs += 1
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(xs))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel(f"difference against shuffle ({unit})")
        ax.set_title(f"paired contrast: {label}, arm - shuffle", fontsize=10)
        ax.axvline(len(PREDICTED) - 0.5, color="0.6", lw=0.8, ls="--")  # 1 epoch | 2 epochs
        ax.grid(alpha=0.3, axis="y")
    handles, labels = axes[0][2].get_legend_handles_labels()
    axes[0][0].legend(handles, labels, loc="upper left", ncol=3)  # --batching, every panel
    fig.suptitle(
        f"E7: mini-batch schedulers (--batching) on chain, GRPO, {data['rl_steps']} RL steps, "
        f"B = 16 x G = 8, {n} seed{'s' if n > 1 else ''}",
        fontsize=12,
    )
    band = (
        f"Lines: mean over {n} seeds; bands and bars: 95 % Student-t interval over seeds (t with "
        f"{n - 1} "
        "degrees of freedom), paired by seed in the bottom row."
        if n > 1
        else "One seed: no bands or bars."
    )
    common.caption(
        fig,
        "Each seed's arms start from the same chain warm start with the same seed. "
        "|restate drift|: mean over 256 held-out problems of |change of the log-odds of no "
        "restatement against '(' since the warm start|. tax_interior_sum: running sum over RL "
        "steps "
        "of KL(pi_new || pi_old) at histories before a group's divergence point. Accuracy: "
        f"greedy, {data['eval_size']} held-out problems; dotted: the warm start. full (grey): one "
        "optimizer step per batch, the on-policy reference, in no contrast. " + band,
    )
    return fig


if __name__ == "__main__":
    common.cli(main)
