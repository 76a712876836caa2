"""drift_probes.py: what moves a reward-irrelevant choice, step by step (for E9).

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

   with c the step's detached coefficients (loss.coefficients). To first order
   the step changes ell by grad ell . Delta theta. For plain SGD
   Delta theta = -lr s g (s: the gradient-norm clip's factor). For AdamW with
   the denominator D = sqrt(v_t / (1 - beta2^t)) + eps of the actual step held
   fixed, Delta theta = -lr (beta1 m_{t-1} + (1 - beta1) s g) / (1 - beta1^t) / D:
   a *carried* part (earlier steps' momentum) plus the direct and coupled parts
   of this step's gradient. ``split_step`` returns the three inner products and
   the measured change of ell; the parts add up to grad ell . (theta_new -
   theta_old) exactly (tests/test_drift_probes.py), and to the measured change
   up to second-order terms.
"""

import copy

import torch
import torch.nn.functional as F

import probes as P
import toy_tasks
from model import completion_logprobs, left_pad
from toy_tasks import PAD

RESTATE = toy_tasks.encode("(")[0]


def restated(batch):
    """[N] bool: does rollout i open with the restatement ``(``?"""
    return batch["tokens"][:, 0] == RESTATE


def credit(batch, adv):
    """Real credit of the restate choice in one rollout batch: ``credit_gap``
    (accuracy with minus without restating; None if either is absent) and
    ``credit_cov`` (within-group covariance of restated and A, mean over groups)."""
    x, r, g = restated(batch).double(), batch["rewards"].double(), batch["group"]
    gap = None
    if bool(x.bool().any()) and not bool(x.bool().all()):
        gap = float(r[x.bool()].mean() - r[~x.bool()].mean())
    covs = []
    for k in g.unique():
        sel = g == k
        xs, a = x[sel], adv[sel].double()
        covs.append(float(((xs - xs.mean()) * (a - a.mean())).mean()))
    return {"credit_gap": gap, "credit_cov": sum(covs) / len(covs), "restated": float(x.mean())}


def restate_log_odds(model, task, problems):
    """ell: mean over problems of log pi(majority first token) - log pi("("), differentiable."""
    dev = next(model.parameters()).device
    ids, valid, _ = left_pad([toy_tasks.encode(task.prompt(p)) for p in problems], PAD, dev)
    logp = F.log_softmax(model(ids, valid)[:, -1].float(), -1)  # left-padded: the last position is real
    a = torch.tensor([toy_tasks.encode(task.style_points(p)[0][2][0])[0] for p in problems], device=dev)
    return (logp.gather(1, a[:, None])[:, 0] - logp[:, RESTATE]).mean()


def _grad(scalar, params):
    return torch.autograd.grad(scalar, params, retain_graph=True, allow_unused=True)


def _dot(a, b):
    return sum(float((x * y).sum()) for x, y in zip(a, b) if x is not None and y is not None)


def split_step(model, opt, batch, adv, loss, task, problems, grad_clip=1.0):
    """One on-policy optimizer step of ``loss`` on the whole batch, taken with
    ``opt`` (torch.optim.SGD without momentum, or AdamW without weight decay),
    and the change of ell it makes, split (the module docstring). Returns
    {"direct", "coupled", "carried", "predicted", "measured", "exact"}; "exact"
    is grad ell . (theta_new - theta_old)."""
    params = [p for p in model.parameters() if p.requires_grad]
    ell0 = restate_log_odds(model, task, problems)
    g_ell = _grad(ell0, params)
    c = P.token_coefficients(model, batch, adv, loss)  # on-policy: rho = 1, no clip binds
    logp = completion_logprobs(model, batch["prompts"], batch["tokens"], batch["mask"], PAD)
    g_d = _grad(-(c[:, 0] * logp[:, 0]).sum(), params)
    g_c = _grad(-(c[:, 1:] * logp[:, 1:]).sum(), params)
    zero = lambda g, p: torch.zeros_like(p) if g is None else g
    g_d, g_c = [zero(g, p) for g, p in zip(g_d, params)], [zero(g, p) for g, p in zip(g_c, params)]
    norm = torch.sqrt(sum(((a + b) ** 2).sum() for a, b in zip(g_d, g_c)))
    s = min(1.0, grad_clip / (float(norm) + 1e-6))  # torch's clip_grad_norm_ factor
    before = [p.detach().clone() for p in params]
    group = opt.param_groups[0]
    adam = isinstance(opt, torch.optim.AdamW)
    m_prev = [copy.deepcopy(opt.state[p].get("exp_avg")) if p in opt.state else None for p in params]
    opt.zero_grad(set_to_none=True)
    for p, a, b in zip(params, g_d, g_c):
        p.grad = (a + b).clone()
    torch.nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()
    lr = group["lr"]
    if adam:
        b1, b2 = group["betas"]
        parts = {"direct": [], "coupled": [], "carried": []}
        for p, a, b, m in zip(params, g_d, g_c, m_prev):
            st = opt.state[p]
            t = float(st["step"])
            den = (st["exp_avg_sq"] / (1 - b2 ** t)).sqrt() + group["eps"]
            k = -lr / (1 - b1 ** t) / den
            parts["direct"].append(k * (1 - b1) * s * a)
            parts["coupled"].append(k * (1 - b1) * s * b)
            parts["carried"].append(k * b1 * (m if m is not None else torch.zeros_like(p)))
    else:
        parts = {"direct": [-lr * s * a for a in g_d], "coupled": [-lr * s * b for b in g_c],
                 "carried": [torch.zeros_like(p) for p in params]}
    out = {k: _dot(g_ell, v) for k, v in parts.items()}
    out["predicted"] = out["direct"] + out["coupled"] + out["carried"]
    out["exact"] = _dot(g_ell, [p.detach() - q for p, q in zip(params, before)])
    with torch.no_grad():
        out["measured"] = float(restate_log_odds(model, task, problems) - ell0)
    return out
