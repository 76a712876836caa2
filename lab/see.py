"""see.py: one group of rollouts, one update, every token coloured by how it moved.

What it teaches
---------------
A critic-free update hands every token of rollout i the same signed weight,
that of its advantage Â_i. Whether the token's probability goes up or down is
decided by the sum over *all* tokens of the batch (diagnostics.py):

    Delta log pi(y_i) = eta * sum_j c_j * grad log pi(y_i) . grad log pi(y_j)

Copies of one token after one identical history have the same gradient, so
their own contributions add up to (sum of their c_j) * |grad|^2. With equal
weights inside a group (dr_grpo, dapo) that sum is w * sum A_j: zero for a token
the whole group shares, the reward's credit for a token only some rollouts
share. With grpo's 1/L_i the long rollouts' copies weigh less, and a shared
token moves although no reward asked for it. positive_only has no negative
weights, so nothing cancels: every sampled token is pushed up, shared or not.

The picture: for one group of ``--task=chain`` rollouts (a mixed one, picked
from a rollout batch), rows are rollouts, marked with reward and the sign of
A; each token is a box coloured by Delta log pi after one update on the whole
batch (blue: boosted, red: suppressed; one colour scale, in nats, for every
panel, so that colours compare across objectives). Style tokens (choices the
verifier does not check) have a thick black outline; tokens whose (history, token)
a positive and a negative rollout share have a dashed one. One panel per
objective, same rollouts, stacked so the figure stays narrow.

    python -m lab.see --init_from=out/warm_start.pt                 # writes see.png
    python -m lab.see --init_from=out/warm_start.pt --optimizer=adam --out=see_adam.png

Without matplotlib it prints the same information as text.
"""

import copy
import random
import sys
import dataclasses
from dataclasses import dataclass

import torch
import toy_tasks
from lab import probes  # one update, its Deltas and coefficients
from plumbing import errors
from lab.files import FIGURE_TYPES, atomic_savefig, check_out_file
from plumbing.checkpoint import load_checkpoint
from plumbing.config import Config, _f, check_numbers, once, parse_args
from plumbing.errors import CliError
from lab.estimators import rollouts
from lab import estimators, objectives, residuals


@dataclass
class SeeConfig:
    init_from: str = _f(
        "",
        "warm-start checkpoint of a train.py --task=chain run (e.g. out/warm_start.pt); required",
    )
    losses: str = _f("grpo,dr_grpo,positive_only", "objectives, one panel each (comma-separated)")
    prompts: int = _f(16, "B: prompts in the rollout batch the update is taken on")
    group_size: int = _f(8, "G: completions per prompt")
    optimizer: str = _f(
        "sgd", "sgd (plain, first order) or adam (train.py's AdamW: its first step)"
    )
    lr: float = _f(0.05, "learning rate of the one update (sgd: small enough to be first order)")
    seed: int = _f(0, "seed of the problems and the sampling")
    out: str = _f("see.png", "where the figure goes")


def pick_group(model, task, cfg):
    """A rollout batch and the index of its first mixed group with unequal lengths."""
    held = toy_tasks.eval_problems(task, 256, cfg.seed)
    draw = toy_tasks.train_sampler(task, held, 5000 + cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    drawn = []

    def record():
        drawn.append(draw())
        return drawn[-1]
    for _ in range(20):
        drawn.clear()
        batch = rollouts(
            model,
            task,
            record,
            Config(prompts_per_step=cfg.prompts, group_size=cfg.group_size),
            gen,
            "cpu",
        )
        batch.problems = [drawn[i // cfg.group_size] for i in range(len(batch.group))]
        r, g, lens = batch.rewards, batch.group, batch.mask.sum(1)
        for k in range(cfg.prompts):
            rows = g == k
            if r[rows].min() < r[rows].max() and lens[rows].min() < lens[rows].max():
                return batch, k
    raise CliError("no mixed group in 20 rollout batches: is this a warm start of --task=chain?")


def panel(model64, batch, name, cfg):
    """Delta log pi per token after one update of objective ``name`` on the batch."""
    adv = estimators.advantages(batch.rewards, batch.group, objectives.own_estimator(name))
    new = probes.one_update(model64, batch, adv, cfg.optimizer, cfg.lr, objective=name)
    delta = probes.token_deltas(model64, new, batch)
    coef = probes.token_coefficients(model64, batch, adv, name)
    res = residuals.exch_residual(coef, adv, batch.tokens, batch.mask, batch.group)
    return delta, adv, res


def draw(plt, batch, k, task, panels, cfg):
    """Long because: it draws one figure panel by panel; split, one figure's layout would be
    scattered over several functions."""
    rows = (batch.group == k).nonzero()[:, 0].tolist()
    rows.sort(key=lambda i: -float(batch.rewards[i]))
    p = batch.problems[rows[0]]
    tok, mask = batch.tokens, batch.mask
    sets = residuals.history_token_sets(tok, mask, batch.group)
    sign = torch.sign(batch.rewards[rows] - batch.rewards[rows].mean())
    both = {int(s) for s in sets[rows].unique() if int(s) >= 0 and
            {float(x) for x in sign[(sets[rows] == s).any(1)]} >= {1.0, -1.0}}
    T = int(mask[rows].sum(1).max())
    scale = (
        max(float(d[rows].abs().max()) for d, _, _ in panels.values()) or 1.0
    )  # one scale for all panels
    fig, axes = plt.subplots(
        len(panels),
        1,
        # about 0.24 inch per token at 100 dpi: near 800 px wide for a chain completion, so
        # that 11-point text stays 10 points or more when the figure is shown 800 px wide
        figsize=(0.24 * T + 1.6, (0.3 * len(rows) + 0.6) * len(panels) + 1.5),
        squeeze=False,
    )
    cmap, norm = plt.get_cmap("RdBu"), plt.Normalize(-scale, scale)
    for ax, (name, (delta, adv, res)) in zip(axes[:, 0], panels.items()):
        for y, i in enumerate(rows):
            text = [toy_tasks.decode([t]) or "⏎" for t in tok[i, :int(mask[i].sum())].tolist()]
            cats = task.categories(p, toy_tasks.decode(tok[i].tolist()))
            for x, ch in enumerate(text):
                style = x < len(cats) and cats[x] == "style"
                shared = int(sets[i, x]) in both
                ax.add_patch(
                    plt.Rectangle(
                        (x, -y - 0.45),
                        0.92,
                        0.9,
                        facecolor=cmap(norm(float(delta[i, x]))),
                        edgecolor="k",
                        lw=2.2 if style else (1.0 if shared else 0.2),
                        ls="--" if shared and not style else "-",
                    )
                )
                # white text on the darkest cells, so that every character stays legible
                dark = abs(float(norm(float(delta[i, x]))) - 0.5) > 0.32
                ax.text(x + 0.46, -y, ch, ha="center", va="center", fontsize=11,
                        family="monospace", color="white" if dark else "black")
            a = float(adv[i])
            ax.text(
                -0.4,
                -y,
                f"r={float(batch.rewards[i]):.0f} A{'+' if a > 0 else ('-' if a < 0 else '0')}",
                ha="right",
                va="center",
                fontsize=11,
            )
        ax.set_xlim(-3.2, T + 0.2)
        ax.set_ylim(-len(rows) + 0.3, 0.8)
        ax.axis("off")
        ax.set_title(f"{name}: largest |Δ| {float(delta[rows].abs().max()):.2g} nats, "
                     f"exch_residual {res:.3f}", fontsize=12, loc="left")
    fig.suptitle(
        f"Δ log π of every token after one update ({cfg.optimizer}, lr {cfg.lr:g}),\n"
        f"batch of {cfg.prompts} groups × {cfg.group_size}; the group of prompt {task.prompt(p)}",
        fontsize=12,
    )
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=norm)
    bar = fig.colorbar(
        sm, ax=list(axes[:, 0]), orientation="horizontal", fraction=0.04, pad=0.03, aspect=40
    )
    bar.set_label(
        "Δ log π(token) after the update (nats; one scale for every panel):\nblue boosted, red "
        "suppressed. Thick outline: style token (not checked by the verifier);\n"
        "dashed: the same token "
        "after the same history in a positive and a negative rollout",
        fontsize=11,
    )
    bar.ax.tick_params(labelsize=11)
    return fig


def main(cfg):
    if not cfg.init_from:
        raise CliError("--init_from=CKPT is required (a warm start of --task=chain)")
    check_numbers(cfg)
    check_out_file(cfg.out, "--out", FIGURE_TYPES)
    names = [x for x in cfg.losses.split(",") if x]
    for n in names:
        try:
            objectives.objective(n)
        except ValueError as e:
            raise CliError(str(e)) from None
    if not names:
        raise CliError("--losses needs at least one objective")
    if cfg.optimizer not in ("sgd", "adam"):
        raise CliError(f"--optimizer takes sgd or adam, got {cfg.optimizer!r}")
    if not (1 <= cfg.prompts <= 1024 and 2 <= cfg.group_size <= 256):
        raise CliError("--prompts must be in 1..1024 and --group_size in 2..256")
    if not cfg.lr > 0:
        raise CliError(f"--lr must be positive, got {cfg.lr}")
    model, ck = load_checkpoint(cfg.init_from)
    t = ck["task"]
    task = toy_tasks.make_task(t["task"], t["digits"], t["scratchpad"])
    if task.style_points is None:
        raise CliError(
            f"the checkpoint is of task {t['task']!r}; see.py needs a task with style points "
            f"(--task=chain)"
        )
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    batch, k = pick_group(model, task, cfg)
    m64 = copy.deepcopy(model).double()
    panels = {n: panel(m64, batch, n, cfg) for n in names}
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    rows = (batch.group == k).nonzero()[:, 0].tolist()
    for n, (delta, adv, res) in panels.items():
        print(f"{n} (exch_residual {res:.3f}):")
        for i in rows:
            toks = [
                toy_tasks.decode([x]) or "<eos>"
                for x in batch.tokens[i, : int(batch.mask[i].sum())].tolist()
            ]
            print(f"  r={float(batch.rewards[i]):.0f} A={float(adv[i]):+.2f}  " +
                  " ".join(f"{c}{'+' if d > 0 else '-'}" for c, d in zip(toks, delta[i].tolist())))
    if plt is None:
        print("(matplotlib is not installed: no figure; pip install -r requirements-plots.txt)")
        return
    fig = draw(plt, batch, k, task, panels, cfg)
    # a PNG keeps the flags that made it, so that a caption's command can be checked against it
    meta = {"metadata": {"Description": made_by(cfg)}} if cfg.out.lower().endswith(".png") else {}
    atomic_savefig(fig, cfg.out, dpi=100, bbox_inches="tight", **meta)  # a full disk: old kept
    plt.close(fig)
    print(f"wrote {cfg.out}")


def made_by(cfg):
    """The flags of this figure, as a command line (--init_from and --out aside)."""
    return "python -m lab.see " + " ".join(
        f"--{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg)
        if f.name not in ("init_from", "out"))


def quoted(argv):
    """argv, refused in one line that says why when a word that is no flag follows
    --key=VALUE: the shell cut a path with a space in two (quoted, it arrives whole)."""
    for before, word in zip(argv, argv[1:]):
        if before.startswith("--") and "=" in before and not word.startswith("-"):
            key, _, value = before.partition("=")
            raise CliError(f"unexpected argument {word!r} after {before!r}: a path with a "
                           f"space needs quotes, as in {key}='{value} {word}'")
    return argv


def cli(argv):
    """The command line: bad input, a failed write and Ctrl-C get one 'error: ...' line
    and exit status 2."""
    return errors.cli(lambda: main(parse_args(once(quoted(argv)), SeeConfig, doc=__doc__,
                                              check=False)))


if __name__ == "__main__":
    cli(sys.argv[1:])
