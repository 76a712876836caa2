"""Small helpers shared by the exercise scripts and checks.

- ``shared_group``: one group of G rollouts that all emit the *same* first
  completion token after the prompt (so that token has the same history, the
  same log pi_new and the same log pi_old in every rollout), then continue with
  different tokens. This is the smallest batch on which cancellation can be seen.
- ``coefficients``: c_{i,t} = -d loss / d log pi_new(y_{i,t}) of one objective
  of loss.py on such a batch, read off by autograd.
- ``net_and_mass``: the shared token's net coefficient sum_i c_{i,0} and its
  mass sum_i |c_{i,0}|. The shared token cancels iff the net is 0.
"""

import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import loss as L  # noqa: E402


def shared_group(lengths=(2, 3, 4, 5), rewards=(1.0, 0.0, 1.0, 0.0), seed=0,
                 off_policy=False, shared_logratio=0.0):
    """Tensors (new_logp, old_logp, mask, rewards, group) of one group.

    Rollout i has lengths[i] completion tokens. Token 0 is shared by the whole
    group. Off-policy, every other token gets a random log-ratio in
    [-0.3, 0.3]; the shared token gets ``shared_logratio`` in every rollout
    (the copies of one (history, token) pair always have the same ratio).
    """
    g = torch.Generator().manual_seed(seed)
    G, T = len(lengths), max(lengths)
    lens = torch.tensor(lengths)
    mask = torch.arange(T)[None] < lens[:, None]
    new = torch.log(torch.rand(G, T, generator=g) * 0.9 + 0.05) * mask
    new[:, 0] = new[0, 0]
    logr = torch.zeros(G, T)
    if off_policy:
        logr = (torch.rand(G, T, generator=g) - 0.5) * 0.6
        logr[:, 0] = shared_logratio
    old = new - logr * mask
    return new, old, mask, torch.tensor(rewards), torch.zeros(G, dtype=torch.long)


def coefficients(loss_name, new, old, mask, adv, group, clip="none", **kw):
    """c_{i,t} of loss.policy_loss, and its stats dict."""
    new = new.clone().requires_grad_(True)
    total, stats = L.policy_loss(new, old, mask, adv, group, loss_name, clip, **kw)
    return L.coefficients(total, new).detach(), stats


def net_and_mass(coef):
    """(sum_i c_{i,0}, sum_i |c_{i,0}|) for the shared first token of one group."""
    return float(coef[:, 0].sum()), float(coef[:, 0].abs().sum())


def residual(loss_name, batch, clip="none", **kw):
    """loss.first_token_residual of one objective on a batch from ``shared_group``."""
    new, old, mask, r, grp = batch
    adv = L.advantages(r, grp, loss_name)
    c, _ = coefficients(loss_name, new, old, mask, adv, grp, clip, **kw)
    return L.first_token_residual(c, grp)
