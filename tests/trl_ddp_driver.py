"""Run by tests/test_trl_bridge.py under `accelerate launch --multi_gpu --num_processes=2` with
no GPU visible (two CPU processes, gloo): a few
steps of the tiny model with the ledger on; each process saves what it held (its rows of
every generation batch, its coefficients per optimizer step) and the ledger it logged, so
that the test can recompute the ledger of the whole batch in one process and compare."""
import os
import sys

import torch

from trl_bridge import trainer as bridge
from trl_bridge import train_lm


class Recording(bridge.CancellationGRPOTrainer):
    """Saves each process's generation batch and coefficients before the ledger."""
    record = []

    def _log_ledger(self):
        self.record.append({"gen": {k: v.cpu() for k, v in self._gen.items()},
                            "steps": [tuple(x.cpu() for x in s) for s in self._ledger_steps]})
        super()._log_ledger()
        self.record[-1]["logged"] = {k: v[-1] for k, v in self._metrics["train"].items()
                                     if k.startswith("ledger/")}


if __name__ == "__main__":
    out = sys.argv[1]
    bridge.CancellationGRPOTrainer = Recording  # the script's own path, recording
    train_lm.main([f"--out={out}", "--model=tiny", "--sft_steps=300", "--steps=6", "--batch=8",
                 "--group_size=8", "--accumulation=1", "--steps_per_generation=2",
                 "--keep_groups=false"])
    rank = int(os.environ.get("RANK", "0"))
    torch.save(Recording.record, os.path.join(out, f"record_{rank}.pt"))
