"""Every guard that compares paths compares real paths: a link to a file, a link to a
folder and a chain of links that lead into what a guard protects are refused like the
direct path, and nothing is written or deleted. The guards: --overwrite against
--init_from (train.py), --out against results/ (the experiments, lab.bench) and the
handout's "inside this repository" (tests/test_classroom_handout.py: the handout is the
teacher's)."""

import os

import pytest

import train
from lab import bench
from lab.experiments import common
from plumbing.errors import CliError

KINDS = ("file", "folder", "chain")


def link(tmp_path, kind, folder, name):
    """A path that leads to folder/name: through a link to the file, through a link to
    the folder, or through two links to the folder in a row (a link to a link)."""
    links = tmp_path / "links"
    links.mkdir(exist_ok=True)
    if kind == "file":
        (links / "f").symlink_to(os.path.join(folder, name))
        return str(links / "f")
    (links / "d").symlink_to(folder)
    if kind == "folder":
        return str(links / "d" / name)
    (links / "dd").symlink_to(links / "d")
    return str(links / "dd" / name)


def files_of(folder):
    return {p: open(os.path.join(folder, p), "rb").read() for p in sorted(os.listdir(folder))}


@pytest.mark.parametrize("kind", KINDS)
def test_overwrite_refuses_an_init_from_reached_through_links(tmp_path, capsys, kind):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "warm_start.pt").write_bytes(b"the warm start a user keeps")
    before = files_of(run)
    with pytest.raises(SystemExit) as e:
        train.cli([f"--init_from={link(tmp_path, kind, str(run), 'warm_start.pt')}",
                   "--overwrite", f"--out_dir={run}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --overwrite would delete --init_from"), lines
    assert files_of(run) == before


@pytest.mark.parametrize("kind", KINDS)
def test_overwrite_refuses_an_out_dir_reached_through_links(tmp_path, capsys, kind):
    run = tmp_path / "run"
    run.mkdir()
    (run / "warm_start.pt").write_bytes(b"the warm start a user keeps")
    out = os.path.dirname(link(tmp_path, "chain" if kind == "chain" else "folder",
                               str(run), "x"))
    if kind == "file":  # --init_from itself a link, into the linked --out_dir
        (tmp_path / "ws.pt").symlink_to(run / "warm_start.pt")
    init = str(tmp_path / "ws.pt") if kind == "file" else str(run / "warm_start.pt")
    with pytest.raises(SystemExit) as e:
        train.cli([f"--init_from={init}", "--overwrite", f"--out_dir={out}"])
    assert e.value.code == 2 and "--overwrite would delete" in capsys.readouterr().err
    assert (run / "warm_start.pt").read_bytes() == b"the warm start a user keeps"


@pytest.mark.parametrize("kind", KINDS)
def test_a_partial_experiment_refuses_an_out_that_leads_into_results(tmp_path, monkeypatch,
                                                                     kind):
    results = tmp_path / "results"  # stands for results/
    (results / "sub").mkdir(parents=True)
    monkeypatch.setattr(common, "RESULTS", str(results))
    out = os.path.dirname(link(tmp_path, "folder" if kind == "file" else kind,
                               str(results / "sub"), "x"))
    if kind == "file":  # a link whose target is results/ itself
        (tmp_path / "r").symlink_to(results)
        out = str(tmp_path / "r")
    with pytest.raises(CliError, match="is in results/"):
        common.parse(["--quick", f"--out={out}"])
    assert os.listdir(results) == ["sub"] and os.listdir(results / "sub") == []


@pytest.mark.parametrize("kind", KINDS)
def test_the_bench_refuses_an_out_that_leads_into_results(tmp_path, kind):
    results = os.path.join(os.path.dirname(common.RESULTS), "results")
    name = "e1_flips.json" if kind == "file" else "bench.jsonl"
    with pytest.raises(CliError, match="lies in results/"):
        bench.parse([f"--out={link(tmp_path, kind, results, name)}", "--device=cpu"])
    assert not os.path.exists(os.path.join(results, "bench.jsonl"))


def test_the_bench_replaces_only_its_own_lines_and_refuses_an_empty_out(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(CliError, match="holds something else"):
        bench.parse([f"--out={notes}", "--device=cpu"])
    earlier = tmp_path / "bench.jsonl"
    earlier.write_text('{"name": "matmul_peak"}\n')
    assert bench.parse([f"--out={earlier}", "--device=cpu"])["out"] == str(earlier)
    with pytest.raises(CliError, match="--out is empty"):
        bench.parse(["--out=", "--device=cpu"])
