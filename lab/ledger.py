"""ledger.py: the cancellation ledger, where the shared tokens' coefficients went.

What it teaches
---------------
The cancellation ledger (THEORY.md section 2.5) accounts, for each rollout
batch, for where the coefficients of the shared tokens went. A *set* S is the
copies of one token a after one identical history h inside a group
(residuals.history_token_sets), with at least two copies. Copy i of S receives
c_i^(k) in optimizer step k (0 if its row is not in that step). In step k the
copies' gradients are one vector, so only their net n_k = sum_{i in S} c_i^(k)
moves the parameters; the rest, sum_i |c_i^(k)| - |n_k|, cancelled. With
c_i = sum_k c_i^(k), the |Â|-weighted mean weight wbar = sum_S sign(Â_i) c_i /
sum_S |Â_i|, Â_g the group's mean advantage, and c°_i the coefficients the same
steps would give on-policy (every ratio 1, so no clip binds):

    sum_k |n_k| = split + |C|,      split = sum_k |n_k| - |sum_k n_k|
    C = sum_S c_i = credit + uncentred + weights + ratios   (exactly)
      credit    = wbar sum_S (Â_i - Â_g)    what the rewards ask of a after h
      uncentred = wbar |S| Â_g              an estimator not centred in its group
      weights   = C° - wbar° sum_S Â_i      the objective's own unequal weights
      ratios    = (C - wbar sum_S Â_i) - weights   what reuse adds (ratios, clips)

``split`` is what did not cancel because the copies were applied in different
optimizer steps (a group split by the scheduler, or nets of opposite sign in
different epochs). ``weights`` and ``ratios``
together are what exch_residual measures inside one step. Each part is logged
as ``ledger_<part>``: the sum over sets of its magnitude over the sum over
sets of sum_k sum_i |c_i^(k)| (the shared tokens' coefficient mass), and
``ledger_cancelled`` the share that cancelled inside the steps. The magnitudes
of the signed parts bound what did not cancel; they need not add up to it.

The run's summary (``lines`` below) names the largest part other than
credit (``ledger_verdict``) and a flag that removes it (``ledger_remedies``);
diagnostics.py's ``shared_dlogp`` measures what the update did to those tokens.
"""

from dataclasses import replace

import torch

import batching
import loss
from lab import estimators, objectives, residuals
from plumbing.config import validate
from plumbing.console import MIXED_HINT_FLAGS
from plumbing.errors import CliError


# The parts of the ledger (see the docstring), in the order the summary lists them; the
# words are what the summary prints for each.
LEDGER_PARTS = {
    "credit": "credit the rewards give (intended)",
    "weights": "unequal weights from the objective itself",
    "ratios": "ratios and clips of reused data",
    "split": "copies applied in different optimizer steps",
    "uncentred": "an advantage estimator not centred in its group",
}


def ledger_sums(steps, adv, tokens, mask, group):
    """The cancellation ledger of one rollout batch, as sums over its shared-token sets.

    ``steps``: one (rows, coef, coef_on) per optimizer step, in order: the rows of the
    batch it used, every copy's coefficient c [rows, T] and the on-policy one c° (loss.py's
    ``coefficients`` of the same loss with every ratio 1). Returns {"mass": sum over sets
    of sum_k sum_i |c_i^(k)|, "cancelled": what cancelled inside steps, and one sum of
    magnitudes per part of LEDGER_PARTS}. Sets with one copy are left out: nothing there
    can cancel."""
    ids = residuals.history_token_sets(tokens.cpu(), mask.cpu(), group.cpu())
    n_sets = int(ids.max()) + 1 if bool((ids >= 0).any()) else 0
    zero = {"mass": 0.0, "cancelled": 0.0, **{p: 0.0 for p in LEDGER_PARTS}}
    if n_sets == 0:
        return zero

    def per_set(where, v):  # sum of v over the copies of each set
        return torch.zeros(n_sets, dtype=torch.float64, device="cpu").index_add_(0, where, v)

    on = ids >= 0
    zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device="cpu")
    total, total_on = zeros(ids.shape), zeros(ids.shape)
    moved, mass = zeros(n_sets), zeros(n_sets)
    for rows, coef, coef_on in steps:
        rows = rows.cpu()
        sub, c = ids[rows], coef.detach().cpu().double()
        here = sub >= 0
        net = per_set(sub[here], c[here])  # one gradient per set and step: only the net moves
        moved += net.abs()
        mass += per_set(sub[here], c[here].abs())
        total.index_add_(0, rows, c)  # a row may come back in a later epoch
        total_on.index_add_(0, rows, coef_on.detach().cpu().double())
    where = ids[on]
    a = adv.detach().cpu().double()[:, None].expand(ids.shape)
    a_g = (loss.group_sum(adv.detach().cpu().double(), group.cpu())
           / loss.group_sum(torch.ones(len(adv), dtype=torch.float64, device="cpu"),
                                 group.cpu()))
    a_g = a_g[:, None].expand(ids.shape)
    copies, sum_a, abs_a = per_set(where, torch.ones_like(a[on])), per_set(where, a[on]), \
        per_set(where, a[on].abs())
    C, C_on = per_set(where, total[on]), per_set(where, total_on[on])

    def mean_weight(c):  # wbar = sum_S sign(Â_i) c_i / sum_S |Â_i| (0 where every Â is 0)
        s = per_set(where, torch.sign(a[on]) * c[on])
        return torch.where(abs_a > 0, s / abs_a.clamp(min=1e-300), torch.zeros_like(s))
    wbar, wbar_on = mean_weight(total), mean_weight(total_on)
    weights = C_on - wbar_on * sum_a
    parts = {
        "credit": wbar * per_set(where, (a - a_g)[on]),
        "uncentred": wbar * per_set(where, a_g[on]),
        "weights": weights,
        "ratios": (C - wbar * sum_a) - weights,
        "split": moved - C.abs(),
    }
    shared = copies >= 2
    out = {"mass": float(mass[shared].sum()), "cancelled": float((mass - moved)[shared].sum())}
    out.update({p: float(parts[p][shared].abs().sum()) for p in LEDGER_PARTS})
    return out


def ledger_shares(sums):
    """Each part of ``ledger_sums`` (or of their sum over steps) as a share of the mass."""
    m = sums["mass"]
    return {k: (v / m if m > 0 else 0.0) for k, v in sums.items() if k != "mass"}


LEDGER_ZERO = 1e-6  # a share at most this is float error (float32 coefficients: ~1e-8 here)


def ledger_verdict(shares):
    """(the largest part other than credit, or None, and one sentence). None when what did
    not cancel, 1 - cancelled, exceeds credit by no more than float error: then the parts
    other than credit are absent or offset each other."""
    defects = {p: shares[p] for p in LEDGER_PARTS if p != "credit"}
    worst = max(defects, key=defects.get)
    beyond_credit = 1.0 - shares["cancelled"] - shares["credit"]
    if defects[worst] <= LEDGER_ZERO or beyond_credit <= LEDGER_ZERO:
        return None, ("beyond the credit the rewards give, nothing was left uncancelled (up to "
                      "float error): whatever else moved the shared tokens came through other "
                      "tokens' gradients")
    pct = lambda x: f"{100 * x:.3g} %"
    return worst, (f"the largest cause other than credit: {LEDGER_PARTS[worst]} "
                   f"({pct(defects[worst])} of the mass, against {pct(shares['credit'])} "
                   f"for credit)")


def ledger_remedies(part, cfg):
    """Candidate changes that remove ``part`` of the ledger, best first, as (flags, words);
    none is what cfg already uses. The caller keeps the first its flag checks accept."""
    obj, out = objectives.OBJECTIVES[cfg.loss], []
    whole = batching.keeps_groups_whole(cfg.batching) or cfg.minibatches == 1
    fewer = {k: 1 for k in ("epochs", "minibatches") if getattr(cfg, k) > 1}
    if part == "weights":
        if "on-policy" in obj.cancels and cfg.agg != "auto":
            out.append(({"agg": "auto"}, "the objective's own aggregation, equal weights"))
        if "on-policy" in obj.cancels and cfg.beta > 0:
            out.append(({"beta": 0.0}, "no KL penalty: it pushes every copy the same way"))
        for name in ("dr_grpo", "dapo", "cispo"):
            if name != cfg.loss:
                out.append(({"loss": name, "agg": "auto"}, "an objective with equal weights"))
    elif part == "ratios":
        transform = next(n for n, o in objectives.OBJECTIVES.items() if o.group_transform)
        if obj.group_transform is None:  # one weight per group, if each step holds whole groups
            flags = {"loss": transform} if whole else {"loss": transform, "batching": "query"}
            out.append((flags, "a DFPO transform: one weight per group"))
        if fewer:
            out.append((fewer, "no reuse: every step on-policy"))
    elif part == "split":
        if whole and cfg.epochs > 1:  # groups stay whole: the epochs' nets differ in sign
            out.append(({"epochs": 1}, "one epoch: each copy is applied in one step"))
        for name in batching.WHOLE_GROUPS:
            if name != cfg.batching and not whole:
                out.append(({"batching": name}, "a scheduler that keeps groups whole"))
        if cfg.minibatches > 1:
            out.append(({"minibatches": 1}, "one step per epoch"))
    else:
        for name, e in estimators.ESTIMATORS.items():
            if e.centred and name != cfg.adv:
                out.append(({"adv": name}, "a centred estimator"))
    return [(f, w) for f, w in out if any(getattr(cfg, k) != v for k, v in f.items())]


# switches whose effect on the shared tokens the five parts do not isolate (THEORY.md 2.5)
LEDGER_BLIND = {
    "beta": "the KL penalty gives every copy the same push, booked as 'weights'",
    "entropy_coef": "the entropy bonus acts through the whole distribution, not through c",
    "top_entropy_quantile": "the entropy selection can take some copies of a token, not others",
}


def ledger_caveats(cfg):
    """One clause per switch of LEDGER_BLIND the run has on ('' if none)."""
    on = [w for k, w in LEDGER_BLIND.items()
          if getattr(cfg, k) != (1.0 if k == "top_entropy_quantile" else 0.0)]
    return "; ".join(on)


# ----------------------------------------------------------------------------- the run's last lines

# lab/experiments/demo_ledger.py over seeds 0-9 (results/demo_ledger.json; a test checks these):
# shared_dlogp_mean, grpo - dr_grpo: mean, 95 % t half-width, smallest detectable, margin
DEMO_SHARED_DLOGP = (6.7e-6, 3.0e-5, 4.1e-5, 1e-4)


def demo_finding():
    """What the demo's ten seeds found about shared_dlogp, in one sentence."""
    d, h, mde, margin = DEMO_SHARED_DLOGP
    return (f"over seeds 0-9 of the demo, grpo and dr_grpo moved them alike: difference "
            f"{d:+.1e} +- {h:.1e}, equivalent to none within +-{margin:.0e} (smallest detectable "
            f"{mde:.1e}; results/README.md)")


def percent(share):
    """A ledger share for print: 0 up to float error (LEDGER_ZERO), else 3 digits."""
    return "0 %" if share <= LEDGER_ZERO else f"{100 * share:.3g} %"


def remedy(part, cfg):
    """The first of ledger_remedies that this run's flag checks accept, as words
    with its flags; '' when none is accepted."""
    for flags, words in ledger_remedies(part, cfg):
        try:
            validate(replace(cfg, **flags))
        except CliError:
            continue
        changed = {k: v for k, v in flags.items() if getattr(cfg, k) != v}  # what to type
        return f"try {words} (" + " ".join(f"--{k}={v}" for k, v in changed.items()) + ")"
    return ""


def ledger_lines(summary, cfg):
    """The run's cancellation ledger in a few true sentences (ledger.py, THEORY.md 2.5)."""
    n, shares = summary["ledger_steps"], {k: summary[f"ledger_{k}"]
                                          for k in ("cancelled", *LEDGER_PARTS)}
    over = "the RL steps" if n == cfg.rl_steps else f"the last {n} RL steps (since the resume)"
    if not summary["ledger_mixed_steps"]:
        return [f"cancellation ledger over {over}: no group was mixed, so no rollout carried an "
                "advantage against another's: nothing to cancel. " + MIXED_HINT_FLAGS]
    if summary["ledger_mass"] == 0:
        return [f"cancellation ledger over {over}: the tokens that rollouts of a group share "
                "after the same history received no coefficient at all: nothing to cancel"]
    parts = ", ".join(f"{LEDGER_PARTS[p].split(' (')[0]} {percent(shares[p])}"
                      for p in LEDGER_PARTS)
    part, verdict = ledger_verdict(shares)
    fix = remedy(part, cfg) if part else ""
    caveat = ledger_caveats(cfg)
    return [f"cancellation ledger over {over}: of the coefficients on tokens that several "
            f"rollouts of a group share after the same history, {percent(shares['cancelled'])} "
            f"cancelled inside the optimizer steps; the rest by cause (parts can offset each "
            f"other): {parts}",
            verdict + (f"; {fix}" if fix else "") + (f" (note: {caveat})" if caveat else ""),
            f"shared tokens before a mixed group diverges: log-prob change "
            f"{summary['shared_dlogp_mean']:+.1e} nats per RL step on average (steps with no "
            f"such token count as 0)" + (f"; {demo_finding()}" if cfg.task == "add" else "")]
