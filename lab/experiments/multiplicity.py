"""Multiple comparisons: every contrast every experiment reports, with its p-value
and Holm's correction inside each experiment's primaries.

What it shows
-------------
Each experiment states its primary contrasts before it runs, and reports more
secondary ones. With about 25 primaries and 100 secondaries, some interval
will exclude zero by chance. This script reads the committed results
(results/<experiment>.json, whose contrasts keep their per-seed differences),
and for every contrast prints

    diff +- half (95 % paired t), n, the smallest detectable effect (80 % power),
    p = 2 (1 - F_{n-1}(|t|)), t = diff / (sd / sqrt(n)),

and, for the primaries of each experiment as one family, Holm's adjusted p
(stats.holm): a primary "survives" if its adjusted p is below 0.05.
Secondaries are exploratory: their raw p is shown, and Holm's p inside the
experiment's secondaries beside it, so that a reader sees which would survive
a correction too. Post-hoc quantities (defined after some of the evaluation
seeds had been seen; POST_HOC lists them) are a third family, corrected the
same way and counted apart. Nothing is re-run: the numbers are the JSON's.

    python -m lab.experiments.multiplicity            # results/ -> results/multiplicity.json
"""

import glob
import json
import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.multiplicity\n")
    sys.exit(2)
from lab.experiments import common
from lab.experiments import stats


# JSON keys that hold post-hoc contrasts, {arm: contrast}: each is reported as "<key> <arm>"
POST_HOC = {
    # E9: the restate choice's warm-start accuracy gap, added after seeds 0-1 had been seen
    "e9_drift_mechanism": ("warm_credit_gap",),
    # E10: the checks, measured after the full run had been seen
    "e10_length": ("warm_check_gap", "check_share_change", "check_share_end"),
}
KINDS = ("primary", "secondary", "post_hoc")


def post_hoc(name, data):
    """The post-hoc contrasts of one experiment's JSON, named "<key> <arm>"."""
    return {f"{key} {arm}": c for key in POST_HOC.get(name, ())
            for arm, c in (data.get(key) or {}).items()}


def checked(path, kind, contrasts):
    """An experiment's contrasts of one kind, each checked for what family() reads: a
    number (or null) for diff, half and mde, a count n (CliError naming it if not)."""
    num = lambda x: x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))
    if not isinstance(contrasts, dict):
        raise common.CliError(f"{path}: its {kind} contrasts are not a JSON object; rerun the "
                              f"experiment")
    for name, c in contrasts.items():
        if not (isinstance(c, dict) and all(k in c and num(c[k]) for k in ("diff", "half", "mde"))
                and isinstance(c.get("n"), int) and num(c.get("sd"))):
            raise common.CliError(f"{path}: {kind} contrast {name!r} is not a contrast (numbers "
                                  f"diff, half, mde, sd and a count n); rerun the experiment")
    return contrasts


def family(contrasts):
    """{name: row} for one experiment's primaries or secondaries, Holm inside it."""
    names = list(contrasts)
    ps = [stats.p_value(contrasts[n]) for n in names]
    adj = stats.holm(ps)
    out = {}
    for n, p, a in zip(names, ps, adj):
        c = contrasts[n]
        out[n] = {
            "diff": c["diff"],
            "half": c["half"],
            "n": c["n"],
            "mde": c["mde"],
            "p": p,
            "p_holm": a,
            "clear_of_zero": p is not None and p < 0.05,
            "survives_holm": a is not None and a < 0.05,
            "predicted": c.get("predicted"),
            "per_seed": c.get("per_seed"),
        }
    return out


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    o = common.parse(argv, {"results": ("results", "folder of the experiments' JSON files")},
                     __doc__, unused=("quick", "seeds", "jobs", "threads", "replot", "device"),
                     name="multiplicity")
    folder = (
        o["results"] if os.path.isabs(o["results"]) else os.path.join(common.ROOT, o["results"])
    )
    if not os.path.isdir(folder):
        raise common.CliError(f"--results={o['results']}: no such folder")
    # the report goes beside the JSON it reads, unless --out says where
    out_dir = o["out"] if any(a.startswith("--out=") for a in argv) else folder
    if common.in_results(out_dir) and not common.in_results(o["out"]):  # beside results/...
        if os.path.realpath(folder) != os.path.realpath(common.RESULTS):
            raise common.CliError(f"--results={o['results']} is inside results/, which only "
                                  f"the full run writes: give --out=DIR for its report")
        common.announce("multiplicity")  # ...which it read: that is the full run
    t0 = time.time()
    report = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        try:
            data = json.load(open(path))
        except (OSError, ValueError) as e:
            raise common.CliError(f"{path}: not a readable JSON file ({e})") from None
        if not isinstance(data, dict) or not isinstance(data.get("primary"), dict):
            continue
        name = os.path.basename(path)[:-5]
        fams = {"primary": data["primary"], "secondary": data.get("secondary") or {}}
        try:
            fams["post_hoc"] = post_hoc(name, data)
            report[name] = {kind: family(checked(path, kind, c)) for kind, c in fams.items()}
        except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            raise common.CliError(f"{path}: its contrasts are not an experiment's "
                                  f"({type(e).__name__}: {e}); rerun the experiment") from None
    if not report:  # nothing to correct: refuse rather than write an empty report
        raise common.CliError(f"--results={o['results']}: no experiment's JSON (with its "
                              f"primary contrasts) in {folder}")
    num = lambda x, d=3: "n/a" if x is None or x != x else f"{x:.{d}g}"
    rows = []
    for exp, fam in report.items():
        for kind in KINDS:
            for n, r in fam[kind].items():
                rows.append(
                    [
                        exp,
                        kind,
                        n[:48],
                        f"{num(r['diff'])} ± {num(r['half'])}",
                        r["n"],
                        num(r["mde"]),
                        num(r["p"]),
                        num(r["p_holm"]),
                        (
                            ("yes" if r["survives_holm"] else "no")
                            if kind == "primary"
                            else "exploratory" if kind == "secondary" else "post hoc"
                        ),
                    ]
                )
    common.table(
        rows,
        [
            "experiment",
            "kind",
            "contrast",
            "diff ± 95% t",
            "n",
            "detectable",
            "p",
            "p (Holm)",
            "survives Holm",
        ],
    )
    counts = {e: {k: len(f[k]) for k in KINDS} for e, f in report.items()}
    n_p, n_s, n_h = (sum(c[k] for c in counts.values()) for k in KINDS)
    lost = [(e, n) for e, f in report.items() for n, r in f["primary"].items()
            if r["clear_of_zero"] and not r["survives_holm"]]
    print(
        f"multiplicity: {len(report)} experiments, {n_p} primary, {n_s} secondary and {n_h} "
        f"post-hoc contrasts; "
        f"{len(lost)} primaries clear of zero before Holm but not after"
        + "".join(f"; {e}: {n}" for e, n in lost)
        + f" [{time.time() - t0:.1f}s]"
    )
    data = {
        "experiment": "multiplicity",
        "counts": counts,
        "families": report,
        "rule": "Holm within each "
        "experiment's primaries at 0.05; secondaries exploratory and post-hoc contrasts apart "
        "(Holm within each shown)",
        "wall_s": round(time.time() - t0, 2),
    }
    common.save("multiplicity", data, out_dir)
    return data


if __name__ == "__main__":
    common.cli(main)
