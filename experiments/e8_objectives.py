"""E8: which objectives keep shared tokens cancelling off-policy? [P1, arXiv 2604.13088]

Claim: length normalisation (``grpo``), sequence-level ratios (``gspo``) and
asymmetric clipping break gradient exchangeability, so shared tokens drift:
a *learning tax* accumulates at histories every rollout shares, equally
correct answers drift apart (solution-probability drift) and entropy
collapses. Min-Replace (``dfpo_min``) and Adv-Orthogonal (``dfpo_orth``)
restore exchangeability by construction, also off-policy.

Method: on ``primes`` (write an even N as a sum of two primes: several
answers are correct), from one SFT warm start per seed, train each objective
with off-policy reuse (``--minibatches=4 --epochs=2``, ``--batching=query`` so
that every group stays whole inside one step and only the objective decides
whether its shared tokens cancel; E7 is about the cut), without clipping and
with clip-higher (``--clip=higher``, eps 0.2 / 0.28; for ``gspo`` the GSPO
paper's sequence-level eps 3e-4 / 4e-4). Reported per run: the shared-token
residual (mean over steps), the learning tax (sum over steps of the mean KL at
shared histories), the drift of the log-odds between two fixed correct answers
(|end - start|), the entropy over the correct answers, the mean token entropy
and held-out accuracy, with 95 % intervals over seeds.

Learning rates: all runs use the same AdamW lr. The objectives' losses differ
by per-step constants (1/(N L_max), 1/sum L, the advantage's sigma); Adam's
update is invariant to a constant rescaling of the loss (up to its epsilon), so
one lr is the matched choice. What remains different between objectives is
exactly the *relative* weight of tokens and sequences, which is the point.

Primary contrast (fixed before any result), without clipping, paired by seed
(each seed's arms share the warm start and the seed): the log-odds drift and
the answer entropy of ``dfpo_min`` and of ``dfpo_orth`` minus ``grpo``, and of
``dr_grpo`` minus ``grpo`` (same sigma-normalised advantage, no 1/L_i: it
separates the aggregation from the advantage). [P1] predicts drift lower (< 0)
and answer entropy higher (> 0) for the exchangeable objectives. The next
version of this experiment will add style_drift, answer drift per problem and
tax_interior.

    python experiments/e8_objectives.py --quick    # one seed, 40 RL steps
    python experiments/e8_objectives.py            # 3 seeds, 150 RL steps
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

OBJECTIVES = ["grpo", "dr_grpo", "dapo", "gspo", "dfpo_min", "dfpo_orth"]
EXTRA = {"rl_steps": (150, "RL steps per run (quick: 40)"),
         "sft_steps": (1000, "SFT steps of the warm start"),
         "task": ("primes", "a task with several correct answers"),
         "small": (False, "tiny model and batches, for smoke tests")}


def clip_flags(loss, clipped):
    if not clipped:
        return ["--clip=none"]
    if loss == "gspo":
        return ["--clip=higher", "--clip_low=0.0003", "--clip_high=0.0004"]
    return ["--clip=higher", "--clip_low=0.2", "--clip_high=0.28"]


def summarise(ms):
    rl = [m for m in ms if m["phase"] == "rl"]
    evals = [m for m in rl if "eval_acc" in m]
    steps = [m for m in rl if "residual" in m]
    first, last = evals[0], evals[-1]
    out = {"acc_start": first["eval_acc"], "acc": last["eval_acc"], "entropy": last["entropy"],
           "entropy_start": first["entropy"],
           "residual": sum(m["residual"] for m in steps) / len(steps),
           "tax_sum": steps[-1]["tax_sum"], "clip_frac": sum(m["clip_frac"] for m in steps) / len(steps),
           "curve_steps": [m["step"] for m in evals], "curve_tax": [m.get("tax_sum", 0.0) for m in evals]}
    if "answer_log_odds" in last:
        out["logodds_drift"] = abs(last["answer_log_odds"] - first["answer_log_odds"])
        out["answer_entropy"] = last["answer_entropy"]
        out["answer_entropy_start"] = first["answer_entropy"]
    return out


def primary(results):
    """The docstring's primary contrasts from the per-seed runs (no clip)."""
    out = {}
    runs = lambda loss: results[f"{loss} / no clip"]["runs"]
    for metric, sign in (("logodds_drift", "< 0"), ("answer_entropy", "> 0")):
        for loss in ("dfpo_min", "dfpo_orth", "dr_grpo"):
            a, b = {r["seed"]: r.get(metric) for r in runs(loss)}, {r["seed"]: r.get(metric) for r in runs("grpo")}
            seeds = [s for s in b if s in a]  # in the order of the reference arm
            out[f"{metric} {loss} - grpo"] = common.contrast([a[s] for s in seeds], [b[s] for s in seeds],
                                                             sign, seeds)
    return out


def plot(plt, data):
    """Residual, learning tax and accuracy per objective, without and with clip-higher."""
    results = data["results"]
    names = list(results)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), sharey=True)
    panels = [("residual", "Shared-token residual", "|Σ c| / Σ |c| at the first token (0 = cancels)", (0, 1)),
              ("tax_sum", "Learning tax", "Σ over RL steps of KL(π_new ‖ π_old) (nats)", (0, None)),
              ("acc", "Held-out accuracy at the end", "fraction correct (greedy)", (0, 1))]
    colors = ["C0" if "no clip" in nm else "C1" for nm in names]
    for i, (metric, title, xlabel, (lo, hi)) in enumerate(panels):
        pairs = [results[nm]["summary"][metric] for nm in names]
        axes[i].barh(range(len(names)), [p[0] or 0 for p in pairs], xerr=common.errbars(pairs, lo, hi),
                     color=colors, capsize=2)
        axes[i].set_title(title, fontsize=10)
        axes[i].set_xlabel(xlabel, fontsize=9)
        axes[i].grid(axis="x", alpha=0.3)
        if metric == "acc":
            start = results[names[0]]["summary"]["acc_start"][0]
            axes[i].axvline(start, color="k", ls=":", lw=1)
            axes[i].text(start, len(names) - 0.4, " warm start", fontsize=8, va="bottom")
        if metric == "residual":
            axes[i].axvline(0, color="k", lw=0.8)
    axes[0].set_yticks(range(len(names)), names, fontsize=8)
    axes[0].set_ylim(-0.6, len(names) + 0.2)
    from matplotlib.patches import Patch
    fig.legend([Patch(color="C0"), Patch(color="C1")], ["no clip", "clip-higher"], loc="upper center",
               ncol=2, fontsize=9, bbox_to_anchor=(0.5, 1.05), frameon=False)
    n = len(data["seeds"])
    common.caption(fig, f"Task {data.get('task', 'primes')}, {data['rl_steps']} RL steps with "
                        "--minibatches=4 --epochs=2 --batching=query (off-policy reuse, whole groups). "
                        "Residual: mean over steps; learning tax: KL at the histories each group shares, summed "
                        "over steps; accuracy on the held-out problems, dotted: the warm start. "
                        + common.ci_note(n, "0 (and 1 for fractions)"))
    fig.tight_layout()
    return fig


def main(argv):
    o = common.parse(argv, EXTRA, __doc__)
    if o["replot"]:
        return common.replot("e8_objectives", o["out"], plot)
    rl_steps = min(o["rl_steps"], 40) if o["quick"] else o["rl_steps"]
    size = ["--n_layer=1", "--n_embd=32", "--prompts_per_step=4", "--group_size=4",
            "--eval_size=16"] if o["small"] else []
    t0 = time.time()
    results, rows = {}, []
    for clipped in (False, True):
        for loss in OBJECTIVES:
            key = f"{loss} / {'clip-higher' if clipped else 'no clip'}"
            runs = []
            for seed in o["seeds"]:
                ws = common.warm_start(o["out"], seed, o["task"], sft_steps=o["sft_steps"],
                                       **({"n_layer": 1, "n_embd": 32} if o["small"] else {}))
                d = os.path.join(o["out"], "runs", "e8", f"{loss}_{'clip' if clipped else 'noclip'}_s{seed}")
                flags = [f"--task={o['task']}", f"--init_from={ws}", f"--seed={seed}", f"--loss={loss}",
                         f"--rl_steps={rl_steps}", f"--eval_every={max(rl_steps // 4, 1)}",
                         "--minibatches=4", "--epochs=2", "--batching=query",
                         "--diagnostics=true"] + clip_flags(loss, clipped) + size
                runs.append({"seed": seed, **summarise(common.run(flags, d))})
            agg = {k: common.mean_ci([r[k] for r in runs]) for k in runs[0]
                   if not k.startswith("curve") and k != "seed"}
            results[key] = {"summary": agg, "runs": runs}
            rows.append([key, f"{agg['residual'][0]:.3f}", f"{agg['tax_sum'][0]:.3f} ± {agg['tax_sum'][1]:.3f}",
                         f"{agg.get('logodds_drift', (float('nan'),))[0]:.2f}",
                         f"{agg.get('answer_entropy', (float('nan'),))[0]:.2f}",
                         f"{agg['entropy'][0]:.3f}", f"{agg['acc'][0]:.3f} ± {agg['acc'][1]:.3f}"])
    seconds = round(time.time() - t0, 1)
    data = {"experiment": "E8 objectives", "task": o["task"], "seeds": o["seeds"],
            "rl_steps": rl_steps, "quick": o["quick"], "seconds": seconds, "results": results}
    data["primary"] = primary(results)
    common.table(rows, ["objective / clip", "residual", "tax sum (95% CI)", "log-odds drift",
                        "answer entropy", "token entropy", "accuracy (95% CI)"])
    common.print_contrasts(data["primary"])
    print(f"E8 took {seconds:.0f}s")

    data = common.clean(data)
    common.save("e8_objectives", data, o["out"], lambda plt: plot(plt, data))
    return data


if __name__ == "__main__":
    common.cli(main)
