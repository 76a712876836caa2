"""syncs.py: count the points where the host would wait for the GPU, on any device.

What it teaches
---------------
A GPU runs its kernels in a queue while Python goes on. The host waits for the queue
to drain whenever it needs a value: ``.item()``, ``float(t)``, ``bool(t)``, ``.tolist()``,
a copy to the CPU, and an op whose output *shape* depends on the data (``nonzero``,
boolean indexing, ``unique``, ``masked_select``). Each wait is a *synchronisation*.
At this model's size a kernel takes microseconds, so a step with many waits is set by
them, not by arithmetic (nanoGPT reads one number per logged step).

``SyncCounter`` counts them while it is active, at the dispatcher level (a
TorchDispatchMode sees every aten op) plus the Python methods that leave torch
(``tolist``, ``numpy``, ``cpu``), so the count is the same on a CPU and needs no GPU:
lab/bench.py prints it and tests/test_syncs.py keeps it from growing. It counts a
``.cpu()`` or ``.tolist()`` of a tensor that already lives on the CPU too, because on a
GPU run the same line would meet a GPU tensor: the count is an upper bound. Reads
inside torch.optim are left out: the optimizers keep their step counts on the host.
"""

import collections
import contextlib
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# ops that read a value back to the host, or whose output shape depends on the data
WAITS = {
    aten._local_scalar_dense.default: "item",       # .item(), float(t), int(t), bool(t)
    aten.nonzero.default: "nonzero",
    aten.masked_select.default: "masked_select",
    aten._unique2.default: "unique",
    aten.unique_dim.default: "unique",
    aten.unique_consecutive.default: "unique",
    aten.equal.default: "equal",
}


_HOST = {"depth": 0}  # > 0 inside host(): bookkeeping on tensors already on the host


@contextlib.contextmanager
def host():
    """A block of bookkeeping on tensors that were copied to the host before it (one counted
    read): its reads make no GPU wait, so they are not counted. A SyncCounter on a GPU run
    checks the claim: a device tensor inside the block is an error."""
    _HOST["depth"] += 1
    try:
        yield
    finally:
        _HOST["depth"] -= 1


def to_host(*tensors):
    """Copies of the tensors on the host, in one read (each read makes a GPU wait). The
    values go through float64, exact for the token ids, masks and float32 numbers here."""
    # what to copy: the device's tensors (on a CPU run all of them, so that the count of a
    # CPU run shows the read a GPU run makes)
    away = [t for t in tensors if t.device.type != "cpu"] or list(tensors)
    flat = torch.cat([t.detach().reshape(-1).double() for t in away]).cpu()
    out, start = [], 0
    for t in tensors:
        if any(t is a for a in away):
            out.append(flat[start:start + t.numel()].reshape(t.shape).to(t.dtype))
            start += t.numel()
        else:  # already on the host
            out.append(t)
    return out[0] if len(out) == 1 else tuple(out)


class SyncCounter(TorchDispatchMode):
    """``with SyncCounter() as c: ...``, then ``c.total`` and ``c.by_kind``."""

    def __init__(self):
        super().__init__()
        self.by_kind = collections.Counter()
        self._patched = contextlib.ExitStack()

    @property
    def total(self):
        return sum(self.by_kind.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _HOST["depth"]:
            if any(isinstance(a, torch.Tensor) and a.device.type != "cpu"
                   for a in torch.utils._pytree.tree_leaves((args, kwargs))):
                raise RuntimeError(f"{func} on a device tensor inside syncs.host()")
            return func(*args, **(kwargs or {}))
        kind = WAITS.get(func)
        if kind is None and func is aten.index.Tensor:  # boolean indexing: a nonzero inside
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]):
                kind = "bool index"
        if kind is None and func is aten.repeat_interleave.Tensor:
            kind = "repeat_interleave"  # output size from the data
        if kind is not None and not _in_optimizer():
            self.by_kind[kind] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        for name in ("tolist", "numpy", "cpu"):
            self._patched.enter_context(_counting_method(self, name))
        return super().__enter__()

    def __exit__(self, *exc):
        self._patched.close()
        return super().__exit__(*exc)


def _in_optimizer():
    """Is the op inside torch.optim? Its step counts live on the host (torch's default,
    capturable=False), so reading them makes no GPU wait."""
    frame = sys._getframe(2)
    while frame is not None:
        if f"{os.sep}torch{os.sep}optim{os.sep}" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _counting_method(counter, name):
    """Count calls of ``torch.Tensor.<name>`` (a read back to the host on a GPU run)."""
    real = getattr(torch.Tensor, name)

    def counted(self, *a, **k):
        if not _HOST["depth"]:
            counter.by_kind[name] += 1
        return real(self, *a, **k)
    setattr(torch.Tensor, name, counted)
    try:
        yield
    finally:
        setattr(torch.Tensor, name, real)

