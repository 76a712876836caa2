"""choice_motion.py: what moved a choice's log-odds at the prompts of one optimizer step.

What it teaches
---------------
E12's choice X is the first completion token (the ``parity_*`` tasks' ``(``). At a group's
prompt h its log-odds f = log pi(X | h) - log(1 - pi(X | h)) move in one optimizer step by
exactly u . d (the motion ledger's identity, motion.py): d the step, u the gradient of f
averaged along the step's straight path (Simpson's rule). The step's gradient splits by
where its tokens sit relative to X at h (THEORY.md 4.3):

    own      the group's rollouts that wrote X at h: kappa (sum_{x_i = X} c_i0) P grad log pi(X|h)
    history  the group's other first tokens at h (the softmax's competition at h)
    peers    the other groups' first tokens: the same decision at the other prompts
    same     the rest of the group's tokens: coupling inside the group
    other    the rest of the other groups' tokens (and any term not through log pi)
    memory, decay   the optimizer's state (motion.step_parts)

own + history is what a tabular policy (a free logit vector per history) would move: the
first-order push of THEORY.md 2.7, sum_i c_i0 (x_i - pi_X) in logit space. peers carry that
push from the other prompts through shared parameters; same and other are the rest of the
completions' tokens pulling on X ([P2]'s coupling); memory is the optimizer's state. So the
change is the sum of the seven parts, plus the quadrature's gap.

Memory is earlier steps' gradients, carried: under AdamW with beta1 = 0.9 it is most of any
push that lasts. So the run also keeps the momentum of its first tokens' gradients alone,
m^first_t = beta1 m^first_{t-1} + (1 - beta1) kappa g^first_t (SGD: mu m + kappa g), which
the optimizer's momentum holds linearly, and splits memory into ``memory_first`` (what the
earlier steps' first tokens, the same decision at earlier prompts, carry) and the rest.
The split needs every optimizer step since RL began (--motion_every=1, not resumed).
"""

import contextlib

import torch
from torch.nn.utils import parameters_to_vector

from lab import motion
from toy_tasks import PAD

PARTS = ("own", "history", "peers", "same", "other", "memory", "decay")
# at most this many groups' prompts per optimizer step, evenly spaced over the step's groups
# (a random sample of its prompts: the problem stream draws them at random); each costs a
# backward pass of the group and, at each of Simpson's three points, one of its prompt
MAX_GROUPS = 4


def momentum_map(opt, params):
    """(a, b, F): flat vectors with m_t = a m_{t-1} + b g~_t for the optimizer's momentum
    (g~ the clipped gradient) and its memory step F * m_{t-1}, read after ``opt.step()``
    (motion.step_parts' terms); None for an optimizer without momentum."""
    group_of = {id(p): g for g in opt.param_groups for p in g["params"]}
    out = ([], [], [])
    for p in params:
        g, st = group_of[id(p)], opt.state[p]
        if isinstance(opt, torch.optim.Adam):
            b1 = g["betas"][0]
            denom = st["exp_avg_sq"].sqrt() / (1 - g["betas"][1] ** float(st["step"])) ** 0.5 \
                + g["eps"]
            parts = (b1, 1 - b1, -(g["lr"] / (1 - b1 ** float(st["step"]))) * b1 / denom)
        elif isinstance(opt, torch.optim.SGD) and g["momentum"]:
            parts = (g["momentum"], 1.0, -g["lr"] * g["momentum"])
        else:
            return None
        for k, v in zip(out, parts):
            k.append((v if torch.is_tensor(v) else torch.full_like(p, v)).reshape(-1))
    return tuple(torch.cat(v) for v in out)


def choice_motion(model, opt, batch, mb, coef, before, choice, temperature=1.0, kappa=1.0,
                  autocast=contextlib.nullcontext, carried=None, max_groups=MAX_GROUPS):
    """The choice's motion at the prompts of the groups with rows in ``mb`` (the step's rows
    of ``batch``), in the optimizer step ``opt`` took on ``model`` from the flat parameters
    ``before``; ``coef`` [len(mb), T] its coefficients c = -d loss / d log pi, ``choice``
    the choice's token id, ``kappa`` the clip's factor. It follows at most ``max_groups``
    groups, evenly spaced (motion.spaced); every group's tokens enter the parts.
    Returns a dict of lists, one entry per followed group: ``group``, the log-odds before
    (``f``), their measured change ``dlo``, each part of PARTS, ``gap`` = dlo - their sum,
    and ``memory_first``: memory's part that the earlier steps' first tokens carried,
    given ``carried`` (m^first before this step), else None. Also ``first_grad``: this
    step's g^first (clipped), from which the caller carries m^first on (``advance``)."""
    params = list(model.parameters())
    after = parameters_to_vector(params).detach()
    d, st = after - before, motion.step_parts(opt, params, before)
    mb, coef = mb.cpu(), coef.to(before.device, before.dtype)
    local = {int(r): j for j, r in enumerate(mb.tolist())}
    every_group = sorted({int(batch.group[r]) for r in mb.tolist()})
    rows_of = {k: [r for r in mb.tolist() if int(batch.group[r]) == k] for k in every_group}
    groups = motion.spaced(every_group, max_groups)
    net = motion.Scratch(model, autocast).at(before)
    # the gradient of each group's share of the loss, -sum c log pi, at the step's start
    grads = motion.group_grads(net, batch, mb, coef, [(0, rows_of[k], 0) for k in groups],
                               temperature)
    first, every = first_token_grads(net, batch, rows_of, groups, local, coef, choice,
                                     temperature)
    us, values = odds_path(net, batch, [rows_of[k][0] for k in groups], before, d, choice,
                           temperature)
    pg = st["precond"] * st["grad"]
    first_mem = None
    if carried is not None:
        mm = momentum_map(opt, params)
        first_mem = None if mm is None else mm[2] * carried
    out = {k: [] for k in ("group", "f", "dlo", *PARTS, "gap", "memory_first")}
    for j, k in enumerate(groups):
        u = us[j]
        own, hist = (kappa * float(u @ (st["precond"] * g)) for g in first[k])
        peers = kappa * float(u @ (st["precond"] * every)) - own - hist
        grp = -kappa * float(u @ (st["precond"] * grads[k]))
        part = {"own": own, "history": hist, "peers": peers, "same": grp - own - hist,
                "other": -float(u @ pg) - grp - peers, "memory": float(u @ st["memory"]),
                "decay": float(u @ st["decay"])}
        change = values[-1][j] - values[0][j]
        for key, v in (("group", k), ("f", values[0][j]), ("dlo", change), *part.items(),
                       ("gap", change - sum(part.values()))):
            out[key].append(v)
        # with no momentum, memory is 0 and so is its first tokens' part
        out["memory_first"].append(None if carried is None else
                                   0.0 if first_mem is None else float(u @ first_mem))
    out["first_grad"] = -kappa * every  # the loss's gradient from the first tokens, clipped
    return out


def advance(opt, params, carried, first_grad):
    """m^first after this step: a m^first + b g^first (momentum_map); None without momentum."""
    mm = momentum_map(opt, params)
    if mm is None:
        return None
    return mm[0] * carried + mm[1] * first_grad


def first_token_grads(net, batch, rows_of, groups, local, coef, choice, temperature):
    """({group: (grad of sum c_i0 log pi(y_i0 | h) over its rows that wrote the choice, the
    same over its other rows)} for ``groups``, the same sum over every row of the step) at
    the step's start: one forward of each group's first tokens, and one of all of them."""
    out = {}
    for k in groups:
        rows = rows_of[k]
        lp = net.logprobs(batch, rows, temperature, upto=1)[:, 0]
        c0 = coef[[local[r] for r in rows], 0].to(lp.dtype)
        wrote = batch.tokens[rows, 0].to(lp.device) == choice
        pair = []
        for sel in (wrote, ~wrote):
            if bool(sel.any()):
                pair.append(net.grad((c0[sel] * lp[sel]).sum()))
            else:  # no such row: that part of the step is 0
                pair.append(torch.zeros_like(parameters_to_vector(net.params)))
        out[k] = tuple(pair)
    rows = [r for k in rows_of for r in rows_of[k]]
    lp = net.logprobs(batch, rows, temperature, upto=1)[:, 0]
    every = net.grad((coef[[local[r] for r in rows], 0].to(lp.dtype) * lp).sum())
    return out, every


def odds_path(net, batch, rows, before, d, choice, temperature):
    """The gradient of the choice's log-odds at each row's prompt, averaged along the path
    before + s d by Simpson's rule, and the log-odds at each node: per node and prompt one
    forward of the prompt alone and one backward (a batched forward would make every
    prompt's backward run through every prompt)."""
    dev = before.device
    us, values = [0.0] * len(rows), []
    for s, w in zip(motion.NODES, motion.WEIGHTS):
        net.at(before + s * d)
        vals = []
        for j, r in enumerate(rows):
            ids = torch.tensor([batch.prompts[r]], device=dev)
            with net.autocast():
                logits = net.net(ids, torch.ones_like(ids, dtype=torch.bool))[0, -1]
            if logits.dtype in (torch.float16, torch.bfloat16):  # as model.token_logprobs
                logits = logits.float()
            lp = torch.log_softmax(logits / temperature, -1)[choice]
            f = lp - torch.log1p(-lp.exp())  # log pi - log(1 - pi)
            vals.append(float(f.detach()))
            us[j] = us[j] + w * net.grad(f)
        values.append(vals)
    return us, values


def step_metrics(m):
    """One step's numbers, means over its groups: the choice's measured change of log-odds
    (``choice_motion_dlo``), each part's (``choice_motion_<part>``), the gap, their sizes
    (``_abs``, ``_abs_gap``: means of |change| and |gap|), and the number of groups."""
    n = len(m["dlo"])
    if not n:
        return {}
    out = {"choice_motion_n": float(n), "choice_motion_dlo": sum(m["dlo"]) / n,
           "choice_motion_gap": sum(m["gap"]) / n,
           "choice_motion_abs": sum(abs(x) for x in m["dlo"]) / n,
           "choice_motion_abs_gap": sum(abs(x) for x in m["gap"]) / n}
    for p in PARTS:
        out[f"choice_motion_{p}"] = sum(m[p]) / n
    if None not in m["memory_first"]:
        out["choice_motion_memory_first"] = sum(m["memory_first"]) / n
    return out
