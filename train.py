"""train.py: SFT warm start, then critic-free RL with verifiable rewards (GRPO and its kin).

What it teaches: the whole loop, as in nanoGPT's train.py. Read it top to bottom: each
phase opens with its loop, and the functions it calls follow it; main, at the end, makes
the run and calls the phases.

Phase 1, SFT: the cross-entropy of a teacher's solutions, briefly, so that the policy is
right *sometimes*: only a group with both right and wrong completions carries a signal.

Phase 2, RL (THEORY.md section 1). Each RL step (``rl_step``):
  1. sample B = --prompts_per_step prompts x G = --group_size completions (sampler.py);
  2. reward each completion with the task's verifier (toy_tasks.py);
  3. one advantage Â_i per completion, from its group's rewards (loss.advantages);
  4. cut the rollout batch into --minibatches mini-batches (batching.py), and for
     --epochs passes take one optimizer step per mini-batch (``optimizer_step``): the
     step's denominators, then per micro-batch the log-probs, the loss, e.g.

         loss = -1/N sum_i 1/L_i sum_t min(rho_{i,t} Â_i, clip(rho_{i,t}) Â_i)   (loss.grpo)

     with rho the ratio to the policy that sampled (1 on the first step: on-policy), and
     its backward; then the gradient clip and the optimizer step;
  5. log, and every --eval_every steps evaluate on held-out problems.

The lab (lab/) is reached through one hooks object: ``Hooks`` does nothing. The demo turns
the lab on (--instruments): its hooks measure cancellation, and change no weight's update.
Plumbing (plumbing/): the flags, the run's creation, folder and --resume, the printing,
and under torchrun each process's rows (dist_utils). ``python train.py --key=value``.
"""

import functools
import sys

import torch

import batching
import loss
from model import amp, completion_logprobs, rl_optimizer
from plumbing import checkpoint, config, console, dist_utils, errors, rundir
import sampler
from sampler import evaluate, rollouts
from toy_tasks import PAD


# ----------------------------------------------------------------------------- phase 1: SFT

def sft(run):
    """Cross-entropy on the teacher's solutions, --sft_steps steps of --sft_batch."""
    cfg, state = run.cfg, run.state
    # AdamW, as nanoGPT: SFT is ordinary next-token training, only on the completion's tokens
    opt = torch.optim.AdamW(run.model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
    if state.saved:  # resumed inside SFT: the optimizer's moments continue too
        state.restore(opt, run.rank)
    n_sft = dist_utils.share(cfg.sft_batch)  # this process's share of the batch
    bar = console.progress(range(state.step + 1, cfg.sft_steps + 1), "sft", run.master)
    losses, first = [], state.step + 1  # losses: read back when a line or checkpoint is due
    for step in bar:
        if (step - 1) % cfg.ckpt_every == 0 or step == first:
            # the batches up to the next checkpoint, which saves the random streams after them
            upto = min(cfg.sft_steps, ((step - 1) // cfg.ckpt_every + 1) * cfg.ckpt_every)
            batches = sampler.sft_batches(run.task, state.problems, n_sft, state.sol_rng,
                                          run.device, cfg.sft_flawed, upto - step + 1)
        prompts, tokens, mask = next(batches)
        with amp(cfg, run.device):
            logp = completion_logprobs(run.model, prompts, tokens, mask, PAD)
        sft_loss = -dist_utils.token_mean(logp, mask)  # over every process's tokens
        opt.zero_grad(set_to_none=True)
        sft_loss.backward()  # DDP all-reduces the gradients here (plumbing/dist_utils.py)
        opt.step()
        losses.append(sft_loss.detach())
        printed = step % max(1, cfg.sft_steps // 4) == 0  # a log file gets 4 lines
        if printed or step % cfg.ckpt_every == 0 or step == cfg.sft_steps:
            console.sft_log(run, bar, step, losses, printed)
            losses = []
        state.step = step
        if step == cfg.sft_steps:  # the warm start: --beta's reference, and the lab's start
            run.out.warm_start(step)
        if step % cfg.ckpt_every == 0 or step == cfg.sft_steps:
            run.out.checkpoint(state, opt)
    bar.close()


# ----------------------------------------------------------------------------- phase 2: RL

def rl(run):
    """Evaluate the warm start, then --rl_steps RL steps, evaluating every --eval_every."""
    cfg, state = run.cfg, run.state
    opt = rl_optimizer(run.model.parameters(), cfg.optimizer, cfg.lr)
    run.hooks.rl_start(run)  # the lab: --beta's frozen reference (lab/hooks.py)
    if state.phase == "rl":  # resumed in RL: the optimizer's moments continue
        state.restore(opt, run.rank)
    else:
        evaluate_warm_start(run, opt)
    bar = console.progress(range(state.step + 1, cfg.rl_steps + 1), "rl", run.master)
    for step in bar:
        state.step = step  # set first: a checkpoint saves the step that has just finished
        try:
            rec = rl_step(run, opt)
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step {step}: {e}; the run diverged (try a smaller --lr); "
                                     f"the last good checkpoint is kept") from None
        console.mixed_at_start(run, step, rec["mixed"])  # and a hint
        run.out.log(rec)
        # a checkpoint every --ckpt_every steps and at the end: --resume continues from it
        if step % cfg.ckpt_every == 0 or step == cfg.rl_steps:
            run.out.checkpoint(state, opt)
        if run.master:
            bar.set_postfix(reward=f"{rec['reward']:.2f}", acc=f"{state.sums['acc']:.2f}")
    bar.close()


def evaluate_warm_start(run, opt):
    """RL step 0: the warm start's accuracy (and the lab's diagnostics), before any update."""
    cfg, state = run.cfg, run.state
    state.phase, state.step = "rl", 0
    if cfg.sft_steps == 0 and not cfg.init_from:
        run.out.warm_start(0)  # the untrained start is the warm start: --beta's reference on resume
    if run.master:  # its metrics line, and the lines that say what the numbers mean
        console.warm_start(run)
    if cfg.rl_steps == 0:
        run.out.checkpoint(state, opt)


def rl_step(run, opt):
    """One RL step: rollouts and rewards, the update, evaluation -> its metrics line."""
    cfg, state, step, policy = run.cfg, run.state, run.state.step, run.unwrapped  # (no DDP)
    run.model.train()  # (the sampler switches to eval mode and back by itself)
    # 1-2. each process samples its share of the groups and rewards them; then every one
    # holds the whole batch, so that advantages, the cut and the denominators are global
    batch = rollouts(policy, run.task, state.problems, cfg, state.gen, run.device,
                     cfg.prompts_per_step // run.world, run.decoder)
    run.hooks.rewarded(policy, run.task, batch, state.gen)  # the lab's: ReMax, shuffled rewards
    batch.max_len = run.task.max_new_tokens  # dr_grpo's L_max: the completion budget
    batch = dist_utils.gather_rollouts(batch)
    # only a group with both right and wrong rollouts carries a signal (its Â is not 0)
    mixed = loss.mixed_fraction(batch.rewards, batch.group)
    rec = {"phase": "rl", "step": step, "reward": float(batch.rewards.mean()), "mixed": mixed}
    rec.update(run.hooks.rollouts(policy, batch))  # the lab looks before the update
    # 3-4. advantages, mini-batches, epochs: the optimizer steps of this batch
    out = rl_update(run.model, opt, batch, cfg, state.gen, run.hooks)
    checkpoint.check_finite(policy, "after the update")  # never carry a NaN into a checkpoint
    rec.update({k: v for k, v in out.items() if k not in ("steps", "adv", "cut")})
    # 5. held-out greedy accuracy every --eval_every steps
    evaluating = step % cfg.eval_every == 0 or step == cfg.rl_steps
    if run.master and evaluating:
        state.sums["acc"] = rec["eval_acc"] = evaluate(policy, run.task, run.held_out, cfg,
                                                       run.device, run.decoder)
    # the lab: what the update did (the ledger, the learning tax), its diagnostics
    rec.update(run.hooks.after(policy, rec, batch, out["adv"], out["cut"]))
    if run.master and evaluating:
        console.eval_line(run, rec)
    return rec


def rl_update(model, opt, batch, cfg, gen, hooks=None):
    """Advantages, mini-batches, epochs: the optimizer steps of one whole (all-gathered)
    rollout batch. ``hooks``: the run's (the lab's, with its catalogue), else the lesson's."""
    hooks = hooks or Hooks()
    # 3. one advantage per completion from its group's rewards (--adv, by default the --loss's
    # own: GRPO's (r - mu_g)/(sigma_g + eps) in the demo); every epoch reuses it, not recomputed
    adv = loss.ADVANTAGES[cfg.adv](batch.rewards, batch.group, batch.mask.sum(1), batch.baseline)
    objective = hooks.objective(cfg, model, batch)  # loss.grpo in the demo
    logs = []  # each optimizer step's numbers
    for _ in range(cfg.epochs):
        # 4. the scheduler decides which rollouts meet in one step, and so whether the copies
        # of a shared token are applied together (batching.py); a new cut each epoch, made
        # on rank 0 and sent to every rank so that all take the same steps
        cut = dist_utils.on_rank0(lambda: batching.schedule(
            cfg.batching, batch.group, adv, batch.mask.sum(1), cfg.minibatches, gen))
        for mb in cut:  # one optimizer step per mini-batch; off-policy after the first
            logs.append(optimizer_step(model, opt, batch, adv, mb, cfg, objective, hooks))
    # the batch's line of metrics.jsonl: each number is its mean over the optimizer steps
    out = {k: sum(s[k] for s in logs) / len(logs) for k in logs[0]}
    return dict(out, steps=logs, adv=adv, cut=cut)  # and what a caller or the lab reads


def optimizer_step(model, opt, batch, adv, mb, cfg, objective=None, hooks=None):
    """One optimizer step on mini-batch ``mb`` (rows of the batch): the step's denominators, then
    per micro-batch the log-probs, the loss and its backward; the clip; the step -> its numbers."""
    hooks = hooks or Hooks()
    objective = objective or hooks.objective(cfg, model, batch)
    # this process's rows of mb (torchrun gives each rank a contiguous share), cut into
    # micro-batches of --micro_batch rollouts whose gradients add up to the step's
    rank, world = dist_utils.rank_world()  # one process: rank 0 of a world of 1
    mine = dist_utils.shard(torch.arange(len(mb), device=mb.device), rank, world)
    parts = [mine[p] for p in dist_utils.micro_batches(len(mine), cfg.micro_batch)]
    # what every part shares: the *step's* N, sum L, L_max and DFPO weights, so that
    # splitting a step changes no copy's weight (--norm=local shows what breaks otherwise)
    counts_for = part_counts(model, batch, adv, mb, parts, cfg)
    n_parts = 1 if cfg.norm == "global" else len(parts) * world  # local: a mean of the parts
    sums = {}  # the logged numbers, summed over the parts
    opt.zero_grad(set_to_none=True)  # gradients accumulate over the parts: one step
    for j, p in enumerate(parts):
        rows = mb[p]
        dist_utils.sync_on_last(model, j == len(parts) - 1)  # DDP: one all-reduce a step
        logp, hidden = logprobs_of(model, batch, rows, cfg)
        args = (batch.old_logprobs[rows], batch.mask[rows], adv[rows], batch.group[rows])
        counts = counts_for(p)  # the step's N, sum L, L_max (and DFPO's w~ of these rows)
        hooks.forward(rows, hidden)  # the lab's objectives may read these rows' hidden states
        # 4. the objective's loss of these rows: loss.grpo in the demo (loss.py). On-policy, on
        # whole groups, its value is about 0 (the advantages are centred); its gradient is not
        value, clip_frac = objective(logp, *args, counts)
        stats = dict(hooks.part(p, logp, args, counts, n_parts), clip_frac=clip_frac,
                     finite=torch.isfinite(value))
        # the step's loss is the sum of its parts' (--norm=global), as if taken whole
        term = value / n_parts
        # DDP *averages* the ranks' gradients; each rank's term is its share of the step's
        # sum, so x world makes the average the sum (1 in one process)
        (term * world).backward()
        dist_utils.add_rows(sums, dict(stats, loss=term.detach()), len(p), batch.mask.device)
    out = dist_utils.step_means(sums, len(mb), batch.mask.device)
    if out.pop("finite") < 1:  # stop before a NaN reaches the weights
        raise FloatingPointError("loss is not finite")
    # the clip scales the whole step: it changes no ratio between two copies' weights
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)  # (before the clip)
    opt.step()
    out.update(hooks.step(mb, adv, opt, norm))  # what the hooks measure of the step just taken
    return out


def part_counts(model, batch, adv, mb, parts, cfg):
    """p -> the step's counts that part p shares (loss.step_counts: N, sum L, L_max) and DFPO's
    w~ of p's rows, from a no-grad pass over every row of the step; --norm=local: p's own."""
    world = dist_utils.rank_world()[1]

    def counts_of(rows, m=1):  # m: the micro-batches M (bnpo divides by them, as TRL)
        return loss.step_counts(batch.mask[rows], adv[rows], max_len=batch.max_len,
                                micro_batches=m)

    counts, weights = counts_of(mb, len(parts) * world), None
    transform = loss.GROUP_TRANSFORMS.get(cfg.loss)  # DFPO's, else None
    split = world > 1 or len(parts) > 1  # in one part the loss sees every row: its own w~
    if transform and cfg.norm == "global" and split:
        plain = getattr(model, "module", model)
        with torch.no_grad():  # w~ is detached: the transform is applied before the gradient
            ratio = torch.cat([loss.sequence_ratio(logprobs_of(plain, batch, mb[p], cfg)[0],
                                                   batch.old_logprobs[mb[p]], batch.mask[mb[p]])
                               for p in parts])
        bounds = loss.clip_bounds(cfg.clip, cfg.clip_low, cfg.clip_high)
        # --clip on a dfpo loss truncates w before the transform
        whole = dist_utils.all_reduce_rows(ratio, torch.cat(parts), len(mb))
        weights = loss.dfpo_weights(whole, adv[mb], batch.group[mb], transform, bounds)

    def of(p):  # --norm=local: each part its own counts, as some engines shipped
        own = counts if cfg.norm == "global" else counts_of(mb[p])
        return dict(own, weights=None if weights is None else weights[p])
    return of


def logprobs_of(net, batch, rows, cfg):
    """log pi(y_t | s_t) of the batch's ``rows`` (a tensor on the host) under ``net``, tempered
    as at sampling (so that an on-policy ratio is 1, up to rounding), and the hidden states that
    produced them."""
    with amp(cfg, batch.mask.device.type):
        return completion_logprobs(net, [batch.prompts[i] for i in rows.tolist()],
                                   batch.tokens[rows], batch.mask[rows], PAD,
                                   cfg.temperature, return_hidden=True)


# ----------------------------------------------------------------------------- the lab's seams

class Hooks:
    """The lesson's hooks: they pick --loss's function and do nothing at the loop's other
    points. The lab's (lab/hooks.py) also measure there, and may pick the catalogue's."""
    legend = ""

    def objective(self, cfg, model, batch):  # --loss's function, with --clip's bounds
        return functools.partial(loss.LOSSES[cfg.loss],
                                 clip=loss.clip_bounds(cfg.clip, cfg.clip_low, cfg.clip_high))

    def rl_start(self, run):
        pass

    def rewarded(self, model, task, batch, gen):
        pass

    def rollouts(self, model, batch):
        return {}

    def forward(self, rows, hidden):  # a part's rows, and the hidden states of its log-probs
        pass

    def part(self, p, logp, args, counts, n_parts):
        return {}

    def step(self, mb, adv, opt, norm):
        return {}

    def after(self, model, rec, batch=None, adv=None, cut=None):
        return {}

    def line(self, rec):
        return ""

    def finish(self, summary):
        return []


def hooks_for(cfg, state=None, master=True, task=None, held_out=None):
    """The run's hooks: the lab's where the run turns the lab on (--instruments, or an
    objective, estimator or switch the lesson does not hold), else the do-nothing Hooks.
    Without a run's ``state`` (a caller's own update), the lab's catalogue alone."""
    if not config.needs_lab(cfg):
        return Hooks()
    from lab.hooks import LabHooks  # the lesson's arrow into the lab
    return LabHooks(cfg, state, master, task, held_out)


# ----------------------------------------------------------------------------- main

def main(cfg, given=None):
    """One run of train.py: the checks, the run, SFT, RL; returns the summary (rank 0).
    ``given``: the flags written on the command line, which --resume compares with
    the saved run (config.given_flags); None for a Config built in code."""
    try:  # every check before anything is written, then the model, folder and streams
        with rundir.started(cfg, given) as run:
            run.hooks = hooks_for(run.cfg, run.state, run.master, run.task, run.held_out)
            if run.state.phase == "sft" and run.sft_steps > 0:
                sft(run)
            rl(run)
            return console.summarise(run) if run.master else {}
    except rundir.Finished as done:  # --resume of a finished run: nothing to run or write
        if dist_utils.env_world()[0] == 0:
            print(done)
        return done.summary


def cli(argv):
    """The command line (errors.cli: bad input is one 'error: ...' line and exit 2)."""
    return errors.cli(lambda: main(config.parse_args(join_lab(argv), config.Config,
                                                     doc=__doc__), config.given_flags(argv)))


def join_lab(argv):
    """Import the lab where the command line turns it on: its catalogue's names and checks
    join loss.py's and config's registries before the flags are read. Returns argv."""
    try:
        if config.lab_wanted(argv):
            import lab  # noqa: F401
    except ModuleNotFoundError as e:  # without lab/, --help lists the lesson's choices alone
        if e.name != "lab":
            raise  # a module the lab needs: its own error
        if not config.asks_help(argv):
            raise errors.CliError("these flags need the lab (lab/), which is not here; "
                                  "--instruments=false runs the lesson alone") from None
    return argv


if __name__ == "__main__":
    cli(sys.argv[1:])
    dist_utils.finish_worker()
