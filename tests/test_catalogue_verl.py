"""The catalogue's three late entries against numbers worked by hand: GDPO's advantages
(one reward), Balanced Aggregation's weights (arXiv 2605.04077) and verl's optimal token
baseline; and the scoreboard's verdicts for the first two."""
import math

import pytest
import torch

from lab import estimators, objectives, residuals


def test_gdpo_is_grpo_then_a_token_weighted_whitening():
    # one group, rewards 1 0 0 0: z = 1.5, -0.5, -0.5, -0.5 (mu 0.25, Bessel sd 0.5)
    # lengths 3 1 1 1: token mean m = (4.5 - 1.5) / 6 = 0.5, so z - m = 1, -1, -1, -1;
    # token variance 6/6 * 6/5 = 1.2, so A = (z - m) / sqrt(1.2)
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    a = estimators.advantages(r, torch.zeros(4, dtype=torch.long), "gdpo",
                              lengths=torch.tensor([3, 1, 1, 1]))
    want = torch.tensor([1.0, -1.0, -1.0, -1.0]) / math.sqrt(1.2)
    assert torch.allclose(a, want, atol=1e-5)
    assert abs(float(a.sum())) > 1.0  # not centred: the estimator's record says so
    assert not estimators.estimator("gdpo").centred


def test_gdpo_is_centred_where_lengths_are_equal():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    a = estimators.advantages(r, torch.tensor([0, 0, 0, 1, 1, 1]), "gdpo",
                              lengths=torch.full((6,), 4))
    assert abs(float(a[:3].sum())) < 1e-6 and abs(float(a[3:].sum())) < 1e-6


def _coefficients(adv, lens, group):
    """c_i = -d loss / d log pi of --loss=ba on-policy (one token per unit of length)."""
    T = int(lens.max())
    mask = torch.arange(T)[None] < lens[:, None]
    new = torch.zeros(len(lens), T, dtype=torch.float64, requires_grad=True)
    batch = objectives.LossBatch(new, new.detach(), mask, adv.double(), group)
    total, _ = objectives.policy_loss(batch, objectives.LossSettings("ba", "higher"))
    total.backward()
    return -new.grad


def test_balanced_aggregation_weights_by_hand():
    # group 0: lengths 2 3 4 1, signs + - - -: n_+ = 1, T_+ = 2, n_- = 3, T_- = 8, n_± = 4;
    # K = 2 groups. agg = n_s / (K n_± T_s): 1/(2*4*2) = 1/16 and 3/(2*4*8) = 3/64.
    # group 1: signs + 0 - -: the zero row gets 0; n_+ = 1, T_+ = 5; n_- = 2, T_- = 3, n_± = 3
    lens = torch.tensor([2, 3, 4, 1, 5, 2, 1, 2])
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = torch.tensor([0.75, -0.25, -0.25, -0.25, 1.0, 0.0, -0.5, -0.5])
    want = torch.tensor([1 / 16, 3 / 64, 3 / 64, 3 / 64,
                         1 / (2 * 3 * 5), 0.0, 2 / (2 * 3 * 3), 2 / (2 * 3 * 3)])
    counts = {"n_seqs": 8, "max_len": 5, "n_tokens": int(lens.sum())}  # unread by this mode
    got = objectives.agg_weight("balanced-token-mean", lens, counts, adv, group)
    assert torch.allclose(got.double(), want.double(), atol=1e-7)
    c = _coefficients(adv, lens, group)
    mask = torch.arange(5)[None] < lens[:, None]
    assert torch.allclose(c, (adv * want).double()[:, None] * mask, atol=1e-9)
    # per unit |Â|, group 0's positive tokens weigh n_+ = 1 and its negative tokens n_- = 3,
    # over K n_± = 8: sum_t agg over each subset's tokens is 1/8 and 3/8
    tok = (want[:, None] * mask)[:4]
    assert float(tok[:1].sum()) == pytest.approx(1 / 8) and float(tok[1:].sum()) == (
        pytest.approx(3 / 8))


def test_balanced_aggregation_cancels_a_group_shared_token_iff_mean_lengths_agree():
    adv = torch.tensor([0.5, 0.5, -0.5, -0.5])
    group = torch.zeros(4, dtype=torch.long)
    even = _coefficients(adv, torch.tensor([2, 2, 3, 1]), group)   # mean 2 and mean 2
    uneven = _coefficients(adv, torch.tensor([2, 2, 4, 4]), group)  # mean 2 and mean 4
    assert abs(float(even[:, 0].sum())) < 1e-12
    # positives 2 * 0.5 * (2/(4*4)) = 1/8; negatives -2 * 0.5 * (2/(4*8)) = -1/16
    assert float(uneven[:, 0].sum()) == pytest.approx(1 / 8 - 1 / 16)


def test_optimal_token_baseline_by_hand():
    # one group of two rows: rewards 1, 0; lengths 2, 1.
    # pi of the sampled tokens: row 0: 0.5, 0.8; row 1: 0.2. sum_v pi^2: 0.5, 0.7; 0.5.
    # w = 1 - 2 pi + sum pi^2: row 0: 0.5, 0.1; row 1: 1.1. W = cumsum: 0.5, 0.6; 1.1.
    # B_0 = (1 * 0.5 + 0 * 1.1) / 1.6 = 0.3125; B_1 = (1 * 0.6) / 0.6 = 1 (row 1 has ended)
    mask = torch.tensor([[True, True], [True, False]])
    old = torch.tensor([[0.5, 0.8], [0.2, 1.0]]).log().double()
    spsq = torch.tensor([[0.5, 0.7], [0.5, 0.0]]).double()
    a = estimators.optimal_token_baseline(torch.tensor([1.0, 0.0]), torch.tensor([3, 3]),
                                          mask, old, spsq)
    want = torch.tensor([[1 - 0.3125, 0.0], [-0.3125, 0.0]]).double()
    assert torch.allclose(a, want, atol=1e-7)


def test_optimal_token_baseline_centres_a_token_the_whole_group_shares():
    # the same first token after the same prompt: the same pi and sum pi^2 on every copy
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 3, dtype=torch.bool)
    old = torch.rand(4, 3, generator=g, dtype=torch.float64).clamp(0.05).log()
    old[:, 0] = math.log(0.4)
    spsq = torch.rand(4, 3, generator=g, dtype=torch.float64) * 0.5 + 0.2
    spsq[:, 0] = 0.3
    a = estimators.optimal_token_baseline(torch.tensor([1.0, 0.0, 1.0, 0.0]),
                                          torch.zeros(4, dtype=torch.long), mask, old, spsq)
    assert abs(float(a[:, 0].sum())) < 1e-6
    assert torch.allclose(a[:, 0], torch.tensor([0.5, -0.5, 0.5, -0.5]).double(), atol=1e-6)
    # a lone row has no baseline
    lone = estimators.optimal_token_baseline(torch.tensor([1.0]), torch.tensor([0]),
                                             mask[:1], old[:1], spsq[:1])
    assert torch.allclose(lone, torch.ones(1, 3, dtype=torch.float64))


@pytest.mark.parametrize("row", ["ba · grpo", "dapo · gdpo"])
def test_the_scoreboard_agrees_with_the_records(row):
    from lab.experiments import scoreboard
    board = scoreboard.score([row], 3)
    for regime in objectives.REGIMES:
        cell = board[row][regime]
        assert cell["exch_match"] and cell["whole_match"], (regime, cell)
    if row == "ba · grpo":  # unequal weights by sign: a residual, in every regime
        assert all(board[row][r]["exch_residual"] > 1e-6 for r in objectives.REGIMES)
    else:  # dapo's equal weights, but gdpo is not centred: only the whole group's sum is off
        assert board[row]["on-policy"]["exch_residual"] < 1e-6
        assert board[row]["on-policy"]["whole_group"] > 1e-6


def test_exch_residual_reads_one_advantage_per_token_by_hand():
    # one group of three rows: all share their first token (a set of three copies); rows 0
    # and 2 also share the second (a set of two), where their A differ from the first's
    tokens = torch.tensor([[5, 1], [5, 2], [5, 1]])
    mask = torch.ones(3, 2, dtype=torch.bool)
    group = torch.zeros(3, dtype=torch.long)
    adv = torch.tensor([[0.6, 0.3], [-0.2, 0.5], [-0.4, -0.3]], dtype=torch.float64)
    equal = 0.5 * adv  # the same weight on every copy: nothing beyond the credit
    assert residuals.exch_residual(equal, adv, tokens, mask, group) < 1e-12
    # weights 1, 1, 0.5 by row. First set: c = (0.6, -0.2, -0.2), sum A = 0, so res =
    # |0.6 - 0.2 - 0.2| / 1.0 = 0.2. Second: c = (0.3, -0.15), wbar = 0.45 / 0.6 = 0.75,
    # sum A = 0, res = 0.15 / 0.45 = 1/3. Mean (0.2 + 1/3) / 2. (Read from column 0,
    # A = (0.6, -0.4) there would give wbar 0.45, res |0.15 - 0.09| / 0.45 and a mean 1/6.)
    c = adv * torch.tensor([[1.0], [1.0], [0.5]], dtype=torch.float64)
    assert residuals.exch_residual(c, adv, tokens, mask, group) == pytest.approx((0.2 + 1 / 3) / 2)


def test_the_scoreboard_scores_the_optimal_token_baseline_per_token():
    """OTB's A_{i,t} reach the coefficients token by token: dapo's token mean keeps the
    copies' weights equal and the group-shared token cancels (B_t = the group's mean
    there); grpo's 1/L_i does not; and deeper in the rollouts A is not r - mu."""
    from lab.experiments import scoreboard
    board = scoreboard.score(list(scoreboard.TOKEN_ROWS), 3)
    for row in scoreboard.TOKEN_ROWS:
        for regime in objectives.REGIMES:
            assert board[row][regime]["exch_match"] and board[row][regime]["whole_match"]
    dapo, grpo = (board[f"{o} · optimal_token_baseline"]["on-policy"] for o in ("dapo", "grpo"))
    assert dapo["exch_residual"] < 1e-6 and dapo["whole_group"] < 1e-6
    assert grpo["exch_residual"] > 1e-3 and grpo["whole_group"] > 1e-3
    b = scoreboard.make_batch("on-policy", 3)
    _, a = scoreboard.coefficients(b, "dapo · optimal_token_baseline")
    mu = estimators.advantages(b["rewards"], b["group"], "dr_grpo")  # r - mu
    assert a.shape == b["mask"].shape
    assert torch.allclose(a[:, 0], mu.double(), atol=1e-6)  # centred where all share
    assert float(((a - mu[:, None].double()) * b["mask"]).abs().max()) > 1e-2  # not below


def test_the_reports_scoreboard_tables_are_the_jsons():
    """results/README.md's three exchangeability tables, each as the committed board
    generates it (scoreboard.report_tables), and the row count its verdict states."""
    import json
    import os
    from lab.experiments import scoreboard
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    data = json.load(open(os.path.join(root, "results", "scoreboard.json")))
    report = open(os.path.join(root, "results", "README.md")).read()
    objective, switch, token = scoreboard.report_tables(data)
    assert objective in report and switch in report
    assert "| per-token Â " + token[len("| row "):] in report
    assert f"{len(data['summary'])} rows × 4 regimes × 2 measures" in report
    assert data["mismatches"] == [] and set(data["token_rows"]) == set(scoreboard.TOKEN_ROWS)
