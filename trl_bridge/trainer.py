"""trainer.py: loss.py's objectives and the cancellation ledger inside TRL's GRPOTrainer.

What it adds to a TRL run
-------------------------
The lesson's loss of an optimizer step is sum_{i,t} c_{i,t} (-log pi(y_{i,t})) with the
coefficient c_{i,t} = rho_{i,t} Â_i agg_i (loss.py). TRL computes Â; this trainer keeps it
and replaces the rest:

* ``objective``: any of loss.py's five (grpo, dr_grpo, dapo, dfpo_min, dfpo_orth), given
  the *optimizer step's* counts N, sum L and L_max, summed over micro-batches and
  processes, so that splitting a step changes no copy's weight. DFPO's group transform
  sees every row of the step (a no-grad pass when the data is reused).
* ``keep_groups`` (default on): TRL shuffles the rows of a generation batch before cutting
  it into micro-batches; with ``steps_per_generation`` above the gradient accumulation a
  group's copies then land in different optimizer steps, where they cannot cancel. Here
  whole groups are shuffled instead, so each group lies inside one optimizer step.
  ``keep_groups=False`` restores TRL's own shuffle, to measure what it costs.
* the ledger (lab/ledger.py, THEORY.md 2.5) of every ``ledger_every``-th generation
  batch, and lab/lengthcov.py's in-group length gap and Cov(Â, w), logged through TRL's
  own metrics (console, TensorBoard, wandb) as ``ledger/<part>`` and ``lengthcov/<key>``.
  With several processes every process gathers the whole batch, so 2 processes give the
  ledger of the batch as 1 process would.
* TRL's ``beta`` (its reference model, its k3 estimator), ``importance_sampling_level=
  "sequence"`` (GSPO) and ``entropy_coef``, each as TRL computes it. Every other TRL
  setting these objectives do not honour is refused in one line (UNSUPPORTED, loss_type,
  a scale_rewards that contradicts the objective), never silently ignored.

TRL's private names this file relies on (trl 1.16; nothing public serves):
``_generate_and_score_completions`` (extended: group and row ids), ``_prepare_inputs``
(replaced in training when ``keep_groups``), ``_get_per_token_logps_and_entropies`` (the
log-probs), ``_buffered_inputs``, ``_step`` and ``_metrics`` (TRL's metric lists).
"""
import sys
from dataclasses import dataclass, field
from typing import Optional

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import split_tensor_dict

from trl_bridge.lesson import load

loss, engines, lengthcov, objectives, ledger = load(
    "loss", "lab.engines", "lab.lengthcov", "lab.objectives", "lab.ledger")

OBJECTIVES = ("grpo", "dr_grpo", "dapo", "dfpo_min", "dfpo_orth")  # loss.py's own five
# TRL's settings that this trainer does not honour, with the value that is off: refused
# when set, never silently ignored (docs/REFERENCE.md says why for each)
UNSUPPORTED = {"top_entropy_quantile": 1.0, "off_policy_mask_threshold": None, "delta": None,
               "use_adaptive_entropy": False, "use_vllm": False}
# scale_rewards: each objective's own Â (loss.OWN_ADV): GRPO's scaled one, or r - mu
OWN_SCALE = {name: "group" if loss.OWN_ADV[name] == "grpo" else "none" for name in OBJECTIVES}
GROUP = 1 << 32  # a group id: the generation batch's number times GROUP, plus its group


@dataclass
class CancellationConfig(GRPOConfig):
    """GRPOConfig and three settings. ``objective`` replaces ``loss_type`` (which is refused
    unless it names the same loss); ``scale_rewards`` defaults to the objective's own."""
    objective: str = field(default="grpo", metadata={"help": "one of " + ", ".join(OBJECTIVES)})
    keep_groups: bool = field(default=True, metadata={
        "help": "keep each group inside one optimizer step (False: TRL's row shuffle)"})
    ledger_every: int = field(default=1, metadata={
        "help": "the ledger of every N-th generation batch (0: never)"})
    loss_type: Optional[str] = field(default=None, metadata={"help": "not read: see objective"})
    scale_rewards: Optional[str] = field(default=None, metadata={
        "help": "the advantage's scaling; default: the objective's own (OWN_SCALE)"})

    def __post_init__(self):
        super().__post_init__()
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; choose one of "
                             f"{', '.join(OBJECTIVES)}")
        if self.loss_type not in (None, self.objective):
            raise ValueError(f"loss_type={self.loss_type!r} is not read: objective replaces it; "
                             f"give objective={self.loss_type!r} and leave loss_type out")
        own = OWN_SCALE[self.objective]
        if self.scale_rewards is None:
            self.scale_rewards = own
            if own != "group" and self.process_index == 0:  # TRL's default would be "group"
                print(f"CancellationConfig: scale_rewards={own!r}, {self.objective}'s own "
                      f"advantage (r - mu)", file=sys.stderr)
        elif self.scale_rewards != own:
            raise ValueError(f"scale_rewards={self.scale_rewards!r} contradicts objective="
                             f"{self.objective!r}, whose advantage takes scale_rewards={own!r} "
                             f"(or leave scale_rewards out)")
        changed = [k for k, off in UNSUPPORTED.items() if getattr(self, k) != off]
        if changed:
            raise ValueError(f"CancellationConfig does not take {', '.join(changed)}: this "
                             f"trainer does not honour it; leave "
                             + ", ".join(f"{k}={UNSUPPORTED[k]!r}" for k in changed))
        if self.importance_sampling_level not in ("token", "sequence"):
            raise ValueError(f"importance_sampling_level takes 'token' or 'sequence', got "
                             f"{self.importance_sampling_level!r}")
        if self.importance_sampling_level == "sequence" and self.objective.startswith("dfpo"):
            raise ValueError("importance_sampling_level='sequence' is for grpo, dr_grpo and "
                             "dapo: DFPO has its own sequence weights")
        if self.ledger_every < 0:
            raise ValueError(f"ledger_every must be >= 0, got {self.ledger_every}")
        if self.steps_per_generation % self.gradient_accumulation_steps:
            raise ValueError(
                f"steps_per_generation ({self.steps_per_generation}) must be a multiple of "
                f"gradient_accumulation_steps ({self.gradient_accumulation_steps}): an "
                f"optimizer step then never straddles two generation batches")
        step_rows = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if self.keep_groups and step_rows % self.num_generations:
            raise ValueError(
                f"keep_groups needs whole groups in every optimizer step: "
                f"per_device_train_batch_size x gradient_accumulation_steps ({step_rows}) "
                f"must be a multiple of num_generations ({self.num_generations}); or set "
                f"keep_groups=False (TRL's shuffle: groups split over steps)")


def shuffle_groups(batch, size):
    """TRL's generation batch with its groups (runs of ``size`` rows) in a random order;
    the rows of a group stay together, so cutting it into steps keeps groups whole."""
    n = len(batch["advantages"])
    order = torch.randperm(n // size)
    rows = (order[:, None] * size + torch.arange(size)).flatten()
    out = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor) and v.dim() > 0 and len(v) == n:
            out[k] = v[rows.to(v.device)]
        elif isinstance(v, list) and len(v) == n:
            out[k] = [v[int(i)] for i in rows]
        else:
            out[k] = v  # scalars such as num_items_in_batch
    return out


def loss_mask(inputs):
    """The tokens the loss sees: the completion's, less a tool's output (TRL's loss_mask)."""
    mask = inputs["completion_mask"].bool()
    if "tool_mask" in inputs:
        mask = mask & inputs["tool_mask"].bool()
    return mask


class CancellationGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with loss.py's objective, whole groups per optimizer step, and the
    ledger in TRL's metrics. Takes a CancellationConfig as ``args``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, CancellationConfig):
            raise ValueError("CancellationGRPOTrainer needs args=CancellationConfig(...)")
        if self.aux_loss_enabled:
            raise ValueError("a mixture-of-experts router loss is not supported: loss.py's "
                             "objectives do not add it")
        self.objective = loss.LOSSES[self.args.objective]
        self.agg = objectives.OBJECTIVES[self.args.objective].agg  # its agg_i (lab)
        self.transform = loss.GROUP_TRANSFORMS.get(self.args.objective)  # DFPO's, else None
        # TRL's two-sided clip, 1 - epsilon_low and 1 + epsilon_high, as loss.py's bounds
        self.bounds = (1.0 - self.epsilon_low, 1.0 + self.epsilon_high)
        self._generation = 0       # generation batches scored so far
        self._gen = None           # the current generation batch, for the ledger
        self._ledger_steps = []    # (rows, coef, coef_on) per optimizer step of it
        self._step_parts = None    # the parts of the optimizer step being accumulated
        self._counts = None        # that step's counts (and DFPO weights, per micro-batch)

    # ------------------------------------------------------------------ generation

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        n, device = len(out["advantages"]), out["advantages"].device
        # rows are in group order across processes (TRL groups them so: rewards.view(-1, G))
        rows = self.accelerator.process_index * n + torch.arange(n, device=device)
        size = (self.num_generations if self.model.training
                else getattr(self, "num_generations_eval", None) or self.num_generations)
        out["group_id"] = self._generation * GROUP + rows // size
        out["row_id"] = torch.arange(n, device=device)  # the row in this process's batch
        if not self.model.training:
            return out
        self._gen = {k: out[k] for k in ("completion_ids", "completion_mask", "advantages",
                                         "group_id")}
        self._generation += 1
        self._ledger_steps = []
        return out

    def _prepare_inputs(self, generation_batch):
        if not (self.model.training and self.args.keep_groups):
            return super()._prepare_inputs(generation_batch)
        per_gen = self.args.steps_per_generation
        if self._step % (per_gen * self.num_iterations) == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            if "pixel_values" in batch:
                raise ValueError("keep_groups does not handle images; set keep_groups=False")
            batch = shuffle_groups(batch, self.num_generations)
            self._buffered_inputs = split_tensor_dict(batch, per_gen)
        return self._buffered_inputs[self._step % per_gen]

    # ------------------------------------------------------------------ the loss

    def _logps(self, model, inputs, entropy=False):
        """log pi of the completion tokens, and with ``entropy`` their entropies (else None)."""
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logp, ent, _ = self._get_per_token_logps_and_entropies(
            model, ids, attention, inputs["completion_ids"].size(1), compute_entropy=entropy)
        return logp, ent

    def _step_counts(self, model, parts):
        """The counts every micro-batch of one optimizer step shares, over all processes:
        N, sum L, L_max (TRL's max_completion_length, as its dr_grpo), and for DFPO the
        group transform of every row's sequence ratio (one weight list per part)."""
        masks = [loss_mask(p) for p in parts]
        local = torch.tensor([sum(len(m) for m in masks), sum(int(m.sum()) for m in masks)],
                             dtype=torch.long, device=masks[0].device)
        n, tokens = self.accelerator.reduce(local, "sum").tolist()
        counts = {"n_seqs": int(n), "n_tokens": int(tokens), "max_len": self.max_completion_length,
                  "n_pos_tokens": 0, "micro_batches": len(parts) * self.accelerator.num_processes}
        weights = [None] * len(parts)
        if self.transform is not None:
            with torch.no_grad():  # w~ is detached: the transform precedes the gradient
                ratio = torch.cat([
                    loss.sequence_ratio(self._logps(model, p)[0], p["old_per_token_logps"], m)
                    if p.get("old_per_token_logps") is not None
                    else torch.ones(len(m), device=m.device) for p, m in zip(parts, masks)])
            adv = torch.cat([p["advantages"] for p in parts])
            group = torch.cat([p["group_id"] for p in parts])
            # every process's rows: a group split over processes is transformed whole
            whole = [self.accelerator.gather(x) for x in (ratio, adv, group)]
            w = loss.dfpo_weights(whole[0], whole[1], whole[2], self.transform, self.bounds)
            mine = w.view(self.accelerator.num_processes, -1)[self.accelerator.process_index]
            weights = list(torch.split(mine, [len(m) for m in masks]))
        return counts, weights

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs:
            raise ValueError("CancellationGRPOTrainer does not return outputs")
        mode = "train" if self.model.training else "eval"
        ga = self.current_gradient_accumulation_steps if mode == "train" else 1
        k = self._step % self.args.steps_per_generation  # this micro-batch in the buffer
        if mode == "train" and self._step % ga == 0:  # the first part of an optimizer step
            parts = self._buffered_inputs[k:k + ga]
            self._counts = self._step_counts(model, parts)
            self._step_parts = []
        counts, weights = (self._counts if mode == "train"
                           else self._step_counts(model, [inputs]))
        weight = weights[self._step % ga if mode == "train" else 0]
        mask = loss_mask(inputs)
        logp, ent = self._logps(model, inputs, entropy=self.entropy_coef != 0)
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        adv, group = inputs["advantages"], inputs["group_id"]
        ref = inputs.get("ref_per_token_logps")  # TRL's, when beta != 0
        value, clip_frac = self._policy(logp, old, mask, adv, group, dict(counts, weights=weight),
                                        ref, self.bounds)
        if mode == "train" and self._ledger_on():
            self._keep_coefficients(value, logp, mask, adv, group, counts, ref, inputs["row_id"])
        self._metrics[mode]["objective/clip_frac"].append(
            float(self.accelerator.gather(clip_frac.detach().reshape(1)).mean()))
        m = mask.float()
        mean = lambda x: float(self.accelerator.gather(
            ((x.detach() * m).sum() / m.sum().clamp(min=1)).reshape(1)).mean())
        if self.beta:  # TRL's names: the mean k3 and token entropy of the micro-batch
            self._metrics[mode]["kl"].append(mean(engines.kl_penalty(logp, ref, "k3")))
        if self.entropy_coef:
            self._metrics[mode]["entropy"].append(mean(ent))
        # DDP averages the processes' gradients; each term is its share of the step's sum
        value = value * self.accelerator.num_processes
        if self.entropy_coef:  # TRL's bonus: this micro-batch's mean token entropy, / GA
            value = value - self.entropy_coef * (ent * m).sum() / m.sum().clamp(min=1) / ga
        return value

    def _policy(self, logp, old, mask, adv, group, counts, ref, bounds):
        """The objective (with GSPO's one ratio per sequence if asked), plus beta times TRL's
        k3 estimate of KL(pi || pi_ref) per token, aggregated with the objective's agg_i
        (as TRL adds it to its per-token loss). Returns (loss, clip fraction)."""
        m, lens = mask.float(), mask.sum(1)
        agg = objectives.agg_weight(self.agg, lens, counts)
        log_ratio = (logp - old) * m
        seq = log_ratio.sum(1) / lens.clamp(min=1)
        if self.args.importance_sampling_level == "sequence":  # GSPO: s_i, clipped per row
            x = objectives.TermInputs(logp, logp, log_ratio, seq, seq.detach().exp(), mask,
                                      lens, adv, group, agg, bounds)
            value, clip_frac, _ = objectives.sequence_term(x, None)
        else:
            value, clip_frac = self.objective(logp, old, mask, adv, group, counts, bounds)
        if self.beta:
            kl = engines.kl_penalty(logp, ref, "k3")  # e^(ref - logp) - (ref - logp) - 1
            if self.args.use_bias_correction_kl:  # TRL: times the (differentiable) ratio
                sequence = self.args.importance_sampling_level == "sequence"
                kl = kl * (seq[:, None] if sequence else log_ratio).exp()
            value = value + self.beta * (kl * agg[:, None] * m).sum()
        return value, clip_frac

    # ------------------------------------------------------------------ the ledger

    def _ledger_on(self):
        every = self.args.ledger_every
        return every > 0 and self._gen is not None and (self._generation - 1) % every == 0

    def _keep_coefficients(self, value, logp, mask, adv, group, counts, ref, rows):
        """c = -d loss / d log pi of this micro-batch (the KL term included, the entropy
        bonus not: it acts through the whole distribution), and c° (every ratio 1, DFPO's
        w~ = 1: whole groups at pi_old); the step's parts are joined, and the ledger of the
        generation batch is taken after its last optimizer step."""
        (grad,) = torch.autograd.grad(value, logp, retain_graph=True)
        lp = logp.detach().requires_grad_(True)
        on, _ = self._policy(lp, lp.detach(), mask, adv, group,
                             dict(counts, weights=torch.ones_like(adv)), ref, None)
        (grad_on,) = torch.autograd.grad(on, lp)
        self._step_parts.append((rows, -grad.detach(), -grad_on.detach()))
        ga = self.current_gradient_accumulation_steps
        if len(self._step_parts) == ga:  # the optimizer step is complete
            rows, c, c_on = (torch.cat(x) for x in zip(*self._step_parts))
            self._ledger_steps.append((rows, c, c_on))
            per_gen = self.args.steps_per_generation * self.num_iterations
            if (self._step + 1) % per_gen == 0:  # the generation batch's last step
                self._log_ledger()

    def _log_ledger(self):
        """The ledger and the length-reward covariance of the generation batch just used,
        over every process's rows (gathered), into TRL's metrics."""
        acc, g = self.accelerator, self._gen
        n = len(g["advantages"])
        offset = acc.process_index * n
        pad = lambda x: acc.pad_across_processes(x, dim=1, pad_index=0)
        tokens = acc.gather(pad(g["completion_ids"]))
        mask = acc.gather(pad(g["completion_mask"].long())).bool()
        adv, group = acc.gather(g["advantages"]), acc.gather(g["group_id"])
        steps = []
        for rows, c, c_on in self._ledger_steps:
            rows = acc.gather(rows + offset)
            steps.append((rows, acc.gather(pad(c)), acc.gather(pad(c_on))))
        sums = ledger.ledger_sums(steps, adv, tokens, mask, group)
        metrics = self._metrics["train"]
        if sums["mass"] > 0:  # a batch without shared tokens has no ledger (not a zero one)
            shares = ledger.ledger_shares(sums)
            for part in ("cancelled",) + tuple(ledger.LEDGER_PARTS):
                metrics[f"ledger/{part}"].append(shares[part])
        lens = mask.sum(1)
        counts = loss.step_counts(mask, adv, max_len=self.max_completion_length)
        agg = objectives.agg_weight(objectives.OBJECTIVES[self.args.objective].agg, lens, counts)
        # "right" is above the group's mean (with 0/1 rewards: the right rollouts)
        cov = lengthcov.batch_metrics(adv, agg.to(adv.device), group, lens, (adv > 0).float())
        for key in ("lencov_gap", "lencov_cov"):
            if cov[key] is not None:
                metrics[f"lengthcov/{key[len('lencov_'):]}"].append(cov[key])
        self._ledger_steps = []
