"""The advantage estimators (advantage.py): each by hand or by an independent
route, which ones are centred inside a group (both ways), and --adv in a run."""
import json
import math
import os

import pytest
import torch
import loss
import train
from plumbing.config import parse_args
from plumbing.errors import CliError
from tests.test_docs import rows
from lab import estimators, objectives

R = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
G = torch.tensor([0, 0, 0, 1, 1, 1])
LENS = torch.tensor([2, 4, 6, 3, 3, 6])


def test_grpo_dr_grpo_rloo_by_hand():
    s = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # sample sd of (1, 0, 0)
    a = torch.tensor([2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3])
    torch.testing.assert_close(estimators.advantages(R, G, "dr_grpo"), a)
    torch.testing.assert_close(estimators.advantages(R, G, "grpo"), a / (s + 1e-6))
    torch.testing.assert_close(
        estimators.advantages(R, G, "rloo"), torch.tensor([1.0, -0.5, -0.5, 0.5, 0.5, -1.0])
    )


def test_batch_estimators_by_hand():
    sd_b = math.sqrt(6 * 0.25 / 5)  # sample sd of three 1s and three 0s
    a = torch.tensor([2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3])
    torch.testing.assert_close(estimators.advantages(R, G, "grpo_batch_std"), a / (sd_b + 1e-6))
    torch.testing.assert_close(
        estimators.advantages(R, G, "batch_whiten"), (R - 0.5) / (sd_b + 1e-6)
    )
    # alpha = N / #{r != 0} = 6/3
    torch.testing.assert_close(estimators.advantages(R, G, "gpg"), a * 6 / 3)


def _token_route(x, lens):
    """verl's masked_whiten, written out: one entry per token, torch.var (unbiased)."""
    tok = torch.cat([x[i].repeat(int(n)) for i, n in enumerate(lens)])
    return (x - tok.mean()) / torch.sqrt(tok.var(unbiased=True) + 1e-8)


def test_reinforce_plus_plus_rows_by_the_token_route():
    torch.testing.assert_close(estimators.advantages(R, G, "reinforce_plus_plus", lengths=LENS),
                               _token_route(R, LENS))
    x = estimators.advantages(R, G, "dr_grpo")
    torch.testing.assert_close(
        estimators.advantages(R, G, "reinforce_plus_plus_baseline", lengths=LENS),
        _token_route(x, LENS),
    )


def test_opo_remax_passk_by_hand():
    # opo, group 0: b = (2*1 + 4*0 + 6*0) / 12 = 1/6; group 1: b = (3 + 3 + 0) / 12 = 1/2
    torch.testing.assert_close(estimators.advantages(R, G, "opo", lengths=LENS),
                               torch.tensor([5 / 6, -1 / 6, -1 / 6, 0.5, 0.5, -0.5]))
    base = torch.tensor([0.0, 0, 0, 1, 1, 1])
    torch.testing.assert_close(estimators.advantages(R, G, "remax", baseline=base),
                               torch.tensor([1.0, 0, 0, 0, 0, -1]))
    # pass@k: group 0 has one correct: it gets (1 - 0)/(sd + eps);
    # group 1 has two: r_max - r_2nd = 0
    s = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    torch.testing.assert_close(estimators.advantages(R, G, "grpo_passk"),
                               torch.tensor([1 / (s + 1e-6), 0, 0, 0, 0, 0]))


def test_every_estimator_is_centred_exactly_when_the_table_says():
    """Both ways: a centred row gives sum_g A = 0 on every random batch; any other
    row gives a non-zero sum on some group of some batch."""
    g = torch.Generator().manual_seed(0)
    for est in estimators.ESTIMATORS:
        worst = 0.0
        for _ in range(20):
            grp = torch.arange(5).repeat_interleave(4)
            r = (torch.rand(20, generator=g) < 0.5).float()
            lens = torch.randint(1, 9, (20,), generator=g)
            base = (torch.rand(5, generator=g) < 0.5).float().repeat_interleave(4)
            a = estimators.advantages(r, grp, est, lengths=lens, baseline=base)
            # sum_g A, on every row
            worst = max(worst, float(loss.group_sum(a, grp).abs().max()))
        assert (worst < 1e-5) == estimators.ESTIMATORS[est].centred, (est, worst)


def test_one_signed_estimators_are_never_negative():
    r = torch.tensor([1.0, 0, 1, 1, 0, 0, 0, 0])
    grp = torch.arange(2).repeat_interleave(4)
    for est in [e for e, rec in estimators.ESTIMATORS.items() if rec.one_signed]:
        assert bool((estimators.advantages(r, grp, est) >= 0).all()), est


def test_auto_keeps_every_loss_on_its_own_estimator():
    """The loss table's advantage column is the start of the estimator row --adv=auto picks."""
    est = rows(estimators.table())
    for name, (adv_cell, _, _) in rows(objectives.table()).items():
        chosen = objectives.own_estimator(name)
        assert est[chosen][0].startswith(adv_cell), (name, chosen)
        assert (
            parse_args([f"--loss={name}"] + (["--dro_beta=0.1"] if name == "dro" else [])).adv
            == chosen
        )


def test_unknown_or_unfed_estimators_fail_loudly():
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        estimators.advantages(R, G, "ppo")
    with pytest.raises(ValueError, match="lengths"):
        estimators.advantages(R, G, "opo")
    with pytest.raises(ValueError, match="greedy baseline"):
        estimators.advantages(R, G, "remax")
    with pytest.raises(CliError, match="unknown advantage estimator"):
        parse_args(["--adv=ppo"])


TINY = [
    "--n_layer=1",
    "--n_head=2",
    "--n_embd=32",
    "--sft_steps=2",
    "--sft_batch=8",
    "--rl_steps=1",
    "--prompts_per_step=3",
    "--group_size=4",
    "--eval_size=8",
    "--device=cpu",
]


@pytest.mark.parametrize(
    "est", ["remax", "reinforce_plus_plus", "opo", "grpo_passk", "batch_whiten"]
)
def test_an_estimator_runs_and_is_logged(tmp_path, est):
    train.main(parse_args(TINY + [f"--adv={est}", f"--out_dir={tmp_path}"]))
    assert json.load(open(os.path.join(tmp_path, "config.json")))["adv"] == est


def test_permute_within_groups_keeps_each_groups_rewards():
    r = torch.tensor([1.0, 2, 3, 4, 10, 20, 30, 40, 7, 7])
    grp = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    moved = 0
    for seed in range(5):
        out = estimators.permute_within_groups(r, grp, torch.Generator().manual_seed(seed))
        for k in range(3):
            assert sorted(out[grp == k].tolist()) == sorted(r[grp == k].tolist())
        moved += int(not torch.equal(out, r))
    assert moved >= 4
    again = estimators.permute_within_groups(r, grp, torch.Generator().manual_seed(0))
    assert torch.equal(
        again, estimators.permute_within_groups(r, grp, torch.Generator().manual_seed(0))
    )


def test_sgd_and_permuted_rewards_run(tmp_path):
    train.main(parse_args(TINY + ["--optimizer=sgd", "--permute_rewards", f"--out_dir={tmp_path}"]))
    ck = torch.load(os.path.join(tmp_path, "ckpt.pt"), weights_only=True)
    groups = ck["resume"]["optimizer"]["param_groups"]
    # torch.optim.SGD's state, not AdamW's
    assert "momentum" in groups[0] and "betas" not in groups[0]
    conf = json.load(open(os.path.join(tmp_path, "config.json")))
    assert conf["optimizer"] == "sgd" and conf["permute_rewards"] is True
    with pytest.raises(CliError, match="unknown optimizer"):
        parse_args(["--optimizer=adam"])


def test_eps_reaches_every_estimator_whose_formula_divides_by_a_sd():
    """eps moves exactly the rows whose formula adds it (none accepts it and ignores it);
    grpo at TRL's 1e-4 agrees with an independent computation (statistics.stdev, float64,
    TRL's scale_rewards="group"); the default stays loss.EPS, to the bit."""
    import statistics
    g = torch.Generator().manual_seed(0)
    r = torch.randint(0, 2, (24,), generator=g).float() * torch.rand(24, generator=g)
    group = torch.arange(6).repeat_interleave(4)
    lens = torch.randint(1, 9, (24,), generator=g)
    base = torch.randint(0, 2, (24,), generator=g).float()
    for name, est in estimators.ESTIMATORS.items():
        a, b = (estimators.advantages(r, group, name, lens, base, eps=e) for e in (1e-6, 0.5))
        assert (not torch.equal(a, b)) == ("eps" in est.formula), name
    got = estimators.advantages(r, group, "grpo", eps=1e-4)
    rows = r.tolist()
    want = []
    for i, x in enumerate(rows):
        mine = [y for y, k in zip(rows, group.tolist()) if k == group[i]]
        want.append((x - statistics.fmean(mine)) / (statistics.stdev(mine) + 1e-4))
    torch.testing.assert_close(got, torch.tensor(want), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, estimators.advantages(r, group, "grpo"), rtol=0, atol=1e-7)
    assert torch.equal(estimators.advantages(r, group, "grpo"), loss.advantages(r, group))
    assert torch.equal(loss.advantages(r, group), loss.advantages(r, group, eps=loss.EPS))
