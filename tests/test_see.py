"""see.py: the one-group picture. The panels' numbers are checked, not just drawn."""
import random

import pytest
import torch

from lab import see
import toy_tasks
from plumbing.config import parse_args
from plumbing.errors import CliError
from model import GPT, GPTConfig
from sampler import Rollouts

TASK = toy_tasks.make_task("chain")


def teacher_batch(G=4, n_prompts=3):
    """A rollout batch written by the teacher: per prompt, right and flawed (wrong)
    completions with different style choices, so groups are mixed and lengths differ."""
    rng = random.Random(0)
    probs, texts = [], []
    while len(probs) < n_prompts:
        p = TASK.sample(rng)
        if TASK.reward(p, TASK.flawed(p, random.Random(1))) == 0:  # a carry the teacher forgets
            probs.append(p)
            # seeds whose draws do not restate: the group shares its first tokens
            seeds = [
                s for s in range(100) if not TASK.solution(p, random.Random(s)).startswith("(")
            ][:G]
            texts += [
                TASK.solution(p, random.Random(s)) if k % 2 else TASK.flawed(p, random.Random(s))
                for k, s in enumerate(seeds)
            ]
    seqs = [toy_tasks.encode(t) + [toy_tasks.EOS] for t in texts]
    tok = torch.full((len(seqs), max(map(len, seqs))), toy_tasks.PAD)
    for i, s in enumerate(seqs):
        tok[i, :len(s)] = torch.tensor(s)
    rows = [p for p in probs for _ in range(G)]
    return Rollouts(prompts=[toy_tasks.encode(TASK.prompt(p)) for p in rows], tokens=tok,
                    mask=tok != toy_tasks.PAD, old_logprobs=torch.zeros(tok.shape),
                    group=torch.arange(n_prompts).repeat_interleave(G), problems=rows,
                    rewards=torch.tensor([TASK.reward(p, t) for p, t in zip(rows, texts)]),
                    max_len=TASK.max_new_tokens)


def test_panels_and_figure(tmp_path):
    torch.manual_seed(0)
    m = GPT(
        GPTConfig(
            vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1, n_head=2, n_embd=16
        )
    ).double()
    batch = teacher_batch()
    cfg = see.SeeConfig(optimizer="sgd", lr=0.5)
    panels = {n: see.panel(m, batch, n, cfg) for n in ("grpo", "dr_grpo", "positive_only")}
    assert panels["dr_grpo"][2] < 1e-9  # equal weights: every (history, token) set cancels
    assert panels["grpo"][2] > 1e-3               # 1/L_i with unequal lengths does not
    for delta, adv, _ in panels.values():
        assert delta.shape == batch.tokens.shape and float(delta.abs().max()) > 0
    assert torch.all(panels["positive_only"][1] >= 0)
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = see.draw(plt, batch, 0, TASK, panels, cfg)
    fig.savefig(tmp_path / "see.png")
    assert (tmp_path / "see.png").stat().st_size > 10_000


@pytest.mark.parametrize("argv, msg", [
    ([], "--init_from=CKPT is required"),
    (["--init_from=x.pt", "--losses=ppo"], "unknown loss 'ppo'"),
    (["--init_from=x.pt", "--optimizer=lion"], "--optimizer takes sgd or adam"),
    (["--init_from=x.pt", "--lr=0"], "--lr must be positive"),
    (["--init_from=missing.pt"], "does not exist"),
])
def test_bad_input_is_one_line(argv, msg):
    with pytest.raises(CliError, match=msg):
        see.main(parse_args(argv, see.SeeConfig, check=False))


def test_the_readmes_picture_is_what_its_caption_makes(tmp_path, monkeypatch):
    """README.md's token picture: the lab.see flags its caption gives are the ones the
    committed docs/see.png was made with (kept in the PNG), and they make a picture again
    (here from a tiny chain checkpoint, as a stand-in for the caption's warm start)."""
    import os
    import re
    pytest.importorskip("matplotlib")
    from PIL import Image
    from plumbing import checkpoint
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    command = re.search(r"`(python -m lab\.see [^`]*--out=docs/see\.png)`", readme).group(1)
    flags = [f for f in command.split()[3:] if not f.startswith(("--init_from=", "--out="))]
    made = Image.open(os.path.join(root, "docs", "see.png")).info["Description"]
    given = see.made_by(parse_args(flags, see.SeeConfig, check=False))
    assert made == given, (made, given)
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1,
                      n_head=2, n_embd=16))
    ck = tmp_path / "warm_start.pt"
    cfg = parse_args(["--task=chain", "--n_layer=1", "--n_head=2", "--n_embd=16"], check=False)
    checkpoint.save_checkpoint(str(ck), m, cfg, "warm_start", 0)
    # a random model has no mixed group: the teacher's batch stands in for its rollouts
    monkeypatch.setattr(see, "pick_group", lambda model, task, cfg: (teacher_batch(), 0))
    out = tmp_path / "see.png"
    see.cli(flags + [f"--init_from={ck}", f"--out={out}"])
    assert Image.open(out).info["Description"] == made
