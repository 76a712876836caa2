"""E7: does the mini-batch cut decide how well GRPO learns? [P2, arXiv 2605.08666]

Claim: query-preserved (``query``, QB) and reward-balanced (``balanced``, RB)
mini-batching improve RLVR training over a random cut (``shuffle``, TRL's
behaviour), because they keep positive and negative rollouts of a group in the
same optimizer step, where their shared tokens cancel; cutting by reward sign
(``sign``) blocks cancellation and should hurt.

Method: from the same SFT warm start (the default run's), train GRPO with
``--minibatches=4`` (setting A: one epoch; setting B, full mode only, on the
add task: ``--epochs=2``) under each scheduler, over several seeds; ``full`` takes the
whole batch in one step (``--minibatches=1``), the on-policy reference.
Reported per scheduler: the held-out greedy accuracy curve, the final
accuracy with a 95 % confidence interval over seeds, the mean token entropy
and the learning tax (running sum of KL(pi_new || pi_old) at histories a whole
group shares; train.py ``--diagnostics``).

Primary contrast (fixed before any result): the learning tax (tax_sum) of
``query`` and of ``balanced`` minus that of ``shuffle``, paired by seed (each
seed's arms start from the same warm start with the same seed), per task and
setting; [P2] predicts < 0 (kept groups cancel, so less drift at shared
histories); ``sign`` minus ``shuffle`` predicted > 0. Secondary: final
held-out accuracy, the same pairs, predicted > 0 for query and balanced,
< 0 for sign. The next version of this experiment will replace tax_sum by
tax_interior and style_drift.

    python experiments/e7_schedulers.py --quick      # one seed, setting A, add task
    python experiments/e7_schedulers.py              # 3 seeds; add: A and B, primes: A
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SCHEDULERS = ["full", "shuffle", "query", "balanced", "sign"]
EXTRA = {"rl_steps": (200, "RL steps per run (quick: 120)"),
         "sft_steps": (1000, "SFT steps of the warm start"),
         "hard_task": ("primes", "the harder second task (full mode)"),
         "small": (False, "tiny model and batches, for smoke tests")}


def plot(plt, data):
    """Held-out accuracy over RL steps per scheduler: mean over seeds with a 95 % band."""
    results = data["results"]
    keys = list(results)
    fig, axes = plt.subplots(1, len(keys), figsize=(5.8 * len(keys), 4.3), squeeze=False)
    n = 1
    for ax, key in zip(axes[0], keys):
        for k, (sched, r) in enumerate(results[key].items()):
            runs = r["runs"]
            n = len(runs)
            steps = runs[0]["steps"]
            stats = [common.mean_ci([run["acc"][i] for run in runs]) for i in range(len(steps))]
            mean = [m for m, _ in stats]
            color = f"C{k}"
            ax.plot(steps, mean, label=sched, marker="o", ms=3, color=color)
            if n > 1:
                ax.fill_between(steps, [max(0.0, m - h) for m, h in stats], [min(1.0, m + h) for m, h in stats],
                                color=color, alpha=0.08, lw=0)
        first = next(iter(results[key].values()))["runs"]
        start = sum(run["acc"][0] for run in first) / len(first)
        ax.axhline(start, color="k", ls=":", lw=1, label="warm start")
        task, setting = key.split(" | ")
        ax.set_title(f"{task}, setting {setting}".replace("M=4", "M = 4"), fontsize=10)
        ax.set_xlabel("RL step")
        ax.set_ylabel("held-out greedy accuracy (fraction)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=9, bbox_to_anchor=(0.5, 1.0),
               title="--batching", title_fontsize=9, frameon=False)
    band = (f"Lines: mean over {n} seeds; bands: 95 % Student-t interval over seeds at each evaluation "
            f"(t with {n - 1} degrees of freedom), cut at 0 and 1." if n > 1 else "One seed: no band.")
    common.caption(fig, f"GRPO from the same SFT warm start per seed, {data['rl_steps']} RL steps, "
                        "mini-batches cut by each scheduler (full: one step per batch). " + band +
                        " Dotted: warm-start accuracy (mean over seeds). add: 256 held-out problems; primes: 19.")
    fig.tight_layout(rect=(0, 0, 1, 0.86))
    return fig


def main(argv):
    o = common.parse(argv, EXTRA, __doc__)
    if o["replot"]:
        return common.replot("e7_schedulers", o["out"], plot)
    rl_steps = min(o["rl_steps"], 120) if o["quick"] else o["rl_steps"]
    A, B = ("A: M=4, 1 epoch", 1), ("B: M=4, 2 epochs", 2)
    plan = [("add", A)] if o["quick"] else [("add", A), ("add", B), (o["hard_task"], A)]
    size = ["--n_layer=1", "--n_embd=32", "--prompts_per_step=4", "--group_size=4",
            "--eval_size=16"] if o["small"] else []
    t0 = time.time()
    results, rows = {}, []
    for task, (setting, epochs) in plan:
        key = f"{task} | {setting}"
        results[key] = {}
        for sched in SCHEDULERS:
            runs = []
            for seed in o["seeds"]:
                ws = common.warm_start(o["out"], seed, task, sft_steps=o["sft_steps"],
                                       **({"n_layer": 1, "n_embd": 32} if o["small"] else {}))
                d = os.path.join(o["out"], "runs", "e7", f"{task}_e{epochs}_{sched}_s{seed}")
                flags = [f"--task={task}", f"--init_from={ws}", f"--seed={seed}",
                         f"--rl_steps={rl_steps}", f"--eval_every={max(rl_steps // 6, 1)}",
                         f"--batching={sched}", f"--minibatches={1 if sched == 'full' else 4}",
                         f"--epochs={epochs}", "--diagnostics=true"] + size
                ms = common.run(flags, d)
                evals = [m for m in ms if m["phase"] == "rl" and "eval_acc" in m]
                runs.append({"seed": seed, "steps": [m["step"] for m in evals],
                             "acc": [m["eval_acc"] for m in evals],
                             "entropy": evals[-1]["entropy"],
                             "tax_sum": ([m["tax_sum"] for m in ms if "tax_sum" in m] or [0.0])[-1]})
            acc = common.mean_ci([r["acc"][-1] for r in runs])
            ent = common.mean_ci([r["entropy"] for r in runs])
            tax = common.mean_ci([r["tax_sum"] for r in runs])
            results[key][sched] = {"final_acc": acc, "entropy": ent, "tax_sum": tax, "runs": runs}
            rows.append([key, sched, f"{runs[0]['acc'][0]:.3f}", f"{acc[0]:.3f} ± {acc[1]:.3f}",
                         f"{ent[0]:.3f}", f"{tax[0]:.3f}"])
    seconds = round(time.time() - t0, 1)
    data = {"experiment": "E7 schedulers", "seeds": o["seeds"], "rl_steps": rl_steps,
            "quick": o["quick"], "seconds": seconds, "results": results}
    data["primary"], data["secondary"] = {}, {}
    for key, arms in results.items():
        per = {s: {"seeds": [r["seed"] for r in arms[s]["runs"]], "tax_sum": [r["tax_sum"] for r in arms[s]["runs"]],
                   "acc": [r["acc"][-1] for r in arms[s]["runs"]]} for s in arms}
        for s, sign in (("query", "<"), ("balanced", "<"), ("sign", ">")):
            data["primary"][f"{key}: tax_sum {s} - shuffle"] = common.contrast(
                per[s]["tax_sum"], per["shuffle"]["tax_sum"], f"{sign} 0", per[s]["seeds"])
            data["secondary"][f"{key}: final acc {s} - shuffle"] = common.contrast(
                per[s]["acc"], per["shuffle"]["acc"], f"{'>' if sign == '<' else '<'} 0", per[s]["seeds"])
    common.table(rows, ["task | setting", "batching", "start acc", "final acc (95% CI)", "entropy", "tax sum"])
    common.print_contrasts(data["primary"])
    common.print_contrasts(data["secondary"], "secondary")
    print(f"E7 took {seconds:.0f}s")

    data = common.clean(data)
    common.save("e7_schedulers", data, o["out"], lambda plt: plot(plt, data))
    return data


if __name__ == "__main__":
    common.cli(main)
