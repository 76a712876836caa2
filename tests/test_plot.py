"""plot.py draws what train.py logs: a real tiny run per task with --diagnostics,
then plot.py on it; every panel plot.py promises gets data from some run."""

import json

import pytest

from lab import plot
import train
from plumbing.config import parse_args

TINY = [
    "--n_layer=1",
    "--n_head=2",
    "--n_embd=32",
    "--sft_steps=3",
    "--sft_batch=8",
    "--rl_steps=3",
    "--prompts_per_step=2",
    "--group_size=4",
    "--eval_size=8",
    "--eval_every=1",
    "--diagnostics",
    "--device=cpu",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny run of each task whose diagnostics differ: chain (style points) and primes
    (answers)."""
    out = {}
    for task in ("chain", "primes"):
        d = tmp_path_factory.mktemp(task)
        train.main(parse_args([f"--task={task}", f"--out_dir={d}", *TINY]))
        out[task] = d
    return out


def test_every_panel_key_is_a_key_train_py_writes(runs):
    written = set()
    for d in runs.values():
        for line in open(d / "metrics.jsonl"):
            written |= set(json.loads(line))
    promised = {key for key, *_ in plot.PANELS}
    assert promised <= written, sorted(promised - written)


def test_plot_draws_every_panel_with_data(runs, tmp_path):
    pytest.importorskip("matplotlib")
    loaded = [plot.load_run(str(d)) for d in runs.values()]
    drawn = {p[0] for p in plot.panels_present(loaded)}
    assert drawn == {key for key, *_ in plot.PANELS}
    for p in plot.PANELS:
        assert any(len(plot.series(r, p[0], p[3])[0]) > 0 for r in loaded), p[0]
    out = tmp_path / "cmp.png"
    plot.main([str(d) for d in runs.values()] + [f"--out={out}"])
    assert out.stat().st_size > 10_000
