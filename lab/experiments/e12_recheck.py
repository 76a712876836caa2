"""E12's two code versions: one committed evaluation seed run again on the current code.

Seeds 0-2 of E12 ran before train.py was restructured, seeds 3 onwards after it. This
script trains that seed's W+ and W- warm starts again, runs their gates and both arms on
the current code, in a scratch folder, and compares each new record with the committed
one (results/e12/), field by field. Every field but the wall time must agree to the last
bit for the two versions to count as one.

    python -m lab.experiments.e12_recheck        # seed 0 -> results/e12_recheck_s0_t2.json
    python -m lab.experiments.e12_recheck --seeds=3 --conds=W+ --threads=1

The file's name gives the seed and torch's threads (t2: two), which the result names. It
goes to --out (default results/); the warm starts and runs to <out>/runs/e12_recheck/
(scratch). Only a seed with committed records can be rechecked; --quick has no meaning here.
"""
import json
import os
import sys

if not __package__:
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e12_recheck\n")
    sys.exit(2)
from lab.experiments import common
from lab.experiments import e12_covariance as e12
import torch

TIME_FIELDS = ("seconds",)  # wall time: the one field two identical runs may not share


def differences(old, new, path=""):
    """Every place two records differ, as 'path: old -> new' lines (time fields skipped)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            if k in TIME_FIELDS:
                continue
            if k not in old or k not in new:
                out.append(f"{path}{k}: only in {'new' if k in new else 'committed'}")
            else:
                out += differences(old[k], new[k], f"{path}{k}.")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new))
                for d in differences(a, b, f"{path}{i}.")]
    return [] if old == new else [f"{path.rstrip('.')}: {old!r} -> {new!r}"]


COMMITTED = os.path.join(common.ROOT, "results", "e12")


def names(seed, cond):
    """The committed records one condition of a seed is compared on: its gate, its arms."""
    task = f"parity_{e12.CONDITIONS[cond]}"
    return [f"gate_{task}_s{seed}"] + [
        f"{cond}_{arm}_s{seed}".replace("+", "p").replace("-", "m") for arm in e12.ARMS]


def check(o):
    """Before anything is written: one seed, a condition, and a committed record of each
    run to compare with (a seed without them would train for minutes to compare nothing)."""
    if len(o["seeds"]) != 1:
        raise common.CliError("--seeds takes one seed here")
    if o["conds"] not in ("W+", "W-", "both"):
        raise common.CliError(f"--conds takes W+, W- or both, got {o['conds']!r}")
    seed = o["seeds"][0]
    conds = ("W+", "W-") if o["conds"] == "both" else (o["conds"],)
    missing = [n for c in conds for n in names(seed, c)
               if not os.path.isfile(os.path.join(COMMITTED, n + ".json"))]
    if missing:
        raise common.CliError(f"seed {seed} has no committed record {missing[0]}.json in "
                              f"results/e12/: only a committed evaluation seed can be rechecked")
    o["conds"] = conds


def main(argv):
    extra = {"seeds": ("0", "the committed evaluation seed to run again (0-2: the old code)"),
             "conds": ("both", "the condition to run again: W+, W- or both")}
    # the seed and the condition choose which committed records to recheck, not a design:
    # the result goes to --out (default results/), the warm starts and runs to <out>/runs/
    o = common.parse(argv, extra, __doc__, unused=("jobs", "replot", "quick"),
                     name="e12_recheck", modes=("seeds", "conds"), check=check)
    seed, conds = o["seeds"][0], o["conds"]
    threads = torch.get_num_threads()
    label = f"e12_recheck_s{seed}_t{threads}"
    committed, out = COMMITTED, o["out"]
    scratch = os.path.join(out, "runs", "e12_recheck", label)  # its own warm starts
    o.update(lr=e12.LR, steps=e12.STEPS, sft_steps=e12.SFT_STEPS, small=False, quick=False,
             out=scratch, records=os.path.join(scratch, "e12"))
    os.makedirs(o["records"], exist_ok=True)
    report = {"experiment": "e12_recheck", "seed": seed, "threads": threads, "records": {}}
    for cond in conds:
        w = e12.Warm(o, seed, cond)
        e12.warm_gap(o, seed, cond, w)
        for arm in e12.ARMS:
            e12.one_run(o, seed, cond, arm, w)
        for name in names(seed, cond):
            with open(os.path.join(committed, name + ".json"), encoding="utf-8") as f:
                old = json.load(f)
            with open(os.path.join(o["records"], name + ".json"), encoding="utf-8") as f:
                new = json.load(f)
            diff = differences(old, new)
            report["records"][name] = diff
            print(f"{name}: {'identical' if not diff else f'{len(diff)} fields differ'}")
            for line in diff[:10]:
                print("   ", line)
    report["identical"] = not any(report["records"].values())
    print("every field but the wall time identical" if report["identical"] else
          "the two code versions DIFFER (see above)")
    common.save(label, common.clean(report), out)
    return report


if __name__ == "__main__":
    common.cli(main)
