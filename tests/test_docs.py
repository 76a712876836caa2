"""The docs against the code: one objective table (loss.py's), a README that
stays short, and a reference that names every flag and metric key."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # also run as a script: python tests/test_docs.py
import loss  # noqa: E402
from lab import estimators, objectives


def read(path):
    return open(os.path.join(ROOT, path), encoding="utf-8").read()


def objective_block(text, name="objectives"):
    """The lines between <!-- name --> and <!-- /name -->."""
    m = re.search(rf"<!-- {name} -->\n(.*?)<!-- /{name} -->", text, re.S)
    assert m, f"no <!-- {name} --> block"
    return m.group(1).strip()


def rows(block):
    """{name: (advantage, coefficient, verdict)} of a markdown objective table."""
    out = {}
    for line in block.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out[cells[0].strip("`")] = tuple(cells[1:])
    return out


def test_objective_table_parser_is_not_vacuous():
    block = "| a | b | c | d |\n|---|---|---|---|\n| `x` | 1 | 2 | yes |\n| `y` | 3 | 4 | no |"
    assert rows(block) == {"x": ("1", "2", "yes"), "y": ("3", "4", "no")}


# Every copy of a table that the records generate: (file, block name, generator).
GENERATED = [("docs/REFERENCE.md", "objectives", lambda: objectives.table()),
             ("THEORY.md", "estimators", lambda: estimators.table())]


def test_loss_py_table_has_every_objective_once():
    table = rows(objectives.table())
    assert list(table) == list(objectives.OBJECTIVES)
    assert all(len(cells) == 3 and all(cells) for cells in table.values())


def test_the_estimator_table_has_every_estimator_once():
    assert list(rows(estimators.table())) == list(estimators.ESTIMATORS)


def test_every_copy_of_a_generated_table_is_what_the_records_give():
    """docs/REFERENCE.md and THEORY.md hold the tables the records generate, row by row
    and cell by cell.
    Regenerate them with: python tests/test_docs.py"""
    for path, name, make in GENERATED:
        assert rows(objective_block(read(path), name)) == rows(make()), path


def test_no_other_doc_repeats_the_objective_columns():
    """THEORY.md and docs/ cite sources and engines, but do not restate the
    advantage/coefficient/verdict of every objective: a second copy would drift."""
    for path in ("THEORY.md", "README.md", "results/README.md", "EXERCISES.md"):
        text = read(path)
        assert "<!-- objectives -->" not in text, path
        heads = re.findall(r"^(\|[^\n]*\|)\n\|[-| :]+\|$", text, re.M)  # table header rows
        assert not [
            h for h in heads if re.search("advantage", h, re.I) and re.search("exchang", h, re.I)
        ], path


def prose(text):
    """The README's prose: its lines outside code blocks, tables, headings and comments."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [line for line in text.splitlines() if line.strip() and not line.startswith(
        ("|", "#", "<!--", "!["))]


def test_readme_is_short_and_plain():
    """A student reads it in ten minutes: at most 1,200 words of prose, a first paragraph of
    at most 80 words, sentences of 18 words or fewer on average, the picture in the first
    screen (by line 40)."""
    text = read("README.md")
    words = " ".join(prose(text)).split()
    assert len(words) <= 1200, len(words)
    first = text.split("\n\n")[1]
    assert len(first.split()) <= 80
    sentences = [s for s in re.split(r"(?<=[.!?:])\s+", " ".join(prose(text))) if s.split()]
    assert len(words) / len(sentences) <= 18, len(words) / len(sentences)
    picture = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("!["))
    assert picture <= 40


# -------------------------------------------------------------------- docs/REFERENCE.md: every flag

def captured_help(call):
    """What a --help call prints to stdout (it exits 0)."""
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            call()
        except SystemExit as e:
            assert e.code in (0, None)
    return buf.getvalue()


def flags_reference():
    """The flags of every script, as their --help prints them: the block of
    docs/REFERENCE.md between <!-- flags --> and <!-- /flags -->."""
    import glob
    import importlib
    from lab import bench
    from plumbing import config
    from lab import plot
    import sample
    from lab import see
    # train.py's --help shows the defaults of its default task (add's, config.TASK_DEFAULTS)
    task = config.Config.task
    parts = [("train.py", (config.usage(config.Config, "", config.GROUPS,
                                        defaults=config.TASK_DEFAULTS.get(task))
                           + f"\n\ndefaults shown for --task={task}").strip()),
             ("sample.py", config.usage(sample.SampleConfig).strip()),
             ("lab/see.py", config.usage(see.SeeConfig).strip()),
             ("lab/plot.py", captured_help(lambda: plot.parse(["--help"])).strip()),
             ("lab/bench.py", captured_help(lambda: bench.parse(["--help"])).strip())]
    for path in sorted(glob.glob(os.path.join(ROOT, "lab", "experiments", "*.py"))):
        if 'if __name__ == "__main__"' in open(path).read():
            name = os.path.basename(path)[:-3]
            text = captured_help(
                lambda: importlib.import_module("lab.experiments." + name).main(["--help"])
            )
            parts.append(
                (f"lab/experiments/{name}.py", "flags:\n" + text.split("\nflags:\n")[1].rstrip())
            )
    return "\n\n".join(f"### `{name}`\n\n```\n{text}\n```" for name, text in parts)


def reference_block(text):
    m = re.search(r"<!-- flags -->\n(.*?)\n<!-- /flags -->", text, re.S)
    assert m, "no <!-- flags --> block in docs/REFERENCE.md"
    return m.group(1)


def test_reference_lists_every_flag_of_every_script_as_its_help_does():
    """docs/REFERENCE.md's flag section is what the scripts' --help prints today.
    Regenerate it with: python tests/test_docs.py"""
    assert reference_block(read("docs/REFERENCE.md")) == flags_reference()


def test_reference_names_every_metric_key_train_py_writes(tmp_path):
    """Every key of a real --diagnostics run's metrics.jsonl is explained in
    docs/REFERENCE.md (as `key`)."""
    import json
    import train
    from plumbing.config import parse_args
    cfg = parse_args(["--task=chain", "--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=2",
                      "--sft_batch=8", "--rl_steps=2", "--prompts_per_step=2", "--group_size=4",
                      "--eval_size=8", "--eval_every=1", "--diagnostics", "--device=cpu",
                      f"--out_dir={tmp_path}"])
    train.main(cfg)
    keys = set()
    for line in open(tmp_path / "metrics.jsonl"):
        keys |= set(json.loads(line))
    ref = read("docs/REFERENCE.md")
    missing = sorted(k for k in keys if f"`{k}`" not in ref)
    assert len(keys) > 30 and not missing, missing


def regenerate():
    """Rewrite every generated block: the record tables and docs/REFERENCE.md's flags."""
    for path, name, make in GENERATED:
        full = os.path.join(ROOT, path)
        text = open(full, encoding="utf-8").read()
        text = text.replace(objective_block(text, name), make())
        open(full, "w", encoding="utf-8").write(text)
        print(f"wrote the {name} table of {path}")
    path = os.path.join(ROOT, "docs", "REFERENCE.md")
    text = open(path, encoding="utf-8").read()
    text = text.replace(reference_block(text), flags_reference())
    open(path, "w", encoding="utf-8").write(text)
    print(f"wrote the flags of {path}")


if __name__ == "__main__":  # python tests/test_docs.py: rewrite every generated block
    regenerate()


def test_the_readme_names_every_task_of_the_registry():
    """README's --task row lists the registry's tasks; toy_tasks.py's layout row the
    lesson's, and lab/'s row the testbeds the lab adds (lab/testbeds.py)."""
    import lab  # noqa: F401 (its testbeds join the registry)
    import toy_tasks
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    row = next(line for line in text.splitlines() if line.startswith("| `--task` |"))
    layout = next(line for line in text.splitlines() if line.startswith("| `toy_tasks.py` |"))
    labs = next(line for line in text.splitlines() if line.startswith("| `lab/` |"))
    for name in toy_tasks.TASKS:
        assert f"`{name}`" in row, name
        if name in toy_tasks.LESSON:
            assert f"`{name}`" in layout, name
        else:
            assert f"`{name}`" not in layout, name
            assert f"`{name}`" in labs or name.startswith("parity_") and "`parity_*`" in labs
    assert set(toy_tasks.TASKS) - toy_tasks.LESSON


def test_the_readmes_demo_output_is_what_the_code_prints_for_the_committed_run():
    """The README shows the demo's output verbatim. Its closing lines, rebuilt by the code
    from the summary line of that run's metrics.jsonl (results/demo_readme.json: the same
    fresh clone's `python train.py`), are all there, as printed."""
    import json

    from lab import ledger
    from plumbing.config import parse_args
    from plumbing.console import summary_line
    block = objective_block(read("README.md"), "demo")
    summary = json.load(open(os.path.join(ROOT, "results", "demo_readme.json")))["summary"]
    assert summary["phase"] == "summary" and summary["ledger_steps"] == 100
    cfg = parse_args(["--out_dir=out"], check=False)
    expected = ledger.ledger_lines(summary, cfg) + [summary_line(summary, cfg).split(" in ")[0]]
    for line in "\n".join(expected).splitlines():
        assert line in block, line
    assert all(len(line) <= 100 for line in block.splitlines())
    assert f"{round(summary['seconds'])} s." in read("README.md")  # the run's own time


def test_the_readmes_demo_null_is_the_json_s():
    """The README's grpo - dr_grpo numbers for the demo's group-shared tokens are
    results/demo_ledger.json's, to their printed precision."""
    import json
    data = json.load(open(os.path.join(ROOT, "results", "demo_ledger.json")))
    c = data["primary"]["shared_dlogp_mean, grpo - dr_grpo"]
    quoted = re.search(r"<!-- demo-null -->(.*?)<!-- /demo-null -->", read("README.md")).group(1)
    assert quoted == (f"{c['diff']:+.1e} ± {c['half']:.1e} nats per RL step (smallest "
                      f"detectable {c['mde']:.1e})")
    assert data["seeds"] == list(range(10)) and not data["quick"]
