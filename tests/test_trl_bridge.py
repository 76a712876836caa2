"""trl_bridge: loss.py's objectives and the ledger inside TRL's GRPOTrainer, on a tiny model
built in the test (nothing downloaded). Skipped where the extra is not installed."""
import copy
import os
import random

import pytest

pytest.importorskip("trl")
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import loss  # noqa: E402
from trl_bridge import tiny  # noqa: E402
from trl_bridge.trainer import CancellationConfig, CancellationGRPOTrainer  # noqa: E402

TOK = tiny.tokenizer()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dataset(n=64, seed=0):
    rng = random.Random(seed)
    return Dataset.from_dict({"prompt": ["".join(rng.choice("0123456789") for _ in range(4))
                                         + "=" for _ in range(n)]})


def last_even(completions, **kw):
    """About half the completions end on an even digit: groups are mixed, and the reward
    does not follow from a shared prefix, so shared tokens meet both signs."""
    return [float(c[-1:] in "02468") for c in completions]


def settings(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4,
                max_completion_length=10, max_steps=4, bf16=False, logging_steps=1,
                report_to=[], save_strategy="no", gradient_accumulation_steps=2,
                use_cpu=True, learning_rate=1e-3, temperature=0.5, seed=0)
    return {**base, **kw}


def trainer(tmp_path, model=None, **kw):
    return CancellationGRPOTrainer(model=model or tiny.model(TOK), reward_funcs=last_even,
                                   args=CancellationConfig(**settings(tmp_path, **kw)),
                                   train_dataset=dataset(), processing_class=TOK)


def logged(tr, key):
    return [h[key] for h in tr.state.log_history if key in h]


# ----------------------------------------------------------------------------- the loss

def batch(seed=0, rows=8, length=10, prompt=5):
    """One micro-batch as TRL hands it to the loss, off-policy: old log-probs 0.3 nats
    off at random, so ratios leave the clip interval on some tokens."""
    g = torch.Generator().manual_seed(seed)
    comp = torch.randint(0, 18, (rows, length), generator=g)
    cmask = (torch.arange(length)[None, :] < torch.randint(3, length + 1, (rows, 1),
                                                           generator=g)).long()
    return {"prompt_ids": torch.randint(0, 10, (rows, prompt), generator=g),
            "prompt_mask": torch.ones(rows, prompt, dtype=torch.long),
            "completion_ids": comp, "completion_mask": cmask,
            "advantages": torch.randn(rows, generator=g),
            "group_id": torch.arange(rows) // 4, "row_id": torch.arange(rows),
            "num_items_in_batch": cmask.sum(),
            "noise": 0.3 * torch.randn(rows, length, generator=g),
            "ref_noise": 0.2 * torch.randn(rows, length, generator=g)}


def gradient(tr, inputs, ours):
    """The model's gradient of one micro-batch's loss, by TRL's _compute_loss or ours."""
    tr.model.train()
    tr.model.zero_grad()
    tr.current_gradient_accumulation_steps = 1  # set by train(); one micro-batch per step
    with torch.no_grad():
        logp = tr._get_per_token_logps_and_entropies(
            tr.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            inputs["completion_ids"].size(1))[0]
    # the reference's log-probs as TRL's generation step leaves them (read when beta != 0)
    inputs = dict(inputs, old_per_token_logps=logp + inputs["noise"],
                  ref_per_token_logps=logp + inputs["ref_noise"])
    if ours:
        tr._step, tr._buffered_inputs = 0, [inputs]
        value = tr.compute_loss(tr.model, inputs)
    else:
        value = tr._compute_loss(tr.model, inputs)
    value.backward()
    return torch.cat([p.grad.flatten() for p in tr.model.parameters() if p.grad is not None])


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "dapo"])
def test_the_gradient_equals_trls_own_loss_type_off_policy_with_the_clip_binding(name, tmp_path):
    model = tiny.model(TOK)
    common = settings(tmp_path, gradient_accumulation_steps=1, steps_per_generation=1,
                      epsilon=0.2, epsilon_high=0.28)
    trl = GRPOTrainer(model=copy.deepcopy(model), reward_funcs=last_even, processing_class=TOK,
                      args=GRPOConfig(loss_type=name, **common), train_dataset=dataset())
    ours = CancellationGRPOTrainer(model=copy.deepcopy(model), reward_funcs=last_even,
                                   processing_class=TOK, train_dataset=dataset(),
                                   args=CancellationConfig(objective=name, **common))
    inputs = batch()
    g_trl, g_ours = gradient(trl, inputs, False), gradient(ours, inputs, True)
    assert ours._metrics["train"]["objective/clip_frac"][-1] > 0.02  # the clip binds
    assert torch.allclose(g_ours, g_trl, rtol=1e-4, atol=1e-7)


def saved_tiny(tmp_path):
    """A tiny model loaded from a folder: with beta != 0 TRL builds its reference model from
    the policy's own path (config._name_or_path)."""
    from transformers import Qwen2ForCausalLM
    tiny.model(TOK).save_pretrained(tmp_path / "tiny")
    return Qwen2ForCausalLM.from_pretrained(tmp_path / "tiny")


RECIPES = [  # (objective, the settings a recipe adds); GSPO with its own clip (3e-4, 4e-4)
    ("grpo", {"beta": 0.1}), ("dr_grpo", {"beta": 0.1}),
    ("dapo", {"beta": 0.1, "use_bias_correction_kl": True}),
    ("grpo", {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}),
    ("dr_grpo", {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}),
    ("dapo", {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}),
    ("grpo", {"entropy_coef": 0.05}), ("dapo", {"entropy_coef": 0.05}),
    ("grpo", {"beta": 0.1, "entropy_coef": 0.05, "importance_sampling_level": "sequence",
              "use_bias_correction_kl": True, "epsilon": 3e-4, "epsilon_high": 4e-4}),
]


@pytest.mark.parametrize("name,extra", RECIPES)
def test_beta_gspo_and_the_entropy_bonus_equal_trls_own(name, extra, tmp_path):
    """TRL's beta (k3 to its reference model), importance_sampling_level="sequence" (GSPO)
    and entropy_coef, off-policy with the clip binding: the gradient is TRL's. The same
    setting switched off gives another gradient, so the comparison sees the term."""
    model = saved_tiny(tmp_path)
    common = settings(tmp_path, gradient_accumulation_steps=1, steps_per_generation=1)
    make = lambda cls, cfg, **kw: cls(model=copy.deepcopy(model), reward_funcs=last_even,
                                      processing_class=TOK, train_dataset=dataset(),
                                      args=cfg(**{**common, **kw}))
    trl = make(GRPOTrainer, GRPOConfig, loss_type=name, **extra)
    ours = make(CancellationGRPOTrainer, CancellationConfig, objective=name, **extra)
    plain = make(CancellationGRPOTrainer, CancellationConfig, objective=name,
                 **{k: v for k, v in extra.items() if k.startswith("eps")})
    inputs = batch()
    g_trl, g_ours, g_plain = (gradient(t, inputs, t is not trl) for t in (trl, ours, plain))
    assert ours._metrics["train"]["objective/clip_frac"][-1] > 0.02  # the clip binds
    assert torch.allclose(g_ours, g_trl, rtol=1e-4, atol=1e-7)
    assert (g_ours - g_plain).norm() > 1e-3 * g_plain.norm()
    logged = {k for k, v in ours._metrics["train"].items() if v}
    assert ("kl" in logged) == ("beta" in extra) and ("entropy" in logged) == (
        "entropy_coef" in extra)  # under TRL's names


@pytest.mark.parametrize("name", ["grpo", "dapo", "dfpo_min"])
def test_two_micro_batches_give_the_gradient_of_their_joined_step(name, tmp_path):
    """Gradient accumulation over 2 micro-batches of one optimizer step gives the gradient
    of the whole step taken at once: the counts N, sum L and DFPO's w~ are the step's."""
    model = tiny.model(TOK)
    joined = CancellationGRPOTrainer(
        model=copy.deepcopy(model), reward_funcs=last_even, processing_class=TOK,
        train_dataset=dataset(), args=CancellationConfig(objective=name, **settings(
            tmp_path, gradient_accumulation_steps=1, steps_per_generation=1)))
    split = CancellationGRPOTrainer(
        model=copy.deepcopy(model), reward_funcs=last_even, processing_class=TOK,
        train_dataset=dataset(), args=CancellationConfig(objective=name, **settings(
            tmp_path, gradient_accumulation_steps=2, steps_per_generation=2)))
    inputs = batch(rows=8)
    with torch.no_grad():
        logp = joined._get_per_token_logps_and_entropies(
            joined.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            inputs["completion_ids"].size(1))[0]
    inputs = dict(inputs, old_per_token_logps=logp + inputs.pop("noise"))
    half = lambda rows: {k: v[rows] if torch.is_tensor(v) and v.dim() and len(v) == 8 else v
                         for k, v in inputs.items()}

    def step_gradient(tr, parts):  # one optimizer step over the parts, as train() runs it
        tr.model.train()
        tr.model.zero_grad()
        tr.current_gradient_accumulation_steps = len(parts)
        tr._buffered_inputs = parts
        for k, part in enumerate(parts):
            tr._step = k
            tr.compute_loss(tr.model, part).backward()
        return torch.cat([p.grad.flatten() for p in tr.model.parameters() if p.grad is not None])
    g_joined = step_gradient(joined, [inputs])
    g_split = step_gradient(split, [half(slice(0, 4)), half(slice(4, 8))])
    assert torch.allclose(g_split, g_joined, rtol=1e-4, atol=1e-7)
    # the test can fail: each half with its own counts is another gradient
    g_own = torch.zeros_like(g_joined)
    for rows in (slice(0, 4), slice(4, 8)):
        g_own += step_gradient(joined, [half(rows)])
    assert (g_own - g_joined).norm() > 1e-3 * g_joined.norm()


def test_a_mismatched_pair_differs(tmp_path):
    """The comparison can fail: our grpo against TRL's dapo."""
    model = tiny.model(TOK)
    common = settings(tmp_path, gradient_accumulation_steps=1, steps_per_generation=1)
    trl = GRPOTrainer(model=copy.deepcopy(model), reward_funcs=last_even, processing_class=TOK,
                      args=GRPOConfig(loss_type="dapo", **common), train_dataset=dataset())
    ours = CancellationGRPOTrainer(model=copy.deepcopy(model), reward_funcs=last_even,
                                   processing_class=TOK, train_dataset=dataset(),
                                   args=CancellationConfig(objective="grpo", **common))
    inputs = batch()
    g_trl, g_ours = gradient(trl, inputs, False), gradient(ours, inputs, True)
    assert (g_ours - g_trl).norm() > 0.05 * g_trl.norm()


# ----------------------------------------------------------------------------- the ledger

def test_the_parts_zero_by_construction_are_zero(tmp_path):
    """dapo on-policy (one optimizer step per generation): no unequal weights, no ratios.
    The ledger sees shared tokens (mass), so the zeros say something about the weights,
    not about an empty ledger."""
    tr = trainer(tmp_path, objective="dapo", max_steps=6)
    tr.train()
    assert max(logged(tr, "ledger/cancelled")) > 0.1
    for part in ("weights", "ratios", "split"):
        assert max(logged(tr, f"ledger/{part}")) < 1e-6, part
    assert logged(tr, "lengthcov/gap")


def test_grpo_leaves_a_weights_part_and_whole_groups_no_split(tmp_path):
    """Four optimizer steps per generation batch, groups kept whole: no split (TRL's
    shuffle splits them: the next test), while grpo's 1/L leaves a weights part."""
    tr = trainer(tmp_path, objective="grpo", max_steps=16, gradient_accumulation_steps=1,
                 per_device_train_batch_size=8, steps_per_generation=4)
    tr.train()
    assert max(logged(tr, "ledger/weights")) > 1e-4
    assert max(logged(tr, "ledger/split")) < 1e-6
    assert max(logged(tr, "ledger/cancelled")) > 0.1


def test_trls_shuffle_splits_groups_over_optimizer_steps(tmp_path):
    """steps_per_generation 4 over gradient accumulation 1: four optimizer steps per
    generation. Whole groups keep the split at 0; TRL's row shuffle does not."""
    kw = dict(objective="dapo", gradient_accumulation_steps=1, per_device_train_batch_size=4,
              steps_per_generation=4, max_steps=8)
    whole, shuffled = trainer(tmp_path / "a", **kw), trainer(tmp_path / "b", keep_groups=False,
                                                            **kw)
    whole.train()
    shuffled.train()
    assert max(logged(whole, "ledger/split")) < 1e-6
    assert max(logged(shuffled, "ledger/split")) > 0.01


def test_dfpo_transforms_see_whole_groups(tmp_path, monkeypatch):
    seen = []
    real = loss.dfpo_weights

    def spy(ratio, adv, group, transform, bounds):
        seen.append(torch.unique(group, return_counts=True)[1].tolist())
        return real(ratio, adv, group, transform, bounds)
    monkeypatch.setattr(loss, "dfpo_weights", spy)
    kw = dict(objective="dfpo_min", gradient_accumulation_steps=1,
              per_device_train_batch_size=4, steps_per_generation=4, max_steps=4)
    trainer(tmp_path / "a", **kw).train()
    assert seen and all(set(counts) == {4} for counts in seen)  # G = 4 rows of every group
    seen.clear()
    trainer(tmp_path / "b", keep_groups=False, **kw).train()
    assert any(set(counts) != {4} for counts in seen)  # TRL's shuffle: partial groups


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("kw,words", [
    ({"objective": "ppo"}, "unknown objective 'ppo'"),
    ({"per_device_train_batch_size": 6, "gradient_accumulation_steps": 1,
      "steps_per_generation": 2}, "keep_groups"),
    ({"ledger_every": -1}, "ledger_every"),
    ({"steps_per_generation": 3}, "multiple of gradient_accumulation_steps"),
    ({"use_vllm": True}, "does not take use_vllm"),
    ({"use_adaptive_entropy": True, "top_entropy_quantile": 0.5},
     "top_entropy_quantile, use_adaptive_entropy"),
    ({"loss_type": "dr_grpo"}, "loss_type='dr_grpo' is not read"),
    ({"objective": "dr_grpo", "scale_rewards": "group"}, "contradicts objective='dr_grpo'"),
    ({"objective": "dfpo_min", "scale_rewards": "batch"}, "contradicts objective='dfpo_min'"),
    ({"objective": "grpo", "scale_rewards": "none"}, "contradicts objective='grpo'"),
    ({"objective": "dfpo_min", "importance_sampling_level": "sequence"}, "DFPO has its own"),
])
def test_bad_settings_are_one_line(tmp_path, kw, words):
    with pytest.raises(ValueError) as e:
        CancellationConfig(**settings(tmp_path, **kw))
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name,scale", [("grpo", "group"), ("dapo", "group"),
                                        ("dr_grpo", "none"), ("dfpo_orth", "none")])
def test_scale_rewards_is_the_objectives_own_and_said_when_not_trls(name, scale, tmp_path,
                                                                     capsys):
    args = CancellationConfig(**settings(tmp_path, objective=name))
    assert args.scale_rewards == scale
    said = capsys.readouterr().err
    assert (f"scale_rewards={scale!r}" in said) == (scale != "group")  # TRL's is "group"
    assert CancellationConfig(**settings(tmp_path, objective=name, loss_type=name)).loss_type


# ----------------------------------------------------------------------------- the script

def test_the_example_script_runs_on_the_tiny_model(tmp_path, capsys):
    from trl_bridge import train_lm
    s = train_lm.main([f"--out={tmp_path}", "--model=tiny", "--sft_steps=300", "--steps=6",
                       "--batch=8", "--group_size=8", "--accumulation=1",
                       "--steps_per_generation=2", "--objective=dapo"])
    text = capsys.readouterr().out
    assert "cancellation ledger (dapo, groups kept whole)" in text
    assert {"ledger/cancelled", "ledger/split", "ledger/weights"} <= set(s)
    assert s["ledger/split"] < 1e-6  # whole groups
    for k, v in s.items():
        assert f"{k:24s} {v:.4g}" in text


BAD_INPUT = [  # through `python -m`; tests/test_trl_script.py runs every case in-process
    (["--objective=ppo"], "unknown objective 'ppo'"),
    (["--steps=3", "--steps=4"], "--steps is given twice"),
]


def test_the_scripts_bad_input_is_one_error_line(tmp_path):
    """The entry point itself (its processes side by side, each waited on): exit 2, one
    'error: ...' line naming the fault, no traceback, nothing written."""
    import subprocess
    import sys
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    procs = [subprocess.Popen([sys.executable, "-m", "trl_bridge.train_lm",
                               f"--out={tmp_path}/o{i}", *argv], cwd=ROOT, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i, (argv, _) in enumerate(BAD_INPUT)]
    for i, (p, (argv, words)) in enumerate(zip(procs, BAD_INPUT)):
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 2 and stdout == "", argv
        assert stderr.strip().splitlines()[-1].startswith("error: "), argv
        assert words in stderr and "Traceback" not in stderr, argv
        assert not os.path.exists(f"{tmp_path}/o{i}"), argv


def test_a_trainer_without_a_reward_function_is_refused(tmp_path):
    with pytest.raises((TypeError, ValueError)):
        CancellationGRPOTrainer(model=tiny.model(TOK), args=CancellationConfig(
            **settings(tmp_path)), train_dataset=dataset(), processing_class=TOK)


def test_two_processes_log_the_ledger_of_the_whole_batch(tmp_path):
    """`accelerate launch` with 2 CPU processes (gloo), TRL's shuffle (groups split over
    steps and processes): the ledger each process logs is the one computed in a single
    process from both processes' rows and coefficients joined."""
    import subprocess
    import sys
    from lab.ledger import ledger_shares, ledger_sums
    run = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
                          "--num_processes=2", "tests/trl_ddp_driver.py", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT,
                                  CUDA_VISIBLE_DEVICES=""))  # two CPU processes
    assert run.returncode == 0, run.stderr[-2000:]
    recs = [torch.load(tmp_path / f"record_{r}.pt", weights_only=False) for r in (0, 1)]
    assert len(recs[0]) == len(recs[1]) >= 1
    pad = lambda x, T: torch.nn.functional.pad(x, (0, T - x.shape[1]))
    checked = 0
    for a, b in zip(*recs):
        T = max(a["gen"]["completion_ids"].shape[1], b["gen"]["completion_ids"].shape[1])
        n = len(a["gen"]["advantages"])
        join = lambda k: torch.cat([pad(a["gen"][k], T), pad(b["gen"][k], T)])
        steps = [(torch.cat([ra, rb + n]), torch.cat([pad(ca, T), pad(cb, T)]),
                  torch.cat([pad(oa, T), pad(ob, T)]))
                 for (ra, ca, oa), (rb, cb, ob) in zip(a["steps"], b["steps"])]
        sums = ledger_sums(steps, torch.cat([a["gen"]["advantages"], b["gen"]["advantages"]]),
                           join("completion_ids"), join("completion_mask").bool(),
                           torch.cat([a["gen"]["group_id"], b["gen"]["group_id"]]))
        shares = ledger_shares(sums)
        assert a["logged"] or sums["mass"] == 0  # a batch with shared tokens logs its ledger
        for k, v in a["logged"].items():
            assert v == pytest.approx(shares[k.split("/")[1]], abs=1e-9), k
            assert b["logged"][k] == pytest.approx(v, abs=1e-12)
        checked += sums["mass"] > 0
    assert checked >= 1  # at least one batch had shared tokens to account for


def test_the_references_reward_snippet_runs_as_pasted():
    """The reward function docs/REFERENCE.md shows (tests/test_trl_anywhere.py runs its
    trainer snippet from a folder of a researcher's own)."""
    import re
    text = open(os.path.join(ROOT, "docs", "REFERENCE.md"), encoding="utf-8").read()
    section = text.split("## Beyond the toy")[1].split("\n## ")[0]
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", section, re.S) if "def exact" in c]
    scope = {}
    exec(compile(code, "REFERENCE.md", "exec"), scope)
    assert scope["exact"](["46", " 46\n", "461", "4"], ["46"] * 4) == [1.0, 1.0, 0.0, 0.0]
