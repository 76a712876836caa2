"""The run plumbing sits below the lab and keeps its promises: it imports nothing of the
lab (the lab registers its flags' names and rules in it), every number flag is bounded,
--compile needs a working compiler, the guards that compare paths follow links, and a
damaged record is set aside without overwriting an earlier one."""

import dataclasses
import os

import pytest

import lab  # noqa: F401  (registers the lab's flags and rules in plumbing.config)
from lab import files
import train
from plumbing import checkpoint, config, rundir
from plumbing.config import Config, parse_args
from plumbing.errors import CliError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("name", sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "plumbing"))
                                         if f.endswith(".py")))
def test_the_plumbing_imports_nothing_of_the_lab(name):
    from test_structure import top_imports
    assert "lab" not in top_imports(os.path.join(ROOT, "plumbing", name + ".py")), name


def test_the_lab_fills_the_registries_the_flags_read():
    assert set(config.CHOICES) == {"loss", "adv", "agg", "kl_loss_type"}
    assert "dro" in config.CHOICES["loss"] and "rloo" in config.CHOICES["adv"]
    assert Config(loss="rloo").adv == "rloo" and Config(loss="nope").adv == "auto"
    assert parse_args(["--loss=sapo"], check=False).clip == "none"  # IMPLIED
    with pytest.raises(CliError, match="needs --dro_beta > 0"):
        config.validate(Config(loss="dro"))  # one of CHECKS


def one_line(capsys, argv):
    """train.cli(argv) must end with exit status 2 and one 'error: ...' line."""
    with pytest.raises(SystemExit) as e:
        train.cli(argv)
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), (argv, err)
    return err[0]


NUMBERS = [f.name for f in dataclasses.fields(Config) if f.type in (int, float)]


@pytest.mark.parametrize("name", NUMBERS)
def test_every_number_flag_is_bounded(name, tmp_path, capsys):
    """-1, 1e30, nan and a 30-digit integer are refused in one line by every count, size
    and float flag; 0 is either a value it takes or refused the same way. Nothing is
    written."""
    out = f"--out_dir={tmp_path}/run"
    for raw in ("-1", "1e30", "nan", "1" + "0" * 29):
        assert f"--{name}" in one_line(capsys, [f"--{name}={raw}", out]), raw
    try:
        parse_args([f"--{name}=0", out])
    except CliError as e:
        assert f"--{name}" in str(e) and "\n" not in str(e)
    assert not os.path.exists(tmp_path / "run")


def test_compile_needs_a_working_compiler(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CXX", "/bin/false")  # a compiler that builds nothing
    assert "C++ compiler" in one_line(capsys, ["--compile=true", f"--out_dir={tmp_path}/run"])
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert not config.compiler_works()
    assert not os.path.exists(tmp_path / "run")


def test_overwrite_refuses_an_init_from_that_links_into_the_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for f in ("config.json", "ckpt.pt"):
        (run / f).write_text("{}")
    (tmp_path / "one").symlink_to(run / "ckpt.pt")
    (tmp_path / "two").symlink_to(tmp_path / "one")  # a chain of links
    (tmp_path / "dir").symlink_to(run)  # a link to the folder itself
    for path in (run / "ckpt.pt", tmp_path / "one", tmp_path / "two", tmp_path / "dir/ckpt.pt"):
        cfg = parse_args(["--overwrite", f"--init_from={path}", f"--out_dir={run}"],
                         check=False)
        with pytest.raises(CliError, match="would delete --init_from"):
            rundir.open_run(cfg)


def test_a_damaged_record_is_set_aside_never_over_an_earlier_one(tmp_path):
    path = str(tmp_path / "r.json")
    for n, want in enumerate(("r.json.bad", "r.json.bad.1", "r.json.bad.2")):
        open(path, "w").write(f"damaged {n}")
        assert files.set_aside(path) == str(tmp_path / want)
    assert [open(str(tmp_path / w)).read() for w in ("r.json.bad", "r.json.bad.1")] == \
        ["damaged 0", "damaged 1"] and not os.path.exists(path)


def test_argparse_errors_are_one_line(capsys, tmp_path):
    for argv, message in ((["--lr"], "--lr needs a value"), (["--lr=fast"], "takes a number"),
                          (["--resume=maybe"], "takes true or false"),
                          (["--bogus=1"], "unknown flag --bogus"), (["stray"], "unexpected")):
        assert message in one_line(capsys, argv + [f"--out_dir={tmp_path}/run"])
