"""plot.py: draw the training curves of one or more runs of train.py.

What it teaches
---------------
How to read a run: held-out accuracy should climb from the warm start, the
mean reward with it; the fraction of *mixed* groups (some rollouts right,
some wrong) is the share of the batch that carries any learning signal; the
residuals of the step's coefficients (THEORY.md section 2: first_token_residual
and exch_residual) are 0 where the shared tokens' coefficients cancel. With ``--diagnostics``
the run also logs token entropy, pass@k and the learning tax (THEORY.md
section 4), which get their own panels.

Usage::

    python -m lab.plot OUT_DIR [OUT_DIR ...] [--out=FILE]

Each OUT_DIR is a folder train.py wrote (it holds metrics.jsonl). Several
folders are overlaid, one colour per run, for comparing runs. The figure goes
to OUT_DIR/curves.png (the first folder) unless ``--out`` names a file.
Only panels for quantities that at least one run logged are drawn.
matplotlib is optional for the rest of the project
(``pip install -r requirements-plots.txt``); without it this script exits
with one line and status 2.
"""

import json
import os
import sys

from plumbing import errors
from lab import files
from lab.files import FIGURE_TYPES, check_out_file
from plumbing.errors import CliError

SMOOTH = 10  # RL steps in the running mean drawn over per-step quantities

# (metric key, panel title, y-axis label, kind). kind "eval": logged at
# evaluations only, drawn with markers; "step": logged every RL step, drawn
# faint per step with a running mean on top; "sft": the SFT phase.
PANELS = [
    ("loss", "SFT loss", "cross-entropy per token (nats)", "sft"),
    ("eval_acc", "Held-out accuracy (greedy)", "fraction correct", "eval"),
    ("reward", "Mean reward of the rollouts", "mean reward (0 to 1)", "step"),
    ("mixed", "Mixed groups (carry a signal)", "fraction of groups", "step"),
    ("first_token_residual", "First-token residual", "|Σc| / Σ|c| (0 = cancels)", "step"),
    (
        "exch_residual",
        "Exchangeability residual per (history, token)",
        "|Σc − w̄ΣÂ| / Σ|c|",
        "step",
    ),
    ("entropy", "Mean token entropy, held out", "nats per token", "eval"),
    ("tax_sum", "Learning tax, cumulative", "Σ KL(π_new‖π_old) (nats)", "step"),
    ("tax_interior", "Learning tax before divergence", "KL per step (nats)", "step"),
    (
        "style_drift",
        "Reward-irrelevant style drift",
        "mean |Δ log-odds| since warm start (nats)",
        "eval",
    ),
    ("answer_log_odds", "Log-odds between two correct answers", "log-odds (nats)", "eval"),
    ("answer_entropy", "Entropy over correct answers", "nats", "eval"),
    ("clip_frac", "Clipped fraction", "fraction of tokens", "step"),
]


OLD_KEYS = {
    "residual": "first_token_residual",
    "residual_ha": "exch_residual",
}  # runs logged before the rename


def usage():
    return __doc__.split("Usage::")[1].split("Each OUT_DIR")[0].strip()


def parse(argv):
    """(run folders, output file) from the command line."""
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip().splitlines()[0] + "\n\nusage: " + usage() + "\n\n"
              "  OUT_DIR ...    run folders of train.py (each holds metrics.jsonl), overlaid\n"
              "  --out=FILE     the figure (default: OUT_DIR/curves.png of the first folder)")
        sys.exit(0)
    dirs, out = [], None
    for a in argv:
        if a.startswith("--out="):
            if out is not None:  # else the last one would win without a word
                raise CliError("--out is given twice; give it once")
            out = a[len("--out="):]
            if not out:
                raise CliError("--out needs a file name: --out=FILE.png")
        elif a.startswith("--"):
            raise CliError(
                f"unknown flag {a.split('=')[0]} (plot.py takes OUT_DIR ... and --out=FILE)"
            )
        else:
            dirs.append(a)
    if not dirs:
        raise CliError(f"name at least one run folder: {usage()}")
    for d in dirs:
        if not os.path.isfile(os.path.join(d, "metrics.jsonl")):
            raise CliError(
                f"{os.path.join(d, 'metrics.jsonl')} does not exist: is {d!r} a folder train.py "
                "wrote?"
            )
    out = out or os.path.join(dirs[0], "curves.png")
    check_out_file(out, "--out", FIGURE_TYPES)
    return dirs, out


def load_run(path):
    """{"sft": [...], "rl": [...], "label": str} from a run folder."""
    runs = {"sft": [], "rl": []}
    try:
        with open(os.path.join(path, "metrics.jsonl"), encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError:
        raise CliError(f"{path}/metrics.jsonl is not text (UTF-8): not a metrics file") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            raise CliError(f"{path}/metrics.jsonl line {n} is not JSON") from None
        step = rec.get("step") if isinstance(rec, dict) else None
        # every record train.py writes has a phase and an integer step a plot can hold
        if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2 ** 53:
            raise CliError(f"{path}/metrics.jsonl line {n} is not a metrics record "
                           f"(a JSON object with an integer step in [0, 2**53))")
        rec = {OLD_KEYS.get(k, k): v for k, v in rec.items()}
        if rec.get("phase") in runs:
            runs[rec["phase"]].append(rec)
    label = os.path.basename(os.path.normpath(path)) or path
    cfg_path = os.path.join(path, "config.json")
    if os.path.isfile(cfg_path):
        try:
            with open(cfg_path, encoding="utf-8") as f:
                cfg = json.load(f)
            label += f" ({cfg.get('loss', '?')}, {cfg.get('task_name', cfg.get('task', '?'))})"
        except (ValueError, AttributeError):  # UnicodeDecodeError is a ValueError
            raise CliError(f"{cfg_path} is not a config.json of this project (UTF-8 JSON "
                           f"object)") from None
    runs["label"] = label
    return runs


def series(run, key, kind):
    """(x, y) of one metric: SFT step for the SFT loss, RL step otherwise."""
    recs = run["sft"] if kind == "sft" else run["rl"]
    pts = [(r["step"], r[key]) for r in recs if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def panels_present(runs):
    """The rows of PANELS that at least one run has data for."""
    return [p for p in PANELS if any(series(r, p[0], p[3])[0] for r in runs)]


def running_mean(y, k=SMOOTH):
    out, s = [], 0.0
    for i, v in enumerate(y):
        s += v
        if i >= k:
            s -= y[i - k]
        out.append(s / min(i + 1, k))
    return out


def draw(runs, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("plot.py needs matplotlib: pip install -r requirements-plots.txt") from None
    panels = panels_present(runs)
    if not panels:
        raise CliError("no metric to plot: the runs' metrics.jsonl hold no SFT or RL lines")
    cols = 3 if len(panels) > 4 else 2
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.4 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, title, ylabel, kind) in zip(axes.flat, panels):
        for k, run in enumerate(runs):
            x, y = series(run, key, kind)
            if not x:
                continue
            c = colors[k % len(colors)]
            if kind == "eval":
                ax.plot(x, y, "o-", color=c, ms=3, label=run["label"])
                if key == "eval_acc" and x[0] == 0:
                    ax.axhline(y[0], color=c, ls=":", lw=1)
            else:
                ax.plot(x, y, color=c, lw=0.6, alpha=0.3)
                ax.plot(
                    x,
                    running_mean(y) if kind == "step" else running_mean(y, 25),
                    color=c,
                    lw=1.5,
                    label=run["label"],
                )
        if key in ("first_token_residual", "exch_residual"):
            ax.axhline(0, color="k", lw=0.8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("SFT step" if kind == "sft" else "RL step")
        ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in axes.flat:
        h, lab = ax.get_legend_handles_labels()
        if len(lab) > len(labels):
            handles, labels = h, lab
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=9,
               bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.suptitle("Training curves. Faint: per step; solid: running mean of "
                 f"{SMOOTH} RL steps (25 SFT steps); dotted: warm-start accuracy", fontsize=10)
    fig.tight_layout(rect=(0, 0.03 + 0.025 * ((len(labels) + 2) // 3), 1, 0.97))
    files.atomic_savefig(fig, path, dpi=110)  # a full disk keeps the earlier figure
    plt.close(fig)


def main(argv):
    dirs, out = parse(argv)
    runs = [load_run(d) for d in dirs]
    draw(runs, out)
    print(f"wrote {out} ({len(runs)} run{'s' if len(runs) > 1 else ''})")
    return out


def cli(argv):
    """The command line: bad input, a failed write and Ctrl-C get one 'error: ...' line
    and exit status 2."""
    return errors.cli(main, argv)


if __name__ == "__main__":
    cli(sys.argv[1:])
