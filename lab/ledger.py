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

import textwrap
from dataclasses import replace

import torch

import batching
import loss
from lab import estimators, lengthcov, motion, objectives, residuals
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
    can cancel.

    Long because: the five parts share every per-set sum, and splitting them apart would
    compute those sums again for each part."""
    ids = residuals.history_token_sets(tokens.cpu(), mask.cpu(), group.cpu())
    # a set with one copy adds nothing to any part: drop it before the sums (most positions
    # of long completions are not shared), renumbering the rest in the same order
    on = ids >= 0
    copies = torch.bincount(ids[on], minlength=1)
    keep = copies >= 2
    renumber = torch.cumsum(keep.long(), 0) - 1
    ids = torch.where(on, torch.where(keep[ids.clamp(min=0)], renumber[ids.clamp(min=0)], -1), -1)
    n_sets = int(keep.sum())
    zero = {"mass": 0.0, "cancelled": 0.0, **{p: 0.0 for p in LEDGER_PARTS}}
    if n_sets == 0:
        return zero

    def per_set(where, v):  # sum of v over the copies of each set
        return torch.zeros(n_sets, dtype=torch.float64, device="cpu").index_add_(0, where, v)

    # every shared position once: its row, its token position and its set
    row, pos = torch.nonzero(ids >= 0, as_tuple=True)
    where = ids[row, pos]
    zeros = lambda n: torch.zeros(n, dtype=torch.float64, device="cpu")
    total, total_on = zeros(len(where)), zeros(len(where))  # c_i and c°_i summed over steps
    moved, mass = zeros(n_sets), zeros(n_sets)
    for rows, coef, coef_on in steps:
        rows = rows.cpu()
        at = torch.full((ids.shape[0],), -1, dtype=torch.long, device="cpu")
        at[rows] = torch.arange(len(rows), device="cpu")  # a step uses a row once
        k = at[row]
        mine = k >= 0  # the shared positions of this step's rows
        c = coef.detach().cpu().double()[k[mine], pos[mine]]
        net = per_set(where[mine], c)  # one gradient per set and step: only the net moves
        moved += net.abs()
        mass += per_set(where[mine], c.abs())
        total[mine] += c  # a row may come back in a later epoch
        total_on[mine] += coef_on.detach().cpu().double()[k[mine], pos[mine]]
    a_row = adv.detach().cpu().double()
    a_g_row = (loss.group_sum(a_row, group.cpu())
               / loss.group_sum(torch.ones(len(adv), dtype=torch.float64, device="cpu"),
                                group.cpu()))
    a, a_g = a_row[row], a_g_row[row]
    copies, sum_a, abs_a = per_set(where, torch.ones_like(a)), per_set(where, a), \
        per_set(where, a.abs())
    C, C_on = per_set(where, total), per_set(where, total_on)

    def mean_weight(c):  # wbar = sum_S sign(Â_i) c_i / sum_S |Â_i| (0 where every Â is 0)
        s = per_set(where, torch.sign(a) * c)
        return torch.where(abs_a > 0, s / abs_a.clamp(min=1e-300), torch.zeros_like(s))
    wbar, wbar_on = mean_weight(total), mean_weight(total_on)
    weights = C_on - wbar_on * sum_a
    parts = {
        "credit": wbar * per_set(where, a - a_g),
        "uncentred": wbar * per_set(where, a_g),
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


def largest_cause(shares):
    """The largest part other than credit, or None when what did not cancel, 1 - cancelled,
    exceeds credit by no more than float error (the other parts are absent or offset)."""
    defects = {p: shares[p] for p in LEDGER_PARTS if p != "credit"}
    worst = max(defects, key=defects.get)
    beyond_credit = 1.0 - shares["cancelled"] - shares["credit"]
    if defects[worst] <= LEDGER_ZERO or beyond_credit <= LEDGER_ZERO:
        return None
    return worst


def ledger_remedies(part, cfg):
    """Changes of flags that remove ``part`` of the ledger and bring no other part that the run
    does not have already, best first, as (flags, words). Only where that holds whatever the
    data: under reuse (several mini-batches or epochs) an objective's weights, the ratios and
    the split of a group interact, and no single change is safe, so none is offered for the
    weights there. tests/test_ledger.py runs every remedy and reads the ledger it leaves."""
    obj, out = objectives.OBJECTIVES[cfg.loss], []
    on_policy = cfg.minibatches == 1 and cfg.epochs == 1
    whole = batching.keeps_groups_whole(cfg.batching) or cfg.minibatches == 1
    if part == "weights" and on_policy:
        # the KL penalty pushes every copy the same way: the ledger books it as weights
        no_kl = {"beta": 0.0} if cfg.beta > 0 else {}
        if "on-policy" in obj.cancels:
            out.append(({"agg": "auto", **no_kl}, "the objective's own equal weights"))
        for name in ("dapo", "dr_grpo"):  # dapo: GRPO's own Â, only the weights made equal
            if name != cfg.loss:
                out.append(({"loss": name, "agg": "auto", **no_kl}, "an objective with equal "
                            "weights"))
    elif part == "ratios":  # every step on-policy: no ratio, and no group split over steps
        out.append(({"minibatches": 1, "epochs": 1}, "no reuse: every step on-policy"))
    elif part == "split":
        if not whole and cfg.epochs == 1:
            out.append(({"batching": "query"}, "a scheduler that keeps groups whole"))
        if whole and cfg.epochs > 1:  # groups stay whole: the epochs' nets differ in sign
            out.append(({"epochs": 1}, "one epoch: each copy is applied in one step"))
    elif part == "uncentred":
        for name in (objectives.OBJECTIVES[cfg.loss].adv, "dr_grpo", "grpo"):
            if estimators.ESTIMATORS[name].centred and name != cfg.adv:
                out.append(({"adv": name}, "a centred estimator"))
    return [(f, w) for f, w in out if any(getattr(cfg, k) != v for k, v in f.items())]


# switches whose effect on the shared tokens the five parts do not isolate (THEORY.md 2.5)
LEDGER_BLIND = {
    "beta": "the KL penalty gives every copy the same push, booked as 'weights'",
    "entropy_coef": "the entropy bonus acts through the whole distribution, not through c",
    "top_entropy_quantile": "the entropy selection can take some copies of a token, not others",
}


def ledger_caveats(cfg):
    """One clause per switch of LEDGER_BLIND the run has on."""
    return [w for k, w in LEDGER_BLIND.items()
            if getattr(cfg, k) != (1.0 if k == "top_entropy_quantile" else 0.0)]


# ----------------------------------------------------------------------------- the run's last lines

def by_construction(cfg):
    """The ledger's parts that this run's flags make zero whatever the data (up to float
    error): {part: (why, the flag that would make it non-zero)}."""
    out = {}
    if cfg.minibatches == 1 and cfg.epochs == 1:  # one on-policy step per rollout batch
        out["ratios"] = ("no data is reused", "--epochs=2 reuses it")
        out["split"] = ("one optimizer step takes every group", "--minibatches=2 splits them")
    if estimators.ESTIMATORS[cfg.adv].centred:
        out["uncentred"] = (f"--adv={cfg.adv} is centred in each group",
                            "--adv=batch_whiten is not")
    return out


def percent(share):
    """A ledger share for print: 0 up to float error (LEDGER_ZERO), else 3 digits."""
    return "0 %" if share <= LEDGER_ZERO else f"{100 * share:.3g} %"


def remedy(part, cfg):
    """The flags of the first of ledger_remedies that this run's flag checks accept; '' when
    none is accepted."""
    for flags, _ in ledger_remedies(part, cfg):
        try:
            validate(replace(cfg, **flags))
        except CliError:
            continue
        return " ".join(f"--{k}={v}" for k, v in flags.items() if getattr(cfg, k) != v)
    return ""


# the rows of the ledger's table: a part and its words (at most 44 characters)
ROWS = {"credit": "left by credit, what the rewards ask for",
        "weights": "left by unequal weights of the objective",
        "ratios": "left by ratios and clips of reused data",
        "split": "left by copies in different steps",
        "uncentred": "left by advantages not centred in a group"}


def ledger_lines(summary, cfg):
    """The run's cancellation ledger as a small table, its verdict, and the change of the
    group-shared tokens (THEORY.md 2.5). Every line is at most 100 characters."""
    n, shares = summary["ledger_steps"], {k: summary[f"ledger_{k}"]
                                          for k in ("cancelled", *LEDGER_PARTS)}
    first = cfg.rl_steps - n + 1
    head = f"cancellation ledger of RL steps {first}-{cfg.rl_steps} (THEORY.md 2.5)"
    if not summary["ledger_mixed_steps"]:
        return [head + ": no group was mixed, so nothing could cancel",
                "hint: " + MIXED_HINT_FLAGS.strip()]
    if summary["ledger_mass"] == 0:
        return [head + ": the shared tokens got no coefficient, so nothing could cancel"]
    out = [head,
           "a shared token: one that two or more rollouts of a group write after one history;",
           "of its copies' coefficients, summed over the steps:",
           f"  {'cancelled inside an optimizer step':44s} {percent(shares['cancelled']):>8s}"]
    zero = {p: w for p, w in by_construction(cfg).items() if shares[p] <= LEDGER_ZERO}
    for p, words in ROWS.items():
        fix = remedy(p, cfg) if p != "credit" and shares[p] > LEDGER_ZERO else ""
        out.append(f"  {words:44s} {percent(shares[p]):>8s}" + (f"   {fix} removes it"
                                                               if fix else "")
                   + (" *" if p in zero else ""))
    out.append("  (the parts can offset each other: they need not add up to 100 %)")
    if zero:  # a 0 that the flags guarantee is no finding: say so, and what would change it
        why = "; ".join(f"{w} ({flag})" for w, flag in zero.values())
        out += textwrap.wrap(f"* zero by construction in this run: {why}", 98,
                             initial_indent="  ", subsequent_indent="    ")
    out += verdict_lines(shares, cfg)
    if "motion_moved" in summary or "motion_scale_mean" in summary:  # the motion ledger
        out += motion.lines(summary, cfg.motion_every)
    else:
        out += ["group-shared tokens (every rollout of a mixed group writes them before it "
                "diverges):",
                f"  mean log-prob change {summary['shared_dlogp_mean']:+.1e} nats per RL step"]
    if "lencov_gap_mean" in summary:
        out += length_lines(summary["lencov_gap_mean"], summary["length_mean"], cfg,
                            shares["weights"])
    return out


def length_lines(gap, length, cfg, weights=None):
    """What 1/L_i had to act on (THEORY.md 2.7), in at most four lines of one idea each: a
    group-shared token's copies sum to G Cov(Â, w) inside the group, so 1/L_i pushes it only
    where right and wrong rollouts differ in length. To first order the net is gap / (2 L) of
    its copies' summed |c|: sum_i Â_i / L_i = k a (1/L_right - 1/L_wrong) against
    sum_i |Â_i| / L_i = 2 k a / L. ``weights``: the ledger's share left by unequal weights
    (every shared token); and where the gap falls on E13's curve (lengthcov.where_on_curve)."""
    longer = "right" if gap > 0 else "wrong"
    share = 100 * abs(gap) / length
    out = [f"length and reward (THEORY.md 2.7): in mixed groups, {longer} ran "
           f"{abs(gap):.1f} tokens ({share:.1f} % of L) longer."]
    agg = objectives.LossSettings.from_config(cfg).aggregation()
    if agg == "balanced-token-mean":  # Balanced Aggregation: 1 / T_s of the row's sign class
        return out + ["  This run's weights depend on its sign classes' mean lengths, not on "
                      "each L_i: the 1/L_i estimate does not apply."]
    if agg != "seq-mean-token-mean":
        return out + ["  This run's weights do not depend on L_i: the gap pushes nothing."]
    way = "a push down" if gap > 0 else "a push up"
    out.append(f"  Through that gap 1/L_i leaves a group-shared token {share / 2:.1f} % of its "
               f"coefficients: {way}.")
    if weights is not None:
        out.append(f"  The ledger's {percent(weights)} left by unequal weights counts every "
                   f"shared token.")
    return out + ["  " + line for line in lengthcov.where_on_curve(share)]


def verdict_lines(shares, cfg):
    """The largest cause besides credit, what would remove it, and the caveats."""
    part = largest_cause(shares)
    note = [f"note: {c}" for c in ledger_caveats(cfg)]
    if part is None:
        return ["verdict: beyond the rewards' credit nothing was left uncancelled (up to float "
                "error)"] + note
    fix = remedy(part, cfg)
    words = ROWS[part].replace("left by ", "")
    lines = [f"verdict: the largest cause besides credit is {words}"[:100]]
    lines.append(f"  ({percent(shares[part])}); {fix} would remove it" if fix else
                 f"  ({percent(shares[part])}); no single flag removes it under this run's reuse")
    return lines + note
