"""instruments.py: what the lab measures inside a run of train.py, at three points of a step.

What it teaches
---------------
The lesson's RL step exposes two things: the rollout batch, and the coefficients
c_{i,t} = -d loss / d log pi(y_{i,t}) that every token received in every optimizer step
(lab/hooks.py keeps them from the step's own backward pass, only when the lab is on).
``Instruments`` reads them and nothing else of the step; the lab's hooks call it at:

  rollouts(model, batch)           before the update: the policy at the histories each
                                   group shares (for the learning tax), and the lengths
                                   of right and wrong completions
  step(mb, coef, parts, adv, opt, norm)  after each optimizer step: the ratios' statistics, the
                                   on-policy coefficients c° (each part's loss at
                                   log pi_old, every ratio 1: no clip binds), which
                                   separate the objective's own weights from what reuse
                                   adds, the residuals (residuals.py), and in the RL steps
                                   of --motion_every what moved the shared tokens
                                   (motion.py) and a task's choice (choice_motion.py)
  after(model, rec, batch, adv, cut)  after the update: the cancellation ledger (ledger.py),
                                   the learning tax and the shift of the shared tokens
                                   (diagnostics.py); at an evaluation the --diagnostics
  finish(summary)                  at the run's end: the run's ledger, and its last lines

The cost: one loss evaluation and one autograd.grad through the loss alone per
micro-batch (c°), two forward passes of the model per RL step (the policy at the
shared histories before and after the update), and bookkeeping on the host (a trie of
the batch's tokens). The motion ledger (rank 0, in every --motion_every-th RL step) adds,
per optimizer step, on its own copy of the model: a forward and backward pass of each
group it follows (at most motion.MAX_GROUPS), at three points of the step a forward pass of
each followed token's row with one backward per token (at most motion.MAX_SHARED, all
group-shared), and two forward passes of the step's rows; in a task with a choice, per group
two small backward passes at its prompt and, at each of the three points, one per group.
``--instruments=false`` switches all of it off; then an RL step runs no extra forward or
backward pass, keeps no coefficient, and logs none of these
numbers. (The lab's catalogue still resolves the flags: lab/__init__.py.)
"""

import types

import torch

from lab import batch_stats, choice_motion, diagnostics, ledger, lengthcov, motion, residuals
from lab.syncs import host, to_host
from model import amp
from plumbing import dist_utils
import toy_tasks


# the instruments' running sums, kept in the run's state (its checkpoint saves and restores
# them): the cancellation ledger's mass and parts (ledger.py), the summed shared_dlogp, the
# RL steps they cover and those with a mixed group; the length-reward gap inside mixed
# groups (lengthcov.py); the learning tax, the summed exch_residual, and the warm start's
# diagnostics (drift's reference)
SUMS = {**{f"ledger_{k}": 0.0 for k in ("mass", "cancelled", *ledger.LEDGER_PARTS,
                                         "steps", "mixed_steps")},
        "shared_dlogp_sum": 0.0, "lencov_groups": 0.0, "lencov_gap_sum": 0.0, "length_sum": 0.0,
        "tax_sum": 0.0, "tax_interior_sum": 0.0, "exch_sum": 0.0, "diag_ref": None,
        "motion_steps": 0.0, **{k: 0.0 for k in motion.STEP_KEYS}}


class Instruments:
    """The lab's measures of one run; its running sums live in ``state.sums`` (resumed with
    the run). ``master``: this process logs (rank 0). The hooks call it at three points:
    ``rollouts``, ``step`` and ``after``; and ``finish`` for the summary."""

    def __init__(self, cfg, state, master, task=None, held_out=None):
        self.cfg, self.state, self.master = cfg, state, master
        for k, v in SUMS.items():  # a resumed run's come back with the checkpoint's
            state.sums.setdefault(k, v)
        self.task, self.held_out = task, held_out  # --diagnostics evaluates on them
        self.before, self.theta = None, None
        self.first_m = None  # the first tokens' momentum (choice_motion.py); False: unknown
        self.steps = []  # (rows, c, c°) of each optimizer step of the current batch
        choice = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad).choice
        self.choice_id = None if choice is None else toy_tasks.encode(choice)[0]

    # ------------------------------------------------------------------ before the update

    def rollouts(self, model, batch):
        """The policy at the histories each group shares, taken before the update (rank 0),
        and the lengths of right and wrong completions. The batch is copied to the host
        once: the lab's bookkeeping runs there and makes the GPU wait no more."""
        self.before = diagnostics.tax_before(model, batch) if self.master else None
        self.steps, self.full = [], batch
        tokens, mask, group, rewards = to_host(batch.tokens, batch.mask, batch.group,
                                               batch.rewards)
        self.batch = types.SimpleNamespace(tokens=tokens, mask=mask, group=group, rewards=rewards)
        with host():
            return batch_stats.lengths_by_outcome(self.batch)

    # ------------------------------------------------------------------ each optimizer step

    def begin_step(self, model):
        """Before an optimizer step (rank 0, in RL steps 1, 1 + --motion_every, ...): its
        parameters, for the motion ledger."""
        every = self.cfg.motion_every
        step = getattr(self.state, "step", 1)  # (a caller's own update: its every step)
        if self.master and every and (step - 1) % every == 0:
            self.theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
            self.model = model

    def step(self, mb, coef, parts, adv, opt, norm):
        """One optimizer step on mini-batch ``mb``: its coefficients ``coef`` (this process's
        rows) and, per part, (positions, log pi, (old log pi, mask, Â, groups), the number
        of parts a --norm=local loss is divided by, the loss as a function of the log-probs
        with every ratio 1); ``opt`` and ``norm``, the gradient's norm before the clip, for
        the motion ledger. Returns the ratios' statistics and the residuals of the step's
        shared tokens' copies (and the motion ledger's numbers)."""
        acc, coef_on = {}, torch.zeros_like(coef)
        for p, logp, (old, mask, _, _), n_parts, loss_at in parts:
            for k, v in batch_stats.ratio_stats(logp, old, mask).items():  # row-weighted
                v = torch.as_tensor(v, dtype=torch.float64, device=coef.device)
                acc[k] = acc.get(k, 0.0) + v * len(p)
            # a leaf at the old log-probs: the loss there is the on-policy loss, and its
            # gradient with respect to this leaf is c°; the model's parameters are not touched
            at_old = old.detach().clone().requires_grad_()
            coef_on[p] = residuals.coefficients(loss_at(at_old), at_old).detach().float() \
                / n_parts
        keys = sorted(acc)  # the same order on every rank, for one all-reduce
        stats = dist_utils.all_reduce_sum(torch.stack([acc[k] for k in keys]))
        coef = dist_utils.all_reduce_sum(coef)  # every coefficient of the step, on every rank
        coef_on = dist_utils.all_reduce_sum(coef_on)
        moved = {}
        if self.theta is not None:  # what moved the shared tokens (rank 0, --motion_every)
            kappa = min(1.0, self.cfg.grad_clip / (float(norm) + 1e-6))  # torch's clip factor
            # the group-shared tokens only: the run logs nothing of the others, which cost as
            # much (lab/experiments/motion_check.py follows both)
            moved = motion.step_metrics(motion.token_motion(
                self.model, opt, self.full, mb, coef, self.theta, self.cfg.temperature, kappa,
                caps=(motion.MAX_SHARED, 0, motion.MAX_GROUPS),
                autocast=lambda: amp(self.cfg, self.full.mask.device.type)))
            if self.choice_id is not None:  # a task's choice: what moved it at the prompts
                moved.update(self.choice(opt, mb, coef, kappa))
            self.theta = None
        elif self.master and self.choice_id is not None:  # a step not followed: the first
            self.first_m = False                          # tokens' momentum is lost
        stats, coef, coef_on, adv, mb = to_host(stats, coef, coef_on, adv, mb)  # one read
        self.steps.append((mb, coef, coef_on))
        b = self.batch
        with host():
            out = {k: v / len(mb) for k, v in zip(keys, stats.tolist())}  # row-weighted means
            group, mask = b.group[mb], b.mask[mb]
            out["first_token_residual"] = residuals.first_token_residual(coef, group)
            out["exch_residual"] = residuals.exch_residual(coef, adv[mb], b.tokens[mb], mask,
                                                           group)
        return dict(out, **moved)

    def choice(self, opt, mb, coef, kappa):
        """The choice's motion at the step's prompts (choice_motion.py), with memory split by
        the first tokens' momentum while every step since RL began was followed."""
        params = list(self.model.parameters())
        if self.first_m is None:  # the run's first followed step: RL step 1, or a resume
            fresh = getattr(self.state, "step", 1) == 1
            self.first_m = torch.zeros_like(self.theta) if fresh else False
        carried = self.first_m if self.first_m is not False else None
        out = choice_motion.choice_motion(
            self.model, opt, self.full, mb, coef, self.theta, self.choice_id,
            self.cfg.temperature, kappa, carried=carried,
            autocast=lambda: amp(self.cfg, self.full.mask.device.type))
        if carried is not None:
            m = choice_motion.advance(opt, params, carried, out["first_grad"])
            self.first_m = m if m is not None else carried  # no momentum: nothing carried
        return choice_motion.step_metrics(out)

    # ------------------------------------------------------------------ after the update

    def after(self, model, rec, batch=None, adv=None, cut=None):
        """After a batch's update (``batch``, its advantages and the last cut): the
        batch's cancellation ledger, the learning tax and the shift of the shared tokens;
        at an evaluation (``rec`` has eval_acc: also the warm start's, with no batch), the
        --diagnostics. As metrics."""
        out = {}
        if batch is not None:
            out.update(self.update(adv, cut))
            out.update(self.tax(model, batch, rec["mixed"], rec))
        if "eval_acc" in rec:
            out.update(self.evaluation(model))
        return out

    def update(self, adv, cut):
        """The last cut's split and the batch's cancellation ledger, as metrics."""
        b, adv = self.batch, to_host(adv)
        with host():  # the cut was made on the host
            out = batch_stats.minibatch_stats(cut, b.group, adv, b.mask.sum(1))
            led = ledger.ledger_sums(self.steps, adv, b.tokens, b.mask, b.group)
        out["ledger_mass"] = led["mass"]
        # what the run's weights push inside the mixed groups (lengthcov.py, THEORY.md 2.7)
        choice = b.tokens[:, 0] == self.choice_id if self.choice_id is not None else None
        agg = lengthcov.run_agg(self.cfg, b.mask, adv, b.group)
        cov = lengthcov.batch_metrics(adv, agg, b.group,
                                      b.mask.sum(1), b.rewards, choice)
        out.update(cov)
        sums = self.state.sums  # the run's gap: a mean over its mixed groups, for the summary
        sums["lencov_groups"] += cov["lencov_mixed"]
        sums["lencov_gap_sum"] += (cov["lencov_gap"] or 0.0) * cov["lencov_mixed"]
        with host():
            sums["length_sum"] += float(b.mask.sum(1).double().mean())
        out.update({f"ledger_{k}": v for k, v in ledger.ledger_shares(led).items()})
        for k, v in led.items():  # the run's ledger: sums, so that its shares weigh by mass
            self.state.sums[f"ledger_{k}"] += v
        self.steps = []
        return out

    def tax(self, model, batch, mixed, rec):
        """(rank 0) the learning tax and the shift of the shared tokens, as metrics; and the
        run's sums."""
        sums, out = self.state.sums, {}
        sums["ledger_steps"] += 1
        sums["ledger_mixed_steps"] += float(mixed > 0)
        if self.master:  # what the update did at the histories the group shares
            out["tax"], out["tax_interior"], out["shared_dlogp"] = \
                diagnostics.learning_tax_and_shift(model, batch, self.before)
            sums["tax_sum"] += out["tax"]
            sums["tax_interior_sum"] += out["tax_interior"]
            sums["shared_dlogp_sum"] += out["shared_dlogp"]
            out["tax_sum"], out["tax_interior_sum"] = sums["tax_sum"], sums["tax_interior_sum"]
        sums["exch_sum"] += rec["exch_residual"]  # the summary's mean
        if "motion_n" in rec:  # the motion ledger's sums (rl_update's means of its steps)
            sums["motion_steps"] += 1
            for k in motion.STEP_KEYS:
                sums[k] += rec[k]
        return out

    def evaluation(self, model):
        """--diagnostics at an evaluation: drift since the warm start, entropy, pass@k
        (diagnostics.py); the warm start's own values become drift's reference. A task with
        a ``choice`` also gets its log-odds against every other token, always."""
        out = {}
        if self.choice_id is not None:  # the choice's log-odds, with or without --diagnostics
            out["choice_log_odds"] = lengthcov.choice_log_odds(
                diagnostics.next_logprobs(model, self.task, self.held_out[:256]), self.choice_id)
        if not self.cfg.diagnostics:
            return out
        sums = self.state.sums
        d = diagnostics.eval_diagnostics(model, self.task, self.held_out, self.cfg,
                                         sums["diag_ref"])
        ref = d.pop("_ref")
        if sums["diag_ref"] is None:  # the warm start (RL step 0)
            sums["diag_ref"] = ref
        return {**d, **out}

    # ------------------------------------------------------------------ the run

    def finish(self, summary):
        """The run's ledger and residual, added to ``summary`` (the summary line of
        metrics.jsonl); returns the run's last printed lines (ledger.py)."""
        s, cfg = self.state.sums, self.cfg
        out = {"exch_residual_mean": s["exch_sum"] / cfg.rl_steps} if cfg.rl_steps else {}
        if s["ledger_steps"]:  # the run's ledger (the steps since a resume, for an older run)
            n = int(s["ledger_steps"])
            led = {k: s[f"ledger_{k}"] for k in ("mass", "cancelled", *ledger.LEDGER_PARTS)}
            out.update(ledger_steps=n, ledger_mass=led["mass"],
                       ledger_mixed_steps=int(s["ledger_mixed_steps"]),
                       shared_dlogp_mean=s["shared_dlogp_sum"] / n,
                       **motion.summary(s),
                       **{f"ledger_{k}": v for k, v in ledger.ledger_shares(led).items()})
            if s["lencov_groups"]:  # right - wrong length inside mixed groups, and the length
                out.update(lencov_gap_mean=s["lencov_gap_sum"] / s["lencov_groups"],
                           length_mean=s["length_sum"] / n)
        summary.update(out)
        return ledger.ledger_lines(summary, cfg) if "ledger_steps" in summary else []
