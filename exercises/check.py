"""Checks for the classroom exercises of EXERCISES.md.

    python -m exercises.check ex2      # one exercise
    python -m exercises.check          # all of them

Each line names a property and the input it was tested on. A failing line
says what does not hold there; it never prints the value or the option that
would be right. Exit status: 0 every property holds, 1 something does not
(or is not written yet), 2 a command line this script does not take, 130 Ctrl-C.

Implementation exercises (2, 3, 5, 6). Each property is a statement about
the outputs of your function on inputs chosen here (``cases``). The same
inputs, and more you have not seen, are what your teacher's marking tool
sends to your code in a sandbox; it checks the outputs with the same
properties (``verdicts``), and against the reference answers.

Number exercises (1, 4, 7). The check holds no key and no fingerprint of one:
any check that tells a right number from a wrong one also lets you find the
number by trying candidates (EXERCISES.md, "What the check can tell you").
It says whether each number is filled in and in range, and gives a hint when
a number is one that a common wrong idea gives whatever the table. Your
teacher marks the values. Written answers are read by your teacher: the
check only sees that one is there.
"""

import json
import math
import os
import sys
import traceback

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.check\n")
    sys.exit(2)
if __name__ == "__main__":  # Ctrl-C at any moment, during the imports too: one line
    import signal
    signal.signal(signal.SIGINT, lambda *_: (sys.stderr.write("\ninterrupted\n"), os._exit(130)))
from exercises.problems import SETUP_FIX, SheetError, read_sheet  # noqa: E402

try:
    import torch
except Exception as e:  # ImportError, or a broken build: one line when run, else the error
    if __name__ != "__main__":
        raise
    sys.stderr.write(f"error: cannot import torch in {sys.executable} ({type(e).__name__}); "
                     f"{SETUP_FIX}\n")
    sys.exit(2)

from exercises import roster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

torch.set_num_threads(1)
MIN_WORDS = 20


# ------------------------------------------------------------ the library, reached only here
# The checks need loss.py's objectives for two properties ("inside dfpo_orth", "inside
# dfpo_min") and batching.py's schedulers as baselines for exercise 5. Every use of the
# library beyond the three functions students write is in the three helpers below.

def coefficients(name, batch, clip="none", max_len=None):
    """c_{i,t} = -d loss / d log pi_new by autograd through objectives.policy_loss, with the
    objective's own advantage estimator."""
    import loss
    from lab import estimators, objectives, residuals
    new, old, mask, r, grp = batch
    adv = estimators.advantages(r, grp, objectives.own_estimator(name)).double()
    new = new.clone().requires_grad_(True)
    counts = loss.step_counts(mask, adv, max_len)
    total, _ = objectives.policy_loss(
        objectives.LossBatch(new, old, mask, adv, grp, counts=counts),
        objectives.LossSettings(name, clip))
    return residuals.coefficients(total, new).detach()


def library_cut(name, group, adv, lengths, M, seed):
    """batching.py's scheduler ``name`` (shuffle, query) on one batch: the baselines."""
    import batching
    return [torch.as_tensor(mb, dtype=torch.long).flatten()
            for mb in getattr(batching, name)(group, adv, lengths, M,
                                              torch.Generator().manual_seed(seed))]


def student_function(ex):
    """The function an exercise asks for, looked up when called (tests may replace it)."""
    if ex in ("ex2", "ex3"):
        import loss
        return getattr(loss, {"ex2": "adv_orthogonal", "ex3": "min_replace"}[ex])
    if ex == "ex5":
        import batching
        return batching.query_balanced
    from exercises import ex6_buggy_loss
    return ex6_buggy_loss.dfpo_orth_loss


# ------------------------------------------------------------ small helpers

def T(*xs):
    return torch.tensor(xs, dtype=torch.float64)


def G(*xs):
    return torch.tensor(xs)


def centred(r, group):
    """r minus its group's mean, per group (dr_grpo's advantage)."""
    out = torch.zeros_like(r)
    for g in torch.unique(group):
        m = group == g
        out[m] = r[m] - r[m].mean()
    return out


def rows_of(group, gid):
    return (group == gid).nonzero().flatten().tolist()


def written(sheet, name):
    words = len(str(getattr(sheet, name, "") or "").split())
    assert words >= MIN_WORDS, f"{name}: {words} words; write your argument ({MIN_WORDS}+ words)"


def student(sheet):
    s = roster.canonical(getattr(sheet, "STUDENT", "") or "")
    assert s, "write your name or student id in STUDENT in exercises/sheet.py"
    return s


def shared_group(lengths, rewards, log_s=None, seed=0):
    """(new_logp, old_logp, mask, rewards, group) of one group whose token 0 is shared.

    Token 0 has the same history, the same pi_new and pi_old in every rollout
    (so the same ratio, here 1). Off-policy (log_s given), the other tokens of
    rollout i share the log-ratio that makes mean_t log rho_{i,t} = log_s[i]."""
    g = torch.Generator().manual_seed(seed)
    G_, T_ = len(lengths), max(lengths)
    lens = torch.tensor(lengths, dtype=torch.float64)
    mask = torch.arange(T_)[None] < lens[:, None]
    new = (torch.log(torch.rand(G_, T_, generator=g, dtype=torch.float64) * 0.9 + 0.05) * mask)
    new[:, 0] = new[0, 0]
    logr = torch.zeros(G_, T_, dtype=torch.float64)
    if log_s is not None:
        logr[:, 1:] = (torch.tensor(log_s, dtype=torch.float64) * lens / (lens - 1))[:, None]
    return (new, new - logr * mask, mask, torch.tensor(rewards, dtype=torch.float64),
            torch.zeros(G_, dtype=torch.long))


# ------------------------------------------------------------ calls: inputs and raw outputs
# A call is one input for the function under test: {"prop": the property it serves,
# "kind", "args", "where": the input in words, and what the kind needs}. ``evaluate`` runs
# it and returns raw outputs; ``verdicts`` turns calls and outputs into property lines.
# The marking tool runs ``evaluate`` in a sandbox (``serve``) and ``verdicts`` in its own
# process, so nothing a student's code prints or returns decides a verdict by itself.

def call(prop, kind, args, where, **extra):
    return dict(prop=prop, kind=kind, args=list(args), where=where, **extra)


def _fallback_projection(c):
    """Adv-Orthogonal for exercise 6's inputs only: w~ = P w with P given by the call."""
    adv, group, P = c["args"][3], c["args"][4], c["projection"]

    def adv_orthogonal(w, a, g):
        if not (torch.is_tensor(a) and torch.is_tensor(g) and a.shape == adv.shape
                and g.shape == group.shape and torch.equal(a.double(), adv.double())
                and torch.equal(g, group)):
            raise RuntimeError("loss.adv_orthogonal was called with advantages or groups "
                               "other than the loss's own")
        return P.to(w.dtype) @ w
    return adv_orthogonal


def evaluate(c, fn):
    """Run one call. Returns {"out": ..., ...} or {"error": "Type: message (file:line)",
    "stub": "exercise N" when the function is still a stub}."""
    args = [a.clone() if torch.is_tensor(a) else a for a in c["args"]]
    try:
        if c["kind"] == "cut":
            group, adv, lengths, M, seed = args
            mbs = fn(group, adv, lengths, M, torch.Generator().manual_seed(seed))
            if not isinstance(mbs, (list, tuple)):
                return {"out": None}
            return {"out": [torch.as_tensor(mb, dtype=torch.long).flatten() for mb in mbs]}
        if c["kind"] == "grad":
            w = args[0].clone().requires_grad_(True)
            out = fn(w, *args[1:])
            grad = None
            if torch.is_tensor(out) and out.requires_grad:
                (grad,) = torch.autograd.grad((out * c["v"].to(out.dtype)).sum(), w,
                                              allow_unused=True)
            return {"out": out.detach() if torch.is_tensor(out) else out, "grad": grad,
                    "fv": fn(c["v"].clone(), *[a.clone() for a in c["args"][1:]])}
        if c["kind"] == "loss_grad":
            import loss
            keep = loss.adv_orthogonal
            loss.adv_orthogonal = _fallback_projection(c)
            try:
                leaf = args[0].clone().requires_grad_(True)
                total = fn(leaf, *args[1:])
                (grad,) = torch.autograd.grad(total, leaf)
            finally:
                loss.adv_orthogonal = keep
            return {"value": float(total.detach()), "grad": grad}
        out = fn(*args)
        res = {"out": out.detach() if torch.is_tensor(out) else out, "inputs": args}
        if c["kind"] == "twice" and torch.is_tensor(out):
            again = fn(out.detach().clone(), *[a.clone() for a in c["args"][1:]])
            res["out2"] = again.detach() if torch.is_tensor(again) else again
        return res
    except Exception as e:  # the student's code raised: say where, in one line
        stub = stub_of(e)
        return {"error": str(e) if stub else describe(e), "stub": stub}


def describe(e):
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({os.path.relpath(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}"


def stub_of(e):
    text = str(e)
    if isinstance(e, NotImplementedError) and text.startswith("exercise "):
        return text.split(":")[0]
    return None


# ------------------------------------------------------------ exercise 2: Adv-Orthogonal

# 16 rows: groups 7, 3, 5 interleaved, group 11 of one row, group 2 whose advantages are
# small but not zero (|A|^2 = 0.0014: a guard must be at exactly 0, not at "small").
LABELS = (7, 3, 7, 5, 3, 5, 7, 3, 5, 7, 3, 5, 11, 2, 2, 2)


def random_batch(seed, centre=True, labels=LABELS, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    group = torch.tensor(labels)
    r = (torch.rand(len(labels), generator=g) < 0.5).double()
    adv = centred(r, group) if centre else torch.randn(len(labels), generator=g).double()
    if labels == LABELS:
        adv[13:16] = T(0.03, -0.02, -0.01)
    w = torch.rand(len(labels), generator=g).double() + 0.5
    return w.to(dtype), adv.to(dtype), group


def describe_batch(seed, centre):
    return (f"batch {seed} (16 rows: groups 7, 3, 5 interleaved, group 11 of one row, group 2 "
            f"with |A|^2 = 0.0014; A {'centred' if centre else 'not centred'})")


def ex2_cases():
    f = "hand examples"
    k = 0.35 / 1.5
    calls = [
        call(f, "once", (T(1.2, 0.9, 1, 2, 0.5), T(1, -1, 0, 0.5, -0.5), G(0, 0, 0, 1, 1)),
             "hand example: groups 0 = rows 0-2, 1 = rows 3-4", want=T(1.05, 1.05, 1, 1.25, 1.25)),
        call(f, "once", (T(1.2, 0.9, 0.6, 1.5, 1), T(0.5, 1, -0.5, -0.5, -0.5), G(5, 2, 5, 2, 2)),
             "hand example: group 5 = rows 0, 2; group 2 = rows 1, 3, 4",
             want=T(0.9, 0.9 + k, 0.9, 1.5 - 0.5 * k, 1 - 0.5 * k)),
        call(f, "once", (T(1, 2, .5), T(1, .5, 0), G(4, 4, 4)),
             "hand example: one group whose advantages 1, 0.5, 0 are not centred (use them as "
             "given)", want=T(-.6, 1.2, .5)),
    ]
    for seed in range(6):
        calls.append(call("orthogonal to A in every group", "twice",
                          random_batch(seed, centre=seed % 2 == 0),
                          describe_batch(seed, seed % 2 == 0)))
    group = G(0, 0, 0, 0, 1, 1, 1, 1)
    e = "edge cases"
    calls += [
        call(e, "once", (T(1.3, 1.3, 1.3, 1.3, .7, .7, .7, .7),
                         centred(T(1, 0, 1, 0, 1, 1, 1, 0), group), group),
             "w constant in each group (on-policy)", want="same as w"),
        call(e, "once", (T(1.2, .8, 1.1, 1, .9, 1.3), T(0, 0, 0, .5, -.25, -.25),
                         G(0, 0, 0, 1, 1, 1)),
             "group 0 (rows 0-2) has advantages all 0", want="keeps w where A = 0"),
        call(e, "once", (T(1.2, .8, 1.1, 0.9), T(0.002, -0.001, -0.001, 0.5), G(6, 6, 6, 1)),
             "group 6 (rows 0-2) with |A|^2 = 0.000006 and group 1 of one row",
             want="orthogonal"),
    ]
    w, adv, group = random_batch(11, centre=False, dtype=torch.float32)
    calls.append(call("keeps the dtype of w", "once", (w, adv, group),
                      "float32 inputs (w, A), 16 rows"))
    for seed in (20, 21):
        w, adv, group = random_batch(seed, centre=seed == 20)
        v = torch.rand(len(w), generator=torch.Generator().manual_seed(seed + 100)).double()
        calls.append(call("differentiable in w", "grad", (w, adv, group),
                          describe_batch(seed, seed == 20), v=v))
    return calls


def tensor_like(x, shape, dtype, what):
    assert torch.is_tensor(x) and tuple(x.shape) == tuple(shape), \
        f"{what}: not a tensor of shape {tuple(shape)}"
    assert x.dtype == dtype, f"{what}: a {str(x.dtype)[6:]} tensor for {str(dtype)[6:]} inputs"
    assert bool(torch.isfinite(x).all()), f"{what}: holds NaN or inf"


def close(got, want, what, tol=1e-9):
    assert bool(((got.double() - want.double()).abs() <= tol * (1 + want.double().abs())).all()), \
        f"{what}: wrong values"


def group_ids(group):
    return sorted(set(group.tolist()), key=group.tolist().index)


def orthogonal_everywhere(w, adv, out, where, tol=1e-10):
    """sum_i A_i w~_i = 0 and w~ - w along A, in every group (exact zero-norm groups keep w)."""
    group = where["group"]
    for gid in group_ids(group):
        m = group == gid
        a, d = adv[m].double(), (out[m] - w[m]).double()
        rows = rows_of(group, gid)
        label = f"{where['text']}, group {gid} (rows {rows})"
        if float(a @ a) == 0:
            assert bool((d.abs() <= tol).all()), f"{label}: A is all 0 there, so w~ must be w"
            continue
        assert abs(float(a @ out[m].double())) <= tol * (1 + float(out[m].double().abs().sum())), \
            f"{label}: sum_i A_i w~_i is not 0"
        assert bool(((d - (d @ a) / (a @ a) * a).abs() <= tol * (1 + d.abs().max())).all()), \
            f"{label}: w~ - w is not a multiple of A"


def ex2_hand(pairs):
    for c, r in pairs:
        tensor_like(r["out"], c["args"][0].shape, c["args"][0].dtype, c["where"])
        close(r["out"], c["want"], c["where"], tol=1e-6)


def ex2_orthogonal(pairs):
    for c, r in pairs:
        w, adv, group = c["args"]
        tensor_like(r["out"], w.shape, w.dtype, c["where"])
        orthogonal_everywhere(w, adv, r["out"], {"group": group, "text": c["where"]})
        assert torch.is_tensor(r.get("out2")) and r["out2"].shape == r["out"].shape, \
            f"{c['where']}: applied to its own output, it gives no tensor of the same shape"
        close(r["out2"], r["out"], f"{c['where']}: applied twice, the result changes", tol=1e-9)


def ex2_edges(pairs):
    for c, r in pairs:
        w, adv, group = c["args"]
        tensor_like(r["out"], w.shape, w.dtype, c["where"])
        if c["want"] == "same as w":
            close(r["out"], w, f"{c['where']}: w~ must equal w")
        orthogonal_everywhere(w, adv, r["out"], {"group": group, "text": c["where"]})


def inputs_unchanged(pairs):
    for c, r in pairs:
        if "inputs" in r and not all(
                torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape
                and a.dtype == b.dtype and torch.equal(a, b)
                for a, b in zip(r["inputs"], c["args"]) if torch.is_tensor(b)):
            raise AssertionError(f"{c['where']}: the inputs were modified")


def ex2_dtype(pairs):
    for c, r in pairs:
        w, adv, group = c["args"]
        tensor_like(r["out"], w.shape, w.dtype, c["where"])
        orthogonal_everywhere(w, adv, r["out"], {"group": group, "text": c["where"]}, tol=1e-5)


def ex2_gradient(pairs):
    for c, r in pairs:
        w = c["args"][0]
        tensor_like(r["out"], w.shape, w.dtype, c["where"])
        assert torch.is_tensor(r.get("grad")), (
            f"{c['where']}: w~ carries no gradient back to w (detached, or rebuilt from numbers);"
            " a linear map of w passes its gradient on")
        assert torch.is_tensor(r.get("fv")) and r["fv"].shape == w.shape, \
            f"{c['where']}: applied to v, it gives no tensor of w's shape"
        close(r["grad"], r["fv"], f"{c['where']}: the gradient of sum_i v_i w~_i is not the "
              "transform of v (the projection is linear and symmetric)", tol=1e-9)


# ------------------------------------------------------------ exercise 3: Min-Replace

def ex3_cases():
    calls = [call("hand example", "once",
                  (T(1.2, 0.9, 0.6, 1.5, 1), T(0.5, 0.5, -0.5, -0.5, 0), G(5, 2, 5, 2, 2)),
                  "hand example: group 5 = rows 0, 2; group 2 = rows 1, 3, 4",
                  want=T(0.6, 0.9, 0.6, 0.9, 0.9))]
    for seed in range(5):
        calls.append(call("the group minimum", "once", random_batch(seed, centre=seed % 2 == 0),
                          describe_batch(seed, seed % 2 == 0)))
    calls.append(call("the group minimum", "once",
                      (T(1.3, 1.3, .7, .7), T(0.5, -0.5, 0.5, -0.5), G(1, 1, 0, 0)),
                      "w constant in each group", want=T(1.3, 1.3, .7, .7)))
    w, adv, group = random_batch(12, dtype=torch.float32)
    calls.append(call("keeps the dtype of w", "once", (w, adv, group),
                      "float32 inputs (w, A), 16 rows"))
    return calls


def group_minimum(w, group, out, where):
    for gid in group_ids(group):
        m = group == gid
        label = f"{where}, group {gid} (rows {rows_of(group, gid)})"
        assert len(set(out[m].tolist())) == 1, f"{label}: w~ is not one value per group"
        assert bool((out[m] <= w[m]).all()), f"{label}: some w~_i is larger than w_i"
        assert bool((w[m] == out[m][0]).any()), f"{label}: w~ is not the w of any member"


def ex3_hand(pairs):
    for c, r in pairs:
        tensor_like(r["out"], c["args"][0].shape, c["args"][0].dtype, c["where"])
        close(r["out"], c["want"], c["where"], tol=1e-12)


def ex3_minimum(pairs):
    for c, r in pairs:
        w, adv, group = c["args"]
        tensor_like(r["out"], w.shape, w.dtype, c["where"])
        group_minimum(w, group, r["out"], c["where"])
        if "want" in c:
            close(r["out"], c["want"], f"{c['where']}: w~ must equal w", tol=0)


ex3_dtype = ex3_minimum


# ------------------------------------------------------------ exercise 5: query_balanced

def make_batch(seed, B=8, G_=4):
    """B groups x G rollouts in shuffled order; each group has its own success rate."""
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(B, G_, generator=g) < torch.rand(B, 1, generator=g)).double().flatten()
    perm = torch.randperm(B * G_, generator=g)
    group_ids_ = torch.arange(B).repeat_interleave(G_)[perm] * 7 + 3
    return group_ids_, centred(rewards[perm], group_ids_), torch.randint(3, 9, (B * G_,),
                                                                         generator=g)


LAYOUTS = ((8, 4, 1), (8, 4, 2), (8, 4, 3), (8, 4, 8), (5, 3, 2), (6, 5, 4))


def ex5_cases(base=0):
    """``base`` shifts every batch seed: 0 for this check, a secret one for the marker."""
    calls = []
    for B, Gs, M in LAYOUTS:
        for seed in range(5):
            calls.append(call("a valid whole-group cut", "cut",
                              (*make_batch(base + seed, B, Gs), M, seed),
                              f"{B} groups x {Gs}, M = {M}, batch {seed}"))
    calls += [call("the same seed, the same cut", "cut", (*make_batch(base), 4, 3),
                   f"8 groups x 4, M = 4, batch 0, seed 3 (call {i + 1} of 2)") for i in range(2)]
    for M in (2, 4):
        for seed in range(200):
            calls.append(call("beats shuffle and query", "cut", (*make_batch(base + 1000 + seed),
                                                                 M, seed),
                              f"M = {M}, batch {seed} of 200 (8 groups x 4)"))
    return calls


def valid_cut(c, r):
    group, adv, lengths, M, seed = c["args"]
    mbs = r["out"]
    assert isinstance(mbs, list) and len(mbs) == M, \
        f"{c['where']}: not a list of {M} index tensors"
    assert all(len(mb) > 0 for mb in mbs), f"{c['where']}: a mini-batch is empty"
    assert sorted(torch.cat(mbs).tolist()) == list(range(len(group))), \
        f"{c['where']}: not every rollout exactly once"
    owner = {}
    for k, mb in enumerate(mbs):
        for gid in group[mb].tolist():
            assert owner.setdefault(gid, k) == k, \
                f"{c['where']}: a group is split across mini-batches"
    return mbs


def ex5_valid(pairs):
    for c, r in pairs:
        mbs = valid_cut(c, r)
        group, adv, lengths, M, seed = c["args"]
        sizes = sorted(len(torch.unique(group[mb])) for mb in mbs)
        base = sorted(len(torch.unique(group[mb]))
                      for mb in library_cut("query", group, adv, lengths, M, seed))
        assert sizes == base, \
            f"{c['where']}: the numbers of groups per mini-batch are not those of query"


def ex5_same(pairs):
    (c, a), (_, b) = pairs
    valid_cut(c, a)
    valid_cut(c, b)
    assert [x.tolist() for x in a["out"]] == [x.tolist() for x in b["out"]], \
        f"{c['where'].split(' (')[0]}: the same batch and the same seed give different cuts"


def sign_spread(mbs, adv):
    P = [int((adv[mb] > 0).sum()) for mb in mbs]
    N = [int((adv[mb] < 0).sum()) for mb in mbs]
    return (max(P) - min(P)) + (max(N) - min(N))


def ex5_spread(pairs):
    for M in (2, 4):
        spread = dict.fromkeys(("yours", "shuffle", "query"), 0.0)
        these = [(c, r) for c, r in pairs if c["args"][3] == M]
        for c, r in these:
            group, adv, lengths, _, seed = c["args"]
            spread["yours"] += sign_spread(valid_cut(c, r), adv) / len(these)
            for name in ("shuffle", "query"):
                spread[name] += sign_spread(library_cut(name, group, adv, lengths, M, seed),
                                            adv) / len(these)
        assert spread["yours"] < min(spread["shuffle"], spread["query"]), (
            f"M = {M}, 200 batches of 8 groups x 4: mean sign spread "
            + ", ".join(f"{k} {v:.2f}" for k, v in spread.items()))


# ------------------------------------------------------------ exercise 6: the buggy loss

# Adv-Orthogonal of this check's exercise 6 inputs, as matrices (w~ = P w), times 4: the
# check measures exercise 6 with these, never with your exercise 2, so that a wrong or
# unsolved exercise 2 cannot change the diagnosis. They hold for these inputs only.
P_ONE_GROUP = [[3, 1, -1, 1], [1, 3, 1, -1], [-1, 1, 3, 1], [1, -1, 1, 3]]
P_TWO_GROUPS = [[3, 0, 1, 0, 1, 0, -1, 0], [0, 3, 0, -1, 0, 1, 0, 1], [1, 0, 3, 0, -1, 0, 1, 0],
                [0, -1, 0, 3, 0, 1, 0, 1], [1, 0, -1, 0, 3, 0, 1, 0], [0, 1, 0, 1, 0, 3, 0, -1],
                [-1, 0, 1, 0, 1, 0, 3, 0], [0, 1, 0, 1, 0, -1, 0, 3]]
EX6_SAYS = ("exercise 6 measures with the check's own Adv-Orthogonal for these inputs, never "
            "with your exercise 2: solved or not, it cannot change this diagnosis")


def ex6_one_group(off_policy):
    new, old, mask, r, grp = shared_group(
        (2, 3, 4, 5), (1.0, 0.0, 1.0, 0.0), log_s=(0.1, -0.05, 0.08, -0.12) if off_policy else None)
    old[:, 0] = new[:, 0] - (0.2 if off_policy else 0.0)
    return call("the specified gradient", "loss_grad", (new, old, mask, r - r.mean(), grp, 5),
                "off-policy" if off_policy else "on-policy",
                projection=torch.tensor(P_ONE_GROUP, dtype=torch.float64) / 4)


def ex6_two_groups():
    """Two groups with interleaved rows (ids 9 and 4), off-policy, max_len = 8 above the
    longest completion (5)."""
    a = shared_group((2, 5, 3, 4), (1.0, 0.0, 0.0, 1.0), log_s=(0.09, -0.06, 0.12, -0.03), seed=2)
    b = shared_group((4, 2, 5, 3), (1.0, 1.0, 0.0, 0.0), log_s=(-0.08, 0.05, 0.02, 0.11), seed=3)
    order = [0, 4, 1, 5, 2, 6, 3, 7]  # rows of the two groups interleaved
    new, old, mask, r, _ = (torch.cat(pair)[order] for pair in zip(a, b))
    group = torch.tensor([9, 4] * 4)
    old[:, 0] = new[:, 0] - 0.15
    return call("several groups, L_max above the longest", "loss_grad",
                (new, old, mask, centred(r, group), group, 8),
                "two interleaved groups, off-policy, max_len 8",
                projection=torch.tensor(P_TWO_GROUPS, dtype=torch.float64) / 4)


def ex6_cases():
    return [ex6_one_group(False), ex6_one_group(True), ex6_two_groups()]


def ex6_spec(c):
    """(specified coefficients [N, T], specified loss value) of one call."""
    new, old, mask, adv, group, max_len = c["args"]
    s = (((new - old) * mask).sum(1) / mask.sum(1)).exp()
    w = c["projection"] @ s
    spec = (w * adv / (len(adv) * max_len))[:, None] * mask
    return spec, float(-(spec * new).sum())


def ex6_check(pairs):
    for c, r in pairs:
        new, group = c["args"][0], c["args"][4]
        spec, value = ex6_spec(c)
        assert isinstance(r.get("value"), float) and math.isfinite(r["value"]), \
            f"{c['where']}: the loss is not a finite number"
        assert abs(r["value"] - value) < 1e-6, \
            f"{c['where']}: the loss value is not the specified one"
        grad = r.get("grad")
        assert torch.is_tensor(grad) and grad.shape == new.shape, \
            f"{c['where']}: no gradient of the shape of new_logp"
        assert bool(((-grad.double() - spec).abs() <= 1e-7).all()), \
            f"{c['where']}: the coefficients are not the specified ones"
        for gid in group_ids(group):
            assert abs(float(-grad[group == gid, 0].sum())) < 1e-7, \
                f"{c['where']}: group {gid}'s shared token does not cancel"


def show_ex6(fn):
    print(EX6_SAYS)
    print("one group: rewards 1, 0, 1, 0; lengths 2, 3, 4, 5; token 0 is shared by all four "
          "rollouts")
    for c in ex6_cases()[:2]:
        r = evaluate(c, fn)
        if "error" in r:
            print(f"\n{c['where']}: no measurements: {r['error']}")
            continue
        spec, spec_value = ex6_spec(c)
        coef = -r["grad"]
        print(f"\n{c['where']}:  loss value {r['value']:+.6f}  (specification {spec_value:+.6f})")
        print("  rollout   c of the shared token   specified   |  c summed over the rollout   "
              "specified")
        for i in range(len(coef)):
            print(f"  {i + 1:>7}   {float(coef[i, 0]):>+21.6f}   {float(spec[i, 0]):>+9.6f}   |"
                  f"  {float(coef[i].sum()):>+26.6f}   {float(spec[i].sum()):>+9.6f}")
        res = float(coef[:, 0].sum().abs() / coef[:, 0].abs().sum().clamp(min=1e-300))
        print(f"  shared-token residual: {res:.4f}   (specification: 0)")


# ------------------------------------------------------------ the library integration

def off_policy_groups(shared_log_ratio):
    """Two groups (ids 4 and 9) whose token 0 is shared and whose token ratio is
    exp(shared_log_ratio)."""
    a = shared_group((2, 3, 4, 5), (1.0, 0.0, 1.0, 0.0), log_s=(.1, -.05, .08, -.12), seed=0)
    b = shared_group((5, 4, 3, 2), (1.0, 1.0, 0.0, 0.0), log_s=(-.07, .11, .02, .09), seed=1)
    new, old, mask, r, _ = (torch.cat(pair) for pair in zip(a, b))
    old[:, 0] = new[:, 0] - shared_log_ratio
    return new, old, mask, r, torch.tensor([4] * 4 + [9] * 4)


def cancels_inside(name):
    """Run locally only: the library's objective ``name`` built on your function."""
    def check(pairs):
        for clip, x in (("none", 0.15), ("sym", 0.15), ("sym", 0.3)):
            batch = off_policy_groups(x)
            c = coefficients(name, batch, clip)
            where = f"{name}, clip={clip}, shared log-ratio {x}"
            assert float(c[:, 0].abs().sum()) > 1e-4, f"{where}: the shared token has no weight"
            for gid in (4, 9):
                m = batch[4] == gid
                assert abs(float(c[m, 0].sum())) <= 1e-6 * float(c[m, 0].abs().sum()), \
                    f"{where}: the shared token's coefficients do not sum to 0 in group {gid}"
    return check


# ------------------------------------------------------------ exercises 1, 4, 7: the numbers

KEYS = {  # the numbers each exercise asks for (exercises/sheet.py)
    "EX1": ("grpo_residual", "grpo_net", "grpo_coef_k", "dr_grpo_coef_k"),
    "EX4": ("gspo_residual", "luspo_residual", "orth_delta_k"),
    "EX7": ("tokens", "template", "plain_tokens"),
}
COUNTS = ("tokens", "template", "plain_tokens")  # whole numbers, marked exactly

# Hints for values that a common wrong idea gives whatever the table, and that are never
# right on a table your teacher hands out. They name an idea to re-check, never a value.
HINTS = {
    ("EX1", "grpo_residual", 0.0): "the advantages sum to 0; do the coefficients Â_i/(N L_i)?",
    ("EX1", "grpo_residual", 1.0): "1 means every copy pushes the same way; do they here?",
    ("EX4", "gspo_residual", 0.0): "gspo weighs each rollout by s_i/L_i; do those cancel?",
    ("EX4", "gspo_residual", 1.0): "1 means every copy pushes the same way; do they here?",
    ("EX4", "luspo_residual", 0.0): "luspo has no 1/L_i, but are its weights s_i equal?",
    ("EX4", "luspo_residual", 1.0): "1 means every copy pushes the same way; do they here?",
    ("EX4", "orth_delta_k", 0.0): "off-policy the s_i differ: does Adv-Orthogonal leave them?",
    ("EX7", "template", 1.0): "EOS is one template token; which other scratchpad tokens are "
                              "format, not digits?",
}


def numbers(ex):
    """Filled in, in range, and none of the values HINTS knows to be wrong."""
    def check(env):
        sheet, r = env["sheet"], env.get("roster")
        name, values = student(sheet), getattr(sheet, ex, None)
        assert isinstance(values, dict), f"{ex} is missing from your sheet"
        for key in KEYS[ex]:
            got = values.get(key)
            assert got is not None, f"{ex}[{key!r}] is not filled in yet"
            assert isinstance(got, (int, float)) and not isinstance(got, bool) and (
                isinstance(got, int) or math.isfinite(got)), f"{ex}[{key!r}] is not a number"
            if key in COUNTS:
                assert got == int(got) and got >= 1, f"{ex}[{key!r}] is a count: a whole number"
            if key.endswith("residual"):
                assert 0 <= got <= 1, f"{ex}[{key!r}]: a residual lies between 0 and 1"
            hint = HINTS.get((ex, key, got))  # 1 and 1.0 are one key; 10**400 has no float
            assert hint is None, f"{ex}[{key!r}] = {got} is not right on your table; hint: {hint}"
        if ex == "EX7":
            assert values["template"] < values["tokens"], \
                "EX7: the template tokens are some of the tokens, not all"
        assert r is not None, ("this copy has no class roster (exercises/roster.json), so these "
                               "are not your teacher's tables")
        near = roster.near(name, r["students"])
        assert roster.find(name, r["students"]), (
            f"STUDENT = {name!r} is not on this class's roster; write your name as your teacher "
            "spelled it" + (f" (did you mean {near!r}?)" if near else ""))
    return check


def prose(name):
    return lambda env: written(env["sheet"], name)


# ------------------------------------------------------------ the checks, by exercise

WRITTEN = "written answer (read by your teacher)"
NUMBERS = "the numbers: filled in and in range (your teacher marks their values)"
CASES = {"ex2": ex2_cases, "ex3": ex3_cases, "ex5": ex5_cases, "ex6": ex6_cases}
PROPS = {  # (property, how it is judged from its calls; "local" runs the library here)
    "ex2": [("hand examples", ex2_hand), ("orthogonal to A in every group", ex2_orthogonal),
            ("edge cases", ex2_edges), ("keeps the dtype of w", ex2_dtype),
            ("differentiable in w", ex2_gradient),
            ("leaves its inputs unchanged", inputs_unchanged),
            ("inside dfpo_orth, off-policy", ("local", cancels_inside("dfpo_orth")))],
    "ex3": [("hand example", ex3_hand), ("the group minimum", ex3_minimum),
            ("keeps the dtype of w", ex3_dtype), ("leaves its inputs unchanged", inputs_unchanged),
            ("inside dfpo_min, off-policy", ("local", cancels_inside("dfpo_min")))],
    "ex5": [("a valid whole-group cut", ex5_valid), ("the same seed, the same cut", ex5_same),
            ("beats shuffle and query", ex5_spread)],
    "ex6": [("the specified gradient", ex6_check),
            ("several groups, L_max above the longest", ex6_check)],
}
EVERY_CALL = ("leaves its inputs unchanged",)
SHEET = {
    "ex1": [(NUMBERS, numbers("EX1")), (WRITTEN, prose("EX1_WHY"))],
    "ex3": [(WRITTEN, prose("EX3_WHY"))],
    "ex4": [(NUMBERS, numbers("EX4")), (WRITTEN, prose("EX4_WHY"))],
    "ex6": [(WRITTEN, prose("EX6_WHY"))],
    "ex7": [(NUMBERS, numbers("EX7")), (WRITTEN, prose("EX7_WHY"))],
}
CHECKS = {ex: [w for w, _ in PROPS.get(ex, [])] + [w for w, _ in SHEET.get(ex, [])]
          for ex in ("ex1", "ex2", "ex3", "ex4", "ex5", "ex6", "ex7")}


def judge(ex, fn, pairs):
    """None when the property holds on these (call, result) pairs, else why not."""
    for c, r in pairs:
        if "error" in r:
            stub = r.get("stub")
            if stub and stub != f"exercise {ex[2:]}":
                return f"needs {stub} solved first"
            return f"not written yet ({r['error']})" if stub else r["error"]
    try:
        fn(pairs)
        return None
    except AssertionError as e:
        return str(e)
    except Exception as e:  # a stub reached by the library, or an output no property expected
        stub = stub_of(e)
        if stub:
            return (f"needs {stub} solved first" if stub != f"exercise {ex[2:]}"
                    else f"not written yet ({e})")
        return f"the outputs could not be checked ({type(e).__name__}: {e})"


def verdicts(ex, calls, results, local=True):
    """[(property, None or why)] of an implementation exercise from its calls' results.
    ``local``: also the properties that run the library here (the student's own check)."""
    out = []
    for what, fn in PROPS[ex]:
        if isinstance(fn, tuple):
            if local:
                out.append((what, judge(ex, fn[1], [])))
            continue
        pairs = [(c, r) for c, r in zip(calls, results)
                 if c["prop"] == what or what in EVERY_CALL]
        out.append((what, judge(ex, fn, pairs)))
    return out


def run(ex, env):
    """[(what, None if it holds else why not)] for one exercise, in this process."""
    out = []
    if ex in PROPS:
        fn = env.get("ex6") if ex == "ex6" else None
        try:
            fn = fn or student_function(ex)
        except Exception as e:  # e.g. a loss.py that does not import
            fn = _raiser(e)
        calls = CASES[ex]()
        out += verdicts(ex, calls, [evaluate(c, fn) for c in calls])
    for what, check in SHEET.get(ex, []):
        try:
            check(env)
            out.append((what, None))
        except AssertionError as e:
            out.append((what, str(e)))
    return out


def _raiser(e):
    def fn(*args):
        raise e
    return fn


# ------------------------------------------------------------ the marker's side: serve

REQUEST_LIMIT = 16 << 20
DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
          "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
MAX_ELEMENTS = 1 << 20


def encode(x):
    """Outputs as JSON: tensors as {dtype, shape, data}, anything else by its type's name."""
    if torch.is_tensor(x):
        x = x.detach()
        name = str(x.dtype).replace("torch.", "")
        if name not in DTYPES or x.numel() > MAX_ELEMENTS:
            return {"type": f"tensor of {name}, {x.numel()} elements"}
        return {"dtype": name, "shape": list(x.shape), "data": x.flatten().tolist()}
    if isinstance(x, (list, tuple)):
        return [encode(v) for v in x[:4096]]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return {"type": type(x).__name__}
    if isinstance(x, (int, float)):
        return float(x) if isinstance(x, float) else int(x)
    return {"type": type(x).__name__}


class Opaque:
    """An output that was not a tensor or a number: only its type's name came back."""

    def __init__(self, name):
        self.name = str(name)[:60]

    def __repr__(self):
        return f"<{self.name}>"


def decode(o, depth=0):
    """The inverse of ``encode``, strict: anything else raises ValueError."""
    if depth > 4:
        raise ValueError("nested too deeply")
    if isinstance(o, bool):
        raise ValueError("a bare boolean")
    if isinstance(o, (int, float)):
        return o
    if isinstance(o, list):
        if len(o) > 4096:
            raise ValueError("a list too long")
        return [decode(v, depth + 1) for v in o]
    if isinstance(o, dict) and set(o) == {"type"} and isinstance(o["type"], str):
        return Opaque(o["type"])
    if not (isinstance(o, dict) and set(o) == {"dtype", "shape", "data"}
            and o["dtype"] in DTYPES and isinstance(o["shape"], list) and len(o["shape"]) <= 4
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_ELEMENTS
                    for n in o["shape"]) and isinstance(o["data"], list)):
        raise ValueError("not an encoded tensor")
    size = math.prod(o["shape"])
    if size != len(o["data"]) or size > MAX_ELEMENTS or not all(
            isinstance(v, (int, float)) for v in o["data"]):
        raise ValueError("a tensor whose data do not match its shape")
    return torch.tensor(o["data"], dtype=DTYPES[o["dtype"]]).reshape(o["shape"])


RESULT_KEYS = {"out", "out2", "grad", "fv", "inputs", "value", "error", "stub"}


def decode_result(o):
    if not (isinstance(o, dict) and set(o) <= RESULT_KEYS):
        raise ValueError("not a result")
    r = {}
    for k, v in o.items():
        if k in ("error", "stub"):
            if not (v is None or isinstance(v, str)):
                raise ValueError("a malformed error")
            r[k] = None if v is None else clean(v)
        elif k == "value":
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ValueError("a value that is not a number")
            r[k] = float(v)
        else:
            r[k] = None if v is None else decode(v)
    return r


def clean(text, limit=160):
    """Text from a student's process made safe to print in one line."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def encode_calls(calls):
    return [{k: encode(v) if k in ("args", "v", "projection", "want") and not isinstance(v, str)
             else v for k, v in c.items()} for c in calls]


def decode_calls(raw):
    return [{k: decode(v) if k in ("args", "v", "projection", "want") and not isinstance(v, str)
             else v for k, v in c.items()} for c in raw]


def serve():
    """The marking tool's child (exercises/answers/mark.py), inside a sandbox: read one
    request from stdin, {"ex", "calls"} or {"parts": [{"ex", "calls"}, ...]} (one child
    for several exercises: torch starts once), run the student's function on every call,
    and write the raw outputs as one JSON document. No verdict is formed here."""
    request = json.loads(sys.stdin.buffer.read(REQUEST_LIMIT))
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the student's code prints goes to stderr, not to the results
    parts = request["parts"] if "parts" in request else [request]
    out = [serve_one(part["ex"], decode_calls(part["calls"])) for part in parts]
    results.write(json.dumps({"results": out if "parts" in request else out[0]}))
    results.flush()
    os._exit(0)


def serve_one(ex, calls):
    """The encoded results of one exercise's calls (``serve``)."""
    try:
        fn = student_function(ex)
    except BaseException as e:  # a module that does not import: every call says why
        why = clean(f"importing it failed: {type(e).__name__}" + (f": {e}" if str(e) else ""))
        fn = None
    out = []
    for c in calls:
        if fn is None:
            out.append({"error": why, "stub": None})
            continue
        try:
            r = evaluate(c, fn)
        except BaseException as e:  # SystemExit and friends from the student's code
            r = {"error": f"{type(e).__name__}: {e}", "stub": None}
        out.append({k: (v if k in ("error", "stub") else encode(v)) for k, v in r.items()})
    return out


# ------------------------------------------------------------ the command line

HELP = """usage: python -m exercises.check [EXERCISE ...]

Check your work on the exercises of EXERCISES.md: every exercise, or those named
(ex1 ... ex7). Exit status 0 when every property holds, 1 when one does not.
"""


def main(argv):
    if argv in (["--help"], ["-h"]):
        print(HELP, end="")
        return 0
    if len(set(argv)) < len(argv):
        print("error: an exercise is named twice; name each once", file=sys.stderr)
        return 2
    todo = argv or list(CHECKS)
    bad = [a for a in todo if a not in CHECKS]
    if bad:
        print(f"error: unknown exercise {bad[0]!r}; choose from {', '.join(CHECKS)}",
              file=sys.stderr)
        return 2
    try:
        sheet = read_sheet(os.path.join(HERE, "sheet.py"))
        r = roster.load()
    except (SheetError, roster.RosterError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = {"sheet": sheet, "roster": r}
    failed = 0
    for ex in todo:
        if ex == "ex6":
            try:
                show_ex6(student_function("ex6"))
            except Exception as e:  # an ex6 file that does not import: the FAIL lines say so
                print(f"(no measurements: {clean(describe(e))})")
            print()
        results = run(ex, env)
        failed += sum(why is not None for _, why in results)
        for what, why in results:
            print(f"{ex}  {'ok  ' if why is None else 'FAIL'}  {what}"
                  + ("" if why is None else f": {why}"))
    print("all hold" if not failed else f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the reader (head, less) stopped early: nothing is wrong
        os._exit(0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
