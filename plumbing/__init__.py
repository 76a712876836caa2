"""The run plumbing: what a run needs that the method does not.

    errors.py       CliError and the one-line ``error:`` exit
    config.py       every flag of train.py, its default, its help and its checks; the lab
                    registers its objectives' names and rules there (lab/checks.py)
    checkpoint.py   atomic checkpoints and the state an exact resume needs
    rundir.py       the run's creation (``started``: model, folder, streams) and its folder:
                    the lock, config.json, metrics.jsonl, --resume, ``Run``
    dist_utils.py   what crosses processes under torchrun: the rollouts, the cut, the sums
    fast_decode.py  the sampler's decode step with fixed shapes, a CUDA graph on a GPU
    console.py      what a run prints: the progress bar, SFT's loss, the evaluation lines
                    and their legend, the hint, the summary

A student reads the method at the top level (toy_tasks, model, sampler, loss, batching,
train). Here the defaults decide what a run does (a task's own defaults: config.py's
TASK_DEFAULTS), but no function computes a number of the method: with one process every
function of dist_utils.py is the identity, and fast_decode.py samples what the sampler's
KV-cache path samples."""
