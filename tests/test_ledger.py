"""The cancellation ledger (ledger.py) and the run's closing verdict.

The ledger is checked against a brute-force account written here independently: copies are
grouped by (group, prompt, completion prefix, token) with Python dicts, and every part is
summed in plain floats. Then a matrix of regimes (objective x estimator x scheduler x reuse x
clip, and a run with no mixed group) is trained from one tiny warm start, and each printed
verdict is checked against the brute-force ledger of the coefficients the run used.
"""
import os
import re
from dataclasses import replace

import pytest
import torch

from lab import ledger
import train
from plumbing.config import parse_args, validate

PARTS = list(ledger.LEDGER_PARTS)


# ----------------------------------------------------------------------------- brute force

def brute_ledger(steps, adv, tokens, mask, group):
    """The ledger's sums, by dicts and floats: no tensor indexing shared with ledger.py."""
    tokens, mask, group = tokens.tolist(), mask.tolist(), group.tolist()
    adv = [float(a) for a in adv]
    members = {}
    for i, g in enumerate(group):
        members.setdefault(g, []).append(i)
    a_g = {g: sum(adv[i] for i in rows) / len(rows) for g, rows in members.items()}
    sets = {}  # (group, prefix, token) -> [(row, t)]
    for i, row in enumerate(tokens):
        for t, tok in enumerate(row):
            if not mask[i][t]:
                break
            sets.setdefault((group[i], tuple(row[:t]), tok), []).append((i, t))
    out = {"mass": 0.0, "cancelled": 0.0, **{p: 0.0 for p in PARTS}}
    for (g, _, _), copies in sets.items():
        if len(copies) < 2:
            continue
        total, total_on, moved, mass = {}, {}, 0.0, 0.0
        for rows, coef, coef_on in steps:
            where = {int(r): k for k, r in enumerate(rows)}
            net = 0.0
            for i, t in copies:
                if i in where:
                    c = float(coef[where[i], t])
                    net += c
                    mass += abs(c)
                    total[i] = total.get(i, 0.0) + c
                    total_on[i] = total_on.get(i, 0.0) + float(coef_on[where[i], t])
            moved += abs(net)
        rows = [i for i, _ in copies]
        abs_a = sum(abs(adv[i]) for i in rows)
        sign = lambda x: (x > 0) - (x < 0)

        def wbar(tot):
            return sum(sign(adv[i]) * tot.get(i, 0.0) for i in rows) / abs_a if abs_a else 0.0
        C, C_on = sum(total.values()), sum(total_on.values())
        w, w_on, sum_a = wbar(total), wbar(total_on), sum(adv[i] for i in rows)
        weights = C_on - w_on * sum_a
        parts = {"credit": w * sum(adv[i] - a_g[g] for i in rows),
                 "uncentred": w * len(rows) * a_g[g], "weights": weights,
                 "ratios": (C - w * sum_a) - weights, "split": moved - abs(C)}
        out["mass"] += mass
        out["cancelled"] += mass - moved
        for p in PARTS:
            out[p] += abs(parts[p])
    return out


def close(a, b, rel=1e-6):
    """Equal parts; the default tolerance is float32's, in which coefficients come."""
    assert set(a) == set(b)
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=rel, abs=1e-9), k


# ----------------------------------------------------------------------------- by hand

def one_group():
    """One group of 4: rows 0, 1 share their first token (5), rows 2, 3 another (6); rows
    0 and 2 are right. Â = (1, -1, 1, -1); lengths 3, 2, 2, 1."""
    tokens = torch.tensor([[5, 7, 8], [5, 9, 0], [6, 7, 0], [6, 0, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    return tokens, mask, torch.zeros(4, dtype=torch.long), torch.tensor([1.0, -1.0, 1.0, -1.0])


def test_equal_weights_in_one_step_leave_only_credit():
    """c = Â: the set {row 0, row 1 at t=0} nets 1 - 1 = 0 (cancelled 2 of mass 2); the set
    {2, 3} too. No other set has two copies."""
    tokens, mask, group, adv = one_group()
    coef = adv[:, None] * mask
    s = ledger.ledger_sums([(torch.arange(4), coef, coef)], adv, tokens, mask, group)
    assert s == {"mass": 4.0, "cancelled": 4.0, "credit": 0.0, "uncentred": 0.0,
                 "weights": 0.0, "ratios": 0.0, "split": 0.0}


def test_one_over_length_weights_by_hand():
    """c = Â / L: set {0, 1}: 1/3 - 1/2 = -1/6, mass 5/6, wbar = (1/3 + 1/2) / 2 = 5/12,
    credit 5/12 * (1 - 1) = 0, weights -1/6; set {2, 3}: 1/2 - 1 = -1/2, mass 3/2."""
    tokens, mask, group, adv = one_group()
    coef = adv[:, None] / mask.sum(1, keepdim=True) * mask
    s = ledger.ledger_sums([(torch.arange(4), coef, coef)], adv, tokens, mask, group)
    close(s, {"mass": 5 / 6 + 3 / 2, "cancelled": 5 / 6 - 1 / 6 + 3 / 2 - 1 / 2,
              "credit": 0.0, "uncentred": 0.0, "weights": 1 / 6 + 1 / 2, "ratios": 0.0,
              "split": 0.0})


def test_a_group_split_over_two_steps():
    """Rows 0, 2 in one step, 1, 3 in the next: nothing cancels inside a step, and the whole
    mass is split (the nets over the two steps would have cancelled)."""
    tokens, mask, group, adv = one_group()
    coef = adv[:, None] * mask
    steps = [(torch.tensor([0, 2]), coef[[0, 2]], coef[[0, 2]]),
             (torch.tensor([1, 3]), coef[[1, 3]], coef[[1, 3]])]
    s = ledger.ledger_sums(steps, adv, tokens, mask, group)
    close(s, {"mass": 4.0, "cancelled": 0.0, "credit": 0.0, "uncentred": 0.0, "weights": 0.0,
              "ratios": 0.0, "split": 4.0})


def test_uncentred_and_off_policy_parts():
    """Â = (1, 0, 1, 0) (one-signed): each set's net is all uncentred (Â_g = 1/2,
    wbar = 1, 2 * 1/2 = 1). A clip that zeroes row 1's copy off-policy but not on-policy
    puts its difference in ``ratios``."""
    tokens, mask, group, _ = one_group()
    adv = torch.tensor([1.0, 0.0, 1.0, 0.0])
    coef = adv[:, None] * mask
    s = ledger.ledger_sums([(torch.arange(4), coef, coef)], adv, tokens, mask, group)
    close(s, {"mass": 2.0, "cancelled": 0.0, "credit": 0.0, "uncentred": 2.0, "weights": 0.0,
              "ratios": 0.0, "split": 0.0})
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    on = adv[:, None] * mask
    off = on.clone()
    off[0, 0] = 0.0  # row 0's first copy clipped off-policy: set {0, 1} nets -1
    # set {0, 1}: C = -1, C° = 0, sum Â = 0, so weights = 0 and ratios = -1; set {2, 3} nets 0
    s = ledger.ledger_sums([(torch.arange(4), off, on)], adv, tokens, mask, group)
    close(s, {"mass": 3.0, "cancelled": 2.0, "credit": 0.0, "uncentred": 0.0, "weights": 0.0,
              "ratios": 1.0, "split": 0.0})


@pytest.mark.parametrize("seed", range(5))
def test_ledger_matches_brute_force_on_random_batches(seed):
    """Random groups with shared prefixes, random coefficients, rows reused over steps."""
    g = torch.Generator().manual_seed(seed)
    n, T = 12, 5
    group = torch.arange(3).repeat_interleave(4)
    tokens = torch.randint(3, 5, (n, T), generator=g)  # 2 token values: many shared prefixes
    lens = torch.randint(1, T + 1, (n,), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]
    adv = torch.randn(n, generator=g, dtype=torch.float64).float()
    steps = []
    for _ in range(3):
        rows = torch.randperm(n, generator=g)[:8]
        steps.append((rows, torch.randn(8, T, generator=g) * mask[rows],
                      torch.randn(8, T, generator=g) * mask[rows]))
    close(ledger.ledger_sums(steps, adv, tokens, mask, group),
          brute_ledger(steps, adv, tokens, mask, group), rel=1e-9)


# ----------------------------------------------------------------------------- the verdict, run

WARM = ["--digits=1", "--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_batch=32",
        "--sft_lr=3e-3", "--prompts_per_step=4", "--group_size=4", "--eval_size=8",
        "--eval_every=100", "--device=cpu"]


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory):
    """A tiny 1-digit adder that is right often enough for most groups to be mixed."""
    out = tmp_path_factory.mktemp("warm")
    train.main(parse_args(WARM + ["--sft_steps=150", "--rl_steps=0", f"--out_dir={out}"]))
    return os.path.join(out, "warm_start.pt")


# objective x estimator x scheduler x reuse x clip; the part the design makes dominate where it
# is known in advance ("none": every copy cancels; None: only checked against the brute force)
REGIMES = [
    (["--loss=grpo"], "weights"),
    (["--loss=dr_grpo"], "none"),
    (["--loss=dapo"], None),
    (["--loss=gspo"], "weights"),
    (["--loss=rloo"], "none"),
    (["--loss=gpg"], "none"),
    (["--loss=cispo", "--epochs=2"], None),
    (["--loss=dr_grpo", "--epochs=3", "--lr=3e-2", "--clip=sym"], None),
    (["--loss=dr_grpo", "--epochs=2", "--minibatches=2", "--batching=query", "--clip=higher"],
     None),
    (["--loss=dfpo_min", "--epochs=2", "--minibatches=2", "--batching=query"], None),
    (["--loss=dfpo_orth", "--epochs=2", "--minibatches=2"], None),  # shuffled: groups split
    (["--loss=sapo", "--epochs=2"], None),
    (["--loss=grpo", "--batching=sign", "--minibatches=2"], "split"),
    (["--loss=dr_grpo", "--batching=sign", "--minibatches=2"], "split"),
    (["--loss=dr_grpo", "--batching=shuffle", "--minibatches=4"], None),
    (["--loss=dr_grpo", "--batching=length", "--minibatches=2"], None),
    (["--loss=dr_grpo", "--batching=balanced", "--minibatches=2"], None),
    (["--loss=dr_grpo", "--adv=grpo_passk"], "uncentred"),
    (["--loss=dr_grpo", "--adv=batch_whiten"], None),
    (["--loss=grpo", "--adv=reinforce_plus_plus"], None),
    (["--loss=positive_only"], None),
    (["--loss=dr_grpo", "--agg=seq-mean-token-mean"], "weights"),
    (["--loss=dro", "--dro_beta=0.1", "--epochs=2"], None),
    (["--loss=bnpo", "--minibatches=2", "--batching=query", "--micro_batch=4"], None),
    (["--loss=dfpo_orth", "--adv=positive_only"], None),
    (["--loss=dr_grpo", "--batching=query", "--minibatches=2", "--epochs=3", "--lr=3e-2"], None),
    (["--loss=grpo", "--dual_clip=3", "--epochs=2", "--lr=3e-2"], None),
    (["--loss=dr_grpo", "--beta=0.1"], None),
    (["--loss=dr_grpo", "--off_policy_mask_threshold=0.01", "--epochs=2", "--lr=3e-2"], None),
]


def flags_of(sentence):
    return dict(re.findall(r"--(\w+)=([\w.-]+)", sentence))


def verdict_lines(text):
    """The verdict's lines: its first line and the one after it."""
    lines = text.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("verdict: "))
    return lines[i], lines[i + 1] if i + 1 < len(lines) else ""


def run_regime(tmp_path, warm_start, monkeypatch, flags, name="o"):
    """Train 3 RL steps from the warm start; (cfg, summary, printed text, the brute-force
    ledger's shares of the coefficients the run used)."""
    batches, real = [], ledger.ledger_sums

    def spy(steps, adv, tokens, mask, group):
        batches.append((steps, adv, tokens, mask, group))
        return real(steps, adv, tokens, mask, group)
    monkeypatch.setattr(ledger, "ledger_sums", spy)
    cfg = parse_args(WARM + [f"--init_from={warm_start}", "--rl_steps=3",
                             f"--out_dir={tmp_path}/{name}"] + flags)
    summary = train.main(cfg)
    sums = {"mass": 0.0, "cancelled": 0.0, **{p: 0.0 for p in PARTS}}
    for b in batches:
        for k, v in brute_ledger(*b).items():
            sums[k] += v
    assert summary["ledger_mixed_steps"] > 0, "no mixed group: the regime tests nothing"
    m = sums["mass"] or 1.0  # no coefficient at all: every share 0
    return cfg, summary, {k: v / m for k, v in sums.items() if k != "mass"}


@pytest.mark.parametrize("flags, known", REGIMES, ids=[" ".join(f) for f, _ in REGIMES])
def test_verdict_matches_the_ledger(tmp_path, warm_start, monkeypatch, capsys, flags, known):
    """The printed verdict names the part the brute-force ledger makes largest (or none), and
    its remedy is flags this run does not use, that the flag checks accept, and (where the
    design says which part dominates) that remove that part when run."""
    cfg, summary, shares = run_regime(tmp_path, warm_start, monkeypatch, flags)
    text = capsys.readouterr().out
    if summary["ledger_mass"] == 0:  # dfpo_orth with Â >= 0 zeroes every coefficient
        assert "the shared tokens got no coefficient, so nothing could cancel" in text
        return
    for k, v in shares.items():  # the summary's shares are the brute force's
        assert summary[f"ledger_{k}"] == pytest.approx(v, rel=1e-6, abs=1e-9), k
    defects = {p: shares[p] for p in PARTS if p != "credit"}
    worst = max(defects, key=defects.get)
    beyond = 1 - shares["cancelled"] - shares["credit"]
    zero = ledger.LEDGER_ZERO
    expected = worst if defects[worst] > zero and beyond > zero else "none"
    if known is not None:
        assert expected == known, shares
    first, second = verdict_lines(text)
    if expected == "none":
        assert first.startswith("verdict: beyond the rewards' credit nothing was left")
        return
    assert first == f"verdict: the largest cause besides credit is " \
                    f"{ledger.ROWS[expected].replace('left by ', '')}"[:100]
    assert all(len(l) <= 100 for l in text.splitlines() if str(tmp_path) not in l)
    fixes = [flags_of(l) for l in text.splitlines() if "removes it" in l]  # the table's column
    fix = flags_of(second) if "would remove it" in second else {}
    if fix:
        assert fix in fixes  # the verdict's remedy is the table's for that row
    on_policy = cfg.minibatches == 1 and cfg.epochs == 1
    if expected == "weights" and not on_policy:
        assert "no single flag removes it under this run's reuse" in second
    rows = [(next(k for k, words in ledger.ROWS.items() if words in line), flags_of(line))
            for line in text.splitlines() if line.endswith("removes it")]
    for part, fix in rows:
        assert any(str(getattr(cfg, k)) != v for k, v in fix.items()), fix
        typed = {k: type(getattr(cfg, k))(v) for k, v in fix.items()}
        validate(replace(cfg, **typed))  # the flag checks accept the run with the remedy
        # run with the remedy: it removes its part and brings no part the run did not have
        _, _, after = run_regime(tmp_path, warm_start, monkeypatch,
                                 flags + [f"--{k}={v}" for k, v in fix.items()], "fixed_" + part)
        assert after[part] <= zero, (fix, after)
        for other in PARTS:
            if other not in ("credit", part) and shares[other] <= zero:
                assert after[other] <= zero, (fix, other, after)


def test_no_mixed_group_says_nothing_to_cancel(tmp_path, capsys):
    """An untrained model gets every reward 0: no group is mixed, no coefficient at all."""
    cfg = parse_args(WARM + ["--sft_steps=0", "--rl_steps=2", f"--out_dir={tmp_path}/o"])
    summary = train.main(cfg)
    text = capsys.readouterr().out
    assert summary["ledger_mass"] == 0
    assert "nothing could cancel" in text and "--sft_steps" in text
    assert "most of what" not in text and "every shared token" not in text


def test_the_demos_closing_lines_fit_100_characters():
    """The demo's closing lines, with its parts zero by construction marked: every line fits."""
    cfg = parse_args(["--out_dir=out"], check=False)
    summary = {"ledger_steps": 100, "ledger_mass": 2.0, "shared_dlogp_mean": -2e-6,
               "ledger_mixed_steps": 100, "ledger_cancelled": 0.68, "ledger_credit": 0.31,
               "ledger_weights": 0.014, "ledger_ratios": 1e-8, "ledger_split": 0.0,
               "ledger_uncentred": 6e-9}
    lines = "\n".join(ledger.ledger_lines(summary, cfg)).splitlines()
    assert any(line.startswith("  * zero by construction") for line in lines)
    assert all(len(line) <= 100 for line in lines), [line for line in lines if len(line) > 100]
