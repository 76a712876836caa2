"""instruments.py: what the lab measures inside a run of train.py, at five points of the loop.

What it teaches
---------------
The lesson's RL step exposes two things: the rollout batch, and the coefficients
c_{i,t} = -d loss / d log pi(y_{i,t}) that every token received in every optimizer step
(train.optimizer_step keeps them from its own backward pass). ``Instruments`` reads
them and nothing else of the step, at these points (lab/__init__.py lists the seam):

  rollouts(batch)                  before the update: the policy at the histories each
                                   group shares (for the learning tax), and the lengths
                                   of right and wrong completions
  part(p, logp, old, mask, loss_at)  each micro-batch: the ratios' statistics, and the
                                   on-policy coefficients c° = -d loss_at(log pi_old) /
                                   d log pi (every ratio 1: no clip binds), which separate
                                   the objective's own weights from what reuse adds
  step(coef, batch, adv, mb)       each optimizer step: the residuals (residuals.py)
  update(batch, adv, cut)          after the optimizer steps: the cancellation ledger
                                   (ledger.py), how the scheduler's last cut split the groups
  after(model, batch, mixed, rec)  after the update: the learning tax and the shift of the
                                   shared tokens (diagnostics.py), the run's sums
  summary(), lines()               the run's ledger, for metrics.jsonl and the last lines

The cost: one loss evaluation and one autograd.grad through the loss alone per
micro-batch (c°), two forward passes of the model per RL step (the policy at the
shared histories before and after the update), and bookkeeping on the CPU (a trie of
the batch's tokens). ``--instruments=false`` switches all of it off; then an RL step
runs no extra forward or backward pass, and the run logs none of these numbers.
"""

import types

import torch

from lab import batch_stats, diagnostics, ledger, lengthcov, residuals
from lab.syncs import host, to_host
from plumbing import dist_utils
import toy_tasks


class Instruments:
    """The lab's measures of one run; its running sums live in ``state.sums`` (resumed with
    the run). ``master``: this process logs (rank 0)."""

    def __init__(self, cfg, state, master):
        self.cfg, self.state, self.master = cfg, state, master
        self.before = None
        self.steps = []  # (rows, c, c°) of each optimizer step of the current batch
        choice = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad).choice
        self.choice_id = None if choice is None else toy_tasks.encode(choice)[0]

    # ------------------------------------------------------------------ before the update

    def rollouts(self, model, batch):
        """The policy at the histories each group shares, taken before the update (rank 0),
        and the lengths of right and wrong completions. The batch is copied to the host
        once: the lab's bookkeeping runs there and makes the GPU wait no more."""
        self.before = diagnostics.tax_before(model, batch) if self.master else None
        self.steps = []
        tokens, mask, group, rewards = to_host(batch.tokens, batch.mask, batch.group,
                                               batch.rewards)
        self.batch = types.SimpleNamespace(tokens=tokens, mask=mask, group=group, rewards=rewards)
        with host():
            return batch_stats.lengths_by_outcome(self.batch)

    # ------------------------------------------------------------------ inside a step

    def start_step(self, n_rows, n_tokens, device):
        self.coef_on = torch.zeros(n_rows, n_tokens, device=device)

    def part(self, p, logp, old, mask, loss_at, n_parts):
        """One micro-batch: its ratio statistics, and its on-policy coefficients c°."""
        # a leaf at the old log-probs: the loss there is the on-policy loss, and its gradient
        # with respect to this leaf is c°; the model's parameters are not touched
        at_old = old.detach().clone().requires_grad_()
        self.coef_on[p] = residuals.coefficients(loss_at(at_old), at_old).detach().float() \
            / n_parts
        return batch_stats.ratio_stats(logp, old, mask)

    def step(self, coef, batch, adv, mb):
        """One optimizer step, ``coef`` its coefficients summed over processes: the
        residuals of its shared tokens' copies."""
        coef_on = dist_utils.all_reduce_sum(self.coef_on)
        coef, coef_on, adv, mb = to_host(coef, coef_on, adv, mb)  # one read per step
        self.steps.append((mb, coef, coef_on))
        b = self.batch
        with host():
            group, mask = b.group[mb], b.mask[mb]
            return {"first_token_residual": residuals.first_token_residual(coef, group),
                    "exch_residual": residuals.exch_residual(coef, adv[mb], b.tokens[mb], mask,
                                                             group)}

    # ------------------------------------------------------------------ after the update

    def update(self, batch, adv, cut):
        """The last cut's split and the batch's cancellation ledger, as metrics."""
        b, adv = self.batch, to_host(adv)
        with host():  # the cut was made on the host
            out = batch_stats.minibatch_stats(cut, b.group, adv, b.mask.sum(1))
            led = ledger.ledger_sums(self.steps, adv, b.tokens, b.mask, b.group)
        out["ledger_mass"] = led["mass"]
        # what the run's weights push inside the mixed groups (lengthcov.py, THEORY.md 2.7)
        choice = b.tokens[:, 0] == self.choice_id if self.choice_id is not None else None
        out.update(lengthcov.batch_metrics(adv, lengthcov.run_agg(self.cfg, b.mask, adv),
                                           b.group, b.mask.sum(1), b.rewards, choice))
        out.update({f"ledger_{k}": v for k, v in ledger.ledger_shares(led).items()})
        for k, v in led.items():  # the run's ledger: sums, so that its shares weigh by mass
            self.state.sums[f"ledger_{k}"] += v
        self.steps = []
        return out

    def after(self, model, batch, mixed, rec):
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
        return out

    def evaluation(self, model, task, held_out):
        """--diagnostics at an evaluation: drift since the warm start, entropy, pass@k
        (diagnostics.py); the warm start's own values become drift's reference. A task with
        a ``choice`` also gets its log-odds against every other token, always."""
        out = {}
        if task.choice is not None:  # the choice's log-odds, with or without --diagnostics
            out["choice_log_odds"] = lengthcov.choice_log_odds(
                diagnostics.next_logprobs(model, task, held_out[:256]), self.choice_id)
        if not self.cfg.diagnostics:
            return out
        sums = self.state.sums
        d = diagnostics.eval_diagnostics(model, task, held_out, self.cfg, sums["diag_ref"])
        ref = d.pop("_ref")
        if sums["diag_ref"] is None:  # the warm start (RL step 0)
            sums["diag_ref"] = ref
        return {**d, **out}

    @staticmethod
    def cancelled_text(rec):
        """The evaluation line's share of the shared tokens' coefficients that cancelled."""
        done = f"{100 * rec['ledger_cancelled']:.0f} %" if rec["ledger_mass"] > 0 else "n/a"
        return f"  cancelled {done}"

    # ------------------------------------------------------------------ the run

    def lines(self, summary):
        """The run's last printed lines: its cancellation ledger (ledger.py)."""
        return ledger.ledger_lines(summary, self.cfg) if "ledger_steps" in summary else []

    def summary(self):
        """The run's ledger and residual for the summary line of metrics.jsonl."""
        s, cfg = self.state.sums, self.cfg
        out = {"exch_residual_mean": s["exch_sum"] / cfg.rl_steps} if cfg.rl_steps else {}
        if s["ledger_steps"]:  # the run's ledger (the steps since a resume, for an older run)
            n = int(s["ledger_steps"])
            led = {k: s[f"ledger_{k}"] for k in ("mass", "cancelled", *ledger.LEDGER_PARTS)}
            out.update(ledger_steps=n, ledger_mass=led["mass"],
                       ledger_mixed_steps=int(s["ledger_mixed_steps"]),
                       shared_dlogp_mean=s["shared_dlogp_sum"] / n,
                       **{f"ledger_{k}": v for k, v in ledger.ledger_shares(led).items()})
        return out
