"""Teacher's side: the catalogue of wrong programs for exercises 2, 3, 5 and 6.

Each entry is code a student who half understands the exercise could write. Every one
must fail at least one property of exercises/check.py (tests/test_exercises.py and the
audit check that). ``REFERENCE`` names the right answers: the library's own functions
in the teacher's repository.
"""

import torch

import batching
import loss

# Taken when this module is imported: tests replace the library's functions by the wrong
# ones below, and a wrong one that calls the reference must not call itself.
REFERENCE = {"adv_orthogonal": loss.adv_orthogonal, "min_replace": loss.min_replace,
             "query_balanced": batching.query_balanced}


def reference(name):
    return REFERENCE[name]


def per_group(fn):
    """Apply fn(w, adv) to each group's rows."""
    def out(w, adv, group):
        res = w.clone()
        for g in torch.unique(group):
            m = group == g
            res[m] = fn(w[m], adv[m].to(w.dtype))
        return res
    return out


def projection(denominator=lambda a: a @ a, guard=lambda a: float(a @ a) > 0):
    def fn(w, a):
        return w - (a @ w) / denominator(a) * a if guard(a) else w
    return fn


def recentred(w, adv, group):  # re-centres A inside each group before projecting
    return per_group(lambda w, a: projection()(w, a - a.mean()))(w, adv, group)


def reshaped(w, adv, group):  # assumes contiguous groups of equal size
    K = len(torch.unique(group))
    W, A = w.reshape(K, -1), adv.reshape(K, -1).to(w.dtype)
    sq = (A * A).sum(1, keepdim=True)
    return (W - torch.where(sq > 0, (A * W).sum(1, keepdim=True) / sq.clamp(min=1e-12),
                            0 * sq) * A).reshape(-1)


def no_guard(w, adv, group):  # 0/0 in a group whose advantages are all zero
    return per_group(projection(guard=lambda a: True))(w, adv, group)


def in_place(w, adv, group):  # right values, but overwrites the caller's w
    return w.copy_(reference("adv_orthogonal")(w.clone(), adv, group))


def whole_batch(w, adv, group):  # one projection over the batch, not per group
    adv = adv.to(w.dtype)
    return w - (adv @ w) / (adv @ adv) * adv


def runs(fn):
    """fn(w, adv) over contiguous runs of equal labels only (assumes sorted rows)."""
    def out(w, adv, group):
        res, start = w.clone(), 0
        for n in torch.unique_consecutive(group, return_counts=True)[1].tolist():
            res[start:start + n] = fn(w[start:start + n], adv[start:start + n].to(w.dtype))
            start += n
        return res
    return out


def skips_single_rows(w, adv, group):  # "a group of one cannot be projected"
    out = reference("adv_orthogonal")(w, adv, group)
    for g in torch.unique(group):
        m = group == g
        if int(m.sum()) == 1:
            out[m] = w[m]
    return out


def detached(w, adv, group):  # right values, but no gradient flows back to w
    return reference("adv_orthogonal")(w, adv, group).detach()


def float32_out(w, adv, group):  # computes in float32 whatever the input
    return reference("adv_orthogonal")(w.float(), adv.float(), group)


def rebuilt(w, adv, group):  # right values copied into a new tensor: no gradient
    return torch.tensor(reference("adv_orthogonal")(w, adv, group).tolist(), dtype=w.dtype)


EX2 = {
    "re-centred A": recentred,
    "equal contiguous groups": reshaped,
    "no 0/0 guard": no_guard,
    "modifies its input": in_place,
    "one projection for the batch": whole_batch,
    "projected on sign(A)": per_group(lambda w, a: projection()(w, torch.sign(a))
                                      if float(a @ a) > 0 else w),
    "the part along A kept, not removed": per_group(
        lambda w, a: (a @ w) / (a @ a) * a if float(a @ a) > 0 else 0 * w),
    "w centred instead of projected": per_group(lambda w, a: w - w.mean() + 1),
    "skips groups of one row": skips_single_rows,
    "output detached": detached,
    "output rebuilt from numbers": rebuilt,
    "guard at |A|^2 < 0.01": per_group(projection(guard=lambda a: float(a @ a) >= 0.01)),
    "float32 output": float32_out,
    "divided by |A|, not |A|^2": per_group(projection(denominator=lambda a: (a @ a).sqrt())),
    "no denominator": per_group(projection(denominator=lambda a: 1.0)),
    "contiguous runs": runs(projection()),
    "the part along A added": per_group(
        lambda w, a: w + (a @ w) / (a @ a) * a if float(a @ a) > 0 else w),
}


def min_runs(w, adv, group):  # min over contiguous runs of equal labels only
    return runs(lambda w, a: torch.full_like(w, float(w.min())))(w, adv, group)


EX3 = {
    "contiguous runs": min_runs,
    "global min": lambda w, a, g: torch.full_like(w, float(w.min())),
    "group mean": per_group(lambda w, a: torch.full_like(w, float(w.mean()))),
    "equal contiguous groups": lambda w, a, g: w.reshape(len(torch.unique(g)), -1)
    .min(1, keepdim=True).values.expand(len(torch.unique(g)), -1).reshape(-1),
    "group max": per_group(lambda w, a: torch.full_like(w, float(w.max()))),
    "min over the A > 0 rows": per_group(
        lambda w, a: torch.full_like(w, float(w[a > 0].min()) if bool((a > 0).any())
                                     else float(w.min()))),
    "clamped at 1": lambda w, a, g: w.clamp(max=1.0),
    "group median": per_group(lambda w, a: torch.full_like(w, float(w.median()))),
    "float32 output": lambda w, a, g: reference("min_replace")(w.float(), a, g),
    "modifies its input": lambda w, a, g: w.copy_(reference("min_replace")(w.clone(), a, g)),
    "min of |A|-weighted w": per_group(lambda w, a: torch.full_like(w, float((w * a.abs()).min()))),
}


def greedy_no_room(group_ids, adv, lengths, M, gen):
    """Each group to the mini-batch with the fewest signed rollouts so far: even signs,
    uneven group counts."""
    chunks, load = [[] for _ in range(M)], [0] * M
    for gid in torch.unique(group_ids).tolist():
        rows = (group_ids == gid).nonzero().flatten()
        c = min(range(M), key=lambda c: load[c])
        chunks[c].append(rows)
        load[c] += int((adv[rows] != 0).sum()) + 100 * (len(chunks[c]) > 2)
    return [torch.cat(ch) if ch else torch.zeros(0, dtype=torch.long) for ch in chunks]


def round_robin(group_ids, adv, lengths, M, gen):  # whole groups dealt in label order
    groups = torch.unique(group_ids).tolist()
    return [torch.cat([(group_ids == g).nonzero().flatten() for g in groups[c::M]])
            for c in range(M)]


def global_rng(group_ids, adv, lengths, M, gen):  # ignores the generator it is given
    seed = int(torch.randint(1 << 62, ()))
    return reference("query_balanced")(group_ids, adv, lengths, M,
                                       torch.Generator().manual_seed(seed))


def group_ids_returned(group_ids, adv, lengths, M, gen):  # labels, not row indices
    mbs = reference("query_balanced")(group_ids, adv, lengths, M, gen)
    return [group_ids[mb] for mb in mbs]


def ex5_library(name):
    return getattr(batching, name)


EX5 = {
    "shuffle (splits groups)": ex5_library("shuffle"),
    "query (no balancing)": ex5_library("query"),
    "balanced (splits groups)": ex5_library("balanced"),
    "contiguous cut of the rows": lambda g, a, l, M, gen: list(
        torch.arange(len(g)).tensor_split(M)),
    "greedy without room": greedy_no_room,
    "length (splits groups)": ex5_library("length"),
    "sign (splits groups)": ex5_library("sign"),
    "whole groups dealt in label order": round_robin,
    "the global random stream, not the generator": global_rng,
    "group ids instead of row indices": group_ids_returned,
}


# ---------------------------------------------------------------- exercise 6

def fixed(new_logp, old_logp, mask, adv, group, max_len):
    """The reference fix (exercises/answers/ex6_buggy_loss.py)."""
    from exercises.answers import ex6_buggy_loss
    return ex6_buggy_loss.dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len)


def _adv_orthogonal():
    return loss.adv_orthogonal  # what the check provides while it measures exercise 6


def buggy(new_logp, old_logp, mask, adv, group, max_len):
    from exercises import ex6_buggy_loss
    return ex6_buggy_loss.dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len)


def detached_loss(new_logp, old_logp, mask, adv, group, max_len):  # the whole loss detached
    return buggy(new_logp, old_logp, mask, adv, group, max_len).detach()


def own_length(new_logp, old_logp, mask, adv, group, max_len):  # 1/L_i instead of 1/L_max
    lens = mask.sum(1).clamp(min=1)
    w = ((new_logp - old_logp) * mask).sum(1).div(lens).exp()
    per_seq = _adv_orthogonal()(w, adv, group).detach() * adv / (mask.shape[0] * lens)
    return -(per_seq[:, None] * new_logp * mask).sum()


def untransformed(new_logp, old_logp, mask, adv, group, max_len):  # w without the transform
    w = ((new_logp - old_logp) * mask).sum(1).div(mask.sum(1).clamp(min=1)).exp().detach()
    return -((w * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


def whole_batch_weights(new_logp, old_logp, mask, adv, group, max_len):  # ignores the groups
    lens = mask.sum(1).clamp(min=1)
    w = ((new_logp - old_logp) * mask).sum(1).div(lens).exp()
    w_tilde = _adv_orthogonal()(w, adv, torch.zeros_like(group)).detach()
    return -((w_tilde * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


def batch_max_len(new_logp, old_logp, mask, adv, group, max_len):  # L_max from the batch
    return fixed(new_logp, old_logp, mask, adv, group, int(mask.sum(1).max()))


def no_gradient(new_logp, old_logp, mask, adv, group, max_len):  # the whole input detached
    return fixed(new_logp.detach(), old_logp, mask, adv, group, max_len) + 0 * new_logp.sum()


def ratio_upside_down(new_logp, old_logp, mask, adv, group, max_len):  # w from log(old / new)
    return fixed(new_logp, 2 * new_logp.detach() - old_logp, mask, adv, group, max_len)


def summed_log_ratio(new_logp, old_logp, mask, adv, group, max_len):  # s_i without 1/L_i
    w = ((new_logp - old_logp) * mask).sum(1).exp()
    w_tilde = _adv_orthogonal()(w, adv, group).detach()
    return -((w_tilde * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


def detach_new_logp_term(new_logp, old_logp, mask, adv, group, max_len):  # "detach new_logp"
    lens = mask.sum(1).clamp(min=1)
    w = ((new_logp.detach() - old_logp) * mask).sum(1).div(lens).exp()
    w_tilde = _adv_orthogonal()(w, adv, group)
    return -((w_tilde * adv / (mask.shape[0] * max_len))[:, None] * new_logp.detach()
             * mask).sum() + 0 * new_logp.sum()


EX6 = {
    "the bug left in": buggy,
    "the loss detached": detached_loss,
    "1/L_i for 1/L_max": own_length,
    "w without the transform": untransformed,
    "one projection for the batch": whole_batch_weights,
    "L_max from the batch": batch_max_len,
    "no gradient at all": no_gradient,
    "the ratio upside down": ratio_upside_down,
    "s_i without 1/L_i": summed_log_ratio,
    "new_logp detached everywhere": detach_new_logp_term,
}

WRONG = {"ex2": EX2, "ex3": EX3, "ex5": EX5, "ex6": EX6}

# Each wrong program in words a student understands: what the gradebook says when a
# submission gives the same outputs as that program (gradebook.name_mistake). Programs no
# output tells apart say the same words.
NO_GRADIENT_TO_W = "returns a tensor that carries no gradient back to w (detached or rebuilt)"
NO_GRADIENT = "no gradient reaches new_logp: the loss value is right, its gradient is 0"
SAYS = {
    "ex2": {
        "re-centred A": "re-centres the advantages first; use Â as given",
        "equal contiguous groups": "assumes groups of one size in consecutive rows",
        "no 0/0 guard": ("divides by ‖Â‖² = 0 where a group's advantages are all 0 "
                         "(keep w there)"),
        "modifies its input": "writes into the caller's w instead of returning a new tensor",
        "one projection for the batch": "projects the whole batch at once, not each group",
        "projected on sign(A)": "projects on the signs of Â, not on Â",
        "the part along A kept, not removed": "returns w's part along Â instead of removing it",
        "w centred instead of projected": "centres w in each group instead of projecting it",
        "skips groups of one row": "leaves a group of one row unchanged (it is projected too)",
        "output detached": NO_GRADIENT_TO_W,
        "output rebuilt from numbers": NO_GRADIENT_TO_W,  # the same outputs as detached
        "guard at |A|^2 < 0.01": "treats a small ‖Â‖² as zero (only an exact 0 keeps w)",
        "float32 output": "computes in float32 whatever the dtype of w",
        "divided by |A|, not |A|^2": "divides Âᵀw by ‖Â‖ instead of ‖Â‖²",
        "no denominator": "does not divide Âᵀw by ‖Â‖²",
        "contiguous runs": "takes each run of equal labels for a group (rows may interleave)",
        "the part along A added": "adds w's part along Â instead of subtracting it",
    },
    "ex3": {
        "contiguous runs": "takes each run of equal labels for a group (rows may interleave)",
        "global min": "takes the minimum over the whole batch, not per group",
        "group mean": "takes each group's mean, not its minimum",
        "equal contiguous groups": "assumes groups of one size in consecutive rows",
        "group max": "takes each group's maximum, not its minimum",
        "min over the A > 0 rows": "takes the minimum over the rows with Â > 0 only",
        "clamped at 1": "clamps each weight at 1 instead of taking its group's minimum",
        "group median": "takes each group's median, not its minimum",
        "float32 output": "computes in float32 whatever the dtype of w",
        "modifies its input": "writes into the caller's w instead of returning a new tensor",
        "min of |A|-weighted w": "takes the minimum of |Â| w, not of w",
    },
    "ex5": {
        "shuffle (splits groups)": "cuts shuffled rows, so groups are split",
        "query (no balancing)": "keeps groups whole but does not even out the signs",
        "balanced (splits groups)": "evens out the signs but splits groups",
        "contiguous cut of the rows": "cuts the rows in order, so groups are split",
        "greedy without room": "places groups by sign alone: group counts differ from query's",
        "length (splits groups)": "evens out lengths and splits groups",
        "sign (splits groups)": "sorts rows by sign and splits groups",
        "whole groups dealt in label order": "deals whole groups in label order, signs ignored",
        "the global random stream, not the generator": "draws from torch's global random "
                                                       "stream, not the generator",
        "group ids instead of row indices": "returns group ids where row indices are asked",
    },
    "ex6": {
        "the bug left in": "not fixed: autograd still differentiates through the weights w~",
        "the loss detached": "detaches the whole loss: no gradient at all",
        "1/L_i for 1/L_max": "divides by each rollout's own length L_i instead of L_max",
        "w without the transform": "uses w = s_i without Adv-Orthogonal",
        "one projection for the batch": "projects the weights over the batch, not per group",
        "L_max from the batch": "takes L_max from the batch's longest completion, not max_len",
        "no gradient at all": NO_GRADIENT,
        "the ratio upside down": "builds s_i from old over new probabilities, upside down",
        "s_i without 1/L_i": "sums the log-ratios instead of averaging them over L_i",
        "new_logp detached everywhere": NO_GRADIENT,  # the same outputs as no gradient
    },
}
