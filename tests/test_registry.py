"""One record per objective: an objective registered in one place is known to
every part of the project, with no other file edited (train.py, --help, the
checks of config.py, the docs' table generator and the scoreboard)."""
import contextlib
import io
import json
import os

import pytest
import torch
import batching
import loss
import train
from plumbing.config import parse_args
from plumbing.errors import CliError
from lab import estimators, objectives

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def toy_term(x, settings):
    """-Â_i agg_i log pi: the plain policy gradient, no ratio (as gpg)."""
    total = -((x.adv * x.agg)[:, None] * x.pol_logp * x.mask.float()).sum()
    return total, torch.tensor(0.0), {}


TOY = objectives.Objective(
    "toy",
    toy_term,
    "token-mean",
    "Â_i / sum L, no ratio",
    "yes, in every regime",
    objectives.EVERY_REGIME,
    adv="dr_grpo",
    clip="none",
    own_agg=True,
)
SMALL = [
    "--n_layer=1",
    "--n_head=2",
    "--n_embd=32",
    "--sft_steps=2",
    "--sft_batch=8",
    "--rl_steps=2",
    "--prompts_per_step=2",
    "--group_size=4",
    "--eval_size=8",
    "--eval_every=1",
    "--device=cpu",
]


@pytest.fixture
def toy():
    objectives.register(TOY)
    yield TOY
    del objectives.OBJECTIVES["toy"], loss.LOSSES["toy"]


def test_train_runs_a_registered_objective_on_its_own_estimator(toy, tmp_path):
    summary = train.main(parse_args(["--loss=toy"] + SMALL + [f"--out_dir={tmp_path}"]))
    assert 0.0 <= summary["final_acc"] <= 1.0 and summary["gain"] == pytest.approx(
        summary["final_acc"] - summary["warm_start_acc"])
    saved = json.load(open(tmp_path / "config.json"))
    assert saved["loss"] == "toy" and saved["adv"] == "dr_grpo"  # --adv=auto: the record's own
    steps = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [s["step"] for s in steps if s["phase"] == "rl" and "loss" in s] == [1, 2]


def test_help_lists_a_registered_objective(toy):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse_args(["--help"])
    line = next(x for x in out.getvalue().splitlines() if x.strip().startswith("--loss="))
    assert "| toy " in line or line.rstrip().endswith("toy (objectives.OBJECTIVES)"), line


@pytest.mark.parametrize("flags, message", [
    (["--clip=sym"], "--loss=toy has no ratio clip"),
    (["--agg=token-sum"], "--loss=toy defines its own aggregation"),
    (["--dual_clip=3"], "--dual_clip"),
    (["--dro_beta=0.5"], "--dro_beta applies to it only"),
])
def test_bad_combinations_with_a_registered_objective_are_refused(toy, tmp_path, flags, message):
    with pytest.raises(CliError, match=message.replace("-", r"\-")):
        parse_args(["--loss=toy"] + flags + [f"--out_dir={tmp_path}"])


def test_an_unregistered_name_is_refused_with_the_registered_choices(toy):
    with pytest.raises(CliError, match="unknown loss 'toyy'; choose one of .*toy"):
        parse_args(["--loss=toyy"])


def test_the_table_and_the_scoreboard_know_a_registered_objective(toy):
    row = "| `toy` | r_i - mu_g | Â_i / sum L, no ratio | yes, in every regime |"
    assert row in objectives.table()
    from lab.experiments import scoreboard
    board = scoreboard.score(["toy · dr_grpo"], 3)
    for regime in objectives.REGIMES:
        cell = board["toy · dr_grpo"][regime]
        assert cell["exch_predicted"] == "0" and cell["exch_match"] and cell["whole_match"], regime


def test_a_record_that_contradicts_the_registry_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        objectives.register(objectives.OBJECTIVES["grpo"])
    bad = objectives.Objective("toy2", toy_term, "token-average", "", "", objectives.EVERY_REGIME)
    with pytest.raises(ValueError, match="unknown aggregation"):
        objectives.register(bad)
    assert "toy2" not in objectives.OBJECTIVES


def test_every_name_list_is_its_registry():
    """The choices config.py offers and checks are the registries' keys."""
    from plumbing.config import Config, help_text
    from dataclasses import fields
    helps = {f.name: help_text(f) for f in fields(Config)}
    for flag, names in (("loss", objectives.OBJECTIVES), ("adv", estimators.ESTIMATORS),
                        ("batching", batching.SCHEDULERS), ("agg", objectives.AGGS)):
        assert " | ".join(names) in helps[flag], flag
