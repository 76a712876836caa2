"""The lab: everything that measures the lesson, one folder away from it.

The lesson (model.py, sampler.py, toy_tasks.py, loss.py, batching.py, train.py) trains a
policy. The lab measures what the training does to cancellation, and lends the lesson
the engines' catalogue. train.py is the only lesson file that touches it, through one
hooks object, and only where the run turns the lab on (train.hooks_for):

  the hooks (hooks.py)               ``LabHooks``: train.py calls them after the rollouts,
                                     before each part's backward, after each optimizer
                                     step and after the update; they hand the step the
                                     catalogue's objective and its extras (--beta's
                                     reference, the hidden states, the switches)
  the instruments (instruments.py)   ``Instruments``, behind the hooks: the ledger, the
                                     residuals (from the coefficients c_{i,t} = -d loss /
                                     d log pi(y_{i,t}) the backward left), the learning
                                     tax, the diagnostics, and what moved the shared
                                     tokens (motion.py). --instruments=false: none of it
  the catalogue (objectives.py,      every --loss and --adv beyond the lesson's joins
  estimators.py, engines.py)         loss.LOSSES and loss.ADVANTAGES when the lab is
                                     imported; a switch of its own (--beta, --agg, ...)
                                     takes the catalogue's version of the objective
  the rules (checks.py)              the catalogue's flags and their checks, registered
                                     in plumbing/config.py (which imports nothing of the lab)

The rest is the lab's own: the probes of E1-E6 (probes.py), the experiments and the
scoreboard (experiments/), the bench (bench.py), the pictures (see.py, plot.py).
"""

from plumbing import errors  # noqa: F401 (first: Ctrl-C while the lab loads is one line)
from lab import estimators, objectives  # noqa: E402,F401 (they join loss.py's registries)
from lab import checks  # noqa: E402,F401  (registers the lab's flags and rules in plumbing)
from lab import testbeds  # noqa: E402,F401 (chain and parity_* join toy_tasks.TASKS)
