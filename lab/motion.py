"""motion.py: the motion ledger, what moved a shared token's log-probability in one step.

What it teaches
---------------
The cancellation ledger (ledger.py) says where a shared token's *coefficients* went. The
motion ledger says what *moved* its log-probability l_a = log pi(a | h) in one optimizer
step (THEORY.md section 4.3). The step moves the parameters by d, and the change is exactly

    l_a(theta + d) - l_a(theta) = integral_0^1 grad l_a(theta + s d) . d ds = u_a . d,

linear in d, with u_a the gradient averaged along the step's straight path. Simpson's rule
on s = 0, 1/2, 1 computes u_a: exact when l_a is a cubic along the path; what it misses is
logged as the gap. The optimizer's d is a sum of parts, read from its state (``step_parts``):

    d = kappa P * sum_(i,t) c_it grad l_it(theta)  +  memory  +  decay

kappa the gradient clip's factor, P the preconditioner (lr for SGD; for Adam
lr (1 - b1) / ((1 - b1^t) (sqrt(v_t / (1 - b2^t)) + eps)), v_t its second moment after the
step), memory what momentum brings from earlier steps, decay the weight decay. The sum over
the step's tokens splits by where they sit relative to a's set S (a's copies after h):

    own     kappa (sum_{i in S} c_i) P * grad l_a    0 when the copies' coefficients cancel
    same    the rest of a's group                    coupling inside the group ([P2])
    other   the rest of the step                     other groups, and any term of the
                                                     objective not through a log-prob

So the change is own + same + other + memory + decay, each u_a . (its part of d), plus the
quadrature's gap. The tokens: the group-shared ones (every rollout of a mixed group writes
them after the same history) and a bounded sample of the other shared ones.
"""

import contextlib
import copy

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from lab import residuals
from model import completion_logprobs
from toy_tasks import PAD

# the parts of a token's change, in the order the summary lists them; the words it prints
PARTS = {"own": "its own copies' net push",
         "same": "the rest of its group",
         "other": "other groups (and terms off log-probs)",
         "memory": "momentum from earlier steps",
         "decay": "weight decay"}
# Simpson's rule on [0, 1]: nodes and weights; exact for a cubic along the path
NODES, WEIGHTS = (0.0, 0.5, 1.0), (1 / 6, 4 / 6, 1 / 6)
# at most this many mixed groups, and of their tokens of each kind, per optimizer step: the
# ledger's cost grows with them (a group's backward pass, a token's three)
MAX_GROUPS, MAX_SHARED, MAX_PARTIAL = 3, 8, 4


def step_parts(opt, params, before):
    """The optimizer's step, read from its state after ``opt.step()``: flat vectors (in the
    order of ``params``) ``grad`` (the clipped gradient it used), ``precond`` P, ``memory``
    and ``decay`` with  after - before = -P * grad + memory + decay.  ``before``: the flat
    parameters before the step. Adam/AdamW (no amsgrad) and SGD (no nesterov, no dampening)."""
    group_of = {id(p): g for g in opt.param_groups for p in g["params"]}
    out = {k: [] for k in ("grad", "precond", "memory", "decay")}
    at = 0
    for p in params:
        g, st, n = group_of[id(p)], opt.state[p], p.numel()
        theta, grad = before[at:at + n].view_as(p), p.grad.detach()
        at += n
        lr, wd = g["lr"], g["weight_decay"]
        if isinstance(opt, torch.optim.Adam):  # AdamW is Adam with decoupled weight decay
            if g.get("amsgrad") or g.get("maximize"):
                raise ValueError("the motion ledger reads Adam without amsgrad or maximize")
            b1, b2 = g["betas"]
            t = float(st["step"])
            bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
            denom = st["exp_avg_sq"].sqrt() / bc2 ** 0.5 + g["eps"]
            decoupled = g.get("decoupled_weight_decay", False)
            if decoupled:  # AdamW: theta (1 - lr wd), then Adam's step
                dec = -lr * wd * theta
            else:  # Adam's L2 term joins the gradient it normalises: it is decay's part
                dec = -(lr / bc1) * (1 - b1) * wd * theta / denom
            pre = (lr / bc1) * (1 - b1) / denom
            # m_t = b1 m_{t-1} + (1 - b1) g~ with g~ = g + wd theta (Adam) or g (AdamW)
            g_adam = grad if decoupled else grad + wd * theta
            mem = -(lr / bc1) * (st["exp_avg"] - (1 - b1) * g_adam) / denom
        elif isinstance(opt, torch.optim.SGD):
            if g["nesterov"] or g["dampening"] or g.get("maximize"):
                raise ValueError("the motion ledger reads SGD without nesterov or dampening")
            pre, dec = torch.full_like(p, lr), -lr * wd * theta
            buf = st.get("momentum_buffer") if g["momentum"] else None
            # buf_t = mu buf_{t-1} + g + wd theta; its first part is memory
            mem = torch.zeros_like(p) if buf is None else -lr * (buf - grad - wd * theta)
        else:
            raise ValueError(f"the motion ledger cannot read {type(opt).__name__}")
        for k, v in zip(out, (grad, pre, mem, dec)):
            out[k].append(v.reshape(-1))
    return {k: torch.cat(v) for k, v in out.items()}


def tracked_tokens(tokens, mask, group, rewards, max_shared=MAX_SHARED, max_partial=MAX_PARTIAL,
                   max_groups=MAX_GROUPS, whole=None):
    """The tokens the ledger follows in one step (local rows of the step): a list of
    (kind, rows of the set's copies, position), ``kind`` "shared" where every row of a mixed
    group in the step writes the token after the same history, "partial" where two or more
    but not all do. At most ``max_groups`` mixed groups, evenly spaced over the step's; of
    their sets (residuals.history_token_sets' order: by position, then group) at most
    ``max_shared`` and ``max_partial``, evenly spaced. ``whole``: (each group's size in the
    whole batch, its mixed groups), when the step holds only part of the batch: a token is
    group-shared only if the group's every rollout is in the step and writes it."""
    ids = residuals.history_token_sets(tokens, mask, group)
    group, rewards = group.cpu(), rewards.cpu()
    rows, pos = (ids >= 0).nonzero(as_tuple=True)
    if len(rows) == 0:
        return []
    uniq, inv, count = torch.unique(ids[rows, pos], return_inverse=True, return_counts=True)
    first = torch.full((len(uniq),), len(rows)).scatter_reduce(0, inv, torch.arange(len(rows)),
                                                               "amin")
    size, mixed = whole or groups_of(group, rewards)
    chosen = set(spaced(sorted(k for k in mixed if bool((group == k).any())), max_groups))
    pick = {"shared": [], "partial": []}
    for s in range(len(uniq)):
        k = int(group[rows[first[s]]])
        if count[s] >= 2 and k in chosen:
            pick["shared" if int(count[s]) == size[k] else "partial"].append(s)
    return [(kind, rows[inv == s].tolist(), int(pos[first[s]]))
            for kind, cap in (("shared", max_shared), ("partial", max_partial))
            for s in spaced(pick[kind], cap)]


def spaced(items, cap):
    """At most ``cap`` of ``items``, evenly spaced (all of them when there are no more)."""
    if len(items) <= cap:
        return list(items)
    return [items[round(i * (len(items) - 1) / max(cap - 1, 1))] for i in range(cap)]


class Scratch:
    """A copy of the policy whose parameters are set to any point of the step's path, so
    that the run's own model, its gradients and its optimizer are never touched."""

    def __init__(self, model, autocast=contextlib.nullcontext):
        self.net, self.autocast = copy.deepcopy(model).eval(), autocast
        # --compile sets the instance's forward to a compiled function bound to the run's
        # model: the copy must run its own parameters, with the class's forward
        self.net.__dict__.pop("forward", None)
        self.params = list(self.net.parameters())

    def at(self, flat):
        with torch.no_grad():
            vector_to_parameters(flat, self.params)
        return self

    def logprobs(self, batch, rows, temperature, upto=None):
        T = batch.tokens.shape[1] if upto is None else upto
        with self.autocast():  # as the run computed them (bf16 on CUDA): the same gradient
            return completion_logprobs(self.net, [batch.prompts[i] for i in rows],
                                       batch.tokens[rows, :T], batch.mask[rows, :T], PAD,
                                       temperature)

    def grad(self, value):
        g = torch.autograd.grad(value, self.params, retain_graph=True, allow_unused=True)
        return torch.cat([(x if x is not None else torch.zeros_like(p)).reshape(-1)
                          for x, p in zip(g, self.params)])


def token_motion(model, opt, batch, mb, coef, before, temperature=1.0, kappa=1.0,
                 tokens=None, caps=(MAX_SHARED, MAX_PARTIAL, MAX_GROUPS),
                 autocast=contextlib.nullcontext):
    """The motion ledger of one optimizer step on rows ``mb`` of ``batch`` (its prompts,
    tokens, mask, group, rewards), taken by ``opt`` on ``model`` from the flat parameters
    ``before``; ``coef`` [len(mb), T] the step's coefficients c = -d loss / d log pi;
    ``kappa`` the clip's factor (torch's min(1, clip / (norm + 1e-6))); ``autocast``: the
    run's (a context), so that the copy's gradients are the step's.
    Returns, per tracked token (``tracked_tokens``, or ``tokens`` given as (kind, batch rows,
    position)), a dict of lists: kind, the measured change ``dlogp``, each part of PARTS and
    ``gap`` = dlogp - their sum, ``first`` the first-order change grad l_a(theta) . d;
    ``scale``, the mean |change| of the step's tokens; ``recon``, how far the optimizer's
    parts miss its step (relative). ``caps``: at most so many tokens and groups (tracked_tokens)."""
    params = list(model.parameters())
    after = parameters_to_vector(params).detach()
    d, st = after - before, step_parts(opt, params, before)
    mb, coef = mb.cpu(), coef.to(before.device, before.dtype)
    if tokens is None:
        whole = groups_of(batch.group, batch.rewards)  # a group split across steps is no whole
        tokens = [(k, [int(mb[j]) for j in rows], t) for k, rows, t in tracked_tokens(
            batch.tokens[mb], batch.mask[mb], batch.group[mb], batch.rewards[mb], *caps,
            whole=whole)]
    net = Scratch(model, autocast).at(before)
    grads = group_grads(net, batch, mb, coef, tokens, temperature)
    node_grads, values = path_grads(net, batch, tokens, before, d, temperature)
    local = {int(r): j for j, r in enumerate(mb.tolist())}
    out = {k: [] for k in ("kind", "dlogp", *PARTS, "gap", "first")}
    pg = st["precond"] * st["grad"]
    for j, (kind, rows, t) in enumerate(tokens):
        u = sum(w * g[j] for w, g in zip(WEIGHTS, node_grads))  # the path's mean gradient
        c_set = float(coef[[local[r] for r in rows], t].sum())
        part = {"own": kappa * c_set * float(u @ (st["precond"] * node_grads[0][j]))}
        grp = -kappa * float(u @ (st["precond"] * grads[int(batch.group[rows[0]])]))
        part.update(same=grp - part["own"], other=-float(u @ pg) - grp,
                    memory=float(u @ st["memory"]), decay=float(u @ st["decay"]))
        change = values[-1][j] - values[0][j]
        for k, v in (("kind", kind), ("dlogp", change), *part.items(),
                     ("gap", change - sum(part.values())), ("first", float(node_grads[0][j] @ d))):
            out[k].append(v)
    with torch.no_grad():  # the scale: how far the step's tokens moved, on average
        rows = mb.tolist()
        moved = net.at(after).logprobs(batch, rows, temperature) - \
            net.at(before).logprobs(batch, rows, temperature)
    recon = d - (-pg + st["memory"] + st["decay"])
    return dict(out, scale=float(moved[batch.mask[mb].bool()].abs().mean()) if rows else 0.0,
                recon=float(recon.abs().max() / d.abs().max().clamp_min(1e-30)))


def group_grads(net, batch, mb, coef, tokens, temperature):
    """{group: the gradient of its share of the step's loss, -sum c log pi, at the step's
    start}, for the groups of the followed tokens."""
    local = {int(r): j for j, r in enumerate(mb.tolist())}
    grads = {}
    for k in sorted({int(batch.group[rows[0]]) for _, rows, _ in tokens}):
        rows = [r for r in mb.tolist() if int(batch.group[r]) == k]
        c = coef[[local[r] for r in rows]]
        grads[k] = net.grad(-(c * net.logprobs(batch, rows, temperature)).sum())
    return grads


def groups_of(group, rewards):
    """(size of each group in the whole batch, the set of its mixed groups)."""
    group, rewards = group.cpu(), rewards.cpu()
    ks = [int(k) for k in torch.unique(group)]
    return ({k: int((group == k).sum()) for k in ks},
            {k for k in ks if len(torch.unique(rewards[group == k])) > 1})


def path_grads(net, batch, tokens, before, d, temperature):
    """Each followed token's gradient at Simpson's nodes of the path before + s d, and its
    log-prob there: per node, one forward of each representative row alone (a batched
    forward would make every token's backward run through every row) and one backward per
    token."""
    rows_of = {}  # representative row -> the positions followed on it
    for j, (_, rows, t) in enumerate(tokens):
        rows_of.setdefault(rows[0], []).append((j, t))
    node_grads, values = [], []
    for s in NODES:
        net.at(before + s * d)
        grads, vals = [None] * len(tokens), [None] * len(tokens)
        for r, at in rows_of.items():
            lp = net.logprobs(batch, [r], temperature, max(t for _, t in at) + 1)[0]
            for j, t in at:
                grads[j], vals[j] = net.grad(lp[t]), float(lp[t].detach())
        node_grads.append(grads)
        values.append(vals)
    return node_grads, values


def step_metrics(m):
    """One step's motion ledger as sums (rl_update averages its steps' numbers, so ratios of
    these sums weigh every token alike): over the group-shared tokens, their number, sum
    |dlogp|, sum dlogp^2, per part sum part * dlogp (the part's share of the movement,
    once divided by sum dlogp^2), sum |gap|; and the mean |change| of the step's tokens."""
    sel = [j for j, k in enumerate(m["kind"]) if k == "shared"]
    dl = [m["dlogp"][j] for j in sel]
    out = {"motion_n": float(len(sel)), "motion_abs": sum(abs(x) for x in dl),
           "motion_sq": sum(x * x for x in dl), "motion_gap": sum(abs(m["gap"][j]) for j in sel),
           "motion_scale": m["scale"]}
    for p in PARTS:
        out[f"motion_{p}"] = sum(m[p][j] * m["dlogp"][j] for j in sel)
    return out


# the per-step numbers (step_metrics) that the run sums (instruments.py) for its summary
STEP_KEYS = ("motion_n", "motion_abs", "motion_sq", "motion_gap", "motion_scale",
             *(f"motion_{p}" for p in PARTS))


def summary(sums):
    """The run's motion ledger from its sums over the ``motion_steps`` RL steps it measured:
    the group-shared tokens' mean |change| per optimizer step, the steps' mean token
    change, each part's share of the movement (sum part * change / sum change^2: the shares
    add up to 1 up to the gap) and the gap as a share of the summed |change|. {} when the
    ledger followed no token."""
    if not sums.get("motion_n") or not sums.get("motion_sq"):
        return {}
    return {"motion_steps": int(sums["motion_steps"]),
            "motion_moved": sums["motion_abs"] / sums["motion_n"],
            "motion_scale_mean": sums["motion_scale"] / sums["motion_steps"],
            "motion_gap_share": sums["motion_gap"] / sums["motion_abs"],
            **{f"motion_share_{p}": sums[f"motion_{p}"] / sums["motion_sq"] for p in PARTS}}


def lines(summary, every=1):
    """The demo's lines on what moved the group-shared tokens (at most 100 characters each);
    the parts that are 0 in this run (no momentum, no weight decay) are left out. ``every``:
    the run's --motion_every."""
    if "motion_moved" not in summary:
        return ["group-shared tokens: the motion ledger followed none (no mixed group)"]
    moved, scale = summary["motion_moved"], summary["motion_scale_mean"]
    rel = f", {moved / scale:.2f} times the mean token's ({scale:.1e})" if scale > 0 else ""
    which = "all" if every == 1 else f"1, {1 + every}, ...: --motion_every={every}"
    out = ["what moved the group-shared tokens, per optimizer step (the motion ledger, "
           "THEORY.md 4.3):",
           f"  up to {MAX_SHARED} of them in up to {MAX_GROUPS} mixed groups, in "
           f"{summary['motion_steps']} RL steps ({which})",
           f"  mean |change| {moved:.1e} nats{rel}",
           "  each part's share of that change, sum part x change / sum change^2 (parts can",
           "  oppose each other, so a share can pass 100 % or fall below 0):"]
    shares = {p: summary[f"motion_share_{p}"] for p in PARTS}
    for p, words in PARTS.items():
        if shares[p] != 0:
            out.append(f"    {words:40s} {100 * shares[p]:+8.2f} %")
    top = max((p for p in PARTS if shares[p] != 0), key=lambda p: shares[p])
    out.append(f"  the largest push along the change: {PARTS[top]}")
    out.append(f"  what the split misses (Simpson's rule, the optimizer's state): "
               f"{100 * summary['motion_gap_share']:.2g} % of the summed |change|")
    return out
