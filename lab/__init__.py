"""The lab: everything that measures the lesson, one folder away from it.

The lesson (model.py, sampler.py, toy_tasks.py, loss.py, batching.py, train.py) trains a
policy. The lab measures what the training does to cancellation. The two meet at one
seam, and train.py is the only lesson file that touches it:

  what the lesson exposes          the rollout batch of each RL step, and the
                                   coefficients c_{i,t} = -d loss / d log pi(y_{i,t})
                                   of every optimizer step (train.optimizer_step keeps
                                   them from its own backward pass)
  what the lab reads them with     ``Instruments`` (instruments.py): the cancellation
                                   ledger, the residuals, the learning tax, the
                                   diagnostics; off with --instruments=false
  what the lab lends the lesson    the engines' catalogue: every --loss and --adv beyond
                                   the lesson's and every switch (objectives.py,
                                   estimators.py, engines.py); a run uses the lesson's
                                   own function whenever it can (``lesson_objective``)

The rest is the lab's own: the probes of E1-E6 (probes.py), the experiments and the
scoreboard (experiments/), the bench (bench.py), the pictures (see.py, plot.py).
"""

from lab import checks  # noqa: E402,F401  (registers the lab's flags and rules in plumbing)
