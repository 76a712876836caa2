"""The run plumbing: what a run needs that the method does not.

    errors.py      CliError and the one-line ``error:`` exit
    config.py      every flag of train.py, its default, its help and its checks; the lab
                   registers its objectives' names and rules there (lab/checks.py)
    checkpoint.py  atomic checkpoints and the state an exact resume needs
    rundir.py      the run folder: its lock, config.json, metrics.jsonl, --resume, ``Run``
    dist_utils.py  one optimizer step split over processes (torchrun) and micro-batches
    console.py     what a run prints: the progress bar, the hint, the summary line

A student reads the method at the top level (toy_tasks, model, sampler, loss, batching,
train) and can skip this folder; nothing here changes a number a run computes."""
