"""objectives.py: the engines' catalogue of objectives, one record each, and the switches.

What it teaches
---------------
The lesson (loss.py) writes grpo, dr_grpo, dapo and DFPO as one function each. The big
RL engines ship many more objectives and switches; each is a *weighted policy gradient*,

    grad = - sum_{i,t} c_{i,t} * grad log pi(y_{i,t} | s_{i,t}),

and what matters for cancellation is the coefficient c_{i,t} each copy of a shared
token ends up with (loss.py's docstring, THEORY.md section 2). Three statements, kept
apart (tests/test_loss.py checks each):

* sufficient: equal weights (c_i = w Â_i for every copy: *gradient exchangeability*,
  after [P1, arXiv 2604.13088]) cancel for every centred Â (sum_i Â_i = 0);
* necessary only for all Â: if the w_i are not all equal, some centred Â
  (e.g. Â_i = w_i - mean w) leaves sum_i c_i != 0;
* exact, for one given Â: the copies cancel iff sum_i w_i Â_i = 0, which
  unequal weights can meet too (Adv-Orthogonal does so by design).

One record per objective
------------------------
An objective is one ``Objective`` record in ``OBJECTIVES``: its per-token term, its
aggregation weight agg_i, its own advantage estimator (lab/estimators.py), what its
clip bounds, which switches it allows, and its exchangeability verdict per regime.
Everything else reads the records: ``policy_loss`` dispatches through them,
the flag rules (lab/checks.py) and ``--help``, the scoreboard's predictions
(lab/experiments/scoreboard.py), and the objective table of the docs (``table()``;
tests/test_docs.py checks the copy). To add an objective, write its term and
``register`` one record: it joins loss.LOSSES too. The lesson's five objectives are
records here as well; a run uses the lesson's own function (loss.py) whenever no switch
of this catalogue is on (lab/hooks.py's objective), and ``catalogue_loss`` when one is
(``switched``): the same numbers where both apply (tests/test_loss.py).

Notation: N = sequences and sum L = completion tokens in the optimizer step,
L_i = length of completion i, L_max = the task's longest completion, rho =
pi_new/pi_old per token, s_i = exp(mean_t log rho_{i,t}) per sequence, w~ =
DFPO's transformed weights (loss.py), mu_g and sigma_g = the mean and sd of the
group's rewards.

"Keeps exchangeability" (a record's ``verdict`` and ``cancels``) means: every copy of a
token after one identical history gets the same weight w_i, in the regime named, so such
copies cancel for every centred Â (tests/test_loss_engines.py checks each verdict on
synthetic groups; the scoreboard measures them). Each engine row's constants and what it
follows upstream are said once, in lab/engines.py.

The switches that add to any row (``--dual_clip``, ``--beta``, ``--entropy_coef``,
``--agg``, ``--top_entropy_quantile``, ``--off_policy_mask_threshold``) and what each
does to exchangeability are in docs/REFERENCE.md; lab/engines.py implements them.

Token-level objectives use the PPO surrogate per token (loss.ppo_clip), whose
coefficient is rho Â agg_i where the clip does not bind and 0 where it does. All
copies of a shared (h, a) have the *same* rho, so token ratios keep exchangeability;
an asymmetric clip does not. ``gspo`` uses one ratio s_i per sequence, clipped per
sequence; different copies carry different s_i. ``positive_only`` has Â >= 0, so only
the upper clip bound can ever bind. Groups whose rewards are all equal have Â = 0:
they add nothing to the gradient but still count in N and sum L.
"""

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

import loss
import model
from lab import engines, estimators
from lab import verl_batching  # noqa: F401 (verl's cut joins batching.SCHEDULERS)

CLIPS = loss.CLIPS
# The regimes in which the exchangeability verdicts are stated (and scored, by the
# scoreboard): on-policy; off-policy with no clip binding; a clip binding on a shared
# token; one optimizer step split into micro-batches.
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
    "balanced-token-mean": "n_s / (K n_± T_s), s = the sign class of Â_i in its group",
}
AGGS = tuple(list(AGGREGATIONS)[:5])  # what --agg accepts


def agg_weight(mode, lens, counts, adv=None, group=None):
    """agg_i [N] of aggregation ``mode`` (a key of AGGREGATIONS) for sequences of
    lengths ``lens``, with the optimizer step's denominators ``counts`` (``adv`` and
    ``group``: the rows' Â and group ids, which balanced-token-mean reads)."""
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
    if mode == "balanced-token-mean":
        return balanced_weight(lens, adv, group)
    raise ValueError(f"unknown aggregation {mode!r}; choose one of {', '.join(AGGREGATIONS)}")


def balanced_weight(lens, adv, group):
    """Balanced Aggregation (arXiv 2605.04077): inside each group, a token mean over the
    positives and one over the negatives, mixed by their sequence counts, then a mean over
    the K groups of these rows. Row i of sign class s (Â > 0 or Â < 0) in group g gets
    n_s / (K n_± T_s): n_s rollouts of that sign with T_s tokens, n_± = n_+ + n_-. A row
    with Â = 0 is in neither subset and gets 0 (its policy term is 0 anyway)."""
    L = lens.to(torch.float)
    pos, neg = (adv > 0).float(), (adv < 0).float()
    n_pos, n_neg = loss.group_sum(pos, group), loss.group_sum(neg, group)
    t_pos, t_neg = loss.group_sum(L * pos, group), loss.group_sum(L * neg, group)
    n_signed = (n_pos + n_neg).clamp(min=1)
    k = int(loss.compact(group).max()) + 1 if len(group) else 1
    w = pos * n_pos / t_pos.clamp(min=1) + neg * n_neg / t_neg.clamp(min=1)
    return w / (n_signed * k)


# ----------------------------------------------------------------------------- clips

def ppo_term(ratio, adv, bounds, dual_clip=0.0):
    """loss.ppo_clip, and with ``dual_clip=C`` > 1 and Â < 0 the objective also floored
    at C Â, so a negative token with rho > C loses its gradient too (verl's dual clip)."""
    per_token, binds = loss.ppo_clip(ratio, adv, bounds)
    if bounds is None or not dual_clip:
        return per_token, binds
    obj, floor = -per_token, dual_clip * adv
    low = (adv < 0) & (obj < floor)
    return -torch.where(low, floor, obj), binds | low

# ----------------------------------------------------------------------------- the terms

# A term turns one (micro-)batch's per-token quantities ``x`` (a TermInputs) and
# the settings ``s`` (a LossSettings) into (loss, clip fraction, extra stats).
# The engine objectives' terms are in engines.py; the GRPO family's build on loss.py.

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


def ppo_token_term(x, s):
    """The PPO surrogate per token: -min(rho Â, clip(rho) Â) agg_i."""
    per_tok, binds = ppo_term(x.log_ratio.exp(), x.adv[:, None], x.bounds, s.dual_clip)
    total = (per_tok * x.agg[:, None] * x.mask.float()).sum()
    return total, loss.clip_fraction(binds, x.mask), {}


def clip_cov_term(x, s):
    """The PPO token loss, less the tokens its covariance picks (verl's clip_cov)."""
    per_tok, binds = ppo_term(x.log_ratio.exp(), x.adv[:, None], x.bounds, s.dual_clip)
    per_tok, binds, stats = engines.clip_cov_cut(per_tok, binds, x.new_logp, x.mask, x.adv,
                                                      s.cov_ratio or engines.COV["ratio"])
    total = (per_tok * x.agg[:, None] * x.mask.float()).sum()
    return total, loss.clip_fraction(binds, x.mask), stats


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
        w = loss.dfpo_weights(x.seq_ratio, x.adv, x.group,
                              OBJECTIVES[s.objective].group_transform, x.bounds)
    total = -((w * x.adv * x.agg)[:, None] * x.pol_logp * x.mask.float()).sum()
    binds = x.adv.new_zeros(())
    if x.bounds is not None:
        binds = ((x.seq_ratio < x.bounds[0]) | (x.seq_ratio > x.bounds[1])).float().mean()
    return total, binds, {}


def engine(fn):
    """A loss_engines term, which reads the per-token tensors and an options dict."""
    def term(x, s):
        opts = {"cov_ratio": s.cov_ratio or engines.COV["ratio"], "dro_beta": s.dro_beta,
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
    lesson: Optional[Callable] = None  # the lesson's own function (loss.py), where it has one
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
    # one the lesson does not have joins loss.LOSSES, so train.py finds every --loss there
    loss.LOSSES.setdefault(obj.name, lambda *args, **kw: catalogue_loss(obj.name, *args, **kw))
    loss.OWN_ADV.setdefault(obj.name, obj.adv)  # and its estimator is what --adv=auto picks
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

# The objectives: the GRPO family, DFPO, and the engines' (each row of the docs' table)
register(Objective("grpo", ppo_token_term, agg="seq-mean-token-mean", coefficient="Â_i / (N L_i)",
    verdict="no: 1/L_i", cancels=NONE, why="1/L_i", dual_clip=True, lesson=loss.grpo))
register(Objective("dr_grpo", ppo_token_term, agg="seq-mean-token-sum-norm",
    coefficient="Â_i / (N L_max)", verdict="yes, until a clip binds", cancels=BUT_CLIP,
    why="clip by sign", adv="dr_grpo", dual_clip=True, lesson=loss.dr_grpo))
register(Objective("dapo", ppo_token_term, agg="token-mean", coefficient="Â_i / sum L",
    verdict="yes, until a clip binds", cancels=BUT_CLIP, why="clip by sign", dual_clip=True,
    lesson=loss.dapo))
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
    group_transform=loss.min_replace, lesson=loss.dfpo_min))
register(Objective("dfpo_orth", dfpo_term, agg="seq-mean-token-sum-norm",
    coefficient="sg(w~_i) Â_i / (N L_max), sum_i Â_i w~_i = 0",
    verdict="for tokens the whole group shares; a prefix shared by part of a group: no",
    cancels=ON_POLICY, why="w~_i differ: partial prefixes", adv="dr_grpo", clip="weights",
    group_transform=loss.adv_orthogonal, lesson=loss.dfpo_orth))
register(Objective("dfpo_raw", dfpo_term, agg="seq-mean-token-sum-norm",
    coefficient="sg(clip(s_i)) Â_i / (N L_max): DFPO with no group transform",
    verdict="yes on-policy; off-policy no (s_i)", cancels=ON_POLICY, why="s_i", adv="dr_grpo",
    clip="weights", group_transform=lambda w, adv, group: w))
register(Objective("positive_only", ppo_token_term, agg="positive-token-mean",
    coefficient="1 / sum L over positives", verdict="nothing to cancel", cancels=BUT_CLIP,
    why="clip by sign", adv="positive_only", dual_clip=True, own_agg=True))
register(Objective("bnpo", ppo_token_term, agg="micro-token-mean",
    coefficient="Â_i / (M sum L_local), M micro-batches", verdict="yes, unless a step is split",
    cancels=frozenset({"on-policy", "off-policy"}), why="local token count; clip",
    dual_clip=True, own_agg=True, split_dependent=True))
register(Objective("cispo", engine(engines.cispo), agg="token-mean",
    coefficient="sg(clip(rho)) Â_i / sum L", verdict="yes, also when the clip binds",
    cancels=EVERY_REGIME, clip="cap"))
register(Objective("sapo", engine(engines.sapo), agg="seq-mean-token-mean",
    coefficient="4 rho sig (1 - sig) Â_i / (N L_i), sig = sigmoid(tau (rho - 1))",
    verdict="no: 1/L_i (off-policy also tau by sign of Â)", cancels=NONE, why="1/L_i, tau by sign",
    clip="none", own_agg=True))
register(Objective("gmpo", engine(engines.gmpo), agg="seq-mean-token-mean",
    coefficient="g_i Â_i / (N L_i), g_i = exp(mean_t of log rho clipped by sign of Â)",
    verdict="no: g_i and 1/L_i", cancels=NONE, why="g_i, 1/L_i", clip="log-ratio", own_agg=True,
    sequence_ratio=True))
register(Objective("clip_cov", clip_cov_term, agg="token-mean",
    coefficient="as dapo, 0 on the covariance-selected tokens",
    verdict="no, where the selection takes some copies of a shared token", cancels=BUT_CLIP,
    why="clip; cov selection", split_dependent=True))
register(Objective("kl_cov", engine(engines.kl_cov), agg="token-mean",
    coefficient="(rho Â_i - k sign(log rho)) / sum L, k = 0.1 on selected tokens",
    verdict="yes on-policy; off-policy no on selected copies", cancels=EVERY_REGIME,
    why="cov selection", clip="none", split_dependent=True, additive=True))
register(Objective("gpg", engine(engines.gpg), agg="token-mean",
    coefficient="Â_i / sum L, no ratio", verdict="yes, in every regime", cancels=EVERY_REGIME,
    adv="gpg", clip="none"))
register(Objective("luspo", sequence_term, agg="seq-mean-token-sum",
    coefficient="s_i Â_i / N, clipped per sequence", verdict="yes on-policy; off-policy no (s_i)",
    cancels=ON_POLICY, why="s_i", clip="sequence", eps=(3e-4, 4e-4), sequence_ratio=True))
register(Objective("vespo", engine(engines.vespo), agg="token-mean",
    coefficient="phi(W_i) Â_i / sum L, W_i = prod_t rho_{i,t}, phi(1) = 1",
    verdict="yes on-policy; off-policy no (phi(W_i))", cancels=ON_POLICY, why="phi(W_i)",
    clip="none"))
register(Objective("dppo_tv", engine(engines.dppo_tv), agg="token-mean",
    coefficient="rho Â_i / sum L, 0 where pi - pi_old leaves [-eps_low, eps_high] on Â's side",
    verdict="yes, until a threshold binds (by sign of Â)", cancels=BUT_CLIP,
    why="threshold by sign", clip="threshold", eps=(0.2, 0.2), dual_clip=True))
register(Objective("dppo_kl", engine(engines.dppo_kl), agg="token-mean",
    coefficient="as dppo_tv, the test on the binary KL(pi_old, pi)",
    verdict="yes, until a threshold binds (by sign of Â)", cancels=BUT_CLIP,
    why="threshold by sign", clip="threshold", eps=(0.2, 0.2), dual_clip=True))
register(Objective("dro", engine(engines.dro), agg="token-mean",
    coefficient="(Â_i - beta_dro log rho) / sum L",
    verdict="yes on-policy; off-policy no (the same -beta_dro log rho on every copy)",
    cancels=EVERY_REGIME, why="the same -beta_dro log rho on every copy", clip="none",
    additive=True, needs={"dro_beta": "verl has no default"}))
register(Objective("ba", ppo_token_term, agg="balanced-token-mean",
    coefficient="Â_i n_s / (K n_± T_s): a token mean per sign class s, mixed by counts",
    verdict="no: 1/T_s differs between the group's positives and negatives", cancels=NONE,
    why="1/T_s by sign", dual_clip=True, own_agg=True, split_dependent=True))


def table():
    """The objective table of the docs, from the records (advantage column from
    each objective's own estimator, estimators.py's table)."""
    lines = [
        "| `--loss` | advantage Â_i | coefficient c_{i,t} (on-policy) | keeps exchangeability? |",
        "|---|---|---|---|",
    ]
    for o in OBJECTIVES.values():
        adv = estimators.estimator(o.adv).formula
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
    kl_loss_type: str = "k3"     # beta's estimator (engines.kl_penalty)
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


FROM_SETTINGS = "from settings"  # policy_loss's bounds: --clip's, from the settings


def policy_loss(batch, settings, bounds=FROM_SETTINGS):
    """The scalar loss of one (micro-)batch and a dict of stats (``bounds``: the ratio
    clip's (lo, hi), None for no clip, or FROM_SETTINGS).

    The objective's record supplies the term and its aggregation weight; the
    switches (KL to the reference, entropy bonus, token selection) add to any."""
    obj = objective(settings.objective)
    mask, new_logp, old_logp = batch.mask, batch.new_logprobs, batch.old_logprobs
    mask_f = mask.float()
    lens = mask.sum(1)
    counts = batch.counts if batch.counts is not None else loss.step_counts(mask, batch.adv)
    agg = agg_weight(settings.aggregation(), lens, counts, batch.adv, batch.group)
    # a selection switch drops a token's policy gradient, not its value
    pol_logp = (
        new_logp if batch.keep is None else torch.where(batch.keep, new_logp, new_logp.detach())
    )
    log_ratio = (pol_logp - old_logp) * mask_f
    seq_log_ratio = log_ratio.sum(1) / lens.clamp(min=1)
    if bounds is FROM_SETTINGS:
        bounds = loss.clip_bounds(settings.clip, settings.clip_low, settings.clip_high)
    x = TermInputs(new_logp, pol_logp, log_ratio, seq_log_ratio, seq_log_ratio.detach().exp(), mask,
                   lens, batch.adv, batch.group, agg, bounds, batch.weights)
    total, clip_frac, stats = obj.term(x, settings)

    if settings.beta:  # an estimate of KL(pi || pi_ref) per token, aggregated like the objective
        kl = engines.kl_penalty(new_logp * mask_f, batch.ref_logprobs * mask_f,
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

    stats["clip_frac"] = clip_frac
    return total, stats




# ----------------------------------------------------------------------------- train.py's use

# The switches of this catalogue: their values when off. A run with one on takes the
# catalogue's version of its objective, even for one of the lesson's (``switched``).
SWITCHES_OFF = {"agg": "auto", "dual_clip": 0.0, "beta": 0.0, "entropy_coef": 0.0,
                "top_entropy_quantile": 1.0, "off_policy_mask_threshold": 0.0}


def switched(cfg):
    """Is a switch of this catalogue on (--agg, --dual_clip, --beta, ...)?"""
    return any(getattr(cfg, k) != v for k, v in SWITCHES_OFF.items())


def catalogue_loss(name, logp, old_logp, mask, adv, group, counts, clip, extra):
    """Objective ``name`` of this catalogue with the run's switches, for one part of an
    optimizer step, in the lesson's signature (loss.LOSSES) and the part's ``extra``
    (lab/hooks.py's forward): the flags, the model and the part's hidden states (token
    entropies), the reference's log-probs (--beta), and whether to take every ratio as 1
    (the lab's on-policy coefficients); its ``stats`` get the extra numbers. Returns (loss,
    clip fraction)."""
    x = extra
    cfg = x.cfg
    if engines.needs_entropy(cfg) and x.entropy is None:  # once per part, before any step
        x.entropy = model.token_entropy(x.model, x.hidden, cfg.temperature)
    # on-policy an off-policy mask keeps every token; an entropy selection stays as it was
    entropy = x.entropy.detach() if x.on_policy and x.entropy is not None else x.entropy
    keep = engines.token_keep(logp, old_logp, mask, adv, entropy, cfg)
    # weights None: a DFPO transform is recomputed from these rows' ratios (all 1 at pi_old)
    value, stats = policy_loss(LossBatch(
        logp, old_logp, mask, adv, group, counts=counts, weights=counts.get("weights"),
        ref_logprobs=x.ref_logprobs if cfg.beta else None, entropy=entropy, keep=keep),
        dataclasses.replace(LossSettings.from_config(cfg), objective=name), clip)
    clip_frac = stats.pop("clip_frac")
    x.stats.update(stats)
    return value, clip_frac

