"""Each diagnostics experiment (E1-E6) runs its quick mode on a shrunk config
and writes its JSON (strict: no NaN) and PNG with the expected keys. Findings
are not test targets: nothing here asserts a number of an experiment."""
import dataclasses
import importlib
import importlib.util
import json
import os

import pytest

import toy_tasks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = ["--quick", "--sft_steps=20", "--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_batch=8",
        "--prompts=4", "--group_size=4", "--batches=1"]
EXPERIMENTS = {  # extra flags, and where the summary holds a [mean, CI] pair that must exist
    "e1_flips": (
        ["--steps=0,2"],
        lambda s: [
            s["2"]["adam"]["pos"]["boosted"],
            s["0"]["sgd"]["neg"]["stable"],
            s["2"]["sgd"]["flipped"],
        ],
    ),
    "e2_coupling": (
        ["--steps=0,2"],
        lambda s: [
            s["2"]["adam_live"],
            s["0"]["sgd_all_w"],
            s["2"]["mass_same_low"],
            s["2"]["mass_same"][0],
            s["0"]["head_vs_closed_form"],
        ],
    ),
    "e3_masked": (
        ["--sgd_lrs=1e-2,1e-1"],
        lambda s: [
            r[v]["flipped_eps0"]
            for r in (s["net"]["0.1"], s["cf"])
            for v in ("full", "no_opposite_same_token", "positive_only")
        ]
        + [s["cf"]["full"]["flipped_by_lr"]["0.01"]],
    ),
    "e4_categories": (
        ["--rl_step=2"],
        lambda s: [
            s["at"][t][r][c]["share"]
            for t in ("0", "2")
            for r in ("grpo_adam", "positive_only_sgd")
            for c in ("template", "compute", "style")
        ]
        + [s["gap"]["2"]["adam"]["template+style"]],
    ),
    "e5_value": (
        ["--K=2", "--tokens=8", "--rl_step=1"],
        lambda s: [
            s["adam"]["grpo"]["neg"],
            s["sgd"]["shuffled"]["pos"],
            s["adam"]["positive_only"]["neg"],
        ],
    ),
    "e6_group_size": (
        [
            "--group_sizes=2,4",
            "--prompt_counts=2,4",
            "--rollouts=16",
            "--K=2",
            "--tokens=16",
            "--rl_step=1",
        ],
        lambda s: [s["G"][1]["gap"], s["B"][0]["gap"]],
    ),
}

BY_HAND = {  # each primary contrast recomputed from the seed's own JSON values
    "e1_flips": lambda r: {
        "adam (carried) step 2: boosted share A>0 - A<0": r["steps"]["2"]["adam"]["pos"]["boosted"]
        - r["steps"]["2"]["adam"]["neg"]["boosted"]
    },
    "e2_coupling": lambda r: {
        "adam step 2: sign agreement full vs head (A!=0) - 0.7": r["steps"]["2"]["adam_live"] - 0.7
    },
    "e3_masked": lambda r: {
        "full network, lr 0.1: flipped full - no_opposite_same_token": r["net"]["0.1"]["full"][
            "flipped"
        ]
        - r["net"]["0.1"]["no_opposite_same_token"]["flipped"],
        "closed form, lr 0.1: flipped full - no_opposite_same_token": r["cf"]["full"][
            "flipped_by_lr"
        ]["0.1"]
        - r["cf"]["no_opposite_same_token"]["flipped_by_lr"]["0.1"],
    },
    "e4_categories": lambda r: {
        f"{o}, step 2: template+style share grpo - positive_only": sum(
            r["at"]["2"][f"grpo_{o}"][c]["share"] - r["at"]["2"][f"positive_only_{o}"][c]["share"]
            for c in ("template", "style")
        )
        for o in ("adam", "sgd")
    },
    "e5_value": lambda r: {
        "adam: value gap A<0, grpo - shuffled": (
            r["adam"]["grpo"]["neg"]["boosted"] - r["adam"]["grpo"]["neg"]["suppressed"]
        )
        - (r["adam"]["shuffled"]["neg"]["boosted"] - r["adam"]["shuffled"]["neg"]["suppressed"])
    },
    "e6_group_size": lambda r: {
        f"value gap at {k} = {hi} - at {k} = {lo}": (r[k][-1]["boosted"] - r[k][-1]["suppressed"])
        - (r[k][0]["boosted"] - r[k][0]["suppressed"])
        for k, hi, lo in (("G", 4, 2), ("B", 4, 2))
    },
}


def strict(text):
    def bad(c):
        raise ValueError(f"non-standard JSON constant {c}")
    return json.loads(text, parse_constant=bad)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return str(tmp_path_factory.mktemp("results"))  # the tiny warm starts are trained once, here


@pytest.fixture(params=["mixed", "all_wrong"])
def rewards(request, monkeypatch):
    """A 20-step SFT model is never right: 'all_wrong' checks that empty cells do
    not crash; 'mixed' swaps in a verifier that rewards even-length completions,
    so that groups carry both signs and every code path runs."""
    if request.param == "mixed":
        make = toy_tasks.make_task
        monkeypatch.setattr(toy_tasks, "make_task", lambda *a, **k: dataclasses.replace(
            make(*a, **k), reward=lambda p, text: float(len(text) % 2 == 0)))
    return request.param


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_quick_mode_writes_json_and_png(name, out, rewards, capsys):
    extra, check = EXPERIMENTS[name]
    d = os.path.join(out, rewards)
    mod = importlib.import_module("lab.experiments." + name)
    mod.main(TINY + extra + [f"--out={d}"])
    data = strict(open(os.path.join(d, f"{name}.json")).read())
    for key in ("experiment", "config", "per_seed", "summary", "wall_s"):
        assert key in data, key
    assert data["experiment"] == name and len(data["per_seed"]) == 1  # --quick: one seed
    if rewards == "mixed":
        for pair in check(data["summary"]):
            assert len(pair) == 2 and isinstance(pair[0], float), pair
    if importlib.util.find_spec("matplotlib") is not None:  # plots are an optional extra
        assert os.path.getsize(os.path.join(d, f"{name}.png")) > 0
    else:
        assert not os.path.exists(os.path.join(d, f"{name}.png"))
    check_primary(data)
    # both signs in the groups: every contrast has its seed
    if rewards == "mixed" and name in BY_HAND:
        hand = BY_HAND[name](data["per_seed"][0])
        assert set(hand) == set(data["primary"])
        for k, v in hand.items():
            assert data["primary"][k]["n"] == 1 and abs(data["primary"][k]["diff"] - v) < 1e-9, k
    printed = capsys.readouterr().out
    assert name.split("_")[0] in printed  # it printed its table and file name
    assert printed.count("primary: ") == len(data["primary"])


PRIMARY_KEYS = {"diff", "half", "n", "sd", "mde", "per_seed", "seeds", "predicted"}


def check_primary(data):
    """The docstring's primary contrasts are in the JSON: one seed gives n <= 1
    and no interval (null, not NaN)."""
    assert data["primary"], "no primary contrast"
    for name, c in data["primary"].items():
        assert set(c) == PRIMARY_KEYS, (name, set(c))
        assert c["n"] == len(c["per_seed"]) == len(c["seeds"]) <= 1
        assert c["half"] is None and c["mde"] is None
        # none: registered without a sign
        assert c["predicted"].split()[0] in ("<", ">", "about", "none")
        if c["n"]:
            assert abs(c["diff"] - c["per_seed"][0]) < 1e-12
