"""experiments/output.py: what an experiment writes, and how its figure stays honest.

* ``save(name, data, out, plot)``: ``<out>/<name>.json`` (strict JSON, NaN ->
  null) and, when matplotlib is installed, ``<out>/<name>.png``, both written
  atomically (``files.atomic_savefig``: a full disk leaves the earlier file whole); ``replot``
  redraws the PNG from the JSON alone (``--replot``);
* ``errbars`` cuts error bars at the bounds a quantity cannot pass, and
  ``ci_note`` says so in the caption; ``caption`` puts the caption under the
  figure;
* ``report`` and ``table``: what an experiment prints;
* ``provenance``: the commit, torch version and CPU that produced a result; ``save``
  writes it into every JSON that does not carry one yet.
The statistics behind the bars are stats.py's; common.py imports all of these.
"""

import json
import math
import os
import platform
import subprocess

from lab import files
from plumbing import checkpoint
from plumbing.errors import fail
from lab.experiments.stats import ci, print_contrasts


def errbars(pairs, floor=None, ceil=None):
    """[[below], [above]] half-widths for matplotlib's yerr/xerr from [mean, half]
    pairs, cut so that no bar crosses ``floor`` or ``ceil`` (a fraction, an
    entropy or a KL cannot go below 0). Missing values draw no bar."""
    below, above = [], []
    for pair in pairs:
        m, h = (pair if pair else (None, None))
        m, h = (0.0 if m is None else m), (0.0 if h is None or h != h else h)
        below.append(max(0.0, min(h, m - floor)) if floor is not None else h)
        above.append(max(0.0, min(h, ceil - m)) if ceil is not None else h)
    return [below, above]


def mean_band(ax, x, columns, color, label, **line):
    """One arm over RL steps: the mean of each column of per-seed values (None skipped) as a
    line, its 95 % t interval as a band; points with no value are left out."""
    pts = [(xi, *ci(c)) for xi, c in zip(x, columns) if c]
    x, mean, half = [p[0] for p in pts], [p[1] for p in pts], [p[2] or 0 for p in pts]
    ax.plot(x, mean, color=color, label=label, **line)
    ax.fill_between(x, [m - h for m, h in zip(mean, half)], [m + h for m, h in zip(mean, half)],
                    color=color, alpha=0.15)


def caption(fig, text):
    """The figure's caption is the markdown beside it (results/README.md), readable at any
    width; the text is kept on the figure object, not drawn."""
    fig.caption_text = text


def ci_note(n, cut=None):
    """The caption sentence about error bars over n seeds; ``cut`` names the bounds
    (e.g. "0 and 1" for a share) at which the bars are cut, if any."""
    if n < 2:
        return "One seed: no error bars."
    return (
        f"Error bars: 95 % Student-t interval over {n} seeds (t with {n - 1} degrees of freedom)"
        + (f", cut at {cut} where the quantity cannot go beyond it." if cut else ".")
    )


def replot(name, out, plot):
    """Redraw <out>/<name>.png from <out>/<name>.json with plot(plt, data):
    no model is trained and nothing is recomputed."""
    path = os.path.join(out, f"{name}.json")
    if not os.path.isfile(path):
        fail(f"{path} does not exist: run the experiment first (--replot only redraws its figure)")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:  # cut off, not UTF-8, not JSON
        fail(f"{path} is not readable JSON ({type(e).__name__}): "
             f"rerun the experiment to rewrite it")
    try:  # the figure reads the JSON's keys: an incomplete file is one line, not a traceback
        draw(name, out, lambda plt: plot(plt, data))
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
        fail(f"{path} is incomplete or not {name}'s JSON ({type(e).__name__}: {e}); "
             f"rerun the experiment to rewrite it")
    print(f"redrew {os.path.join(out, name + '.png')} from {path}")
    return data


def draw(name, out, plot):
    """<out>/<name>.png via plot(plt) -> figure, when matplotlib is installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib not installed: {name}.png not written)")
        return
    subplots = plt.subplots
    plt.subplots = column_subplots(subplots)  # a row of panels becomes a column
    try:
        fig = plot(plt)
    finally:
        plt.subplots = subplots
    readable(fig)
    files.atomic_savefig(fig, os.path.join(out, f"{name}.png"), dpi=DPI,
                              bbox_inches="tight")
    plt.close(fig)


# A figure is drawn WIDTH inches wide at DPI, with no text under MIN_PT points: shown 800 px
# wide (README width) its text is then at least MIN_PT * 800 / (WIDTH * DPI) = 11 points
# (a tight bounding box adds a few pixels: still at least 10).
WIDTH, DPI, MIN_PT, PANEL_HEIGHT = 8.0, 100, 11, 3.4


def column_subplots(subplots):
    """plt.subplots, re-laid for WIDTH inches: a row of n panels comes out as a column of n,
    and a grid of r x c (r, c > 1) as one column up to 4 panels and two beyond, so that no
    panel is narrower than about 4 inches. ``ax[i]`` and ``axes[i, j]`` still index the
    same panels as before, in reading order."""
    import numpy as np

    def wrapped(nrows=1, ncols=1, **kw):
        n = nrows * ncols
        if ncols == 1 or n == 1:
            rows, cols = nrows, ncols
        else:
            cols = 1 if nrows == 1 or n % 2 or n <= 4 else 2
            rows = n // cols
        if (rows, cols) == (nrows, ncols) and kw.get("figsize", (0, 0))[0] <= WIDTH:
            return subplots(nrows, ncols, **kw)
        kw.pop("gridspec_kw", None)  # width ratios were for the old row
        kw["figsize"] = (WIDTH, PANEL_HEIGHT * rows * (1 if cols == 1 else 0.9))
        kw["layout"] = "constrained"
        kw["squeeze"] = False
        fig, axes = subplots(rows, cols, **kw)
        flat = axes.reshape(-1)
        shaped = flat if nrows == 1 or ncols == 1 else flat.reshape(nrows, ncols)
        return fig, (shaped[0] if n == 1 else np.asarray(shaped))
    return wrapped


def readable(fig):
    """Raise every text of the figure below MIN_PT points to MIN_PT, and wrap axis labels and
    titles that would run into the next panel."""
    import textwrap
    import matplotlib.text
    for t in fig.findobj(matplotlib.text.Text):
        if t.get_fontsize() < MIN_PT:
            t.set_fontsize(MIN_PT)
    columns = max([ax.get_gridspec().ncols for ax in fig.axes if ax.get_gridspec()] or [1])
    chars = 70 if columns == 1 else 38
    for ax in fig.axes:  # a y label runs along a panel's height: about 40 characters
        for get, put, most in ((ax.get_xlabel, ax.set_xlabel, chars),
                               (ax.get_ylabel, ax.set_ylabel, 40),
                               (ax.get_title, ax.set_title, chars)):
            text = get()
            if len(text) > most and "\n" not in text:
                put(textwrap.fill(text, most))


def provenance(device="cpu"):
    """What produced a result: the commit (with "+changes" when the tree differs from it),
    torch's version and threads, the CPU's model name and its widest vector instructions,
    and the GPU's name when the training runs go to one (--device=cuda). Read once, when
    the experiment starts: a commit made while it runs is not its code."""
    if not STARTED:
        STARTED.update(_provenance(device))
    return dict(STARTED)


STARTED = {}


def _provenance(device):
    import torch
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+changes"
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and cpu in ("", platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    widest = next((f for f in ("avx512f", "avx2", "avx", "neon", "asimd") if f in flags), "")
    out = {"commit": commit, "torch": torch.__version__, "threads": torch.get_num_threads(),
           "cpu": cpu + (f" ({widest})" if widest else ""), "cores": os.cpu_count()}
    if device == "cuda":
        out["gpu"] = torch.cuda.get_device_name()
    return out


def save(name, data, out, plot=None):
    """Write <out>/<name>.json (with its ``provenance``) and, with matplotlib,
    <out>/<name>.png via plot(plt), each atomically (a failed write keeps the earlier file)."""
    if isinstance(data, dict) and "provenance" not in data:
        data = dict(data, provenance=provenance())
    text = json.dumps(clean(data), indent=1, allow_nan=False)  # strict JSON: NaN -> null
    checkpoint.atomic_write_text(text, os.path.join(out, f"{name}.json"))
    if plot is not None:
        draw(name, out, plot)


def report(name, data, out):
    """Print an experiment's primary and secondary contrasts and where it wrote."""
    print_contrasts(data["primary"])
    print_contrasts(data["secondary"], "secondary")
    print(f"[{data['wall_s']:.0f}s] wrote {out}/{name}.json")


def table(rows, header):
    """Print a plain text table."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for r in [header] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))


def clean(x):
    """NaN and inf -> None, recursively, so that the JSON is strict."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def contrast_panel(ax, contrasts, ylabel):
    """The pre-registered contrasts of an experiment, each drawn as its paired
    per-seed differences (dots) and their mean with the 95 % t interval (bar)."""
    import textwrap
    for k, (name, c) in enumerate(contrasts.items()):
        per = c.get("per_seed") or []
        ax.scatter(
            [k + 0.12 * ((i % 5) - 2) / 2 for i in range(len(per))],
            per,
            s=14,
            color="0.55",
            zorder=2,
            label="one seed" if k == 0 else None,
        )
        if c["diff"] is not None:
            ax.errorbar(
                [k],
                [c["diff"]],
                [[c["half"] or 0.0], [c["half"] or 0.0]],
                fmt="D",
                color="k",
                ms=6,
                capsize=5,
                lw=2,
                zorder=3,
                label="mean, 95 % t interval" if k == 0 else None,
            )
    ax.axhline(0, color="tab:red", lw=1, ls="--", label="no difference")
    ax.set_xticks(range(len(contrasts)), [textwrap.fill(n, 22) for n in contrasts], fontsize=8)
    ax.set_xlim(-0.6, len(contrasts) - 0.4)
    ax.set_ylabel(ylabel)
    preds = sorted({c["predicted"] for c in contrasts.values()})
    ax.set_title(f"primary contrast, paired by seed (predicted {', '.join(preds)})", fontsize=10)
    ax.legend(fontsize=7, loc="best")
