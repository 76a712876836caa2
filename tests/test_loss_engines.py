"""The engine objectives and switches of loss.py: coefficients against values
written out by hand, and each row's exchangeability verdict on a group with
shared (history, token) copies. The scoreboard's quick mode runs at the end."""
import dataclasses
import json
import math
import os

import pytest
import torch
import loss
from tests.test_loss import loss_of
from lab import engines, estimators, objectives, residuals

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One group of three completions of lengths 2, 3, 4; rewards 1, 0, 0 (as in test_loss.py).
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
GROUP = torch.zeros(3, dtype=torch.long)
LENS = torch.tensor([2.0, 3.0, 4.0])
SIGMA = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
A = torch.tensor([2 / 3, -1 / 3, -1 / 3]) / (SIGMA + 1e-6)
ON = torch.log(torch.rand(3, 4, generator=torch.Generator().manual_seed(0)) * 0.9 + 0.05) * MASK
LOGR = torch.tensor([[0.10, -0.30, 0, 0], [0.05, 0.02, 0.20, 0], [-0.10, 0.00, 0.10, 0.40]])
OLD = ON - LOGR * MASK
RHO = LOGR.exp() * MASK


def coef(objective, new, old, adv, mask=MASK, group=GROUP, clip="none", **kw):
    new = new.clone().requires_grad_(True)
    total, stats = loss_of(new, old, mask, adv, group, objective, clip, **kw)
    return residuals.coefficients(total, new).detach(), stats


def per_seq(x, mask=MASK):
    return x[:, None] * mask.float()


def test_gpg_advantage_by_hand():
    # alpha = N / #{r != 0} = 3 / 1; A = 3 (r - mu)
    torch.testing.assert_close(estimators.advantages(torch.tensor([1.0, 0, 0]), GROUP, "gpg"),
                               torch.tensor([2.0, -1.0, -1.0]))
    # two groups, 4 rollouts, 3 non-zero rewards: alpha = 4/3
    r, g = torch.tensor([1.0, 0, 2, 1]), torch.tensor([0, 0, 1, 1])
    torch.testing.assert_close(
        estimators.advantages(r, g, "gpg"), torch.tensor([0.5, -0.5, 0.5, -0.5]) * 4 / 3
    )


@pytest.mark.parametrize("name, expected", [
    ("bnpo", A / 9), ("cispo", A / 9), ("sapo", A / (3 * LENS)), ("gmpo", A / (3 * LENS)),
    ("kl_cov", A / 9), ("gpg", A / 9), ("luspo", A / 3), ("vespo", A / 9)])
def test_on_policy_coefficients_by_hand(name, expected):
    clip = "none" if objectives.OBJECTIVES[name].clip == "none" else "sym"
    c, _ = coef(name, ON, ON.detach(), A, clip=clip)
    torch.testing.assert_close(c, per_seq(expected))


def test_bnpo_divides_by_the_local_token_count():
    # micro-batch = rows 0 and 2 (6 tokens) of a step cut into M = 2: c = rho A / (2 * 6)
    idx = torch.tensor([0, 2])
    counts = loss.step_counts(MASK, A, micro_batches=2)
    c, _ = coef("bnpo", ON[idx], OLD[idx], A[idx], MASK[idx], GROUP[idx], counts=counts)
    torch.testing.assert_close(c, RHO[idx] * A[idx, None] / 12)
    # dapo on the same micro-batch divides by the step's 9 tokens
    c, _ = coef("dapo", ON[idx], OLD[idx], A[idx], MASK[idx], GROUP[idx], counts=counts)
    torch.testing.assert_close(c, RHO[idx] * A[idx, None] / 9)


def test_cispo_keeps_every_token_when_the_clip_binds():
    # clip-higher 0.2 / 0.28: rho = e^-0.3 = .74 -> .8, e^0.4 = 1.49 -> 1.28;
    # no token loses its gradient
    c, st = coef("cispo", ON, OLD, A, clip="higher", clip_low=0.2, clip_high=0.28)
    w = RHO.clamp(0.8, 1.28) * MASK
    torch.testing.assert_close(c, w * A[:, None] / 9)
    assert bool((c[MASK] != 0).all()) and st["clip_frac"] == pytest.approx(2 / 9)
    c, _ = coef("cispo", ON, OLD, A, clip="none")
    torch.testing.assert_close(c, RHO * A[:, None] / 9)


def test_sapo_soft_gate_by_hand():
    # d/dlog rho of (4/tau) sigmoid(tau (rho - 1)) = 4 rho s (1 - s), s = sigmoid(tau (rho - 1))
    tau = torch.tensor([1.0, 1.05, 1.05])[:, None]
    s = torch.sigmoid(tau * (RHO - 1))
    c, _ = coef("sapo", ON, OLD, A)
    torch.testing.assert_close(c, 4 * RHO * s * (1 - s) * per_seq(A / (3 * LENS)))


def test_gmpo_by_hand():
    # eps 0.15 (log space): row 0 (A > 0) t0 log rho 0.3 -> 0.15, no gradient there; row 1 (A < 0)
    # t1 -0.3 -> -0.15, no gradient; row 2's 0.4 is not clipped (A < 0 clips only below)
    logr = LOGR.clone()
    logr[0, 0], logr[1, 1] = 0.3, -0.3
    g = torch.tensor(
        [math.exp((0.15 - 0.3) / 2), math.exp((0.05 - 0.15 + 0.2) / 3), math.exp(0.4 / 4)]
    )
    keep = MASK.float().clone()
    keep[0, 0] = keep[1, 1] = 0
    c, st = coef("gmpo", ON, ON - logr * MASK, A, clip="sym", clip_low=0.15)
    torch.testing.assert_close(c, keep * (A * g / (3 * LENS))[:, None])
    assert st["clip_frac"] == pytest.approx(2 / 9)


# Two rollouts of two tokens, A = +1, -1; only (0, 0) has a covariance in (1, 5):
# mean log pi = -2.525, cov = (+1)(-0.1 + 2.525) = 2.425; the others -1.475, 0.475, 0.475.
COV_LP = torch.tensor([[-0.1, -4.0], [-3.0, -3.0]])
COV_M = torch.ones(2, 2, dtype=torch.bool)
COV_A = torch.tensor([1.0, -1.0])
COV_G = torch.zeros(2, dtype=torch.long)


def test_cov_scores_and_clip_cov_by_hand():
    torch.testing.assert_close(engines.cov_scores(COV_A, COV_LP, COV_M),
                               torch.tensor([[2.425, -1.475], [0.475, 0.475]]))
    c, st = coef("clip_cov", COV_LP, COV_LP.detach(), COV_A, COV_M, COV_G, clip="sym")
    torch.testing.assert_close(c, torch.tensor([[0.0, 0.25], [-0.25, -0.25]]))
    assert st["cov_frac"] == 0.25


def test_kl_cov_by_hand():
    # top-1 covariance is (0, 0): it gets + 0.1 |log rho| (verl's ppo_kl_coef),
    # c = rho A / 4 - 0.1 sign(log rho) / 4; no ratio clip, so rho = e^0.5 at (1, 1) keeps rho A / 4
    logr = torch.tensor([[0.1, -0.2], [0.0, 0.5]])
    c, _ = coef("kl_cov", COV_LP, COV_LP - logr, COV_A, COV_M, COV_G)
    expected = logr.exp() * COV_A[:, None] / 4
    expected[0, 0] -= 0.025
    torch.testing.assert_close(c, expected)
    # on-policy: |0| adds nothing
    c, _ = coef("kl_cov", COV_LP, COV_LP.detach(), COV_A, COV_M, COV_G)
    torch.testing.assert_close(c, COV_A[:, None].expand(2, 2) / 4)


def test_gpg_ignores_the_ratio():
    c, _ = coef("gpg", ON, OLD, A)
    torch.testing.assert_close(c, per_seq(A / 9))


def test_luspo_by_hand():
    s = torch.tensor(
        [(0.10 - 0.30) / 2, (0.05 + 0.02 + 0.20) / 3, (-0.1 + 0 + 0.1 + 0.4) / 4]
    ).exp()
    c, _ = coef("luspo", ON, OLD, A)
    torch.testing.assert_close(c, per_seq(s * A / 3))
    # per-sequence clip eps 0.05 on -A: row 0 (A<0, s=.905 < .95) and rows 1, 2 (A>0, s > 1.05) clip
    c, st = coef("luspo", ON, OLD, -A, clip="sym", clip_low=0.05)
    assert torch.all(c == 0) and st["clip_frac"] == 1.0


def test_vespo_by_hand():
    W = LOGR.sum(1).exp()  # product of token ratios: e^-0.2, e^0.27, e^0.4
    k = torch.tensor([2.0, 3.0, 3.0])
    lam = torch.tensor([3.0, 2.0, 2.0])
    phi = torch.exp(lam) * W ** k * torch.exp(-lam * W)
    c, _ = coef("vespo", ON, OLD, A)
    torch.testing.assert_close(c, per_seq(phi * A / 9))
    # phi(1) = 1
    assert float(engines.vespo_weight(torch.zeros(3, 4), MASK, A).sub(1).abs().max()) < 1e-6


def test_dual_clip_by_hand():
    # sym eps 0.2 binds nowhere here; C = 1.4 cuts row 2, t3 (A < 0, rho = 1.49) only
    c, st = coef("dapo", ON, OLD, A, clip="sym", dual_clip=1.4)
    keep = MASK.float().clone()
    keep[2, 3] = 0
    torch.testing.assert_close(c, keep * RHO * A[:, None] / 9)
    assert st["clip_frac"] == pytest.approx(1 / 9)
    c, _ = coef("dapo", ON, OLD, A, clip="sym", dual_clip=1.5)  # 1.49 < 1.5: nothing cut
    torch.testing.assert_close(c, RHO * A[:, None] / 9)


def test_k3_kl_by_hand():
    ref = ON - torch.tensor([[0.2, -0.1, 0, 0], [0.0, 0.3, -0.2, 0], [0.1, 0.1, 0.1, -0.4]]) * MASK
    base, _ = coef("dapo", ON, OLD, A)
    c, st = coef("dapo", ON, OLD, A, beta=0.1, ref_logprobs=ref)
    # d/dlog pi of pi_ref/pi - log(pi_ref/pi) - 1 = 1 - pi_ref/pi
    torch.testing.assert_close(c - base, -0.1 * (1 - (ref - ON).exp()) * MASK / 9)
    d = (ref - ON)[MASK]
    assert st["kl_ref"] == pytest.approx(float((d.exp() - d - 1).mean()), rel=1e-5)


def test_entropy_term_leaves_c_and_pushes_every_copy_alike():
    # the term's gradient on each token's entropy is -coef / sum L, whatever A
    ent = torch.full((3, 4), 0.5, requires_grad=True)
    new = ON.clone().requires_grad_(True)
    total, _ = loss_of(new, OLD, MASK, A, GROUP, "dapo", "none", entropy_coef=0.01, entropy=ent)
    g_ent, g_new = torch.autograd.grad(total, [ent, new])
    torch.testing.assert_close(g_ent, -0.01 * MASK.float() / 9)
    torch.testing.assert_close(-g_new, RHO * A[:, None] / 9)
    # a tabular policy: two copies of one history with opposite advantages. The policy
    # gradient at that history cancels; the entropy push is the same with A flipped.
    z = torch.tensor([0.3, -0.2, 0.5], requires_grad=True)
    lp = torch.log_softmax(z, 0)
    H = -(lp.exp() * lp).sum()
    grads = []
    for adv in (torch.tensor([1.0, -1.0]), torch.tensor([-1.0, 1.0])):
        logp = lp[[0, 0]][:, None]
        total, _ = loss_of(logp, logp.detach(), torch.ones(2, 1, dtype=torch.bool), adv,
                           torch.zeros(2, dtype=torch.long), "dapo", "none",
                           entropy_coef=0.1, entropy=H.expand(2, 1))
        grads.append(torch.autograd.grad(total, z, retain_graph=True)[0])
    (dH,) = torch.autograd.grad(H, z)
    # 2 copies x 0.1 / 2 tokens: all of it is the push
    torch.testing.assert_close(grads[0], -0.1 * dH)
    torch.testing.assert_close(grads[0], grads[1])


# ----------------------------------------------------------------------------- verdicts

def verdict_group(regime):
    """One group of four, rewards 1, 0, 1, 0, lengths 4, 3, 5, 6. Token 5 first in every
    rollout; rollouts 0, 1 continue with 2 and 2, 3 with 3: three (h, a) sets with
    copies of both signs. One log pi (and one log pi_old) per set."""
    tok = torch.tensor(
        [[5, 2, 7, 9, 0, 0], [5, 2, 8, 0, 0, 0], [5, 3, 7, 9, 4, 0], [5, 3, 6, 1, 1, 2]]
    )
    lens = torch.tensor([4, 3, 5, 6])
    mask = torch.arange(6)[None] < lens[:, None]
    grp = torch.zeros(4, dtype=torch.long)
    ids = residuals.history_token_sets(tok, mask, grp)
    K = int(ids.max()) + 1
    lp = -0.3 - 0.1 * torch.arange(K).float() % 1.7
    shift = 0.1 * torch.sin(torch.arange(K).float() * 1.3)  # |log rho| <= 0.1
    new = torch.where(mask, lp[ids.clamp(min=0)], torch.zeros(()))
    logr = (
        torch.zeros(4, 6)
        if regime == "on"
        else torch.where(mask, shift[ids.clamp(min=0)], torch.zeros(()))
    )
    if regime == "clip":
        logr[:, 0] = 0.35  # the shared first token: rho 1.42 > 1.28
    return tok, mask, grp, new, new - logr, torch.tensor([1.0, 0, 1, 0])


CANCELS = {  # regimes in which the table says each row keeps exchangeability (unequal lengths)
    "grpo": "", "gspo": "", "sapo": "", "gmpo": "",
    "dr_grpo": "on off", "dapo": "on off", "rloo": "on off", "bnpo": "on off",
    "dfpo_min": "on off clip", "positive_only": "on off clip",
    "cispo": "on off clip", "gpg": "on off clip", "luspo": "on", "vespo": "on"}


@pytest.mark.parametrize("name", list(CANCELS))
@pytest.mark.parametrize("regime", ["on", "off", "clip"])
def test_exchangeability_verdict_of_each_row(name, regime):
    tok, mask, grp, new, old, r = verdict_group(regime)
    adv = estimators.advantages(r, grp, objectives.own_estimator(name))
    clip = ("none", 0.2) if objectives.OBJECTIVES[name].clip == "none" else \
        ("higher", 3e-4, 4e-4) if name in ("gspo", "luspo") else ("higher", 0.2, 0.28)
    c, _ = coef(
        name,
        new,
        old,
        adv,
        mask,
        grp,
        clip=clip[0],
        **dict(zip(("clip_low", "clip_high"), clip[1:])),
    )
    res = residuals.exch_residual(c, adv, tok, mask, grp)
    if regime in CANCELS[name].split():
        assert res < 1e-6, res
    else:
        assert res > 1e-3, res


def test_switch_verdicts():
    tok, mask, grp, new, old, r = verdict_group("off")
    adv = estimators.advantages(r, grp, objectives.own_estimator("dapo"))
    ref = new - 0.2 * mask
    res = lambda **kw: residuals.exch_residual(
        coef("dapo", new, old, adv, mask, grp, clip="higher", **kw)[0], adv, tok, mask, grp
    )
    assert res() < 1e-6
    assert res(beta=0.04, ref_logprobs=ref) > 1e-3  # the same k on every copy: no cancel
    assert res(entropy_coef=0.1, entropy=torch.ones(4, 6)) < 1e-6  # c unchanged
    tok, mask, grp, new, old, r = verdict_group("clip")
    old[:, 0] = new[:, 0] - 1.2                               # shared rho = 3.3 > C = 3
    c, _ = coef("dapo", new, old, adv, mask, grp, clip="higher", dual_clip=3.0)
    assert bool((c[:, 0] == 0).all())  # every copy cut: nothing left to break
    assert residuals.exch_residual(c, adv, tok, mask, grp) < 1e-6
    c, _ = coef("dapo", new, old, adv, mask, grp, clip="higher")
    # without it, only the A < 0 copies keep one
    assert residuals.exch_residual(c, adv, tok, mask, grp) > 1e-3


def test_dfpo_orth_cancels_whole_group_tokens_only():
    """Adv-Orthogonal makes sum_i Â_i w~_i = 0 over the group, so the first token cancels,
    but w~ differs between rollouts: a prefix that only part of the group shares does not."""
    tok, mask, grp, new, old, r = verdict_group("off")
    adv = estimators.advantages(r, grp, objectives.own_estimator("dfpo_orth"))
    c, _ = coef("dfpo_orth", new, old, adv, mask, grp)
    assert abs(float(c[:, 0].sum())) < 1e-6 and residuals.first_token_residual(c, grp) < 1e-6
    assert residuals.exch_residual(c, adv, tok, mask, grp) > 1e-3


def test_clip_cov_breaks_exactly_when_its_selection_hits_a_shared_copy():
    tok, mask, grp, new, old, r = verdict_group("on")
    adv = estimators.advantages(r, grp, objectives.own_estimator("clip_cov"))
    hi = new.clone()
    hi[:, 0] = -0.01          # the shared first token far above the mean log pi: cov > 1 for A > 0
    hi[mask & (torch.arange(6) > 0)] = -3.0
    c, st = coef("clip_cov", hi, hi.detach(), adv, mask, grp, clip="sym", cov_ratio=0.01)
    assert st["cov_frac"] > 0 and residuals.exch_residual(c, adv, tok, mask, grp) > 1e-3
    c, st = coef("clip_cov", new, new.detach(), adv, mask, grp, clip="sym", cov_ratio=0.01)
    assert st["cov_frac"] == 0 and residuals.exch_residual(c, adv, tok, mask, grp) < 1e-6


# ----------------------------------------------------------------------------- scoreboard

def test_scoreboard_quick_mode(tmp_path, capsys):
    """Every loss x estimator and every switch row, each measured against its
    prediction; the quick board agrees with the tables everywhere."""
    from lab.experiments import scoreboard
    data = scoreboard.main(["--quick", f"--out={tmp_path}"])
    saved = json.loads((tmp_path / "scoreboard.json").read_text())
    assert saved["summary"].keys() == data["summary"].keys()
    grid = {f"{l} · {e}" for l in objectives.OBJECTIVES for e in estimators.ESTIMATORS}
    rows = grid | set(scoreboard.TOKEN_ROWS) | set(scoreboard.SWITCHES)
    assert rows == set(saved["summary"]) and saved["regimes"] == list(
        scoreboard.REGIMES
    )
    for row in saved["summary"].values():
        for cell in row.values():
            assert cell["exch_predicted"] in ("0", ">0") and 0 <= cell["exch_residual"] <= 1
    assert saved["mismatches"] == []
    assert "0 mismatches" in capsys.readouterr().out


def test_scoreboard_catches_a_wrong_verdict(monkeypatch):
    """The board can fail: claim that grpo's 1/L_i weights are exchangeable, and that
    reinforce_plus_plus is centred, and the measurements disagree."""
    from lab.experiments import scoreboard
    monkeypatch.setitem(objectives.OBJECTIVES, "grpo", dataclasses.replace(
        objectives.OBJECTIVES["grpo"], cancels=objectives.EVERY_REGIME))
    monkeypatch.setitem(estimators.ESTIMATORS, "reinforce_plus_plus", dataclasses.replace(
        estimators.ESTIMATORS["reinforce_plus_plus"], centred=True))
    board = scoreboard.score(["grpo · grpo", "dapo · reinforce_plus_plus"], 3)
    assert not board["grpo · grpo"]["on-policy"]["exch_match"]
    assert not board["dapo · reinforce_plus_plus"]["on-policy"]["whole_match"]


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("argv, msg", [
    (["--loss=ppo"], "choose one of grpo, .*vespo"),
    (["--loss=sapo", "--clip=sym"], "--loss=sapo has no ratio clip; leave --clip out"),
    (["--dual_clip=1"], "must be above 1"),
    (["--dual_clip=3", "--clip=none"], "needs --clip=sym or --clip=higher"),
    (["--dual_clip=3", "--loss=gspo"], "not to --loss=gspo"),
    (["--beta=-0.1"], "--beta must be 0"),
    (["--entropy_coef=-1"], "--entropy_coef must be 0"),
])
def test_bad_switches_are_one_line_errors(argv, msg):
    from plumbing.config import parse_args
    from plumbing.errors import CliError
    with pytest.raises(CliError, match=msg):
        parse_args(argv)
    parse_args(["--loss=sapo", "--clip=none", "--beta=0.04", "--entropy_coef=0.01"])
    parse_args(["--loss=dapo", "--dual_clip=3"])


@pytest.mark.parametrize("name", [n for n, o in objectives.OBJECTIVES.items() if o.clip == "none"])
def test_objectives_without_a_ratio_clip_default_to_clip_none(name):
    from plumbing.config import parse_args
    extra = ["--dro_beta=0.1"] if name == "dro" else []
    assert parse_args([f"--loss={name}"] + extra).clip == "none"
    assert parse_args(["--loss=grpo"]).clip == "sym"


# ----------------------------------------------------------------------------- dppo, dro (verl)

def test_dppo_tv_by_hand():
    # two tokens, A = +1, -1; pi_old = 0.5 everywhere; thresholds eps = 0.2 (clip=sym).
    # row 0 (A > 0): pi = 0.6 (+0.1: kept), 0.8 (+0.3 > 0.2: masked)
    # row 1 (A < 0): pi = 0.2 (-0.3 < -0.2: masked), 0.45 (kept)
    new = torch.tensor([[0.6, 0.8], [0.2, 0.45]]).log()
    old = torch.full((2, 2), 0.5).log()
    a, m, g = (
        torch.tensor([1.0, -1.0]),
        torch.ones(2, 2, dtype=torch.bool),
        torch.zeros(2, dtype=torch.long),
    )
    c, st = coef("dppo_tv", new, old, a, m, g, clip="sym")
    rho = new.exp() / 0.5
    torch.testing.assert_close(c, torch.tensor([[rho[0, 0] / 4, 0.0], [0.0, -rho[1, 1] / 4]]))
    assert st["clip_frac"] == 0.5
    # the IS weight capped at 1.1
    c, _ = coef("dppo_tv", new, old, a, m, g, clip="sym", dual_clip=1.1)
    torch.testing.assert_close(c, torch.tensor([[1.1 / 4, 0.0], [0.0, -0.9 / 4]]))


def test_dppo_kl_by_hand():
    # binary KL(0.5 || p) = 0.5 ln(0.5/p) + 0.5 ln(0.5/(1-p)): p = 0.6 -> 0.0204, p = 0.8 -> 0.2231
    assert float(engines.binary_kl(torch.tensor(0.5), torch.tensor(0.6))) == pytest.approx(
        0.5 * math.log(0.5 / 0.6) + 0.5 * math.log(0.5 / 0.4), abs=1e-6)
    new = torch.tensor([[0.6, 0.8], [0.2, 0.45]]).log()
    old = torch.full((2, 2), 0.5).log()
    a, m, g = (
        torch.tensor([1.0, -1.0]),
        torch.ones(2, 2, dtype=torch.bool),
        torch.zeros(2, dtype=torch.long),
    )
    # eps = 0.1: (0,0) KL 0.020 kept; (0,1) KL 0.223 with pi > pi_old masked;
    # (1,0) KL(0.5||0.2) = 0.223, pi < pi_old masked for A < 0; (1,1) KL 0.005 kept
    c, _ = coef("dppo_kl", new, old, a, m, g, clip="sym", clip_low=0.1)
    rho = new.exp() / 0.5
    torch.testing.assert_close(c, torch.tensor([[rho[0, 0] / 4, 0.0], [0.0, -rho[1, 1] / 4]]))
    # A > 0 with pi below pi_old is always kept, however far
    c, _ = coef(
        "dppo_kl",
        torch.tensor([[0.05]]).log(),
        old[:1, :1],
        a[:1],
        m[:1, :1],
        g[:1],
        clip="sym",
        clip_low=0.1,
    )
    torch.testing.assert_close(c, torch.tensor([[0.1]]))


def test_dro_by_hand():
    # c = (A - beta log rho) / sum L, token-mean over the 9 tokens
    c, _ = coef("dro", ON, OLD, A, dro_beta=0.5)
    torch.testing.assert_close(c, (per_seq(A) - 0.5 * LOGR * MASK) / 9)
    c, _ = coef("dro", ON, ON.detach(), A, dro_beta=0.5)  # on-policy: the plain policy gradient
    torch.testing.assert_close(c, per_seq(A) / 9)


# ----------------------------------------------------------------------------- switches


@pytest.mark.parametrize(
    "kind,grad",
    [
        ("k1", lambda d: torch.ones_like(d)),
        ("k2", lambda d: d),
        ("k3", lambda d: 1 - torch.exp(-d)),
        ("abs", torch.sign),
        ("k1+", lambda d: d),
        ("k3+", lambda d: d),
        ("abs+", lambda d: d),
    ],
)
def test_kl_estimators_value_and_gradient_by_hand(kind, grad):
    d = torch.tensor([-0.4, -0.1, 0.3, 0.7])
    lp = d.clone().requires_grad_(True)
    val = engines.kl_penalty(lp, torch.zeros(4), kind)
    base = kind.rstrip("+")
    expected = {"k1": d, "k2": d ** 2 / 2, "k3": torch.exp(-d) + d - 1, "abs": d.abs()}[base]
    torch.testing.assert_close(val.detach(), expected)
    val.sum().backward()
    torch.testing.assert_close(lp.grad, grad(d))


def test_beta_takes_the_estimator_and_the_objective_aggregation():
    ref = ON + 0.2 * MASK  # log pi - log pi_ref = -0.2 on every token
    c0, _ = coef("dapo", ON, ON.detach(), A, clip="sym")
    c, st = coef(
        "dapo", ON, ON.detach(), A, clip="sym", beta=0.5, ref_logprobs=ref, kl_loss_type="k1"
    )
    torch.testing.assert_close(c, c0 - 0.5 * MASK.float() / 9)  # k1: -beta * norm on every token
    c, _ = coef(
        "dapo", ON, ON.detach(), A, clip="sym", beta=0.5, ref_logprobs=ref, kl_loss_type="k2"
    )
    torch.testing.assert_close(c, c0 + 0.5 * 0.2 * MASK.float() / 9)  # k2: -beta d norm, d = -0.2
    assert st["kl_ref"] == pytest.approx(-0.2)


@pytest.mark.parametrize(
    "agg,norm",
    [
        ("token-mean", lambda: torch.full((3,), 1 / 9)),
        ("token-sum", lambda: torch.ones(3)),
        ("seq-mean-token-sum", lambda: torch.full((3,), 1 / 3)),
        ("seq-mean-token-mean", lambda: 1 / (3 * LENS)),
        ("seq-mean-token-sum-norm", lambda: torch.full((3,), 1 / 12)),
    ],
)
def test_agg_modes_by_hand(agg, norm):
    # on-policy, no clip: c = A * norm_i; L_max = 4 (the mask's width)
    c, _ = coef("grpo", ON, ON.detach(), A, agg=agg)
    torch.testing.assert_close(c, per_seq(A * norm()))


def test_entropy_keep_by_hand():
    # 8 tokens, entropies 0.1..0.8; q = 0.25 keeps those >= the 0.75 quantile = 0.625 (linear):
    # 0.7, 0.8
    h = torch.arange(1, 9, dtype=torch.float).reshape(2, 4) / 10
    m = torch.ones(2, 4, dtype=torch.bool)
    torch.testing.assert_close(
        engines.entropy_keep(h, m, 0.25).float(), torch.tensor([[0, 0, 0, 0], [0, 0, 1, 1.0]])
    )
    assert bool(engines.entropy_keep(h, m, 1.0).all())
    m[1, 3] = False  # a masked token is never kept, nor counted: 7 tokens, 0.75 quantile = 0.55
    torch.testing.assert_close(
        engines.entropy_keep(h, m, 0.25).float(), torch.tensor([[0, 0, 0, 0], [0, 1, 1, 0.0]])
    )


def test_off_policy_keep_by_hand():
    # mean_t log(pi_old/pi): row 0 = 0.3 (A < 0: dropped at delta 0.2), row 1 = 0.3 (A > 0: kept),
    # row 2 = 0.1 (A < 0, below delta: kept)
    new = torch.zeros(3, 2)
    old = torch.tensor([[0.2, 0.4], [0.3, 0.3], [0.1, 0.1]])
    keep = engines.off_policy_keep(
        new, old, torch.ones(3, 2, dtype=torch.bool), torch.tensor([-1.0, 1.0, -1.0]), 0.2
    )
    torch.testing.assert_close(keep.float(), torch.tensor([[0, 0], [1, 1], [1, 1.0]]))


def test_keep_stops_the_policy_gradient_of_dropped_tokens_only():
    keep = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 1]], dtype=torch.bool)
    for name in ("grpo", "dapo", "cispo", "dfpo_min", "vespo"):
        c0, _ = coef(name, ON, OLD, A, clip="none")
        c, st = coef(name, ON, OLD, A, clip="none", keep=keep & MASK)
        torch.testing.assert_close(c, c0 * (keep & MASK).float())
        assert st["kept_frac"] == pytest.approx(6 / 9)
