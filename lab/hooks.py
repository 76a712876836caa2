"""hooks.py: the lab's seams in train.py's loop, and the extras its catalogue's objectives read.

What it teaches: how the lab reaches into the lesson without the lesson knowing it. train.py
calls one hooks object at fixed points of a run; ``train.Hooks`` names them and does nothing
at each. Where the run turns the lab on (its instruments, or an objective, estimator or
switch of its catalogue: train.hooks_for), train.py takes ``LabHooks`` instead:

  objective(cfg, model, batch)  --loss's function, in loss.py's signature (logp, old_logp,
                                mask, Â, group, counts) -> (loss, clip fraction). A switch
                                of the catalogue (--beta, --agg, --entropy_coef, ...)
                                takes the catalogue's version of it (objectives.py); its
                                objectives also read the part's extras (``forward``)
  rl_start(run)                 --beta's frozen reference policy: the warm start
  rewarded(model, task, batch, gen)  this process's rewarded rollouts: ReMax's greedy
                                baseline, --permute_rewards (estimators.controls)
  rollouts(model, batch)        the reference's log-probs of the batch (--beta); the
                                instruments' look before the update (instruments.py)
  forward(rows, hidden)         a part's rows and hidden states: the catalogue's extras
  part(p, logp, args, counts, n_parts)  before a part's backward: its log-probs keep their
                                gradient, the coefficients c_{i,t} = -d loss / d log pi;
                                returns the catalogue's own numbers of the part
  step(mb, adv, opt, norm)      after the optimizer step: the instruments' residuals, and
                                what moved the shared tokens (motion.py, from opt's state
                                and the gradient's norm before the clip)
  after(...), line(rec)         the ledger, the learning tax, the diagnostics; what
  finish(summary)               cancelled, in an evaluation's line; the run's last lines
"""

import functools
import os
import types

import torch

import loss
from lab import estimators, objectives
from lab.instruments import Instruments
from model import GPT, amp, completion_logprobs
from plumbing import checkpoint, dist_utils
from toy_tasks import PAD

LEGEND_LAB = ("; cancelled: the share of the step's shared-token coefficients that\n"
              "  cancelled (the cancellation ledger, at the end)")


class LabHooks:
    """The lab's hooks of one run, its instruments on with --instruments; without the run's
    ``state`` (a caller's own update, train.rl_update) the catalogue's objective alone."""

    def __init__(self, cfg, state=None, master=True, task=None, held_out=None, instruments=None):
        self.cfg, self.inst = cfg, instruments
        if instruments is None and cfg.instruments and state is not None:
            self.inst = Instruments(cfg, state, master, task, held_out)
        self.legend = LEGEND_LAB if self.inst else ""
        self.ref_model, self.seen, self.extras = None, [], None

    # ------------------------------------------------------------------ the objective

    def objective(self, cfg, model, batch):
        """--loss's function for the update of ``batch`` by ``model``, --clip's bounds bound
        in: loss.LOSSES' (loss.grpo in the demo; the catalogue's objectives joined it when
        the lab was imported), or the catalogue's version when a switch of its own is on.
        The catalogue's read the part's extras too: ``forward`` makes them."""
        fn = loss.LOSSES[cfg.loss]
        record = objectives.OBJECTIVES.get(cfg.loss)
        # a switch adds a term or drops tokens: the catalogue's own version, the same numbers else
        catalogue = objectives.switched(cfg) or (record is not None and record.lesson is None)
        if objectives.switched(cfg):
            fn = functools.partial(objectives.catalogue_loss, cfg.loss)
        clip = loss.clip_bounds(cfg.clip, cfg.clip_low, cfg.clip_high)
        plain = getattr(model, "module", model)
        self.batch, self.model = batch, plain  # the step reads its mask; the motion ledger, both

        def objective(logp, old_logp, mask, adv, group, counts, extra=None):
            if not catalogue:  # the lesson's own function (loss.py) reads the counts alone
                return fn(logp, old_logp, mask, adv, group, counts, clip=clip)
            return fn(logp, old_logp, mask, adv, group, counts, clip=clip,
                      extra=self.extras if extra is None else extra)
        self.fn = objective
        return objective

    def forward(self, rows, hidden):
        """A part's rows and the hidden states of its log-probs, before its loss: the extras
        a catalogue objective may also read (the lesson's read none of them). The flags, the
        model, the hidden states (token entropies, computed once per part and kept here),
        the frozen reference's log-probs (--beta); and where it leaves numbers to log."""
        cfg = self.cfg
        self.extras = types.SimpleNamespace(
            cfg=cfg, model=self.model, hidden=hidden,
            ref_logprobs=self.batch.ref_logprobs[rows] if cfg.beta else None,
            on_policy=False, entropy=None, stats={})

    @staticmethod
    def on_policy(counts, extras):
        """A part's counts and extras with every ratio taken as 1: DFPO's w~ of the ratios at
        pi_old (all 1), and the catalogue's switches as on-policy (for the lab's c°)."""
        return dict(counts, weights=None), types.SimpleNamespace(
            **dict(vars(extras), on_policy=True))

    # ------------------------------------------------------------------ the run's points

    def rl_start(self, run):
        """--beta's frozen reference policy: the warm start (the run's own, or --init_from's)."""
        cfg = run.cfg
        if not cfg.beta:
            return
        ref = GPT(run.unwrapped.cfg).to(run.device)
        # resumed in RL, the model has moved on: the reference comes back from its file
        if run.state.phase == "rl":
            path = cfg.init_from or os.path.join(cfg.out_dir, "warm_start.pt")
            ref.load_state_dict(checkpoint.load_checkpoint(path, run.device)[0].state_dict())
        else:
            ref.load_state_dict(run.unwrapped.state_dict())
        self.ref_model = ref.eval().requires_grad_(False)

    def rewarded(self, model, task, batch, gen):
        """This process's rollouts, rewarded, before every process's are gathered: the lab's
        controls (--adv=remax's greedy baseline, --permute_rewards: estimators.controls)."""
        estimators.controls(self.cfg, model, task, batch, gen)

    def rollouts(self, model, batch):
        """The frozen reference's log-probs of the batch's tokens (--beta); then the
        instruments' look at the rollouts, before the update changes the policy."""
        if self.ref_model is not None:
            with torch.no_grad(), amp(self.cfg, batch.mask.device.type):
                batch.ref_logprobs = completion_logprobs(
                    self.ref_model, batch.prompts, batch.tokens, batch.mask, PAD,
                    self.cfg.temperature).float()
        self.batch = batch
        return self.inst.rollouts(model, batch) if self.inst else {}

    def part(self, p, logp, args, counts, n_parts):
        """Before part ``p``'s backward: the instruments keep its log-probs, whose gradient
        the backward leaves (the coefficients), and its loss with every ratio 1. Returns the
        catalogue's own numbers of the part (its objective left them in the part's extras)."""
        if self.inst:
            if not self.seen:  # the step's first part: the parameters before the step
                self.inst.begin_step(self.model)
            logp.retain_grad()  # d loss / d log pi after the backward: the coefficients
            on = self.on_policy(counts, self.extras)
            self.seen.append((p, logp, args, n_parts, lambda lp, a=args, c=on:
                              self.fn(lp, *a, c[0], extra=c[1])[0]))
        return self.extras.stats  # the catalogue's objective left them there

    def step(self, mb, adv, opt, norm):
        """After the optimizer step on ``mb`` by ``opt`` (``norm``: the gradient's before the
        clip): c_{i,t} = -d loss / d log pi(y_{i,t}) of its rows, and the instruments'
        measures of the step's copies of each shared token."""
        seen, self.seen = self.seen, []
        self.extras = None  # the last part's: no later call may read them (its c° keeps a copy)
        if not self.inst:
            return {}
        world = dist_utils.rank_world()[1]
        mask = self.batch.mask
        coef = torch.zeros(len(mb), mask.shape[1], device=mask.device)
        for p, logp, *_ in seen:
            coef[p] = (-logp.grad / world).float()
        return self.inst.step(mb, coef, [(p, logp.detach(), *rest) for p, logp, *rest in seen],
                              adv, opt, norm)

    def after(self, model, rec, batch=None, adv=None, cut=None):
        return self.inst.after(model, rec, batch, adv, cut) if self.inst else {}

    def line(self, rec):
        """The evaluation line's share of the shared tokens' coefficients that cancelled
        (the ledger), or nothing without the instruments."""
        if "ledger_cancelled" not in rec:  # --instruments=false: the lab measured nothing
            return ""
        done = f"{100 * rec['ledger_cancelled']:.0f} %" if rec["ledger_mass"] > 0 else "n/a"
        return f"  cancelled {done}"

    def finish(self, summary):
        return self.inst.finish(summary) if self.inst else []
