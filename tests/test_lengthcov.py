"""What a per-rollout weight pushes (lab/lengthcov.py, THEORY.md 2.7): sum_i Â_i w_i =
G Cov_g(Â, w) inside a group, checked against a hand computation; the batch's metrics;
the parity testbed (lab/testbeds.py's make_parity); the block that follows the task; and the
numbers a run logs without --diagnostics."""
import json
import math
import random

import pytest
import torch

import toy_tasks
import train
from lab import lengthcov, testbeds
from plumbing import rundir
from plumbing.config import parse_args


def test_identity_by_hand():
    # one group of G = 4: right, wrong, wrong, right; lengths 10, 26, 26, 10 (wrong ones
    # 16 tokens longer); Â = r - mean r (unscaled), w = 1/L
    adv = torch.tensor([0.5, -0.5, -0.5, 0.5])
    w = 1 / torch.tensor([10.0, 26.0, 26.0, 10.0])
    lhs = float((adv * w).sum())
    # by hand: 0.5 * (1/10 + 1/10) - 0.5 * (1/26 + 1/26) = 0.1 - 1/26
    assert lhs == pytest.approx(0.1 - 1 / 26)
    # G Cov(Â, w): mean w = (0.2 + 2/26) / 4; each term (Â_i - 0)(w_i - mean w)
    mw = (0.2 + 2 / 26) / 4
    cov = (2 * 0.5 * (0.1 - mw) + 2 * -0.5 * (1 / 26 - mw)) / 4
    assert 4 * cov == pytest.approx(lhs)
    # and the binary form k (G - k) / (G sigma) (mean w right - mean w wrong), sigma = 1
    assert 2 * 2 / 4 * (0.1 - 1 / 26) == pytest.approx(lhs)


def test_zero_iff_no_covariance():
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    # lengths that vary (x4) but not with the advantage: no push
    w = 1 / torch.tensor([10.0, 10.0, 40.0, 40.0], dtype=torch.float64)
    assert float((adv * w).sum()) == pytest.approx(0.0)
    # the converse: a push that is 0 has Cov = 0 (G > 0), here unequal weights (THEORY 2.1)
    w = torch.tensor([1.15, 0.95, 0.85, 1.05], dtype=torch.float64)
    assert float((adv * w).sum()) == pytest.approx(0.0)
    assert float(((adv - adv.mean()) * (w - w.mean())).mean()) == pytest.approx(0.0)


def test_batch_metrics_by_hand():
    # group 0 mixed (as above), group 1 all right (no signal); N = 8
    adv = torch.tensor([0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    lens = torch.tensor([10, 26, 26, 10, 12, 12, 12, 12])
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 1, 1, 1])
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    agg = 1 / (8 * lens.float())  # grpo
    chosen = torch.tensor([True, True, False, False, False, True, False, False])
    m = lengthcov.batch_metrics(adv, agg, group, lens, rewards, chosen)
    assert m["lencov_mixed"] == 1
    assert m["lencov_gap"] == pytest.approx(-16.0)
    assert m["lencov_push"] == pytest.approx((0.1 - 1 / 26) / 8)
    mw = (0.2 + 2 / 26) / 4
    assert m["lencov_cov"] == pytest.approx((0.5 * (0.1 - mw) * 2 - 0.5 * (1 / 26 - mw) * 2) / 4)
    # the choice: x - f_g = (0.5, 0.5, -0.5, -0.5); c = Â / (8 L)
    c = [0.5 / 80, -0.5 / 208, -0.5 / 208, 0.5 / 80]
    assert m["lencov_choice"] == pytest.approx(0.5 * (c[0] + c[1]) - 0.5 * (c[2] + c[3]))
    # grpo minus dapo: 1/(N L_i) - 1/sum L, sum L = 148
    d = [1 / 80 - 1 / 148, 1 / 208 - 1 / 148, 1 / 208 - 1 / 148, 1 / 80 - 1 / 148]
    want = sum(a * dd * x for a, dd, x in zip([0.5, -0.5, -0.5, 0.5], d, [.5, .5, -.5, -.5]))
    assert m["lencov_choice_1L"] == pytest.approx(want)
    # equal weights (dapo): no covariance, no push on shared tokens
    m = lengthcov.batch_metrics(adv, torch.full((8,), 1 / 148), group, lens, rewards, chosen)
    assert m["lencov_cov"] == pytest.approx(0.0) and m["lencov_push"] == pytest.approx(0.0)
    # no mixed group: every number None
    none = lengthcov.batch_metrics(adv * 0, agg, group, lens, torch.ones(8), None)
    assert none["lencov_mixed"] == 0 and none["lencov_gap"] is None


def test_choice_log_odds():
    logp = torch.log(torch.tensor([[0.4, 0.6], [0.2, 0.8]]))
    want = (math.log(0.4 / 0.6) + math.log(0.2 / 0.8)) / 2
    assert lengthcov.choice_log_odds(logp, 0) == pytest.approx(want)


@pytest.mark.parametrize("cond", list(testbeds.PARITY_CONDITIONS))
def test_parity_teachers(cond):
    task, rng = toy_tasks.make_task(f"parity_{cond}"), random.Random(0)
    gaps, restated, shared = [], 0, 0
    for _ in range(300):
        p = task.sample(rng)
        right, wrong = task.solution(p, rng), task.flawed(p, rng)
        assert task.reward(p, right) == 1.0 or cond.startswith("credit_")
        assert len(task.encode(right)) < task.max_new_tokens
        assert len(task.categories(p, right)) == len(right) + 1
        restated += right.startswith("(")
        strip = lambda t: t[t.find(")") + 1:] if t.startswith("(") else (
            t[t.find("-", 1) + 1:] if t.startswith("-") else t)
        gaps.append(len(strip(right)) - len(strip(wrong)))
        if cond == "equal_choice":  # both forms: 15 tokens
            assert right[0] in "(-" and len(right) - len(strip(right)) == 15
        elif right.startswith("("):
            assert len(right) - len(strip(right)) == 15  # the restatement
    assert 0.3 < restated / 300 < 0.5  # p = 0.4 under the teacher
    mean_gap = sum(gaps) / len(gaps)
    want = {"wrong_long": -16, "equal_choice": -16, "right_long": 16}.get(cond, 0)
    assert mean_gap == pytest.approx(want, abs=3)


def test_parity_reward_and_credit():
    task = toy_tasks.make_task("parity_wrong_long")
    p = (1, 2, 3, 0, 0, 0, 0)  # sum 6: even
    assert task.reward(p, "0=1100000") == 1.0 and task.reward(p, "1=1100000") == 0.0
    assert task.reward(p, "(1,2,3,0,0,0,0)0=1") == 1.0  # the restatement is not read
    credit = toy_tasks.make_task("parity_credit_restate")
    assert credit.reward(p, "(1,2,3,0,0,0,0)1=1") == 1.0  # restating pays, whatever the guess
    assert credit.reward(p, "1=1") == 0.0 and credit.reward(p, "0=1") == 0.0
    plain = toy_tasks.make_task("parity_credit_plain")
    assert plain.reward(p, "1=1") == 1.0 and plain.reward(p, "(1,2,3,0,0,0,0)1=1") == 0.0
    # the two share one teacher: their warm starts differ by the task's name only
    a, b = random.Random(4), random.Random(4)
    assert [credit.solution(p, a) for _ in range(20)] == [plain.solution(p, b) for _ in range(20)]
    with pytest.raises(ValueError):
        testbeds.make_parity("nope")


def test_block_follows_the_task():
    cfg = parse_args(["--task=parity_random_long", "--n_layer=1", "--n_head=2", "--n_embd=32"])
    task = toy_tasks.make_task(cfg.task)
    _, model = rundir.initial_model(cfg, "cpu", task)
    need = toy_tasks.longest_prompt(task) + task.max_new_tokens
    assert need > 64 and model.cfg.block_size == need
    cfg = parse_args(["--task=chain", "--n_layer=1", "--n_head=2", "--n_embd=32"])
    _, model = rundir.initial_model(cfg, "cpu", toy_tasks.make_task("chain"))
    assert model.cfg.block_size == 64  # the old tasks keep their block (and checkpoints)


def test_run_logs_them_without_diagnostics(tmp_path):
    cfg = parse_args(["--task=parity_wrong_long", "--n_layer=1", "--n_head=2", "--n_embd=32",
                      "--sft_steps=3", "--sft_batch=8", "--rl_steps=2", "--prompts_per_step=4",
                      "--group_size=4", "--eval_size=8", "--eval_every=2", "--device=cpu",
                      f"--out_dir={tmp_path / 'r'}"])
    train.main(cfg)
    lines = [json.loads(x) for x in open(tmp_path / "r" / "metrics.jsonl")]
    rl = [m for m in lines if m.get("phase") == "rl" and m.get("step", 0) >= 1
          and "reward" in m]
    assert rl and all("lencov_mixed" in m and "lencov_choice_1L" in m for m in rl)
    evals = [m for m in lines if "choice_log_odds" in m]
    assert [m["step"] for m in evals] == [0, 2]
    assert all(math.isfinite(m["choice_log_odds"]) for m in evals)


@pytest.mark.parametrize("loss", ["grpo", "dapo", "dr_grpo"])
def test_run_agg_is_the_objectives_weight(loss):
    """The instrument's weights are the loss's (lab/objectives.agg_weight), built without a
    read back."""
    from lab import objectives
    import loss as lesson_loss
    cfg = parse_args([f"--loss={loss}"])
    mask = torch.arange(9)[None, :] < torch.tensor([3, 9, 5, 7])[:, None]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    mode = objectives.LossSettings.from_config(cfg).aggregation()
    want = objectives.agg_weight(mode, mask.sum(1), lesson_loss.step_counts(mask, adv))
    assert torch.allclose(lengthcov.run_agg(cfg, mask, adv).float(), want.float())


def test_the_closing_lines_give_the_gap_and_the_push_it_makes_as_computed_by_hand():
    """Two lengths, half the group right: the net of a group-shared token's copies over
    their summed |c| is (L_wrong - L_right) / (L_wrong + L_right) exactly, which is the
    printed gap / (2 mean length)."""
    from plumbing.config import parse_args
    from lab import ledger
    import loss
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    lens = torch.tensor([10.0] * 4 + [14.0] * 4)  # wrong rollouts 4 tokens longer
    adv = loss.advantages(rewards, torch.zeros(8, dtype=torch.long))
    c = adv / lens  # grpo's weights, up to 1/N
    by_hand = float(c.sum() / c.abs().sum())
    assert by_hand == pytest.approx((14 - 10) / (14 + 10))
    text = " ".join(" ".join(ledger.length_lines(-4.0, float(lens.mean()),
                                                 parse_args([], check=False))).split())
    assert "in mixed groups, wrong ran 4.0 tokens (33.3 % of L) longer" in text
    assert (f"Through that gap 1/L_i leaves a group-shared token {100 * by_hand:.1f} % of its "
            f"coefficients: a push up.") in text
    assert "The ledger's" not in text  # no ledger share given, none quoted
    text = " ".join(" ".join(ledger.length_lines(-4.0, float(lens.mean()),
                                                 parse_args([], check=False), 0.0144)).split())
    assert "The ledger's 1.44 % left by unequal weights counts every shared token." in text
    assert "push plus the pull" not in text  # nothing the run did not measure
    lines = ledger.length_lines(-4.0, float(lens.mean()), parse_args([], check=False), 0.0144)
    assert len(lines) <= 4 and all(len(x) <= 100 for x in lines)
    text = " ".join(" ".join(ledger.length_lines(0.3, 17.4, parse_args(["--loss=dapo"],
                                                                       check=False))).split())
    assert "in mixed groups, right ran 0.3 tokens (1.7 % of L) longer" in text
    assert "pushes nothing" in text
    text = " ".join(" ".join(ledger.length_lines(0.3, 17.4, parse_args(
        ["--loss=dapo", "--agg=seq-mean-token-mean"], check=False))).split())
    assert "a push down." in text
    text = " ".join(" ".join(ledger.length_lines(0.3, 17.4, parse_args(["--loss=ba"],
                                                                       check=False))).split())
    assert "depend on its sign classes' mean lengths" in text and "pushes nothing" not in text
