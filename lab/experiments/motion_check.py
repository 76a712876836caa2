"""The motion ledger against the change it splits, at the demo's settings (before E14 uses it).

Question: do the motion ledger's parts (lab/motion.py, THEORY.md 4.3) add up to the change of
log pi(a | h) that evaluating the policy again after an optimizer step measures? And how far
would the first-order split (the gradient at the step's start instead of Simpson's average
along it) miss?

Method: the demo's warm start (add, 2 digits, scratchpad, 400 SFT steps) of each seed, and
the state of its grpo run after --step RL steps (common.rl_states: AdamW at lr 1e-4, its
moments kept). From it, one more rollout batch (16 prompts x 8) and one optimizer step of
train.optimizer_step per arm, the ledger following every group-shared token of the batch's
mixed groups (up to 64) and up to 16 others:

  adamw_1e-4       the demo's optimizer with the run's moments, in float64
  adamw_1e-4_fp32  the same in float32, the demo's precision
  sgd_1e-3, sgd_1e-2   plain SGD from the same weights, in float64

Reported per arm, over the followed tokens of every seed: ``slope`` (sum parts x change over
sum change^2: 1 when they agree), the correlation of the parts' sum with the change, the
worst token's |gap| over the largest |change|, the same three for the first-order
prediction, and the parts' shares of the movement, apart for the group-shared tokens and the
others (these carry credit and move more: pooled, they would dominate the shares). A check,
not a test of a hypothesis: no seed is an evaluation seed of any experiment.

    python -m lab.experiments.motion_check --quick    # seed 0, 2 RL steps (out/partial/)
    python -m lab.experiments.motion_check            # seeds 0-2 (results/)
"""
import copy
import dataclasses
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.motion_check\n")
    sys.exit(2)
import torch

import loss
import train
from lab import motion
from lab.experiments import common
from model import completion_logprobs
from plumbing.config import Config
from toy_tasks import PAD

EXTRA = dict(common.DIAG_FLAGS, task=("add", "the demo's task"),
             scratchpad=(True, "the demo's scratchpad"), sft_steps=(400, "the demo's SFT"),
             seeds=("0,1,2", "seeds of the full run"),
             step=(20, "RL steps of the demo's run before the checked step (quick: 2)"))
ARMS = {"adamw_1e-4": ("adamw", 1e-4, torch.float64), "adamw_1e-4_fp32": ("adamw", 1e-4,
                                                                         torch.float32),
        "sgd_1e-3": ("sgd", 1e-3, torch.float64), "sgd_1e-2": ("sgd", 1e-2, torch.float64)}
CAPS = (64, 16, 16)  # group-shared tokens, other shared tokens, mixed groups per step


class Follow(train.Hooks):
    """The lesson's objective, with the motion ledger after each optimizer step."""

    def __init__(self, model, batch, cfg):
        self.model, self.batch, self.cfg, self.seen, self.out = model, batch, cfg, [], None

    def part(self, p, logp, args, counts, n_parts):
        if not self.seen:
            self.before = torch.nn.utils.parameters_to_vector(self.model.parameters()).detach()
            self.before = self.before.clone()
        logp.retain_grad()
        self.seen.append((p, logp))
        return {}

    def step(self, mb, adv, opt, norm):
        coef = torch.zeros(len(mb), self.batch.mask.shape[1], dtype=self.before.dtype)
        for p, logp in self.seen:
            coef[p] = -logp.grad.to(coef.dtype)
        kappa = min(1.0, self.cfg.grad_clip / (float(norm) + 1e-6))  # torch's clip factor
        self.out = motion.token_motion(self.model, opt, self.batch, mb, coef, self.before,
                                       self.cfg.temperature, kappa, caps=CAPS)
        return {}


def one_arm(model, opt_state, batch, arm):
    """One optimizer step of ``arm`` from the kept state: the ledger's per-token numbers."""
    name, lr, dtype = ARMS[arm]
    net = copy.deepcopy(model).to(dtype)
    cfg = Config(lr=lr, optimizer=name)
    opt = train.rl_optimizer(net.parameters(), name, lr)
    if name == "adamw":  # the run's moments, cast to the dtype
        opt.load_state_dict(copy.deepcopy(opt_state))
    with torch.no_grad():  # the old log-probs in the arm's own dtype: on-policy, ratio 1
        old = completion_logprobs(net, batch.prompts, batch.tokens, batch.mask, PAD)
    b = dataclasses.replace(batch, old_logprobs=old)
    adv = loss.ADVANTAGES[cfg.adv](b.rewards, b.group, b.mask.sum(1), b.baseline)
    hooks = Follow(net, b, cfg)
    train.optimizer_step(net, opt, b, adv, torch.arange(len(adv)), cfg, hooks=hooks)
    return hooks.out


def agreement(change, pred):
    """slope, correlation and the worst token's |pred - change| over the largest |change|."""
    x, y = torch.tensor(change, dtype=torch.float64), torch.tensor(pred, dtype=torch.float64)
    slope = float((x * y).sum() / (x * x).sum())
    corr = float(torch.corrcoef(torch.stack([x, y]))[0, 1])
    return {"slope": slope, "corr": corr, "worst": float((y - x).abs().max() / x.abs().max())}


def shares(cat, kind):
    """Over the followed tokens of ``kind``: their number, mean |change|, and each part's
    share of the movement, sum part x change / sum change^2."""
    sel = [j for j, k in enumerate(cat["kind"]) if k == kind]
    d = [cat["dlogp"][j] for j in sel]
    sq = sum(x * x for x in d)
    return {"tokens": len(sel), "moved": sum(abs(x) for x in d) / max(len(sel), 1),
            "shares": {p: sum(cat[p][j] * cat["dlogp"][j] for j in sel) / sq if sq else None
                       for p in motion.PARTS}}


def one_seed(o, seed, step):
    path = common.rl_states(o, seed, [step])[step]
    model, opt = common.load_state(o, seed, path)
    _, task, draw, gen = common.diag_setup(o, seed)
    for _ in range((step + 1) * Config.prompts_per_step):  # past the run's problems
        draw()
    batch = common.rollout_batch(model, task, draw, Config.prompts_per_step, Config.group_size,
                                 gen)
    return {arm: one_arm(model, opt.state_dict(), batch, arm) for arm in ARMS}


def main(argv):
    o = common.parse(argv, EXTRA, __doc__, unused=("jobs", "replot"), name="motion_check")
    step = 2 if o["quick"] else o["step"]
    t0 = time.time()
    per_seed = {s: one_seed(o, s, step) for s in o["seeds"]}
    arms = {}
    for arm in ARMS:
        got = [per_seed[s][arm] for s in o["seeds"]]
        cat = {k: [v for g in got for v in g[k]] for k in ("kind", "dlogp", "first",
                                                            *motion.PARTS)}
        total = [sum(cat[p][j] for p in motion.PARTS) for j in range(len(cat["dlogp"]))]
        arms[arm] = {"tokens": len(total), "parts": agreement(cat["dlogp"], total),
                     "first_order": agreement(cat["dlogp"], cat["first"]),
                     "recon": max(g["recon"] for g in got),
                     **{kind: shares(cat, kind) for kind in ("shared", "partial")}}
        a = arms[arm]
        print(f"{arm:16s} {a['tokens']:4d} tokens  parts: slope {a['parts']['slope']:.6f} "
              f"corr {a['parts']['corr']:.6f} worst {a['parts']['worst']:.1e}  first order: "
              f"slope {a['first_order']['slope']:.3f} worst {a['first_order']['worst']:.2f}")
        print(" " * 17 + "group-shared: " + "  ".join(
            f"{p} {100 * v:+.1f} %" for p, v in a["shared"]["shares"].items() if v))
    data = {"experiment": "motion_check", "seeds": o["seeds"], "step": step,
            "quick": o["quick"], "caps": CAPS, "arms": arms, "wall_s": round(time.time() - t0, 1)}
    common.save("motion_check", common.clean(data), o["out"])
    print(f"[{data['wall_s']:.0f}s] wrote {o['out']}/motion_check.json")
    return data


if __name__ == "__main__":
    common.cli(main)
