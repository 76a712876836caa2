"""The demo's cancellation ledger over seeds: what grpo's unequal weights did to shared tokens.

Question [P1, arXiv 2604.13088]: the demo (``python train.py``: 2-digit addition with a
scratchpad, 400 SFT and 100 RL steps of ``grpo``) gives the copies of a shared token unequal
weights 1/L_i, so part of their coefficients does not cancel (the ledger's ``weights`` part,
diagnostics.py). With ``--loss=dr_grpo`` every copy gets the same weight and nothing of the
kind is left. Does the uncancelled part *do* anything to the shared tokens at the demo's scale?

Method: per seed, the demo command twice, ``python train.py --seed=S`` and the same with
``--loss=dr_grpo``. SFT does not depend on the loss, so both arms start RL from the same warm
start (the same weights, bit for bit). Each run logs, per RL step, ``shared_dlogp``: the mean
change of log pi(a | h) over the update, at the histories h strictly before a mixed group
diverges, of the token a that every rollout of the group emits there.

Primary contrast (fixed before any run of this script): ``shared_dlogp_mean`` (the run's mean
over its RL steps of ``shared_dlogp``, in nats per RL step), grpo minus dr_grpo, paired by
seed, seeds 0-9, 95 % Student t. Predicted < 0: in the demo a wrong rollout is the one that
forgot a carry, two tokens shorter, so under 1/L_i the negative advantages weigh more and a
token every rollout shares is pushed down (that premise held for the teacher's solutions, not
for the RL rollouts: there a right one was 0.3 tokens longer on average, results/README.md).
Equivalence margin, fixed with it: 1e-4 nats per
RL step (a shift of 0.01 nats, about 1 % of the token's probability, over the 100 steps).
Secondary (Holm within the family): final accuracy, grpo minus dr_grpo (no prediction);
``tax_interior_sum`` (the KL at those histories, summed over the run), grpo minus dr_grpo
(predicted > 0). Reported, not tested: each arm's ledger shares (dr_grpo's ``weights`` part is
0 by construction, so it is no evidence), accuracies and seconds.

Seen before this was fixed: while the ledger was built, a few short runs from seed 0's warm
start (6 RL steps, other settings) printed ``shared_dlogp`` values between -3.3e-4 and +2.8e-4;
no 100-step run of either arm had been made.

    python -m lab.experiments.demo_ledger --quick     # one seed, 20 RL steps (out/partial/)
    python -m lab.experiments.demo_ledger             # seeds 0-9 (results/)
"""
import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.demo_ledger\n")
    sys.exit(2)
from lab.experiments import common

ARMS = ("grpo", "dr_grpo")
LEDGER = ("ledger_cancelled", "ledger_credit", "ledger_weights", "ledger_ratios", "ledger_split",
          "ledger_uncentred")
EXTRA = {"seeds": ("0,1,2,3,4,5,6,7,8,9", "seeds of the full run"),
         "rl_steps": (100, "RL steps per arm (quick: 20)"),
         "small": (False, "tiny model and batches, for smoke tests")}
MARGIN = 1e-4  # the primary's equivalence margin, nats per RL step (docstring)


def one_run(o, seed, arm, rl_steps):
    """One demo command; its summary and the per-step series it logged."""
    d = os.path.join(o["out"], "runs", "demo_ledger", f"{arm}_s{seed}")
    small = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=20", "--sft_batch=16",
             "--prompts_per_step=4", "--group_size=4", "--eval_size=16"] if o["small"] else []
    t0 = time.time()
    ms = common.run([f"--seed={seed}", f"--loss={arm}", f"--rl_steps={rl_steps}"] + small, d)
    s = [m for m in ms if m["phase"] == "summary"][-1]
    return {"seed": seed, "seconds": round(time.time() - t0, 1),
            "warm_start_acc": s["warm_start_acc"], "final_acc": s["final_acc"],
            "shared_dlogp_mean": s.get("shared_dlogp_mean"),
            "tax_interior_sum": [m["tax_interior_sum"] for m in ms if "tax_interior_sum" in m][-1],
            **{k: s.get(k) for k in LEDGER}}


def main(argv):
    o = common.parse(argv, EXTRA, __doc__, unused=("jobs", "threads", "replot"), name="demo_ledger")
    rl_steps = min(o["rl_steps"], 20) if o["quick"] else o["rl_steps"]
    t0 = time.time()
    runs = {a: [one_run(o, seed, a, rl_steps) for seed in o["seeds"]] for a in ARMS}
    col = lambda arm, k: [r[k] for r in runs[arm]]
    seeds = o["seeds"]
    primary = {"shared_dlogp_mean, grpo - dr_grpo": common.contrast(
        col("grpo", "shared_dlogp_mean"), col("dr_grpo", "shared_dlogp_mean"), "< 0", seeds)}
    primary["shared_dlogp_mean, grpo - dr_grpo"]["equivalence"] = common.verdict(
        primary["shared_dlogp_mean, grpo - dr_grpo"], MARGIN)
    secondary = {
        "final accuracy, grpo - dr_grpo": common.contrast(
            col("grpo", "final_acc"), col("dr_grpo", "final_acc"), "none", seeds),
        "tax_interior_sum, grpo - dr_grpo": common.contrast(
            col("grpo", "tax_interior_sum"), col("dr_grpo", "tax_interior_sum"), "> 0", seeds),
    }
    keys = ("warm_start_acc", "final_acc", "seconds", "shared_dlogp_mean", "tax_interior_sum",
            *LEDGER)
    per_arm = {a: {k: common.ci(col(a, k)) for k in keys} for a in ARMS}
    data = {"experiment": "demo_ledger", "seeds": seeds, "rl_steps": rl_steps,
            "quick": o["quick"], "margin": MARGIN, "primary": primary, "secondary": secondary,
            "per_arm": per_arm, "runs": runs, "wall_s": round(time.time() - t0, 1)}
    for a in ARMS:
        print(f"{a}: " + "  ".join(f"{k} {common.fmt(per_arm[a][k])}" for k in keys))
    print(f"equivalence (margin {MARGIN:g}): "
          f"{primary['shared_dlogp_mean, grpo - dr_grpo']['equivalence']}")
    common.save("demo_ledger", common.clean(data), o["out"])
    common.report("demo_ledger", data, o["out"])
    return data


if __name__ == "__main__":
    common.cli(main)
