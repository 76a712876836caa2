"""Checks for the classroom exercises of EXERCISES.md.

    python -m exercises.check ex2      # one exercise
    python -m exercises.check          # all of them

Each line names a property and the input it was tested on. A failing line
says what does not hold there; it never prints the value or the option that
would be right. Exit status: 0 every property holds, 1 something does not
(or is not written yet), 2 a command line this script does not take.

Implementation exercises (2, 3, 5) test the library function itself
(loss.adv_orthogonal, loss.min_replace, batching.query_balanced): you write
it in place. Number exercises (1, 4, 7) read exercises/sheet.py as data (it
never runs) and compare a fingerprint of your numbers with the class roster
(exercises/roster.py): one yes or no per exercise, never which number, and
nothing here computes the expected numbers. Written answers are read by your
teacher: the check only sees that one is there.
"""

import math
import os
import sys
import traceback

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.check\n")
    sys.exit(2)
import torch
import batching
import loss
from exercises import roster
from exercises.problems import SheetError, read_sheet
from lab import batch_stats, estimators, objectives, residuals

HERE = os.path.dirname(os.path.abspath(__file__))

torch.set_num_threads(1)
MIN_WORDS = 20


# ------------------------------------------------------------ helpers

def shared_group(lengths, rewards, log_s=None, seed=0):
    """(new_logp, old_logp, mask, rewards, group) of one group whose token 0 is shared.

    Token 0 has the same history, the same pi_new and pi_old in every rollout
    (so the same ratio, here 1). Off-policy (log_s given), the other tokens of
    rollout i share the log-ratio that makes mean_t log rho_{i,t} = log_s[i]."""
    g = torch.Generator().manual_seed(seed)
    G, T = len(lengths), max(lengths)
    lens = torch.tensor(lengths, dtype=torch.float64)
    mask = torch.arange(T)[None] < lens[:, None]
    new = (torch.log(torch.rand(G, T, generator=g, dtype=torch.float64) * 0.9 + 0.05) * mask)
    new[:, 0] = new[0, 0]
    logr = torch.zeros(G, T, dtype=torch.float64)
    if log_s is not None:
        logr[:, 1:] = (torch.tensor(log_s, dtype=torch.float64) * lens / (lens - 1))[:, None]
    return (
        new,
        new - logr * mask,
        mask,
        torch.tensor(rewards, dtype=torch.float64),
        torch.zeros(G, dtype=torch.long),
    )


def coefficients(name, batch, clip="none", max_len=None, adv=None):
    """c_{i,t} = -d loss / d log pi_new by autograd through objectives.policy_loss."""
    new, old, mask, r, grp = batch
    if adv is None:
        adv = estimators.advantages(r, grp, objectives.own_estimator(name)).double()
    new = new.clone().requires_grad_(True)
    counts = loss.step_counts(mask, adv, max_len)
    total, _ = objectives.policy_loss(objectives.LossBatch(new, old, mask, adv, grp, counts=counts),
                             objectives.LossSettings(name, clip))
    return residuals.coefficients(total, new).detach()


def written(sheet, name):
    words = len(str(getattr(sheet, name)).split())
    assert words >= MIN_WORDS, f"{name}: {words} words; write your argument ({MIN_WORDS}+ words)"


def student(sheet):
    s = roster.canonical(sheet.STUDENT)
    assert s, "write your name or student id in STUDENT in exercises/sheet.py"
    return s


# ------------------------------------------------------------ exercise 1: grpo by hand

KEYS = {  # the numbers each exercise asks for (exercises/sheet.py)
    "EX1": ("grpo_residual", "grpo_net", "grpo_coef_k", "dr_grpo_coef_k"),
    "EX4": ("gspo_residual", "luspo_residual", "orth_w_k"),
    "EX7": ("tokens", "template", "plain_share"),
}


def numbers(ex):
    """One yes or no for all the numbers of an exercise, from the class roster's
    fingerprint (roster.py): the check holds no key and never says which number is off."""
    def check(env):
        sheet, r = env["sheet"], env.get("roster")
        name, values = student(sheet), getattr(sheet, ex, None)
        assert isinstance(values, dict), f"{ex} is missing from your sheet"
        for key in KEYS[ex]:
            got = values.get(key)
            assert got is not None, f"{ex}[{key!r}] is not filled in yet"
            assert isinstance(got, (int, float)) and not isinstance(got, bool) and \
                math.isfinite(got), f"{ex}[{key!r}] is not a number"
        assert r is not None, ("cannot be checked in this copy: it has no class roster "
                               "(exercises/roster.json); your teacher marks the numbers")
        assert name in r["students"], (f"STUDENT = {name!r} is not on this class's roster; write "
                                       "your name as your teacher spelled it")
        want = r["students"][name].get(ex)
        assert isinstance(want, str), f"the roster holds no entry for {ex}; ask your teacher"
        assert roster.all_right(name, ex, {k: values[k] for k in KEYS[ex]}, want,
                                r["iterations"]), (
            f"{ex}: not all {len(KEYS[ex])} numbers are right for your table (3 significant "
            "digits, one unit of the third either way); the check does not say which")
    return check


# ------------------------------------------------------------ exercise 2: Adv-Orthogonal

def T(*xs):
    return torch.tensor(xs, dtype=torch.float64)


def G(*xs):
    return torch.tensor(xs)


def same(got, want, what):
    assert (
        torch.is_tensor(got) and got.shape == want.shape
    ), f"{what}: not a tensor of shape {tuple(want.shape)}"
    assert torch.allclose(got.double(), want.double(), atol=1e-6), f"{what}: wrong values"


def ex2_hand(env):
    f = loss.adv_orthogonal
    same(
        f(T(1.2, 0.9, 1, 2, 0.5), T(1, -1, 0, 0.5, -0.5), G(0, 0, 0, 1, 1)),
        T(1.05, 1.05, 1, 1.25, 1.25),
        "hand example: groups 0 = rows 0-2, 1 = rows 3-4",
    )
    k = 0.35 / 1.5
    same(
        f(T(1.2, 0.9, 0.6, 1.5, 1), T(0.5, 1, -0.5, -0.5, -0.5), G(5, 2, 5, 2, 2)),
        T(0.9, 0.9 + k, 0.9, 1.5 - 0.5 * k, 1 - 0.5 * k),
        "hand example: group 5 = rows 0, 2; group 2 = rows 1, 3, 4",
    )
    same(f(T(1, 2, .5), T(1, .5, 0), G(4, 4, 4)), T(-.6, 1.2, .5),
         "hand example: one group whose advantages 1, 0.5, 0 are not centred (use them as given)")


def random_batch(seed, labels=(7, 3, 7, 5, 3, 5, 7, 3, 5, 7, 3, 5), centred=True):
    g = torch.Generator().manual_seed(seed)
    group = torch.tensor(labels)
    r = (torch.rand(len(labels), generator=g) < 0.5).double()
    adv = (
        estimators.advantages(r, group, "dr_grpo").double()
        if centred
        else torch.randn(len(labels), generator=g).double()
    )
    return torch.rand(len(labels), generator=g).double() + 0.5, adv, group


def ex2_orthogonal(env):
    for seed in range(5):
        w, adv, group = random_batch(seed, centred=seed % 2 == 0)
        out = loss.adv_orthogonal(w, adv, group)
        same(out, out, "12 rows, groups 7, 3, 5 interleaved")
        for gid in (3, 5, 7):
            m = group == gid
            assert (
                abs(float((adv[m] * out[m]).sum())) < 1e-6
            ), (f"batch {seed}, group {gid} (rows {m.nonzero().flatten().tolist()}): "
                "sum_i Â_i w~_i is not 0")
            d, a = out[m] - w[m], adv[m]
            assert torch.allclose(d, (d @ a) / (a @ a).clamp(min=1e-12) * a, atol=1e-6), \
                f"batch {seed}, group {gid}: w~ - w is not a multiple of A"
        same(
            loss.adv_orthogonal(out, adv, group),
            out,
            f"batch {seed}: applied twice, the result changes",
        )


def ex2_edges(env):
    group = G(0, 0, 0, 0, 1, 1, 1, 1)
    adv = estimators.advantages(T(1, 0, 1, 0, 1, 1, 1, 0), group, "dr_grpo").double()
    w = T(1.3, 1.3, 1.3, 1.3, .7, .7, .7, .7)
    same(
        loss.adv_orthogonal(w, adv, group),
        w,
        "w constant in each group (on-policy): w~ must equal w",
    )
    w, adv, group = T(1.2, .8, 1.1, 1, .9, 1.3), T(0, 0, 0, .5, -.25, -.25), G(0, 0, 0, 1, 1, 1)
    keep = [x.clone() for x in (w, adv, group)]
    out = loss.adv_orthogonal(w, adv, group)
    assert all(torch.equal(a, b) for a, b in zip(keep, (w, adv, group))), "the inputs were modified"
    assert torch.isfinite(out).all(), "a group whose advantages are all 0 gives 0/0 (NaN or inf)"
    same(out[:3], w[:3], "a group whose advantages are all 0 must keep its w")


def off_policy_groups(shared_log_ratio):
    """Two groups (ids 4 and 9) whose token 0 is shared and whose token ratio is
    exp(shared_log_ratio)."""
    a = shared_group((2, 3, 4, 5), (1.0, 0.0, 1.0, 0.0), log_s=(.1, -.05, .08, -.12), seed=0)
    b = shared_group((5, 4, 3, 2), (1.0, 1.0, 0.0, 0.0), log_s=(-.07, .11, .02, .09), seed=1)
    new, old, mask, r, _ = (torch.cat(pair) for pair in zip(a, b))
    old[:, 0] = new[:, 0] - shared_log_ratio
    return new, old, mask, r, torch.tensor([4] * 4 + [9] * 4)


def cancels_inside(name, env):
    for clip, x in (("none", 0.15), ("sym", 0.15), ("sym", 0.3)):
        batch = off_policy_groups(x)
        c = coefficients(name, batch, clip)
        assert (
            float(c[:, 0].abs().sum()) > 1e-4
        ), f"{name}, clip={clip}, shared log-ratio {x}: the shared token has no weight"
        assert (
            residuals.first_token_residual(c, batch[4]) < 1e-6
        ), (f"{name}, clip={clip}, shared log-ratio {x}: "
            "the shared token's coefficients do not sum to 0")


# ------------------------------------------------------------ exercise 3: Min-Replace

def ex3_hand(env):
    same(
        loss.min_replace(T(1.2, 0.9, 0.6, 1.5, 1), T(0.5, 0.5, -0.5, -0.5, 0), G(5, 2, 5, 2, 2)),
        T(0.6, 0.9, 0.6, 0.9, 0.9),
        "hand example: group 5 = rows 0, 2; group 2 = rows 1, 3, 4",
    )


def ex3_properties(env):
    for seed in range(5):
        w, adv, group = random_batch(seed)
        keep = [x.clone() for x in (w, adv, group)]
        out = loss.min_replace(w, adv, group)
        same(out, out, f"batch {seed}: 12 rows")
        assert all(
            torch.equal(a, b) for a, b in zip(keep, (w, adv, group))
        ), f"batch {seed}: the inputs were modified"
        assert (out <= w + 1e-12).all(), f"batch {seed}: some w~_i is larger than w_i"
        for gid in (3, 5, 7):
            m = group == gid
            assert (
                len(set(out[m].tolist())) == 1
            ), f"batch {seed}, group {gid}: w~ is not one value per group"
            assert bool(
                (w[m] == out[m][0]).any()
            ), f"batch {seed}, group {gid}: w~ is not the w of any member"
    w = T(1.3, 1.3, .7, .7)
    same(
        loss.min_replace(w, T(0.5, -0.5, 0.5, -0.5), G(1, 1, 0, 0)),
        w,
        "w constant in each group: w~ must equal w",
    )


# ------------------------------------------------------------ exercise 4: off-policy by hand

# ------------------------------------------------------------ exercise 5: query_balanced

def make_batch(seed, B=8, G=4):
    """B groups x G rollouts in shuffled order; each group has its own success rate."""
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(B, G, generator=g) < torch.rand(B, 1, generator=g)).float().flatten()
    perm = torch.randperm(B * G, generator=g)
    group_ids = torch.arange(B).repeat_interleave(G)[perm] * 7 + 3
    return (
        group_ids,
        estimators.advantages(rewards[perm], group_ids, "dr_grpo"),
        torch.randint(3, 9, (B * G,), generator=g),
    )


def cut(fn, batch, M, seed):
    mbs = fn(*batch, M, torch.Generator().manual_seed(seed))
    assert (
        isinstance(mbs, (list, tuple)) and len(mbs) == M
    ), f"M = {M}, batch {seed}: not a list of {M} index tensors"
    return [torch.as_tensor(mb, dtype=torch.long) for mb in mbs]


def ex5_valid(env):
    for B, Gs, M in ((8, 4, 1), (8, 4, 2), (8, 4, 3), (8, 4, 8), (5, 3, 2), (6, 5, 4)):
        for seed in range(5):
            batch = make_batch(seed, B, Gs)
            where = f"{B} groups x {Gs}, M = {M}, batch {seed}"
            mbs = cut(batching.query_balanced, batch, M, seed)
            assert all(len(mb) > 0 for mb in mbs), f"{where}: a mini-batch is empty"
            assert sorted(torch.cat(mbs).tolist()) == list(
                range(B * Gs)
            ), f"{where}: not every rollout exactly once"
            stats = batch_stats.minibatch_stats(mbs, *batch)
            assert stats["groups_split"] == 0, f"{where}: a group is split across mini-batches"
            sizes = sorted(len(torch.unique(batch[0][mb])) for mb in mbs)
            assert sizes == sorted(
                len(torch.unique(batch[0][mb])) for mb in cut(batching.query, batch, M, seed)
            ), f"{where}: the numbers of groups per mini-batch are not those of query"
    a = cut(batching.query_balanced, make_batch(0), 4, 3)
    assert [x.tolist() for x in a] == [
        x.tolist() for x in cut(batching.query_balanced, make_batch(0), 4, 3)
    ], "the same batch and the same seed give different cuts"


def sign_spread(stats):
    return (max(stats["mb_pos"]) - min(stats["mb_pos"])) + (
        max(stats["mb_neg"]) - min(stats["mb_neg"])
    )


def ex5_spread(env):
    for M in (2, 4):
        spread = dict.fromkeys(("yours", "shuffle", "query"), 0.0)
        for seed in range(200):
            batch = make_batch(seed)
            for name, fn in (("yours", batching.query_balanced), ("shuffle", batching.shuffle),
                             ("query", batching.query)):
                mbs = cut(fn, batch, M, seed)
                stats = batch_stats.minibatch_stats(mbs, *batch)
                assert (
                    name != "yours" or stats["groups_split"] == 0
                ), f"M = {M}, batch {seed}: a group is split"
                spread[name] += sign_spread(stats) / 200
        assert spread["yours"] < min(
            spread["shuffle"], spread["query"]
        ), f"M = {M}, 200 batches of 8 groups x 4: mean sign spread " + ", ".join(
            f"{k} {v:.2f}" for k, v in spread.items()
        )


# ------------------------------------------------------------ exercise 6: the buggy loss

def ex6_measure(fn, off_policy):
    """(autograd coefficients, specified coefficients, loss value, specified value) on one
    shared group."""
    batch = shared_group(
        (2, 3, 4, 5), (1.0, 0.0, 1.0, 0.0), log_s=(0.1, -0.05, 0.08, -0.12) if off_policy else None
    )
    new, old, mask, r, grp = batch
    old[:, 0] = new[:, 0] - (0.2 if off_policy else 0.0)
    adv = r - r.mean()
    leaf = new.clone().requires_grad_(True)
    total = fn(leaf, old, mask, adv, grp, 5)
    (g,) = torch.autograd.grad(total, leaf)
    s = (((new - old) * mask).sum(1) / mask.sum(1)).exp()
    w = loss.adv_orthogonal(s, adv, grp)  # your exercise 2, checked there
    spec = (w * adv / 20)[:, None] * mask
    return -g, spec, float(total.detach()), float(-(spec * new).sum())


def ex6_fixed(env):
    for off in (False, True):
        where = "off-policy" if off else "on-policy"
        c, spec, value, spec_value = ex6_measure(env["ex6"], off)
        assert abs(value - spec_value) < 1e-6, f"{where}: the loss value is not the specified one"
        assert torch.allclose(
            c, spec, atol=1e-7
        ), f"{where}: the coefficients are not the specified ones"
        assert abs(float(c[:, 0].sum())) < 1e-7, f"{where}: the shared token does not cancel"


def ex6_groups(env):
    """Two groups with interleaved rows (ids 9 and 4), off-policy, max_len = 8 above the
    longest completion (5): the coefficients must follow each group's own Adv-Orthogonal
    weights and the given L_max, and each group's shared token must cancel."""
    a = shared_group((2, 5, 3, 4), (1.0, 0.0, 0.0, 1.0), log_s=(0.09, -0.06, 0.12, -0.03), seed=2)
    b = shared_group((4, 2, 5, 3), (1.0, 1.0, 0.0, 0.0), log_s=(-0.08, 0.05, 0.02, 0.11), seed=3)
    order = [0, 4, 1, 5, 2, 6, 3, 7]  # rows of the two groups interleaved
    new, old, mask, r, _ = (torch.cat(pair)[order] for pair in zip(a, b))
    group = torch.tensor([9, 4] * 4)
    old[:, 0] = new[:, 0] - 0.15
    adv = r - loss.group_mean(r, group)[0]
    leaf = new.clone().requires_grad_(True)
    total = env["ex6"](leaf, old, mask, adv, group, 8)
    (g,) = torch.autograd.grad(total, leaf)
    s = (((new - old) * mask).sum(1) / mask.sum(1)).exp()
    w = loss.adv_orthogonal(s, adv, group)  # your exercise 2, checked there
    spec = (w * adv / (8 * 8))[:, None] * mask
    where = "two interleaved groups, off-policy, max_len 8"
    assert abs(float(total.detach()) + float((spec * new).sum())) < 1e-6, \
        f"{where}: the loss value is not the specified one"
    assert torch.allclose(-g, spec, atol=1e-7), \
        f"{where}: the coefficients are not the specified ones"
    for gid in (9, 4):
        assert abs(float(-g[group == gid, 0].sum())) < 1e-7, \
            f"{where}: group {gid}'s shared token does not cancel"


def show_ex6(fn):
    print(
        "one group: rewards 1, 0, 1, 0; lengths 2, 3, 4, 5; token 0 is shared by all four rollouts"
    )
    for off in (False, True):
        c, spec, value, spec_value = ex6_measure(fn, off)
        print(
            f"\n{'off-policy' if off else 'on-policy'}:  loss value {value:+.6f}  (specification "
            f"{spec_value:+.6f})"
        )
        print(
            "  rollout   c of the shared token   specified   |  c summed over the rollout   "
            "specified"
        )
        for i in range(len(c)):
            print(f"  {i + 1:>7}   {float(c[i, 0]):>+21.6f}   {float(spec[i, 0]):>+9.6f}   |"
                  f"  {float(c[i].sum()):>+26.6f}   {float(spec[i].sum()):>+9.6f}")
        res = float(c[:, 0].sum().abs() / c[:, 0].abs().sum())
        print(f"  shared-token residual: {res:.4f}   (specification: 0)")


# ------------------------------------------------------------ exercise 7: a scratchpad by hand

def prose(name):
    return lambda env: written(env["sheet"], name)


WRITTEN = "written answer (read by your teacher)"
CHECKS = {
    "ex1": [("the numbers", numbers("EX1")), (WRITTEN, prose("EX1_WHY"))],
    "ex2": [
        ("hand examples", ex2_hand),
        ("orthogonal to A in every group", ex2_orthogonal),
        ("edge cases", ex2_edges),
        ("inside dfpo_orth, off-policy", lambda env: cancels_inside("dfpo_orth", env)),
    ],
    "ex3": [
        ("hand example", ex3_hand),
        ("the group minimum", ex3_properties),
        ("inside dfpo_min, off-policy", lambda env: cancels_inside("dfpo_min", env)),
        (WRITTEN, prose("EX3_WHY")),
    ],
    "ex4": [("the numbers", numbers("EX4")), (WRITTEN, prose("EX4_WHY"))],
    "ex5": [("a valid whole-group cut", ex5_valid), ("beats shuffle and query", ex5_spread)],
    "ex6": [("the specified gradient", ex6_fixed),
            ("several groups, L_max above the longest", ex6_groups), (WRITTEN, prose("EX6_WHY"))],
    "ex7": [("the numbers", numbers("EX7")), (WRITTEN, prose("EX7_WHY"))],
}


def run(ex, env):
    """[(what, None if it holds else why not)] for one exercise."""
    out = []
    for what, fn in CHECKS[ex]:
        try:
            fn(env)
            out.append((what, None))
        except AssertionError as e:
            out.append((what, str(e)))
        except NotImplementedError as e:
            other = str(e).startswith("exercise ") and not str(e).startswith(f"exercise {ex[2:]}:")
            out.append(
                (
                    what,
                    (
                        f"needs {str(e).split(':')[0]} solved first"
                        if other
                        else f"not written yet ({e})"
                    ),
                )
            )
        except Exception as e:  # the student's code raised: say where, in one line
            frame = traceback.extract_tb(e.__traceback__)[-1]
            out.append(
                (
                    what,
                    f"{type(e).__name__}: {e} ({os.path.relpath(frame.filename)}:{frame.lineno})",
                )
            )
    return out


def main(argv):
    todo = argv or list(CHECKS)
    bad = [a for a in todo if a not in CHECKS]
    if bad:
        print(
            f"error: unknown exercise {bad[0]!r}; choose from {', '.join(CHECKS)}", file=sys.stderr
        )
        return 2
    from exercises import ex6_buggy_loss
    try:
        sheet = read_sheet(os.path.join(HERE, "sheet.py"))
    except SheetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        r = roster.load()
    except roster.RosterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = {"sheet": sheet, "ex6": ex6_buggy_loss.dfpo_orth_loss, "roster": r}
    failed = 0
    for ex in todo:
        if ex == "ex6":
            try:
                show_ex6(env["ex6"])
            except Exception as e:  # e.g. exercise 2 not solved yet: the FAIL lines say so
                print(f"(no measurements: {type(e).__name__}: {str(e).split('(')[0].strip()})")
            print()
        results = run(ex, env)
        failed += sum(why is not None for _, why in results)
        for what, why in results:
            print(
                f"{ex}  {'ok  ' if why is None else 'FAIL'}  {what}"
                + ("" if why is None else f": {why}")
            )
    print(f"{'all hold' if not failed else f'{failed} failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
