"""estimators.py: the engines' advantage estimators (``--adv``), one record each.

What it teaches
---------------
A critic-free objective turns one reward r_i per completion into one advantage
Â_i per completion, and every token of the completion carries it. A token that
every rollout of a group emits after the same history gets the coefficient
sum_i w_i Â_i (loss.py). With equal weights w_i = w this is w * sum_i Â_i, so the
copies cancel only if the advantages are **centred** inside the group:

    sum_{i in g} Â_i = 0.

Equal weights (gradient exchangeability, loss.py) and centred advantages are two
separate conditions; the engines let you choose them separately (verl's
``adv_estimator``, TRL's ``scale_rewards``), and so does ``--adv`` here. An
estimator that is not centred gives a shared token a net push of w * sum_i Â_i
even under exchangeable weights; tests/test_advantage.py checks each row of the
``centred?`` column on random groups, both ways.

Notation: mu_g and sigma_g = mean and sample sd (Bessel) of group g's rewards;
mean_B, sd_B = the same over the whole rollout batch (every group, every
process); L_i = completion length; b_g = the reward of the greedy completion of
prompt g; eps = 1e-6 (TRL uses 1e-4 where it divides by a sd), the ``eps`` of
``advantages``: every row that divides by a sd adds it (the token-whitened rows use
verl's own 1e-8 inside a square root, written in their formula).
Each estimator is one record in ``ESTIMATORS`` below (its formula, whether it
is centred, and its upstream source); THEORY.md shows the table they generate
(``table()``; tests/test_docs.py checks the copy).

``--adv=auto`` (the default) takes the estimator each ``--loss`` has always used
(its record's ``adv`` in lab/objectives.py), so every command written before
``--adv`` existed gives the same numbers. ``reinforce_plus_plus`` is verl's
outcome-reward case with gamma = 1 and no KL in the reward, where every token of a
completion has the return r_i. ``remax`` needs one greedy completion per prompt:
``controls`` (below) draws it and sets the batch's ``baseline`` (train.py calls it
through the lab's hooks). ``grpo_passk`` follows verl: the first of equal maxima is
"the best", so a group with two or more correct answers gets A = 0 everywhere.
``gdpo`` is GDPO with one reward: each reward's grpo advantage, summed (one term here),
then verl's token-weighted whitening (``_token_whiten``), as NVlabs/GDPO's verl port does.
verl's ``optimal_token_baseline`` gives one advantage per token, which ``--adv`` cannot
carry; ``optimal_token_baseline`` below computes it, and the scoreboard scores it
(lab/experiments/scoreboard.py's TOKEN_ROWS).
"""

from dataclasses import dataclass
from typing import Callable

import torch

import loss
from loss import compact, group_mean, group_std, group_sum
from model import amp
import sampler


def _token_whiten(x, lengths):
    """verl's masked_whiten of a per-sequence value repeated on each of its L_i
    tokens: mean and (Bessel) variance over the batch's tokens, rsqrt(var + 1e-8).
    The 1e-8 is verl's, inside the square root, and the formula says so: ``eps`` (added
    to a sd) does not apply here, and these rows do not read it."""
    w = lengths.to(x.dtype)
    n = w.sum()
    m = (w * x).sum() / n
    v = (w * (x - m) ** 2).sum() / n * n / (n - 1)
    return (x - m) * torch.rsqrt(v + 1e-8)


# ----------------------------------------------------------------------------- the estimators
# Each reads (r, group, mu, n, lengths, baseline, eps): the rewards [N], the group
# ids, the group mean and size per row, the completion lengths, the greedy
# baseline reward per row (remax), and eps.

def _grpo_passk(r, group, mu, n, lengths, baseline, eps):
    """The group's first best gets (r_max - r_2nd) / (sigma_g + eps), the rest 0."""
    g = compact(group)
    out = torch.zeros_like(r)
    sigma = group_std(r, group)
    for k in range(int(g.max()) + 1):
        idx = torch.nonzero(g == k).flatten()
        top = torch.topk(r[idx], 2)
        best = idx[int(torch.argmax(r[idx]))]
        out[best] = (top.values[0] - top.values[1]) / (sigma[best] + eps)
    return out


def _opo(r, group, mu, n, lengths, baseline, eps):
    length = lengths.to(r.dtype)
    return r - group_sum(length * r, group) / group_sum(length, group)


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator (``--adv``): its formula, whether it is centred, its source."""
    name: str
    fn: Callable
    formula: str
    centred: bool
    centred_text: str
    upstream: str
    one_signed: bool = False   # Â >= 0 whatever the rewards
    needs: tuple = ()          # what else it reads: "lengths", "baseline"


ESTIMATORS = {}


def register(est):
    """Add one estimator; its name becomes an --adv value everywhere."""
    if est.name in ESTIMATORS:
        raise ValueError(f"estimator {est.name!r} is already registered")
    ESTIMATORS[est.name] = est
    return est


def estimator(name):
    """The record of ``--adv=name``; a ValueError naming the choices otherwise."""
    if name not in ESTIMATORS:
        raise ValueError(
            f"unknown advantage estimator {name!r}; choose one of {', '.join(ESTIMATORS)}"
        )
    return ESTIMATORS[name]


# The estimators (THEORY.md's table). Each fn reads (r, group, mu, n, lengths, baseline,
# eps): the rewards, the group ids, the group mean and size per row, and the rest.
register(Estimator("grpo", lambda r, g, mu, n, L, b, eps: loss.advantages(r, g, True, eps),
    formula="(r_i - mu_g)/(sigma_g + eps)", centred=True, centred_text="yes",
    upstream='verl `grpo`; TRL `scale_rewards="group"`'))
register(Estimator("dr_grpo", lambda r, g, mu, n, L, b, eps: loss.advantages(r, g, scale=False),
    formula="r_i - mu_g",
    centred=True, centred_text="yes",
    upstream='verl `grpo` + `norm_adv_by_std_in_grpo=False`; TRL `scale_rewards="none"`'))
register(Estimator("grpo_batch_std", lambda r, g, mu, n, L, b, eps: (r - mu) / (r.std() + eps),
    formula="(r_i - mu_g)/(sd_B + eps)", centred=True, centred_text="yes",
    upstream='TRL `scale_rewards="batch"`'))
register(Estimator("rloo", lambda r, g, mu, n, L, b, eps: (r - mu) * n / (n - 1),
    formula="r_i - mean_{j!=i} r_j, = G/(G-1) (r_i - mu_g)", centred=True, centred_text="yes",
    upstream="verl `rloo`"))
register(Estimator("gpg",
    lambda r, g, mu, n, L, b, eps: (r - mu) * len(r) / max(int((r != 0).sum()), 1),
    formula="alpha (r_i - mu_g), alpha = N / #{r_i != 0}, over the batch",
    centred=True, centred_text="yes", upstream="verl `gpg`"))
register(Estimator("batch_whiten", lambda r, g, mu, n, L, b, eps: (r - r.mean()) / (r.std() + eps),
    formula="(r_i - mean_B)/(sd_B + eps), one count per sequence",
    centred=False, centred_text="no: the batch mean replaces mu_g",
    upstream="(batch normalisation)"))
register(Estimator("reinforce_plus_plus", lambda r, g, mu, n, L, b, eps: _token_whiten(r, L),
    formula="(r_i - m)/sqrt(v + 1e-8), m, v = token-weighted mean and variance of r over the batch",
    centred=False, centred_text="no: a batch, length-weighted baseline",
    upstream="verl `reinforce_plus_plus`", needs=("lengths",)))
register(Estimator("reinforce_plus_plus_baseline",
    lambda r, g, mu, n, L, b, eps: _token_whiten(r - mu, L),
    formula="(x_i - m)/sqrt(v + 1e-8), x_i = r_i - mu_g, m, v token-weighted over the batch",
    centred=False, centred_text="no: centred, then shifted by m",
    upstream="verl `reinforce_plus_plus_baseline`", needs=("lengths",)))
register(Estimator("remax", lambda r, g, mu, n, L, b, eps: r - b.float(), formula="r_i - b_g",
    centred=False, centred_text="no (with 0/1 rewards every group is one-signed)",
    upstream="verl `remax`", needs=("baseline",)))
register(Estimator("opo", _opo, formula="r_i - sum_j L_j r_j / sum_j L_j (j in g)",
    centred=False, centred_text="no, unless the lengths are equal", upstream="verl `opo`",
    needs=("lengths",)))
register(Estimator("grpo_passk", _grpo_passk,
    formula="(r_max - r_2nd)/(sigma_g + eps) for the group's best, 0 for the rest",
    centred=False, centred_text="no: Â >= 0", upstream="verl `grpo_passk`", one_signed=True))
register(Estimator("gdpo",
    lambda r, g, mu, n, L, b, eps: _token_whiten(loss.advantages(r, g, True, eps), L),
    formula="(z_i - m)/sqrt(v + 1e-8), z_i = (r_i - mu_g)/(sigma_g + eps), m, v token-weighted",
    centred=False, centred_text="no: centred, then shifted by the token-weighted m",
    upstream="GDPO (arXiv 2601.05242; NVlabs/GDPO's verl-GDPO), one reward",
    needs=("lengths",)))
register(Estimator("positive_only", lambda r, g, mu, n, L, b, eps: (r > 0).float(),
    formula="1[r_i > 0]", centred=False, centred_text="no: Â >= 0",
    upstream="(rejection sampling)", one_signed=True))


def optimal_token_baseline(rewards, group, mask, old_logp, sum_pi_sq, eps=1e-8):
    """verl's ``optimal_token_baseline`` (core_algos.py, outcome reward, no IS weights):
    one advantage per *token*, A_{i,t} = r_i - B_t, with B_t = sum_j r_j W_{j,t} /
    (sum_j W_{j,t} + eps) over the rows j of i's group still running at t, and W_{j,t} =
    sum_{u<=t} (1 - 2 pi_{j,u} + sum_v pi_u(v)^2), pi_{j,u} = exp(old_logp) of the sampled
    token. Returns [N, T], 0 on padding; a group of one row keeps A = r.

    Not an ``--adv``: the trainer carries one Â per sequence. Copies of a token after one
    identical history have the same W (the same history, the same probabilities), so at a
    position the whole group shares B_t is the group's mean reward (up to eps): centred
    there. At a prefix part of a group shares, B_t also averages the other rows: not."""
    m = mask.to(old_logp.dtype)
    w = ((1 - 2 * old_logp.exp() + sum_pi_sq) * m).cumsum(1)
    r = rewards.to(old_logp.dtype)[:, None].expand_as(w)
    g, k = loss.groups(group)
    num = torch.zeros(k, w.shape[1], dtype=w.dtype, device=w.device).index_add_(0, g, r * w * m)
    den = torch.zeros(k, w.shape[1], dtype=w.dtype, device=w.device).index_add_(0, g, w * m)
    alone = (torch.bincount(g, minlength=k) == 1)[g][:, None]
    base = torch.where(alone, torch.zeros_like(w), (num / (den + eps))[g])
    return (r - base) * m


def table():
    """The estimator table of the docs, from the records."""
    lines = ["| `--adv` | Â_i | centred? | upstream |", "|---|---|---|---|"]
    lines += [
        f"| `{e.name}` | {e.formula} | {e.centred_text} | {e.upstream} |"
        for e in ESTIMATORS.values()
    ]
    return "\n".join(lines)


def advantages(rewards, group, name="grpo", lengths=None, baseline=None, eps=loss.EPS):
    """Per-sequence advantages Â_i [N] (the table above) of one whole rollout batch.

    rewards [N], group [N] ids; lengths [N] completion lengths (``opo`` and the
    ``reinforce_plus_plus`` rows need them); baseline [N] the greedy reward of
    each row's prompt (``remax``). Batch statistics are over the rows given:
    pass the whole batch, every process's (train.py does)."""
    est = estimator(name)
    if "lengths" in est.needs and lengths is None:
        raise ValueError(f"--adv={name} needs the completion lengths")
    if "baseline" in est.needs and baseline is None:
        raise ValueError("--adv=remax needs the greedy baseline reward of every row")
    r = rewards.float()
    mu, n = group_mean(r, group)
    return est.fn(r, group, mu, n, lengths, baseline, eps)


def _registered(name):
    """--adv=name as loss.ADVANTAGES calls it: (rewards, group, lengths, baseline) -> Â."""
    return lambda rewards, group, lengths, baseline: advantages(rewards, group, name,
                                                                lengths=lengths, baseline=baseline)


# the estimators the lesson does not have join its registry, so train.py finds every --adv there
for _name in ESTIMATORS:
    loss.ADVANTAGES.setdefault(_name, _registered(_name))


# ------------------------------------------------------- the rewards the estimators read
# Two lab options change a rollout batch before its advantages: ReMax's baseline (the reward
# of a greedy completion) and the null-reward control. Each process applies them to its own
# groups, before the batches are gathered (train.py's ``Hooks.rewarded``).

def permute_within_groups(rewards, group, generator):
    """--permute_rewards, the null-reward control: each group's rewards shuffled
    across its rollouts. Every group keeps its rewards (so its mean, sd and
    mixed-ness), but no completion is scored by its own reward."""
    r = torch.rand(len(rewards), generator=generator, device=generator.device).to(rewards.device)
    g = group.to(torch.float64) * 2
    src = torch.argsort(g + r.to(torch.float64))  # each group's rows, in a random order
    dst = torch.argsort(g, stable=True)            # each group's rows, in their own order
    out = rewards.clone()
    out[dst] = rewards[src]
    return out


def controls(cfg, model, task, batch, gen):
    """The lab's options on a rewarded batch (sampler.rollouts'), in place: --adv=remax's
    ``baseline``, each row's greedy completion's reward (its generator is not drawn from),
    and --permute_rewards. Neither option on: the batch as it is."""
    G = cfg.group_size
    if getattr(cfg, "adv", None) == "remax":  # one greedy completion per group's prompt
        with amp(cfg, batch.mask.device.type):
            greedy = sampler.sample(model, batch.prompts[::G], 1, task.max_new_tokens,
                                    temperature=0.0).tokens.tolist()
        batch.baseline = torch.tensor(
            [float(task.reward(p, task.decode(t))) for p, t in zip(batch.problems[::G], greedy)],
            device=batch.rewards.device).repeat_interleave(G)
    if getattr(cfg, "permute_rewards", False):
        batch.rewards = permute_within_groups(batch.rewards, batch.group, gen)


def rollouts(model, task, next_problem, cfg, gen, device, n_prompts=None, decoder=None):
    """sampler.rollouts, then the lab's ``controls``: the rollouts of train.py's step, which
    calls the two apart (the controls through its hooks, ``LabHooks.rewarded``)."""
    batch = sampler.rollouts(model, task, next_problem, cfg, gen, device, n_prompts, decoder)
    controls(cfg, model, task, batch, gen)
    return batch
