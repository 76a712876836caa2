"""What a class hands in lands on its student's row, and nothing in it reaches outside it
(exercises/answers/collect.py): a link anywhere (the entry, a folder on the way, a file, a
zip member, a platform's download) is refused on that row and never followed; Moodle's and
Canvas's download names find their student; a broken sheet keeps its code and its row; the
latest of a student's packs counts; a pack from a partner's laptop is flagged with both
names; a zipped copy's .venv is skipped. Teacher's copy only; no sandbox needed."""

import json
import os
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises import handin  # noqa: E402
from exercises.answers import collect  # noqa: E402

ROSTER = dict.fromkeys(["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra"])
CODE = {"loss.py": "x = 1\n", "batching.py": "y = 2\n", "ex6_buggy_loss.py": "z = 3\n"}


def sheet(name):
    return f"STUDENT = {name!r}\nEX1 = {{'grpo_net': 0.5}}\n"


def zip_of(path, files, links=(), made=None, packed_for=None):
    """A zip with ``files`` ({member: text}), link members ({member: target}) and, when
    ``made`` is given, the handin.json a pack holds."""
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
        for member, target in dict(links).items():
            info = zipfile.ZipInfo(member)
            info.external_attr = (0o120777 << 16)
            z.writestr(info, target)
        if made:
            z.writestr(handin.MANIFEST, handin.manifest(packed_for, made))
    return path


def folder_of(path, files):
    for rel, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(path, rel)) or path, exist_ok=True)
        with open(os.path.join(path, rel), "w", encoding="utf-8") as f:
            f.write(text)
    return path


def gather(top, tmp_path):
    subs, missing, warnings = collect.gather(str(top), str(tmp_path / "work"), ROSTER)
    return {s.label: s for s in subs}, missing, warnings


def said(sub):
    return " | ".join(sub.problems)


def test_every_form_of_link_is_refused_on_its_row_and_never_followed(tmp_path):
    top = tmp_path / "subs"
    top.mkdir()
    answers = os.path.join(ROOT, "exercises", "answers")
    # a folder whose exercises/ is the teacher's answers: sheet and exercise 6 behind it
    spoof = folder_of(top / "Ada Lovelace", {"loss.py": "x = 1\n", "batching.py": "y = 2\n"})
    os.symlink(answers, spoof / "exercises")
    # a file that is a link, in the side-by-side layout
    alan = folder_of(top / "Alan Turing", {"sheet.py": sheet("Alan Turing"), **CODE})
    os.remove(alan / "loss.py")
    os.symlink(os.path.join(ROOT, "loss.py"), alan / "loss.py")
    # the entry itself a link to a folder; a platform folder whose one zip is a link
    os.symlink(alan, top / "Grace Hopper")
    plat = top / "Edsger Dijkstra_12345_assignsubmission_file"
    plat.mkdir()
    os.symlink(zip_of(tmp_path / "real.zip", {"sheet.py": sheet("Edsger Dijkstra")}),
               plat / "handin.zip")
    # zip members that are links: one of the four files, and a folder elsewhere
    zip_of(top / handin.pack_name("Alan Turing"), {"sheet.py": sheet("Alan Turing"),
                                                   "loss.py": "x = 1\n"},
           links={"ex6_buggy_loss.py": "/etc/passwd", "notes": "/"})
    subs, _, _ = gather(top, tmp_path)
    ada = subs["Ada Lovelace"]
    # the teacher's fixed exercise 6 lies there: refused, never read
    assert "exercises/ex6_buggy_loss.py lies behind the link exercises" in said(ada)
    assert "holds 1 link (exercises)" in said(ada)
    assert not os.path.exists(os.path.join(ada.folder, "ex6_buggy_loss.py"))
    assert not os.path.exists(os.path.join(ada.folder, "sheet.py"))
    assert ada.name == "Ada Lovelace"  # named after its folder: the sheet was never read
    assert "loss.py is a link: not followed" in said(subs["Alan Turing"])
    grace = subs["Grace Hopper"]
    assert "the submission is a link: not followed" in said(grace)
    assert os.listdir(grace.folder) == []
    assert "the pack is a link or a special file" in said(
        subs["Edsger Dijkstra_12345_assignsubmission_file"])
    pack = subs[handin.pack_name("Alan Turing")]
    assert "ex6_buggy_loss.py in the pack is a link" in said(pack)
    assert "the pack holds 2 links" in said(pack)
    assert not os.path.exists(os.path.join(pack.folder, "ex6_buggy_loss.py"))
    assert os.path.isfile(os.path.join(pack.folder, "loss.py"))


def test_platform_download_names_find_their_student(tmp_path):
    """Moodle's folder and flat file names, Canvas's file names (late too), matched to the
    roster; the sheets here do not read, so only the download names can say whose."""
    top = tmp_path / "subs"
    top.mkdir()
    broken = {"sheet.py": "EX1 = {\n", **CODE}
    folder_of(top / "Ada Lovelace_101_assignsubmission_file_", broken)
    zip_of(top / "Alan Turing_102_assignsubmission_file_work.zip", broken)
    zip_of(top / "hoppergrace_LATE_103_9001_work.zip", broken)
    zip_of(top / "dijkstraedsger_104_9002_work.zip", broken)
    subs, missing, _ = gather(top, tmp_path)
    names = {label: s.name for label, s in subs.items()}
    assert names == {"Ada Lovelace_101_assignsubmission_file_": "Ada Lovelace",
                     "Alan Turing_102_assignsubmission_file_work.zip": "Alan Turing",
                     "hoppergrace_LATE_103_9001_work.zip": "Grace Hopper",
                     "dijkstraedsger_104_9002_work.zip": "Edsger Dijkstra"}
    assert missing == [] and all(s.on_roster for s in subs.values())
    for s in subs.values():  # the sheet costs its numbers; the code is still there to mark
        assert "sheet.py, line 1: not Python" in said(s) and "its code is" in said(s)
        assert sorted(os.listdir(s.folder)) == sorted(CODE) + ["sheet.py"]


def test_a_broken_sheet_keeps_its_row_by_the_pack_s_name_or_its_student_line(tmp_path):
    top = tmp_path / "subs"
    top.mkdir()
    zip_of(top / handin.pack_name("Ada Lovelace"), {"sheet.py": "EX1 = {\n", **CODE})
    folder_of(top / "my work", {"sheet.py": 'STUDENT = "Alan Turing"\nEX1 = {\n', **CODE})
    subs, missing, _ = gather(top, tmp_path)
    assert subs[handin.pack_name("Ada Lovelace")].name == "Ada Lovelace"
    assert subs["my work"].name == "Alan Turing"
    assert sorted(missing) == ["Edsger Dijkstra", "Grace Hopper"]


def test_the_latest_pack_counts_and_the_others_are_listed(tmp_path):
    top = tmp_path / "subs"
    top.mkdir()
    files = {"sheet.py": sheet("Ada Lovelace"), **CODE}
    for i, made in enumerate(("2026-12-01T10:00:00Z", "2026-12-01T10:05:00Z",
                              "2026-12-01T09:59:00Z")):
        d = top / f"try{i}"
        d.mkdir()
        zip_of(d / handin.pack_name("Ada Lovelace"), files, made=made, packed_for="Ada Lovelace")
    subs, _, _ = gather(top, tmp_path)
    assert list(subs) == ["try1"]
    assert ("the latest of 3 hand-ins (made 2026-12-01T10:05:00Z); not marked: "
            "try2 (made 2026-12-01T09:59:00Z), try0 (made 2026-12-01T10:00:00Z)") in said(
                subs["try1"])


def test_two_hand_ins_without_times_each_keep_a_row_flagged(tmp_path):
    top = tmp_path / "subs"
    top.mkdir()
    for label in ("a", "b"):
        folder_of(top / label, {"sheet.py": sheet("Ada Lovelace"), **CODE})
    subs, _, _ = gather(top, tmp_path)
    assert sorted(subs) == ["a", "b"]
    assert all("2 submissions name this student (a, b)" in said(s) for s in subs.values())


def test_a_pack_made_on_a_partner_s_laptop_is_flagged_with_both_names(tmp_path):
    """Grace uploads a pack her partner Ada's laptop made (STUDENT still Ada's): it lands
    on Grace's row, the uploader's, flagged with both names; Ada's own row is untouched."""
    top = tmp_path / "subs"
    top.mkdir()
    files = {"sheet.py": sheet("Ada Lovelace"), **CODE}
    grace = top / "Grace Hopper_103_assignsubmission_file"
    grace.mkdir()
    zip_of(grace / handin.pack_name("Ada Lovelace"), files, made="2026-12-01T10:09:00Z",
           packed_for="Ada Lovelace")
    zip_of(top / handin.pack_name("Ada Lovelace"), files, made="2026-12-01T10:00:00Z",
           packed_for="Ada Lovelace")
    subs, missing, _ = gather(top, tmp_path)
    row = subs["Grace Hopper_103_assignsubmission_file"]
    assert row.name == "Grace Hopper" and subs[handin.pack_name("Ada Lovelace")].name == \
        "Ada Lovelace"
    assert "its sheet names 'Ada Lovelace'" in said(row) and "made for 'Ada Lovelace'" in said(row)
    assert "check whose work it is" in said(row)
    assert "Grace Hopper" not in missing and "Ada Lovelace" not in missing


def test_a_zipped_copy_with_its_venv_is_read_and_the_venv_skipped(tmp_path):
    top = tmp_path / "subs"
    top.mkdir()
    files = {f"copy/.venv/lib/site-packages/pkg{i}/mod.py": "" for i in range(600)}
    files.update({"copy/.venv/lib/site-packages/torch/nn/modules/loss.py": "wrong = 1\n",
                  "copy/.git/config": "", "copy/__pycache__/loss.cpython-311.pyc": "",
                  "copy/exercises/sheet.py": sheet("Ada Lovelace"), "copy/loss.py": "x = 1\n",
                  "copy/batching.py": "y = 2\n", "copy/exercises/ex6_buggy_loss.py": "z = 3\n"})
    zip_of(top / "copy.zip", files)
    subs, _, _ = gather(top, tmp_path)
    s = subs["copy.zip"]
    assert s.problems == [] and s.name == "Ada Lovelace"
    assert open(os.path.join(s.folder, "loss.py")).read() == "x = 1\n"


def test_handin_names_a_broken_sheet_s_line_and_packs_it_as_is_when_asked(tmp_path,
                                                                            monkeypatch,
                                                                            capsys):
    for rel, text in {"exercises/sheet.py": 'STUDENT = "Ada Lovelace"\nEX1 = {\n',
                      "loss.py": "x = 1\n", "batching.py": "y = 2\n",
                      "exercises/ex6_buggy_loss.py": "z = 3\n"}.items():
        folder_of(tmp_path / "copy", {rel: text})
    monkeypatch.setattr(handin, "ROOT", str(tmp_path / "copy"))
    monkeypatch.setattr(handin.roster, "load", lambda: None)
    out = tmp_path / "out"
    out.mkdir()
    assert handin.main([f"--out={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sheet.py, line 2: not Python" in err[0] and "--as_is" in err[0]
    assert "your code is still marked" in err[0] and os.listdir(out) == []
    assert handin.main([f"--out={out}", "--as_is"]) == 0
    assert "packed as it is" in capsys.readouterr().err
    with zipfile.ZipFile(out / handin.pack_name("Ada Lovelace")) as z:
        m = json.loads(z.read(handin.MANIFEST))
        assert sorted(z.namelist()) == sorted([*handin.MEMBERS, handin.MANIFEST])
    assert m["student"] == "Ada Lovelace" and m["made"].endswith("Z")
