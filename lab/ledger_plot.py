"""ledger_plot.py: one run's cancellation ledger, RL step by RL step, as a figure.

What it teaches: where the coefficients of the shared tokens went in each RL step (a shared
token: one that several rollouts of a group write after the same history; THEORY.md 2.5).
Left: the share that cancelled inside the optimizer steps, and the share left by the credit
the rewards give (the intended learning). Right: the shares left by every other cause, on
their own scale, because they are small (under grpo, its unequal weights 1/L_i).

Usage::

    python -m lab.ledger_plot OUT_DIR [--out=FILE]      # default: OUT_DIR/ledger.png

The README's picture is this figure of the demo: ``python train.py``, then
``python -m lab.ledger_plot out --out=docs/ledger.png``.
"""

import json
import math
import os
import sys

from lab.plot import load_run, running_mean
from lab.ledger import ROWS
from lab.files import FIGURE_TYPES, check_out_file
from plumbing.errors import CliError, fail

CAUSES = ("weights", "ratios", "split", "uncentred")  # the right panel's parts
KEYS = ("ledger_mass", "ledger_cancelled", "ledger_credit") + tuple(f"ledger_{p}" for p in CAUSES)


def ledger_steps(run, folder):
    """The RL steps that logged a ledger with mass, each checked first: a step that logged
    one holds a finite number in every key the figure reads. Else one line (CliError)."""
    steps = []
    for r in run["rl"]:
        if "ledger_mass" not in r:
            continue
        for key in KEYS:
            v = r.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                got = "no value" if key not in r else json.dumps(v)[:30]
                raise CliError(f"{os.path.join(folder, 'metrics.jsonl')}: RL step {r['step']} "
                               f"has {got} for {key}, not a finite number: not a ledger "
                               f"train.py wrote")
        if r["ledger_mass"] > 0:
            steps.append(r)
    return steps


def parse(argv):
    """(run folder, output file) from the command line."""
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip().splitlines()[0] + "\n\nusage: python -m lab.ledger_plot OUT_DIR "
              "[--out=FILE]   (default: OUT_DIR/ledger.png)")
        sys.exit(0)
    dirs = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    out = None
    for a in flags:
        if not a.startswith("--out=") or a == "--out=":
            raise CliError(f"unknown flag {a.split('=')[0]} (ledger_plot takes OUT_DIR and "
                           f"--out=FILE)" if not a.startswith("--out=") else "--out is empty")
        if out is not None:
            raise CliError("--out is given twice")
        out = a[len("--out="):]
    if len(dirs) != 1:
        raise CliError("name one run folder: python -m lab.ledger_plot OUT_DIR [--out=FILE]")
    if not os.path.isfile(os.path.join(dirs[0], "metrics.jsonl")):
        raise CliError(f"{os.path.join(dirs[0], 'metrics.jsonl')} does not exist: is "
                       f"{dirs[0]!r} a folder train.py wrote?")
    out = out or os.path.join(dirs[0], "ledger.png")
    check_out_file(out, "--out", FIGURE_TYPES)
    return dirs[0], out


def draw(run, path, steps):
    """The two panels of ``steps`` (ledger_steps), saved to ``path`` (written to a temporary
    file, then renamed)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("ledger_plot needs matplotlib: pip install -r requirements-plots.txt") \
            from None
    if not steps:
        raise CliError("this run logged no cancellation ledger (--instruments=false, or no "
                       "mixed group)")
    x = [r["step"] for r in steps]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.6))
    series = [(left, "ledger_cancelled", "cancelled inside an optimizer step", "C0"),
              (left, "ledger_credit", "left by credit (intended)", "C2")]
    series += [(right, f"ledger_{p}", ROWS[p], f"C{3 + k}") for k, p in enumerate(CAUSES)
               if any(r[f"ledger_{p}"] > 1e-6 for r in steps)]
    for ax, key, label, color in series:
        y = [100 * r[key] for r in steps]
        ax.plot(x, y, color=color, lw=0.6, alpha=0.35)
        ax.plot(x, running_mean(y), color=color, lw=1.8, label=label)
    for ax, title in ((left, "Where the shared tokens' coefficients went"),
                      (right, "The other causes, on their own scale")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step")
        ax.set_ylabel("share of the coefficient mass (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        ax.set_ylim(bottom=0)
    fig.suptitle(f"{run['label']}: faint per RL step, solid a running mean of 10", fontsize=9)
    fig.tight_layout()
    tmp = f"{path}.tmp{os.getpid()}{os.path.splitext(path)[1]}"
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv):
    folder, out = parse(argv)
    run = load_run(folder)
    draw(run, out, ledger_steps(run, folder))
    print(f"wrote {out}")
    return out


def cli(argv):
    """The command line: bad input gets one 'error: ...' line and exit status 2."""
    try:
        return main(argv)
    except CliError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": "))
    except KeyboardInterrupt:
        fail("interrupted")


if __name__ == "__main__":
    cli(sys.argv[1:])
