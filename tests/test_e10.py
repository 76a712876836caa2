"""E10's pieces: the chain_check task (a check changes the length, never the reward),
the per-step lengths train.py logs, the length change, and the quick run's contrasts
recomputed from its own records."""
import json
import random

import pytest
import torch

import toy_tasks
import train
from lab import batch_stats, testbeds
from sampler import Rollouts
from test_experiments_e78 import _load
from lab.experiments import e10_length


def test_a_check_changes_the_length_and_not_the_reward():
    task, rng = toy_tasks.make_task("chain_check"), random.Random(0)
    seen = set()
    for _ in range(300):
        p = task.sample(rng)
        for text in (task.solution(p, rng), task.flawed(p, rng)):
            steps = text[text.find(")") + 1:].replace(";", ",").split(",")
            checks = len(steps) - (len(p) - 1) // 2  # steps beyond one per operation
            seen.add(checks)
            unchecked = text
            for _ in range(checks):  # each check is ",<the last step>"
                assert unchecked.endswith("," + steps[-1])
                unchecked = unchecked[:-len(steps[-1]) - 1]
            assert task.reward(p, text) == task.reward(p, unchecked)
            assert len(task.categories(p, text)) == len(text) + 1
            assert len(text) + 1 <= task.max_new_tokens
    assert seen == {0, 1, 2}  # every number of checks, 0 to 2, occurs


def test_chain_is_unchanged_by_the_checks():
    """chain (no checks) draws the same completions from the same random stream."""
    plain, checked = toy_tasks.make_task("chain"), testbeds.make_chain(max_checks=0)
    a, b = random.Random(3), random.Random(3)
    for _ in range(50):
        p, q = plain.sample(a), checked.sample(b)
        assert p == q and plain.solution(p, a) == checked.solution(q, b)


def test_lengths_by_outcome_by_hand():
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    batch = Rollouts(prompts=[[]] * 4, tokens=torch.zeros(4, 4, dtype=torch.long), mask=mask,
                     old_logprobs=torch.zeros(4, 4), group=torch.zeros(4, dtype=torch.long),
                     rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]))
    assert batch_stats.lengths_by_outcome(batch) == {"length_correct": 2.5, "length_incorrect": 2.5}
    batch.rewards = torch.tensor([1.0, 1.0, 1.0, 1.0])
    assert batch_stats.lengths_by_outcome(batch) == {"length_correct": 2.5,
                                                     "length_incorrect": None}


def test_length_change_by_hand():
    assert e10_length.length_change([4, None, 6, 7, 8, 9], 2) == pytest.approx(8.5 - 4)
    assert e10_length.length_change([None, None, 6, 7], 2) is None
    assert e10_length.length_change([1, 2, 3], 1) == 2


def test_cut_checks_by_hand():
    """The completion cut after its third step; the restatement's own '+' and ')' are not
    steps, and ';' separates steps as ',' does."""
    cut = e10_length.cut_checks
    assert cut("(3+4*2-5)3+4=7,7*2=14;14-5=9,14-5=9,14-5=9", 3) == "(3+4*2-5)3+4=7,7*2=14;14-5=9"
    assert cut("3+4=7,7*2=14,14-5=9", 3) == "3+4=7,7*2=14,14-5=9"
    assert cut("3+4=7,7*2=14", 3) == "3+4=7,7*2=14"  # fewer steps: whole
    task = toy_tasks.make_task("chain_check")
    p = (3, "+", 4, "*", 2, "-", 5)
    miscopied = "3+4=7,7*2=14,14-5=9,14-5=8"  # a check that changes the reward
    assert task.reward(p, miscopied) == 0.0 and task.reward(p, cut(miscopied, 3)) == 1.0
    repaired = "3+4=7,7*2=14,14-5=8,14-5=9"  # and one that repairs it
    assert task.reward(p, repaired) == 1.0 and task.reward(p, cut(repaired, 3)) == 0.0


def test_ledger_shares_by_hand():
    """Two steps of mass 1 and 3 whose weights shares are 0.5 and 0.1: the run's share is
    (0.5 * 1 + 0.1 * 3) / 4 = 0.2, not the plain mean 0.3."""
    steps = [{"ledger_mass": 1.0, "ledger_weights": 0.5, "ledger_credit": 0.2,
              "ledger_cancelled": 0.8},
             {"ledger_mass": 3.0, "ledger_weights": 0.1, "ledger_credit": 0.6,
              "ledger_cancelled": 0.4}]
    got = e10_length.ledger_shares(steps)
    assert got == pytest.approx({"weights": 0.2, "credit": 0.5, "cancelled": 0.5})
    assert e10_length.ledger_shares([dict(steps[0], ledger_mass=0.0)])["weights"] is None


def test_e10_quick(tmp_path):
    """Seed 100 (never an evaluation seed), each primary the paired difference of the runs'
    length changes, recomputed here; a second call reads every run from its cache."""
    data, saved = _load("e10_length", tmp_path)
    assert saved["seeds"] == [100] and saved["window"] == 1 and set(saved["runs"]) == {
        "grpo", "dr_grpo", "dapo"}
    for arm, (r,) in saved["runs"].items():
        assert r["seed"] == 100 and len(r["length_incorrect"]) == 2
        assert r["change_incorrect"] == e10_length.length_change(r["length_incorrect"], 1)
    for key, k in (("length change wrong, grpo - dr_grpo", "change_incorrect"),
                   ("length change right, grpo - dr_grpo", "change_correct")):
        a, b = saved["runs"]["grpo"][0][k], saved["runs"]["dr_grpo"][0][k]
        c = saved["primary"][key]
        assert c["n"] == (0 if a is None or b is None else 1)
        if c["n"]:
            assert c["diff"] == pytest.approx(a - b)
    assert "equivalence" in saved["secondary"]["length change wrong, dapo - dr_grpo"]
    again = e10_length.main(["--quick", "--small", "--sft_steps=5", "--rl_steps=2",
                             f"--out={tmp_path}"])
    assert again["runs"] == data["runs"]  # from the cache, not rerun
    # the ledger (post hoc): dr_grpo's weights part is 0 by construction; a record cached
    # without it has it read back from its run's log, to the same value
    led = {arm: r["ledger"] for arm, (r,) in saved["runs"].items()}
    assert led["dr_grpo"]["weights"] is None or abs(led["dr_grpo"]["weights"]) < 1e-6
    cache = tmp_path / "runs" / "e10" / "grpo_s100.json"
    rec = json.load(open(cache))
    del rec["ledger"], rec["warm_acc"]
    json.dump(rec, open(cache, "w"))
    third = e10_length.main(["--quick", "--small", "--sft_steps=5", "--rl_steps=2",
                             f"--out={tmp_path}"])
    assert third["runs"]["grpo"][0]["ledger"] == pytest.approx(led["grpo"])
    warm = {r["warm_acc"] for (r,) in third["runs"].values()}
    assert len(warm) == 1 and 0 <= warm.pop() <= 1  # one warm start, three arms
    # the checks (post hoc): the warm start's and each run's final model, sampled; the
    # counts add up and the contrasts are the paired differences of the shares
    for key in ("warm start", "grpo", "dr_grpo", "dapo"):
        (c,) = saved["checks"][key]
        assert c["rollouts"] == 64 and 0 <= c["checked"] <= 64
        assert c["share_checked"] == c["checked"] / 64
        assert c["changed_to_wrong"] + c["changed_to_right"] <= c["checked"]
    w = saved["checks"]["warm start"][0]["share_checked"]
    c = saved["check_share_change"]["grpo"]
    assert c["n"] == 1 and c["diff"] == pytest.approx(
        saved["checks"]["grpo"][0]["share_checked"] - w)


def test_committed_e10_recomputes_from_its_per_step_lengths_and_matches_the_report():
    """The committed full run: each primary recomputed from the runs' per-step lengths
    alone (window means by hand, paired t with t_{0.975,9} from the table) equals the JSON's
    and is what results/README.md prints; so are the post-hoc check counts it quotes."""
    import math
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    data = json.load(open(os.path.join(root, "results", "e10_length.json")))
    text = open(os.path.join(root, "results", "README.md"), encoding="utf-8").read()
    w = data["window"]
    assert data["seeds"] == list(range(10)) and w == 20 and data["rl_steps"] == 200

    def change(xs):
        first = [x for x in xs[:w] if x is not None]
        last = [x for x in xs[-w:] if x is not None]
        return sum(last) / len(last) - sum(first) / len(first)
    for key, k in (("length change wrong, grpo - dr_grpo", "length_incorrect"),
                   ("length change right, grpo - dr_grpo", "length_correct")):
        by = {a: {r["seed"]: change(r[k]) for r in data["runs"][a]} for a in ("grpo", "dr_grpo")}
        d = [by["grpo"][s] - by["dr_grpo"][s] for s in data["seeds"]]
        m = sum(d) / 10
        half = 2.2622 * math.sqrt(sum((x - m) ** 2 for x in d) / 9) / math.sqrt(10)
        c = data["primary"][key]
        assert c["diff"] == pytest.approx(m, abs=1e-9)
        assert c["half"] == pytest.approx(half, rel=1e-3)
        assert f"{m:.2f} ± {half:.2f} tokens".replace("-", "\u2212") in text, key
    warm = data["checks"]["warm start"]
    checked = sum(c["checked"] for c in warm)
    lost = sum(c["changed_to_wrong"] for c in warm)
    gained = sum(c["changed_to_right"] for c in warm)
    share = sum(c["share_checked"] for c in warm) / len(warm)
    words = " ".join(text.split())
    assert (f"Of {checked // 1000} {checked % 1000:03d} checking completions, {lost} lost their"
            f" reward to a check and {gained} gained it") in words
    assert f"At the warm start {100 * share:.1f} % of completions check" in words

    def rates(c):  # P(check | wrong), P(check | right), from one model's counts
        s, a, b = c["share_checked"], c["acc_checked"], c["acc_not"]
        return (s * (1 - a) / (s * (1 - a) + (1 - s) * (1 - b)), s * a / (s * a + (1 - s) * b))
    mean_rates = {k: [sum(rates(c)[j] for c in v) / len(v) for j in (0, 1)]
                  for k, v in data["checks"].items()}
    wrong, right = mean_rates["warm start"]
    assert (
        f"{100 * wrong:.1f} % after a wrong answer and {100 * right:.1f} % after a right" in words
    )
    for arm in ("grpo", "dr_grpo", "dapo"):
        wrong, right = mean_rates[arm]
        assert f"{100 * wrong:.1f} and {100 * right:.1f} % (`{arm}`)" in words, arm
        end = sum(c["share_checked"] for c in data["checks"][arm]) / 10
        assert f"{100 * end:.1f} % (`{arm}`)" in words, arm
