"""diagnostics.py: what training logs to make token gradient cancellation observable.

What it teaches
---------------
With exchangeable weights (THEORY.md section 2), a token that every rollout of
a group emits after one shared history gets a summed coefficient of zero:
whatever changes pi(. | h) at such a history comes from other tokens' gradients
reaching it through the shared parameters. That change is the *learning tax*
[P1] (THEORY.md section 4), measured per RL step as

    tax = mean over shared histories h of KL(pi_new(. | h) || pi_old(. | h)),

at the histories the whole group shares (``shared_histories``), and
``tax_interior`` at those strictly before the group diverges. On held-out
problems, each evaluation also measures drift that the reward does not ask
for: the log-odds between two equally correct answers (``answer_drift``) and
between the two forms of a choice the verifier does not check (``style_drift``,
``style_entropy``), plus the mean token entropy and pass@k.
``eval_diagnostics`` gathers what train.py logs at an evaluation.

The cancellation ledger, what train.py logs of where the shared tokens'
coefficients went, is ledger.py.

The probes that only experiments E1-E6 use (flips, coupling, masked updates,
token values) live in probes.py.
"""

import math

import torch
import toy_tasks
from model import completion_logprobs, left_pad
from sampler import sample
from toy_tasks import EOS, PAD
import loss


# ----------------------------------------------------------------------------- learning tax, drift

def host_lists(*tensors):
    """Tensors as nested Python lists, read back at once: one copy to the host, whatever
    their number (each read makes a GPU wait). Values come back as floats."""
    flat = torch.cat([t.reshape(-1).double() for t in tensors]).tolist()
    out, start = [], 0
    for t in tensors:
        part, start = flat[start:start + t.numel()], start + t.numel()
        width = t.shape[-1] if t.dim() == 2 else None
        out.append(part if width is None else
                   [part[r * width:(r + 1) * width] for r in range(t.shape[0])])
    return out


def prefix_lengths(tok, mask, group):
    """Per row, the length of its group's longest common completion prefix; and the groups'
    rows, in order of their ids (bookkeeping on the host, from ``host_lists``)."""
    rows_of = {}
    for i, k in enumerate(group):
        rows_of.setdefault(k, []).append(i)
    out = [0] * len(group)
    for k in sorted(rows_of):
        rows, first = rows_of[k], rows_of[k][0]
        n = 0
        while n < len(tok[first]) and all(mask[r][n] and mask[first][n] and
                                          tok[r][n] == tok[first][n] for r in rows):
            n += 1
        for r in rows:
            out[r] = n
    return out, [rows_of[k] for k in sorted(rows_of)]


def common_prefix(tokens, mask, group):
    """Per row, the length of its group's longest common completion prefix."""
    ell, _ = prefix_lengths(*host_lists(tokens, mask, group))
    return torch.tensor(ell, dtype=torch.long, device="cpu")


def shared_pairs(ell, mask, rows_of, interior=False):
    """The (row, t) pairs of ``shared_histories`` as a list, from ``prefix_lengths``."""
    pairs = []
    for rows in rows_of:
        r = rows[0]
        last = ell[r] - 1 if interior else ell[r]
        pairs += [(r, t) for t in range(last + 1) if t < len(mask[r]) and (t == 0 or mask[r][t])]
    return pairs


def shared_histories(tokens, mask, group, interior=False):
    """(row, t) pairs [K,2], one representative row (the group's first) per group
    and position t whose history (prompt + tokens before t) the whole group shares:
    t = 0 and every t up to and including the end ell of the longest common prefix.

    At t = ell the group *diverges*: its rollouts emit different tokens there, and
    a change of pi(. | h) is the intended learning. With ``interior=True`` only
    the histories strictly before it (t < ell) are kept: every rollout emits the
    same token after them, so with exchangeable weights their gradient cancels,
    and whatever moves there is learning tax."""
    tok, m, g = host_lists(tokens, mask, group)
    ell, rows_of = prefix_lengths(tok, m, g)
    pairs = shared_pairs(ell, m, rows_of, interior)
    return torch.tensor(pairs, dtype=torch.long, device="cpu").reshape(-1, 2)


def before_divergence(pairs, tokens, mask, group):
    """bool [K]: which (row, t) pairs of ``shared_histories`` lie strictly before
    their group's divergence point (t < ell)."""
    ell = common_prefix(tokens, mask, group)
    if not len(pairs):
        return torch.zeros(0, dtype=torch.bool, device="cpu")
    return pairs[:, 1] < ell[pairs[:, 0]]


@torch.no_grad()
def policy_at(model, prompts, tokens, mask, rows_t, temperature=1.0):
    """log pi(. | history) [K, V] at the histories (row, t) = prompt + tokens[row, :t]
    (``rows_t``: the pairs, a [K, 2] tensor or a list)."""
    pairs = rows_t.tolist() if torch.is_tensor(rows_t) else rows_t
    rows = sorted({r for r, _ in pairs})
    where = {r: i for i, r in enumerate(rows)}
    ids, valid, _ = left_pad([prompts[r] for r in rows], PAD, tokens.device)
    Lp = ids.shape[1]
    at = torch.tensor(rows, dtype=torch.long, device="cpu").to(tokens.device)
    seq = torch.cat([ids, tokens[at]], 1)[:, :-1]
    val = torch.cat([valid, mask[at]], 1)[:, :-1]
    logits = model(seq, val)[:, Lp - 1:] / temperature
    which = torch.tensor([[where[r], t] for r, t in pairs], dtype=torch.long,
                         device="cpu").reshape(-1, 2).to(logits.device)
    return torch.log_softmax(logits[which[:, 0], which[:, 1]], -1)


def kl(logp_old, logp_new):
    """KL(pi_new(.|h) || pi_old(.|h)) = sum_v pi_new (log pi_new - log pi_old), per history [K]."""
    return (logp_new.exp() * (logp_new - logp_old)).sum(-1)


def tax_before(model, batch):
    """Before a step's updates: the histories each group shares (``shared_histories``, as
    a list), which of them lie before the group diverges, which are in a *mixed* group
    (rewards not all equal), the token the group writes there, and the policy there. The
    batch is read back once; the rest is bookkeeping on the host."""
    tok, m, g, r = host_lists(batch.tokens, batch.mask, batch.group, batch.rewards)
    ell, rows_of = prefix_lengths(tok, m, g)
    pairs = shared_pairs(ell, m, rows_of)
    mixed = {i for rows in rows_of if len({r[j] for j in rows}) > 1 for i in rows}
    facts = [(t < ell[row], row in mixed, int(tok[row][t])) for row, t in pairs]
    return pairs, facts, policy_at(model, batch.prompts, batch.tokens, batch.mask, pairs)


def mixed_rows(rewards, group):
    """bool [N]: the rows of mixed groups, whose rewards are not all equal."""
    g, n = loss.groups(group)
    r = rewards.float()
    lo = torch.full((n,), float("inf"), device=r.device).scatter_reduce_(0, g, r, "amin")
    hi = torch.full((n,), float("-inf"), device=r.device).scatter_reduce_(0, g, r, "amax")
    return (hi > lo)[g]


def learning_tax(model, batch, before):
    """After the updates: (tax, tax_interior), the mean KL(pi_new || pi_old) over all
    shared histories (the divergence point included: intended learning) and over
    those strictly before it (0.0 when there are none)."""
    return learning_tax_and_shift(model, batch, before)[:2]


def learning_tax_and_shift(model, batch, before):
    """(tax, tax_interior, shared_dlogp): ``learning_tax``, and the mean change of
    log pi(a | h) of the token a that the whole group emits after h, over the histories
    strictly before a *mixed* group diverges (0.0 when there are none). There every
    copy of a should cancel: a negative value means the shared tokens were pushed down,
    by what did not cancel and by other tokens' gradients through shared weights.
    One read back for the three numbers."""
    pairs, facts, old = before
    new = policy_at(model, batch.prompts, batch.tokens, batch.mask, pairs)
    k = kl(old, new)
    dev = new.device
    inner = [i for i, (before_split, _, _) in enumerate(facts) if before_split]
    # the histories before a mixed group diverges, and the token the group writes there
    sel = [i for i, (before_split, mixed, _) in enumerate(facts) if before_split and mixed]
    zero = k.new_zeros(())
    tax_interior = k[torch.tensor(inner, device="cpu").to(dev)].mean() if inner else zero
    shift = zero
    if sel:
        at = torch.tensor(sel, device="cpu").to(dev)
        a = torch.tensor([facts[i][2] for i in sel], device="cpu").to(dev)[:, None]
        shift = (new[at].gather(1, a)[:, 0] - old[at].gather(1, a)[:, 0]).mean()
    return tuple(torch.stack([k.mean(), tax_interior, shift]).double().tolist())


def answer_logprobs(model, task, problems):
    """[P, A] total log-prob of each correct answer (text + EOS), -inf padding."""
    ans = [task.answers(p) for p in problems]
    prompts = [toy_tasks.encode(task.prompt(p)) for p, a in zip(problems, ans) for _ in a]
    seqs = [toy_tasks.encode(x) + [EOS] for a in ans for x in a]
    T = max(len(s) for s in seqs)
    dev = next(model.parameters()).device
    tok = torch.tensor([s + [PAD] * (T - len(s)) for s in seqs], device=dev)
    with torch.no_grad():
        lp = completion_logprobs(model, prompts, tok, tok != PAD, PAD).sum(1).cpu()
    out = torch.full((len(problems), max(len(a) for a in ans)), float("-inf"), device="cpu")
    for i, chunk in enumerate(lp.split([len(a) for a in ans])):
        out[i, :len(chunk)] = chunk
    return out


def answer_drift(lp, lp_ref=None):
    """From answer_logprobs, over problems with >= 2 correct answers: mean log-odds
    log pi(answers[0]) - log pi(answers[1]) and mean entropy of pi renormalised over
    the correct answers (in nats). With ``lp_ref`` (the same problems at the warm
    start) also ``drift``, the mean over problems of |log-odds - log-odds_ref|
    (per problem first, so that opposite drifts do not cancel), and
    ``drift_signed``, the mean of the signed change. NaN when no problem has two
    answers."""
    multi = torch.isfinite(lp).sum(1) >= 2
    if not multi.any():
        return {"log_odds": float("nan"), "entropy": float("nan"), "n": 0}
    x = lp[multi]
    q = torch.log_softmax(x, -1)
    ent = -(q.exp() * q.masked_fill(~torch.isfinite(q), 0)).sum(1)
    out = {"log_odds": float((x[:, 0] - x[:, 1]).mean()), "entropy": float(ent.mean()),
           "n": int(multi.sum())}
    if lp_ref is not None:
        d = (x[:, 0] - x[:, 1]) - (lp_ref[multi][:, 0] - lp_ref[multi][:, 1])
        out.update(drift=float(d.abs().mean()), drift_signed=float(d.mean()))
    return out


@torch.no_grad()
def next_logprobs(model, task, problems, temperature=1.0):
    """[P, V] log pi(. | prompt) of the first completion token, for each problem."""
    dev = next(model.parameters()).device
    ids, valid, _ = left_pad([toy_tasks.encode(task.prompt(p)) for p in problems], PAD, dev)
    return torch.log_softmax(model(ids, valid)[:, -1].float() / temperature, -1).cpu()


@torch.no_grad()
def style_log_odds(model, task, problems, temperature=1.0):
    """Log-odds between the two variants of every style point (task.style_points)
    of the problems: log pi(a | h) - log pi(b | h), a the teacher's majority form.
    Returns (log_odds [S], problem index [S], kinds [S] list of str)."""
    pts = [(i, kind, task.prompt(p) + prefix, a, b) for i, p in enumerate(problems)
           for kind, prefix, (a, b) in task.style_points(p)]
    dev = next(model.parameters()).device
    ids, valid, _ = left_pad([toy_tasks.encode(h) for _, _, h, _, _ in pts], PAD, dev)
    logp = torch.log_softmax(
        model(ids, valid)[:, -1].float() / temperature, -1
    )  # left-padded: last = last real
    a = torch.tensor([toy_tasks.encode(x[3])[0] for x in pts], device=dev)
    b = torch.tensor([toy_tasks.encode(x[4])[0] for x in pts], device=dev)
    lo = logp.gather(1, a[:, None])[:, 0] - logp.gather(1, b[:, None])[:, 0]
    return lo.cpu(), torch.tensor([x[0] for x in pts], device="cpu"), [x[1] for x in pts]


def style_drift(lo, lo_ref, problem, kinds):
    """Reward-irrelevant drift at the style points. Per problem (and per kind of
    point) the change of log-odds since the reference is averaged over its points
    first; then ``style_drift`` = mean over problems of |change| and
    ``style_drift_signed`` = mean over problems of the signed change (> 0: towards
    the teacher's majority form). Also both per kind, e.g. ``style_drift_space``."""
    d = lo - lo_ref
    out = {}
    for name in [None] + sorted(set(kinds)):
        sel = torch.tensor([name is None or k == name for k in kinds], device="cpu")
        probs = problem[sel].unique()
        per = torch.stack([d[sel & (problem == p)].mean() for p in probs])
        tag = "" if name is None else f"_{name}"
        out[f"style_drift{tag}"] = float(per.abs().mean())
        out[f"style_drift_signed{tag}"] = float(per.mean())
    return out


def style_entropy(lo, problem, kinds):
    """Entropy (nats) of the policy renormalised over the two equally correct
    forms of every style point: with p = sigmoid(log-odds),
    H = -p log p - (1 - p) log(1 - p) (ln 2 = 0.693 when both are equally
    likely, 0 when one form has taken over). Averaged over a problem's points
    first, then over problems: ``style_entropy`` and per kind, e.g.
    ``style_entropy_restate``. The chain task's analogue of ``answer_entropy``
    (its problems have one answer but several correct forms)."""
    q = torch.sigmoid(lo.double())
    h = -(q * torch.log(q.clamp(min=1e-300)) + (1 - q) * torch.log((1 - q).clamp(min=1e-300)))
    out = {}
    for name in [None] + sorted(set(kinds)):
        sel = torch.tensor([name is None or k == name for k in kinds], device="cpu")
        per = torch.stack([h[sel & (problem == p)].mean() for p in problem[sel].unique()])
        out["style_entropy" + ("" if name is None else f"_{name}")] = float(per.mean())
    return out


@torch.no_grad()
def mean_token_entropy(model, task, problems):
    """Mean entropy (nats) of pi at each token of greedy completions of the problems."""
    prompts = [toy_tasks.encode(task.prompt(p)) for p in problems]
    out = sample(model, prompts, 1, task.max_new_tokens, temperature=0.0)
    rows = torch.tensor([[i, t] for i in range(len(prompts)) for t in range(out.tokens.shape[1])
                         if out.mask[i, t]], device="cpu")
    lp = policy_at(model, prompts, out.tokens, out.mask, rows)
    return float(-(lp.exp() * lp).sum(-1).mean())


def pass_at_k(n, c, k):
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@torch.no_grad()
def pass_at_k_eval(model, task, problems, n, k, generator=None, temperature=1.0):
    """Mean unbiased pass@k over problems from n samples each at ``temperature``."""
    prompts = [toy_tasks.encode(task.prompt(p)) for p in problems]
    out = sample(model, prompts, n, task.max_new_tokens, temperature, generator=generator)
    texts = [toy_tasks.decode(t) for t in out.tokens.tolist()]
    cs = [
        sum(task.reward(p, texts[i * n + j]) > 0 for j in range(n)) for i, p in enumerate(problems)
    ]
    return sum(pass_at_k(n, c, k) for c in cs) / len(problems)


def eval_diagnostics(model, task, held_out, cfg, ref=None, n_problems=64):
    """Entropy, pass@k, and drift since the warm start on held-out problems: the
    log-odds between two correct answers (tasks with several) and at the style
    points (tasks with choices the verifier does not check). ``ref`` holds the warm start's
    values (None at the warm start itself, which then returns them in ``_ref``).
    Uses its own generator, so the training run is the same with or without it."""
    probs = held_out[:n_problems]
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(cfg.seed + 7)
    out = {"entropy": mean_token_entropy(model, task, probs),
           "pass1": pass_at_k_eval(model, task, probs, 2 * cfg.pass_k, 1, gen),
           f"pass{cfg.pass_k}": pass_at_k_eval(model, task, probs, 2 * cfg.pass_k, cfg.pass_k, gen)}
    ref = {} if ref is None else ref
    mine = {}
    if max(len(task.answers(p)) for p in probs) > 1:
        mine["answers"] = answer_logprobs(model, task, probs)
        drift = answer_drift(mine["answers"], ref.get("answers"))
        out.update({f"answer_{k}": v for k, v in drift.items()})
    if task.style_points is not None:
        lo, prob, kinds = style_log_odds(model, task, held_out[:256])
        mine["style"] = lo
        out["style_log_odds"] = float(lo.mean())
        out.update(style_entropy(lo, prob, kinds))
        if "style" in ref:
            out.update(style_drift(lo, ref["style"], prob, kinds))
    out["_ref"] = mine
    return out
