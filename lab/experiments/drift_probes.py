"""drift_probes.py: what moves a choice the verifier ignores, step by step (for E9).

What it teaches
---------------
On ``chain`` the first completion token is a choice the verifier ignores:
restate the problem, ``(``, or not. Its log-odds

    ell(theta) = mean over held-out problems of log pi(a | prompt) - log pi("(" | prompt),

a = the first token of the unrestated form (the teacher's majority), drifts
during RL (> 0: away from restating). Two questions per optimizer step:

1. **Is there real credit?** Among the step's rollouts, ``credit_gap`` =
   P(correct | restated) - P(correct | not), and ``credit_cov`` = the
   within-group covariance of "restated" and the advantage, averaged over
   groups: the push the rewards themselves give the choice through the
   first-token copies (sum_i c_{i,0} over restating copies, to first order).
2. **Direct or coupled?** The step's loss depends on theta only through the
   log-probs of its tokens, so its gradient splits exactly into

       g = g_direct + g_coupled,
       g_direct  = grad of -sum_i c_{i,0} log pi(y_{i,0})     (the first-token copies)
       g_coupled = grad of -sum_{i, t>=1} c_{i,t} log pi(y_{i,t})  (every other token),

   with c the step's detached coefficients (``step_coefficients``: the PPO
   ratio against the sampling-time log-probs, the clip and DFPO's weights, as
   train.optimizer_step has them, so also for a reused mini-batch). The
   first-token log-probs depend on the prompt alone, so g_direct comes from a
   forward pass over the prompts. To first order
   the step changes ell by grad ell . Delta theta. For plain SGD
   Delta theta = -lr s g (s: the gradient-norm clip's factor). For AdamW with
   the denominator D = sqrt(v_t / (1 - beta2^t)) + eps of the actual step held
   fixed, Delta theta = -lr (beta1 m_{t-1} + (1 - beta1) s g) / (1 - beta1^t) / D:
   a *carried* part (earlier steps' momentum) plus the direct and coupled parts
   of this step's gradient. The momentum is linear in the gradients, so it too
   splits by origin: m = m_direct + m_coupled, m_direct,t = beta1 m_direct,t-1 +
   (1 - beta1) s g_direct (kept in ``memo``), and the carried part splits into
   ``carried_direct`` + ``carried_coupled``; direct + carried_direct is then
   everything the first-token copies of this and earlier steps contribute to
   the step, and coupled + carried_coupled everything else: a two-way split of
   the whole update. ``split_step`` returns the inner products and
   the measured change of ell; the parts add up to grad ell . (theta_new -
   theta_old) exactly (tests/test_drift_probes.py), and to the measured change
   up to second-order terms.
3. **How far did the step move the policy?** ``kl``: KL(pi_new || pi_old) per
   token at the batch's own sampled histories; and how settled the choice is:
   its two-way entropy (``choice``).
"""

import copy

import torch

import loss
import toy_tasks
from model import completion_logprobs, left_pad
from toy_tasks import PAD
from lab import objectives, residuals

RESTATE = toy_tasks.encode("(")[0]


def restated(batch):
    """[N] bool: does rollout i open with the restatement ``(``?"""
    return batch.tokens[:, 0] == RESTATE


def restate_accuracy(batch):
    """Sampled accuracy of the rollouts that restate and of those that do not (None where
    a side is empty), their gap, and the counts: a warm start's restate credit."""
    x, r = restated(batch), batch.rewards
    acc = lambda sel: float(r[sel].mean()) if bool(sel.any()) else None
    out = {"rollouts": len(r), "restated": int(x.sum()), "acc_restated": acc(x),
           "acc_not": acc(~x)}
    out["gap"] = (None if None in (out["acc_restated"], out["acc_not"])
                  else out["acc_restated"] - out["acc_not"])
    return out


def credit(batch, adv):
    """Real credit of the restate choice in one rollout batch: ``credit_gap``
    (accuracy with minus without restating; None if either is absent) and
    ``credit_cov`` (within-group covariance of restated and A, mean over groups)."""
    x, r, g = restated(batch).double(), batch.rewards.double(), batch.group
    gap = None
    if bool(x.bool().any()) and not bool(x.bool().all()):
        gap = float(r[x.bool()].mean() - r[~x.bool()].mean())
    covs = []
    for k in g.unique():
        sel = g == k
        xs, a = x[sel], adv[sel].double()
        covs.append(float(((xs - xs.mean()) * (a - a.mean())).mean()))
    return {"credit_gap": gap, "credit_cov": sum(covs) / len(covs), "restated": float(x.mean())}


def choice(model, task, problems):
    """(ell, H): the restate log-odds ell (differentiable) and the entropy of the
    two-way choice, mean over problems of the binary entropy of sigmoid(ell_p),
    in nats (log 2 = 0.69: an even choice; 0: a settled one)."""
    dev = next(model.parameters()).device
    ids, valid, _ = left_pad([toy_tasks.encode(task.prompt(p)) for p in problems], PAD, dev)
    logp = torch.log_softmax(
        model(ids, valid)[:, -1].float(), -1
    )  # left-padded: the last position is real
    a = torch.tensor(
        [toy_tasks.encode(task.style_points(p)[0][2][0])[0] for p in problems], device=dev
    )
    ell = logp.gather(1, a[:, None])[:, 0] - logp[:, RESTATE]
    q = torch.sigmoid(ell.detach().double())
    h = -(q * q.clamp_min(1e-300).log() + (1 - q) * (1 - q).clamp_min(1e-300).log())
    return ell.mean(), float(h.mean())


def restate_log_odds(model, task, problems):
    """ell: mean over problems of log pi(majority first token) - log pi("("), differentiable."""
    return choice(model, task, problems)[0]


def first_token_logprobs(model, batch):
    """log pi(y_{i,0} | prompt_i) [N] from the prompts alone: the first completion
    token sees nothing else, so this equals column 0 of completion_logprobs."""
    dev = batch.tokens.device
    ids, valid, _ = left_pad(batch.prompts, PAD, dev)
    logp = torch.log_softmax(model(ids, valid)[:, -1], -1)
    return logp.gather(1, batch.tokens[:, :1])[:, 0]


def step_coefficients(logp, old, batch, adv, cfg):
    """c_{i,t} = -d loss / d log pi(y_{i,t}) of the step train.optimizer_step takes
    on this (mini-)batch: --loss with its PPO ratio against ``old``, --clip and, for
    DFPO, the weights w~ of these rows. On-policy (old = logp): rho = 1."""
    new = logp.detach().clone().requires_grad_(True)
    counts = loss.step_counts(batch.mask, adv, max_len=batch.max_len)
    value, _ = objectives.policy_loss(
        objectives.LossBatch(new, old, batch.mask, adv, batch.group, counts=counts),
        objectives.LossSettings(cfg.loss, cfg.clip, cfg.clip_low, cfg.clip_high),
    )
    return residuals.coefficients(value, new).detach() * batch.mask


def _grad(scalar, params, keep=False):
    g = torch.autograd.grad(scalar, params, retain_graph=keep, allow_unused=True)
    return [torch.zeros_like(p) if x is None else x for x, p in zip(g, params)]


def _dot(a, b):
    return sum(float((x * y).sum()) for x, y in zip(a, b))


def split_step(model, opt, batch, adv, cfg, task, problems, memo=None):
    """One optimizer step of ``cfg.loss`` on ``batch`` (a whole rollout batch, or a
    mini-batch whose ``logprobs`` are the sampling-time ones: off-policy), taken
    with ``opt`` (torch.optim.SGD with or without momentum, or AdamW without weight
    decay, any beta1) and --grad_clip, as train.optimizer_step takes it, and the
    change of ell it makes, split (the module docstring). ``memo``, a dict kept across
    the steps of one run, holds the momentum of direct origin and, for AdamW, a second
    moment built from the first-token gradients alone (None: not split by origin).
    Returns {"direct", "coupled", "carried", "carried_direct", "carried_coupled",
    "direct_own_v", "carried_direct_own_v", "predicted", "exact", "measured", "kl",
    "entropy"}: "exact" is grad ell . (theta_new - theta_old); the two "_own_v" parts
    are the first-token path's under an AdamW denominator built from the first-token
    gradients alone (None for SGD, or without ``memo``), so that what the other tokens'
    squared gradients do to it (second-moment coupling) is measured; "kl" the mean
    over the batch's completion tokens of KL(pi_new || pi_old) at their sampled
    histories; "entropy" the choice's entropy before the step.

    Long because: the split of one step follows the optimizer's own update term by term
    (gradient, clip, AdamW's moments), in the order the optimizer applies them."""
    params = [p for p in model.parameters() if p.requires_grad]
    ell0, entropy = choice(model, task, problems)
    g_ell = _grad(ell0, params)
    logp, h = completion_logprobs(model, batch.prompts, batch.tokens, batch.mask, PAD,
                                  return_hidden=True)
    old_policy = torch.log_softmax(model.lm_head(h.detach()).float(), -1).detach()
    c = step_coefficients(logp, batch.old_logprobs, batch, adv, cfg)
    g = _grad(-(c * logp).sum(), params)
    g_d = _grad(-(c[:, 0] * first_token_logprobs(model, batch)).sum(), params)
    g_c = [a - b for a, b in zip(g, g_d)]
    norm = torch.sqrt(sum((a ** 2).sum() for a in g))
    s = min(1.0, cfg.grad_clip / (float(norm) + 1e-6))  # torch's clip_grad_norm_ factor
    before = [p.detach().clone() for p in params]
    group = opt.param_groups[0]
    buf = "exp_avg" if isinstance(opt, torch.optim.AdamW) else "momentum_buffer"
    m_prev = [copy.deepcopy(opt.state[p].get(buf)) if p in opt.state else None for p in params]
    opt.zero_grad(set_to_none=True)
    for p, a in zip(params, g):
        p.grad = a.clone()
    torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
    opt.step()
    lr = group["lr"]
    if isinstance(opt, torch.optim.AdamW):
        b1, b2 = group["betas"]
        parts = {k: [] for k in ("direct", "coupled", "carried", "carried_direct",
                                 "carried_coupled", "direct_own_v", "carried_direct_own_v")}
        for p, a, b, m in zip(params, g_d, g_c, m_prev):
            st = opt.state[p]
            t = float(st["step"])
            k = -lr / (1 - b1 ** t) / ((st["exp_avg_sq"] / (1 - b2 ** t)).sqrt() + group["eps"])
            m = m if m is not None else torch.zeros_like(p)
            m_d = memo.get(p, torch.zeros_like(p)) if memo is not None else torch.zeros_like(p)
            parts["direct"].append(k * (1 - b1) * s * a)
            parts["coupled"].append(k * (1 - b1) * s * b)
            parts["carried"].append(k * b1 * m)
            parts["carried_direct"].append(k * b1 * m_d)
            parts["carried_coupled"].append(k * b1 * (m - m_d))
            # the same first-token path under a denominator of first-token gradients alone
            v_d = memo.get(("v", p), torch.zeros_like(p)) if memo is not None else None
            v_d = None if v_d is None else b2 * v_d + (1 - b2) * (s * a) ** 2
            k_own = (-lr / (1 - b1 ** t) / ((v_d / (1 - b2 ** t)).sqrt() + group["eps"])
                     if v_d is not None else torch.zeros_like(p))
            parts["direct_own_v"].append(k_own * (1 - b1) * s * a)
            parts["carried_direct_own_v"].append(k_own * b1 * m_d)
            if memo is not None:
                memo[p] = b1 * m_d + (1 - b1) * s * a  # as torch's exp_avg.lerp_(grad, 1 - beta1)
                memo[("v", p)] = v_d  # as torch's exp_avg_sq, from the first-token gradients
    else:  # SGD: theta -= lr * buf, buf = momentum * buf + grad (buf = grad without momentum)
        mu = group["momentum"]
        parts = {"direct": [-lr * s * a for a in g_d], "coupled": [-lr * s * b for b in g_c]}
        m_d = [memo.get(p, torch.zeros_like(p)) if memo is not None else torch.zeros_like(p)
               for p in params]
        m_all = [m if m is not None else torch.zeros_like(p) for p, m in zip(params, m_prev)]
        parts["carried"] = [-lr * mu * m for m in m_all]
        parts["carried_direct"] = [-lr * mu * m for m in m_d]
        parts["carried_coupled"] = [-lr * mu * (m - md) for m, md in zip(m_all, m_d)]
        if memo is not None and mu:
            for p, md, a in zip(params, m_d, g_d):
                memo[p] = mu * md + s * a  # as torch's momentum_buffer (no dampening)
    out = {k: _dot(g_ell, v) for k, v in parts.items()}
    if memo is None:
        out["carried_direct"] = out["carried_coupled"] = None
    if memo is None or not isinstance(opt, torch.optim.AdamW):
        out["direct_own_v"] = out["carried_direct_own_v"] = None
    out["predicted"] = out["direct"] + out["coupled"] + out["carried"]
    out["exact"] = _dot(g_ell, [p.detach() - q for p, q in zip(params, before)])
    with torch.no_grad():
        out["measured"] = float(restate_log_odds(model, task, problems) - ell0)
        _, h_new = completion_logprobs(model, batch.prompts, batch.tokens, batch.mask, PAD,
                                       return_hidden=True)
        new_policy = torch.log_softmax(model.lm_head(h_new).float(), -1)
        kl = (new_policy.exp() * (new_policy - old_policy)).sum(-1)
        out["kl"] = float(kl[batch.mask].mean())
    out["entropy"] = entropy
    return out
