"""loss.py: the GRPO family of objectives, one record each, and DFPO's transforms.

What it teaches
---------------
Every objective here is a weighted policy gradient. Write its gradient as

    grad = - sum_{i,t} c_{i,t} * grad log pi(y_{i,t} | s_{i,t})

with a per-token coefficient ``c_{i,t} = -d loss / d log pi_new(y_{i,t})``.
Take a token ``a`` that every rollout of a group emits after the same history
``h`` (the first completion token, a shared format prefix). Its gradient is
``(sum_i c_i) grad log pi(a|h)``. Write ``c_i = w_i * Â_i``. Three statements,
kept apart (THEORY.md section 2.1; tests/test_loss.py checks each):

* sufficient: equal weights (w_i = w for every copy, which this project calls
  *gradient exchangeability*, after [P1, arXiv 2604.13088]) cancel for every
  centred Â (sum_i Â_i = 0);
* necessary only for all Â: if the w_i are not all equal, some centred Â
  (e.g. Â_i = w_i - mean w) leaves sum_i c_i != 0;
* exact, for one given Â: the copies cancel iff sum_i w_i Â_i = 0, which
  unequal weights can meet too (Adv-Orthogonal below does so by design).

Where they cancel, only tokens that differ between good and bad rollouts move.
``first_token_residual`` and ``exch_residual`` below measure it on every step.

One record per objective
------------------------
An objective is one ``Objective`` record in ``OBJECTIVES``: its per-token
term, its aggregation weight agg_i, its own advantage estimator, what its clip
bounds, which switches it allows, and its exchangeability verdict per regime.
Everything else reads the records: ``policy_loss`` dispatches through them,
plumbing/config.py's checks and ``--help``, the scoreboard's predictions, and the
objective table of README.md (``table()``; tests/test_docs.py checks the copy
and ``python tests/test_docs.py`` rewrites it). To add an objective, write its
term and ``register`` one record. The records, near the end of this file, are
the table: name, term, aggregation, coefficient and verdict, in that order.

Notation: N = sequences and sum L = completion tokens in the optimizer step,
L_i = length of completion i, L_max = the task's longest completion, rho =
pi_new/pi_old per token, s_i = exp(mean_t log rho_{i,t}) per sequence, w~ =
DFPO's transformed weights (below), mu_g and sigma_g = the mean and sd of the
group's rewards.

"Keeps exchangeability" (a record's ``verdict`` and ``cancels``) means: every copy of a token after
one identical
history gets the same weight w_i, in the regime named, so such copies cancel
for every centred Â (tests/test_loss_engines.py checks each verdict on
synthetic groups; experiments/scoreboard.py measures them). A record's ``adv``
is what ``--adv=auto`` takes, each objective's own estimator; ``--adv`` picks any
other (advantage.py, whose records say which estimators are centred: a shared
token cancels only under equal weights *and* centred Â). sapo's temperature
tau is 1.0 for Â > 0 and 1.05 for Â < 0; clip_cov selects tokens with
1 < (Â - mean Â)(log pi - mean) < 5, kl_cov the top-covariance tokens;
vespo's phi(W) = e^lam W^k e^(-lam W) is detached; dppo's eps are probability
(tv) or KL (kl) thresholds, not ratio bounds.

The switches that add to any row (``--dual_clip``, ``--beta``,
``--entropy_coef``, ``--agg``, ``--top_entropy_quantile``,
``--off_policy_mask_threshold``) and what each does to exchangeability are in
docs/REFERENCE.md; loss_engines.py implements them.

Token-level objectives (grpo, dr_grpo, dapo, rloo, positive_only) use the PPO
surrogate per token, ``-min(rho Â, clip(rho, 1-eps_low, 1+eps_high) Â)``,
whose coefficient is ``rho Â agg_i`` where the clip does not bind and 0 where
it does. All copies of a shared (h, a) have the *same* rho, so token ratios
keep exchangeability; an asymmetric clip does not: when rho > 1+eps_high the
Â>0 copies lose their gradient and the Â<0 ones keep it (clip-higher, DAPO,
makes this more lopsided). ``gspo`` uses one ratio s_i per sequence, clipped
per sequence; different copies carry different s_i.

DFPO's transforms (our names, Min-Replace and Adv-Orthogonal, for the two
detached group transforms the abstract of [P1] describes) take the
per-sequence importance weights ``w_i = sg(s_i)`` and, inside each group,
*before* the gradient and with a stop-gradient, replace them by

    Min-Replace     w~_i = min_j w_j
    Adv-Orthogonal  w~   = w - (Â.w / |Â|^2) Â,        so that sum_i Â_i w~_i = 0

Either way a token shared by the whole group cancels exactly, on- and
off-policy, and no clip is needed (``--clip`` on a dfpo loss truncates w to
[1-eps_low, 1+eps_high] before the transform, which keeps the property). A
prefix that only part S of a group shares gets equal weights under
Min-Replace (one weight for the whole group), so it carries w~ sum_S Â_i, the
credit its rewards give it, and nothing more; under Adv-Orthogonal its w~_i
differ.

On-policy (one mini-batch, one epoch: rho = s = w = 1, no clip binds):
dr_grpo, dfpo_min and dfpo_orth coincide exactly (same advantage, same
coefficient); dapo equals grpo when all lengths are equal; gspo's coefficient
equals grpo's. They differ only once the data are reused off-policy
(``--minibatches`` > 1 or ``--epochs`` > 1 in train.py).

``positive_only`` has Â >= 0, so only the upper clip bound can ever bind;
``--clip=higher`` is allowed and simply sets that bound to 1+eps_high.

Groups whose rewards are all equal have Â = 0: they add nothing to the
gradient but still count in N and sum L.
"""

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

import advantage
import loss_engines

# --clip: what each ratio clip bounds the ratio to (eps_low, eps_high = --clip_low, --clip_high)
CLIPS = {"none": "no clip", "sym": "1±clip_low", "higher": "1-clip_low, 1+clip_high"}
# The regimes in which the exchangeability verdicts are stated (and scored, by
# experiments/scoreboard.py): on-policy; off-policy with no clip binding; a clip
# binding on a shared token; one optimizer step split into micro-batches.
REGIMES = ("on-policy", "off-policy", "clip binds", "split step")
EVERY_REGIME = frozenset(REGIMES)


# ----------------------------------------------------------------------------- aggregation

# The aggregation weight agg_i of every token of sequence i, so that
# loss = sum_{i,t} agg_i * l_{i,t}. The first five are verl's ``loss_agg_mode``
# names (``--agg`` picks one of them); the last two belong to one objective each.
AGGREGATIONS = {
    "token-mean": "1 / sum L",
    "token-sum": "1",
    "seq-mean-token-sum": "1 / N",
    "seq-mean-token-mean": "1 / (N L_i)",
    "seq-mean-token-sum-norm": "1 / (N L_max)",
    "micro-token-mean": "1 / (M sum L_local)",
    "positive-token-mean": "1 / sum L over positives",
}
AGGS = tuple(list(AGGREGATIONS)[:5])  # what --agg accepts


def step_counts(mask, adv, max_len=None, micro_batches=1):
    """Denominators of one optimizer step: N, sum L, sum L over positives, L_max,
    and M, the micro-batches it is split into (only ``micro-token-mean`` reads M).
    Pass them in ``LossBatch.counts`` when a step is split into micro-batches."""
    lens = mask.sum(1)
    return {"n_seqs": mask.shape[0], "n_tokens": int(lens.sum()),
            "n_pos_tokens": int(lens[adv > 0].sum()),
            "max_len": int(max_len if max_len is not None else lens.max()),
            "micro_batches": int(micro_batches)}


def agg_weight(mode, lens, counts):
    """agg_i [N] of aggregation ``mode`` (a key of AGGREGATIONS) for sequences of
    lengths ``lens``, with the optimizer step's denominators ``counts``."""
    n, max_len, tokens = counts["n_seqs"], counts["max_len"], max(counts["n_tokens"], 1)

    def const(v):
        return torch.full_like(lens, v, dtype=torch.float)

    if mode == "seq-mean-token-mean":
        return 1.0 / (n * lens.clamp(min=1).float())
    if mode == "seq-mean-token-sum-norm":
        return const(1.0 / (n * max_len))
    if mode == "token-mean":
        return const(1.0 / tokens)
    if mode == "micro-token-mean":  # this micro-batch's own tokens, times M micro-batches
        return const(1.0 / (max(int(lens.sum()), 1) * counts.get("micro_batches", 1)))
    if mode == "seq-mean-token-sum":
        return const(1.0 / n)
    if mode == "positive-token-mean":
        return const(1.0 / max(counts["n_pos_tokens"], 1))
    if mode == "token-sum":
        return const(1.0)
    raise ValueError(f"unknown aggregation {mode!r}; choose one of {', '.join(AGGREGATIONS)}")


# ----------------------------------------------------------------------------- clips

def clip_bounds(clip, clip_low, clip_high):
    """(lower, upper) ratio bounds of ``--clip``, or None for no clip."""
    if clip == "none":
        return None
    if clip == "sym":
        return 1.0 - clip_low, 1.0 + clip_low
    if clip == "higher":
        return 1.0 - clip_low, 1.0 + clip_high
    raise ValueError(f"unknown clip {clip!r}; choose one of {', '.join(CLIPS)}")


def ppo_term(ratio, adv, bounds, dual_clip=0.0):
    """-min(rho Â, clip(rho) Â) and whether the clip binds (gradient zero).
    With ``dual_clip=C`` > 1 and Â < 0 the objective is also floored at C Â, so
    a negative token with rho > C loses its gradient too (verl's dual clip)."""
    unclipped = ratio * adv
    if bounds is None:
        return -unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    clipped = ratio.clamp(*bounds) * adv
    obj, binds = torch.minimum(unclipped, clipped), clipped < unclipped
    if dual_clip:
        floor = dual_clip * adv
        low = (adv < 0) & (obj < floor)
        obj, binds = torch.where(low, floor, obj), binds | low
    return -obj, binds


# ----------------------------------------------------------------------------- DFPO

def min_replace(w, adv, group):
    """w~_i = min_{j in group(i)} w_j."""
    g = advantage.compact(group)
    n_groups = int(g.max()) + 1
    mins = torch.full((n_groups,), float("inf"), dtype=w.dtype, device=w.device)
    return mins.scatter_reduce(0, g, w, "amin")[g]


def adv_orthogonal(w, adv, group):
    """w~ = w - (Â.w / |Â|^2) Â inside each group; unchanged where |Â| = 0."""
    adv = adv.to(w.dtype)
    g = advantage.compact(group)
    n_groups = int(g.max()) + 1
    dot = torch.zeros(n_groups, dtype=w.dtype, device=w.device).index_add_(0, g, adv * w)
    nrm = torch.zeros(n_groups, dtype=w.dtype, device=w.device).index_add_(0, g, adv * adv)
    coef = torch.where(nrm > 0, dot / nrm.clamp(min=1e-12), torch.zeros_like(nrm))
    return w - coef[g] * adv


def sequence_ratio(new_logp, old_logp, mask):
    """s_i = exp(mean_t log rho_{i,t}), detached: GSPO's ratio and DFPO's w_i."""
    lens = mask.sum(1).clamp(min=1)
    return (((new_logp - old_logp) * mask).sum(1) / lens).detach().exp()


def dfpo_weights(seq_ratio, adv, group, objective, bounds):
    """DFPO's w~ (stop-gradient): truncate w to the clip bounds if any, then the
    objective's group transform inside each group of the rows given. A *per-group
    statistic*: give it every row of the optimizer step, also those in other
    micro-batches or processes (train.py does)."""
    w = seq_ratio if bounds is None else seq_ratio.clamp(*bounds)
    return OBJECTIVES[objective].group_transform(w, adv, group).detach()


# ----------------------------------------------------------------------------- the terms

# A term turns one (micro-)batch's per-token quantities ``x`` (a TermInputs) and
# the settings ``s`` (a LossSettings) into (loss, clip fraction, extra stats).
# The engine objectives' terms are in loss_engines.py; the GRPO family's are here.

@dataclass
class TermInputs:
    """What every term may read, computed once by ``policy_loss``."""
    new_logp: torch.Tensor        # [N, T] log pi of the sampled tokens, differentiable
    pol_logp: torch.Tensor        # new_logp, detached on tokens a selection switch drops
    log_ratio: torch.Tensor       # [N, T] log rho (masked), from pol_logp
    seq_log_ratio: torch.Tensor   # [N] mean_t log rho
    seq_ratio: torch.Tensor       # [N] s_i, detached
    mask: torch.Tensor            # [N, T] bool
    lens: torch.Tensor            # [N] L_i
    adv: torch.Tensor             # [N] Â_i
    group: torch.Tensor           # [N] group ids
    agg: torch.Tensor             # [N] agg_i
    bounds: Optional[tuple]       # ratio bounds of --clip, or None
    weights: Optional[torch.Tensor] = None  # DFPO's w~ over the whole step


def _clip_frac(binds, mask):
    return (binds & mask).float().sum() / mask.float().sum().clamp(min=1)


def ppo_token_term(x, s):
    """The PPO surrogate per token: -min(rho Â, clip(rho) Â) agg_i."""
    per_tok, binds = ppo_term(x.log_ratio.exp(), x.adv[:, None], x.bounds, s.dual_clip)
    total = (per_tok * x.agg[:, None] * x.mask.float()).sum()
    return total, _clip_frac(binds, x.mask), {}


def clip_cov_term(x, s):
    """The PPO token loss, less the tokens its covariance picks (verl's clip_cov)."""
    per_tok, binds = ppo_term(x.log_ratio.exp(), x.adv[:, None], x.bounds, s.dual_clip)
    per_tok, binds, stats = loss_engines.clip_cov_cut(per_tok, binds, x.new_logp, x.mask, x.adv,
                                                      s.cov_ratio or loss_engines.COV["ratio"])
    total = (per_tok * x.agg[:, None] * x.mask.float()).sum()
    return total, _clip_frac(binds, x.mask), stats


def sequence_term(x, s):
    """One ratio per sequence, s_i = exp(mean_t log rho), clipped per sequence:
    -min(s_i Â_i, clip(s_i) Â_i) agg_i L_i (every token of sequence i shares it)."""
    seq = x.seq_log_ratio.exp()  # differentiable: d s_i = s_i * mean_t d log pi
    per_seq, binds = ppo_term(seq, x.adv, x.bounds)
    total = (per_seq * x.agg * x.lens).sum()
    live = x.lens > 0
    return total, (binds & live).float().sum() / max(int(live.sum()), 1), {}


def dfpo_term(x, s):
    """-sg(w~_i) Â_i agg_i log pi: DFPO's transformed weights, no clip on the ratio."""
    w = x.weights
    if w is None:  # this batch is the whole step
        w = dfpo_weights(x.seq_ratio, x.adv, x.group, s.objective, x.bounds)
    total = -((w * x.adv * x.agg)[:, None] * x.pol_logp * x.mask.float()).sum()
    binds = x.adv.new_zeros(())
    if x.bounds is not None:
        binds = ((x.seq_ratio < x.bounds[0]) | (x.seq_ratio > x.bounds[1])).float().mean()
    return total, binds, {}


def engine(fn):
    """A loss_engines term, which reads the per-token tensors and an options dict."""
    def term(x, s):
        opts = {"cov_ratio": s.cov_ratio or loss_engines.COV["ratio"], "dro_beta": s.dro_beta,
                "tis_cap": s.dual_clip}
        return fn(x.pol_logp, x.log_ratio, x.mask, x.adv, x.agg, x.bounds, opts)
    term.__name__ = fn.__name__.lstrip("_")
    return term


# ----------------------------------------------------------------------------- the records

@dataclass(frozen=True)
class Objective:
    """Everything the code and the docs know about one objective (``--loss``)."""
    name: str
    term: Callable                 # (TermInputs, LossSettings) -> (loss, clip fraction, stats)
    agg: str                       # its own aggregation weight agg_i (a key of AGGREGATIONS)
    coefficient: str               # c_{i,t} on-policy, for the table
    verdict: str                   # keeps exchangeability?, for the table
    cancels: frozenset             # REGIMES in which copies of a shared (h, a) get equal weights
    why: str = ""                  # what breaks exchangeability where it does not hold
    adv: str = "grpo"              # its own advantage estimator (--adv=auto)
    clip: str = "ratio"            # what --clip bounds: ratio | sequence | weights | log-ratio |
    #                                cap | threshold, or none (no clip: --clip=none only)
    eps: tuple = (0.2, 0.28)       # its reference (eps_low, eps_high), the scoreboard's
    dual_clip: bool = False        # --dual_clip applies (a token PPO loss, or dppo's IS cap)
    own_agg: bool = False          # its aggregation is part of its definition: --agg refused
    sequence_ratio: bool = False   # one ratio per sequence: token selection refused
    split_dependent: bool = False  # its update depends on how a step is split (as upstream)
    additive: bool = False         # adds to c a term not proportional to Â (kl_cov, dro)
    group_transform: Optional[Callable] = None  # DFPO: w -> w~ inside each group
    needs: dict = field(default_factory=dict)   # settings it requires, {name: why}


OBJECTIVES = {}


def register(obj):
    """Add one objective; its name becomes a --loss value everywhere."""
    if obj.name in OBJECTIVES:
        raise ValueError(f"objective {obj.name!r} is already registered")
    if obj.agg not in AGGREGATIONS:
        raise ValueError(f"objective {obj.name!r}: unknown aggregation {obj.agg!r}")
    if not obj.cancels <= EVERY_REGIME:
        raise ValueError(
            f"objective {obj.name!r}: unknown regimes {sorted(obj.cancels - EVERY_REGIME)}"
        )
    OBJECTIVES[obj.name] = obj
    return obj


def objective(name):
    """The record of ``--loss=name``; a ValueError naming the choices otherwise."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown loss {name!r}; choose one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def own_estimator(name):
    """The advantage estimator ``--adv=auto`` picks for ``--loss=name``."""
    return objective(name).adv


BUT_CLIP = EVERY_REGIME - {"clip binds"}
ON_POLICY = frozenset({"on-policy"})
NONE = frozenset()

# The objectives: the GRPO family, DFPO, and the engines' (each row of README's table)
register(Objective("grpo", ppo_token_term, agg="seq-mean-token-mean", coefficient="Â_i / (N L_i)",
    verdict="no: 1/L_i", cancels=NONE, why="1/L_i", dual_clip=True))
register(Objective("dr_grpo", ppo_token_term, agg="seq-mean-token-sum-norm",
    coefficient="Â_i / (N L_max)", verdict="yes, until a clip binds", cancels=BUT_CLIP,
    why="clip by sign", adv="dr_grpo", dual_clip=True))
register(Objective("dapo", ppo_token_term, agg="token-mean", coefficient="Â_i / sum L",
    verdict="yes, until a clip binds", cancels=BUT_CLIP, why="clip by sign", dual_clip=True))
register(Objective("rloo", ppo_token_term, agg="seq-mean-token-sum",
    coefficient="Â_i / N (token sum)", verdict="yes, until a clip binds", cancels=BUT_CLIP,
    why="clip by sign", adv="rloo", dual_clip=True))
register(Objective("gspo", sequence_term, agg="seq-mean-token-mean",
    coefficient="s_i Â_i / (N L_i), clipped per sequence", verdict="no: s_i and 1/L_i",
    cancels=NONE, why="s_i, 1/L_i", clip="sequence", eps=(3e-4, 4e-4), sequence_ratio=True))
register(Objective("dfpo_min", dfpo_term, agg="seq-mean-token-sum-norm",
    coefficient="sg(w~_i) Â_i / (N L_max), w~_i = min_j w_j",
    verdict="yes, also off-policy and when a clip binds (one weight per group)",
    cancels=EVERY_REGIME - {"split step"},
    why="transform sees part of a group", adv="dr_grpo", clip="weights",
    group_transform=min_replace))
register(Objective("dfpo_orth", dfpo_term, agg="seq-mean-token-sum-norm",
    coefficient="sg(w~_i) Â_i / (N L_max), sum_i Â_i w~_i = 0",
    verdict="for tokens the whole group shares; a prefix shared by part of a group: no",
    cancels=ON_POLICY, why="w~_i differ: partial prefixes", adv="dr_grpo", clip="weights",
    group_transform=adv_orthogonal))
register(Objective("positive_only", ppo_token_term, agg="positive-token-mean",
    coefficient="1 / sum L over positives", verdict="nothing to cancel", cancels=BUT_CLIP,
    why="clip by sign", adv="positive_only", dual_clip=True, own_agg=True))
register(Objective("bnpo", ppo_token_term, agg="micro-token-mean",
    coefficient="Â_i / (M sum L_local), M micro-batches", verdict="yes, unless a step is split",
    cancels=frozenset({"on-policy", "off-policy"}), why="local token count; clip",
    dual_clip=True, own_agg=True, split_dependent=True))
register(Objective("cispo", engine(loss_engines.cispo), agg="token-mean",
    coefficient="sg(clip(rho)) Â_i / sum L", verdict="yes, also when the clip binds",
    cancels=EVERY_REGIME, clip="cap"))
register(Objective("sapo", engine(loss_engines.sapo), agg="seq-mean-token-mean",
    coefficient="4 rho sig (1 - sig) Â_i / (N L_i), sig = sigmoid(tau (rho - 1))",
    verdict="no: 1/L_i (off-policy also tau by sign of Â)", cancels=NONE, why="1/L_i, tau by sign",
    clip="none", own_agg=True))
register(Objective("gmpo", engine(loss_engines.gmpo), agg="seq-mean-token-mean",
    coefficient="g_i Â_i / (N L_i), g_i = exp(mean_t of log rho clipped by sign of Â)",
    verdict="no: g_i and 1/L_i", cancels=NONE, why="g_i, 1/L_i", clip="log-ratio", own_agg=True,
    sequence_ratio=True))
register(Objective("clip_cov", clip_cov_term, agg="token-mean",
    coefficient="as dapo, 0 on the covariance-selected tokens",
    verdict="no, where the selection takes some copies of a shared token", cancels=BUT_CLIP,
    why="clip; cov selection", split_dependent=True))
register(Objective("kl_cov", engine(loss_engines.kl_cov), agg="token-mean",
    coefficient="(rho Â_i - k sign(log rho)) / sum L, k = 0.1 on selected tokens",
    verdict="yes on-policy; off-policy no on selected copies", cancels=EVERY_REGIME,
    why="cov selection", clip="none", split_dependent=True, additive=True))
register(Objective("gpg", engine(loss_engines.gpg), agg="token-mean",
    coefficient="Â_i / sum L, no ratio", verdict="yes, in every regime", cancels=EVERY_REGIME,
    adv="gpg", clip="none"))
register(Objective("luspo", sequence_term, agg="seq-mean-token-sum",
    coefficient="s_i Â_i / N, clipped per sequence", verdict="yes on-policy; off-policy no (s_i)",
    cancels=ON_POLICY, why="s_i", clip="sequence", eps=(3e-4, 4e-4), sequence_ratio=True))
register(Objective("vespo", engine(loss_engines.vespo), agg="token-mean",
    coefficient="phi(W_i) Â_i / sum L, W_i = prod_t rho_{i,t}, phi(1) = 1",
    verdict="yes on-policy; off-policy no (phi(W_i))", cancels=ON_POLICY, why="phi(W_i)",
    clip="none"))
register(Objective("dppo_tv", engine(loss_engines.dppo_tv), agg="token-mean",
    coefficient="rho Â_i / sum L, 0 where pi - pi_old leaves [-eps_low, eps_high] on Â's side",
    verdict="yes, until a threshold binds (by sign of Â)", cancels=BUT_CLIP,
    why="threshold by sign", clip="threshold", eps=(0.2, 0.2), dual_clip=True))
register(Objective("dppo_kl", engine(loss_engines.dppo_kl), agg="token-mean",
    coefficient="as dppo_tv, the test on the binary KL(pi_old, pi)",
    verdict="yes, until a threshold binds (by sign of Â)", cancels=BUT_CLIP,
    why="threshold by sign", clip="threshold", eps=(0.2, 0.2), dual_clip=True))
register(Objective("dro", engine(loss_engines.dro), agg="token-mean",
    coefficient="(Â_i - beta_dro log rho) / sum L",
    verdict="yes on-policy; off-policy no (the same -beta_dro log rho on every copy)",
    cancels=EVERY_REGIME, why="the same -beta_dro log rho on every copy", clip="none",
    additive=True, needs={"dro_beta": "verl has no default"}))


def table():
    """The objective table of the docs, from the records (advantage column from
    each objective's own estimator, advantage.py's table)."""
    lines = [
        "| `--loss` | advantage Â_i | coefficient c_{i,t} (on-policy) | keeps exchangeability? |",
        "|---|---|---|---|",
    ]
    for o in OBJECTIVES.values():
        adv = advantage.estimator(o.adv).formula
        lines.append(f"| `{o.name}` | {adv} | {o.coefficient} | {o.verdict} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the loss

@dataclass(frozen=True)
class LossSettings:
    """The objective and its switches: the flags of train.py that shape the loss."""
    objective: str = "grpo"
    clip: str = "sym"
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float = 0.0       # C > 1: Â<0 tokens with rho > C lose their gradient
    beta: float = 0.0            # KL penalty towards the frozen reference
    kl_loss_type: str = "k3"     # beta's estimator (loss_engines.kl_penalty)
    entropy_coef: float = 0.0    # minus this times the mean token entropy
    agg: Optional[str] = None    # --agg: a verl loss_agg_mode instead of the objective's own
    dro_beta: float = 0.0        # dro's coefficient
    cov_ratio: Optional[float] = None  # clip_cov / kl_cov's selected fraction (verl: 2e-4)

    @classmethod
    def from_config(cls, cfg):
        return cls(
            objective=cfg.loss,
            clip=cfg.clip,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
            dual_clip=cfg.dual_clip,
            beta=cfg.beta,
            kl_loss_type=cfg.kl_loss_type,
            entropy_coef=cfg.entropy_coef,
            agg=None if cfg.agg == "auto" else cfg.agg,
            dro_beta=cfg.dro_beta,
        )

    def aggregation(self):
        """The aggregation this step uses: --agg's, unless the objective fixes its own."""
        own = OBJECTIVES[self.objective]
        return own.agg if self.agg is None or own.own_agg else self.agg


@dataclass
class LossBatch:
    """One (micro-)batch of an optimizer step, as the loss sees it."""
    new_logprobs: torch.Tensor    # [N, T] log pi of the sampled tokens, current policy
    old_logprobs: torch.Tensor    # [N, T] the same at sampling time (the PPO ratio's pi_old)
    mask: torch.Tensor            # [N, T] bool: completion tokens
    adv: torch.Tensor             # [N] Â_i
    group: torch.Tensor           # [N] group ids
    counts: Optional[dict] = None          # the step's denominators (step_counts); default: own
    weights: Optional[torch.Tensor] = None  # DFPO's w~ computed over the whole step; default: own
    ref_logprobs: Optional[torch.Tensor] = None  # [N, T] the frozen reference (--beta)
    entropy: Optional[torch.Tensor] = None  # [N, T] differentiable token entropies (--entropy_coef)
    keep: Optional[torch.Tensor] = None  # [N, T] bool: tokens whose policy term keeps its gradient


def policy_loss(batch, settings):
    """The scalar loss of one (micro-)batch and a dict of stats.

    The objective's record supplies the term and its aggregation weight; the
    switches (KL to the reference, entropy bonus, token selection) add to any."""
    obj = objective(settings.objective)
    mask, new_logp, old_logp = batch.mask, batch.new_logprobs, batch.old_logprobs
    mask_f = mask.float()
    lens = mask.sum(1)
    counts = batch.counts if batch.counts is not None else step_counts(mask, batch.adv)
    agg = agg_weight(settings.aggregation(), lens, counts)
    # a selection switch drops a token's policy gradient, not its value
    pol_logp = (
        new_logp if batch.keep is None else torch.where(batch.keep, new_logp, new_logp.detach())
    )
    log_ratio = (pol_logp - old_logp) * mask_f
    seq_log_ratio = log_ratio.sum(1) / lens.clamp(min=1)
    x = TermInputs(new_logp, pol_logp, log_ratio, seq_log_ratio, seq_log_ratio.detach().exp(), mask,
                   lens, batch.adv, batch.group, agg,
                   clip_bounds(settings.clip, settings.clip_low, settings.clip_high), batch.weights)
    total, clip_frac, stats = obj.term(x, settings)

    if settings.beta:  # an estimate of KL(pi || pi_ref) per token, aggregated like the objective
        kl = loss_engines.kl_penalty(new_logp * mask_f, batch.ref_logprobs * mask_f,
                                     settings.kl_loss_type) * mask_f
        total = total + settings.beta * (kl * agg[:, None]).sum()
        stats["kl_ref"] = float(kl.detach().sum() / mask_f.sum().clamp(min=1))
    if settings.entropy_coef:  # minus the mean token entropy over the step's tokens
        entropy = batch.entropy
        total = total - settings.entropy_coef * (entropy * mask_f).sum() / max(
            counts["n_tokens"], 1
        )
        stats["entropy"] = float((entropy.detach() * mask_f).sum() / mask_f.sum().clamp(min=1))
    if batch.keep is not None:
        stats["kept_frac"] = float((batch.keep & mask).float().sum() / mask_f.sum().clamp(min=1))

    live = lens > 0
    stats.update(
        {
            "clip_frac": float(clip_frac),
            "seq_ratio": float(x.seq_ratio[live].mean()) if bool(live.any()) else 1.0,
            "abs_log_ratio": float(log_ratio.detach().abs().sum() / mask_f.sum().clamp(min=1)),
        }
    )
    return total, stats


# ----------------------------------------------------------------------------- the measures

def coefficients(loss_value, new_logp):
    """c_{i,t} = -d loss / d log pi_new(y_{i,t}), by autograd through the loss
    only (the model is not touched), e.g. for ``first_token_residual``."""
    (g,) = torch.autograd.grad(loss_value, new_logp, retain_graph=True)
    return -g


def first_token_residual(coef, group):
    """First-token residual: per group, |sum_i c_i| / sum_i |c_i| over the
    coefficients of the first completion token (whose history, the prompt, the
    whole group shares), averaged over groups with any weight.

    It sums over the first tokens *whatever they are*: when the rollouts of a
    group start with different tokens, their legitimate per-token differences
    (other ratios, other clips) count too, so it can be non-zero although every
    (history, token) set cancels. ``exch_residual`` is the exact measure; this one
    is kept because it is cheap and is what the exercises use."""
    c0 = coef[:, 0]
    g = advantage.compact(group)
    n_groups = int(g.max()) + 1
    net = torch.zeros(n_groups, dtype=c0.dtype, device=c0.device).index_add_(0, g, c0).abs()
    mass = torch.zeros(n_groups, dtype=c0.dtype, device=c0.device).index_add_(0, g, c0.abs())
    live = mass > 1e-12
    return float((net[live] / mass[live]).mean()) if bool(live.any()) else 0.0


def history_token_sets(tokens, mask, group):
    """Ids of (group, history, token) sets [N,T] (-1 off the mask).

    Two completion tokens (i,t) and (j,u) get the same id exactly when they are
    in the same group (so after the same prompt), at the same position t = u,
    with the same completion prefix y_{<t} and the same token y_t: copies of one
    token after one identical history. Built as a trie over each group's
    completions."""
    g = advantage.compact(group).tolist()
    tok, m = tokens.tolist(), mask.tolist()
    ids = torch.full(tokens.shape, -1, dtype=torch.long, device="cpu")
    trie = {}
    for i in range(len(tok)):
        node = ("g", g[i])
        for t in range(len(tok[i])):
            if not m[i][t]:
                break
            node = trie.setdefault((node, tok[i][t]), len(trie))
            ids[i, t] = node
    return ids


def exch_residual(coef, adv, tokens, mask, group):
    """The exchangeability residual, per (history, token) set (logged as exch_residual).

    Inside a group, the copies of one token a after one identical history h form
    a set S (``history_token_sets``). If every copy got the same weight w, the
    set's net coefficient would be w * sum_S Â_i: the credit the rewards give to
    a after h, zero when S is the whole group. The residual is what the weights
    add on top of that:

        res_S = |sum_S c_i - wbar_S sum_S Â_i| / sum_S |c_i|,
        wbar_S = sum_S sign(Â_i) c_i / sum_S |Â_i|   (the |Â|-weighted mean weight).

    With c_i = w_i Â_i this is |sum_S Â_i (w_i - wbar)| / (wbar sum_S |Â_i|): 0 when
    the weights are equal, whatever the advantages. The converse does not hold:
    unequal weights with sum_S Â_i (w_i - wbar) = 0 give 0 too (w = (1.15, 0.95,
    0.85, 1.05) with Â = (1, -1, 1, -1); Adv-Orthogonal), so 0 says that this
    step's copies cancel, not that the objective is exchangeable. On a set that
    holds the whole group (sum_S Â_i = 0) it is the plain |sum_S c_i| / sum_S |c_i|.
    Returns the mean of res_S over sets with at least two copies and non-zero
    mass (0.0 if there are none)."""
    ids = history_token_sets(tokens, mask, group)
    on = ids >= 0
    flat = ids[on]
    if flat.numel() == 0:
        return 0.0
    c = coef.detach().double().cpu()[on]  # bookkeeping on the CPU, where ids live
    a = adv.detach().double().cpu()[:, None].expand_as(ids)[on]
    n_sets = int(flat.max()) + 1

    def per_set(v):
        return torch.zeros(n_sets, dtype=torch.float64, device="cpu").index_add_(0, flat, v)

    net, mass, n = per_set(c), per_set(c.abs()), per_set(torch.ones_like(c))
    sum_a, abs_a, signed = per_set(a), per_set(a.abs()), per_set(torch.sign(a) * c)
    wbar = torch.where(abs_a > 0, signed / abs_a.clamp(min=1e-300), torch.zeros_like(abs_a))
    live = (n >= 2) & (mass > 1e-12 * float(mass.max().clamp(min=1e-300)))
    res = (net - wbar * sum_a).abs() / mass.clamp(min=1e-300)
    return float(res[live].mean()) if bool(live.any()) else 0.0
