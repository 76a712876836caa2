"""The shape of the code: no import cycles, no module importing up into a script,
lines a reader can see whole, functions a reader can hold. Read from the source
with ast, nothing is run. There is no cap on a file's length: a file that grows
is split by concept, not squeezed."""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("", "plumbing", "lab", "exercises")  # tests/ may import anything
# imported as a package: `from plumbing import config`, `from lab.experiments import common`
PACKAGES = ("plumbing", "lab", "exercises")
SCRIPTS = {"train", "sample"}  # entry points at the top level
LESSON = {"model", "sampler", "toy_tasks", "loss", "batching", "train"}  # the design card's
LIBRARY = {
    "model",
    "sampler",
    "toy_tasks",
    "loss",
    "batching",
    "config",
    "checkpoint",
    "dist_utils",
}


def modules():
    """{name: [paths]} of every module in FOLDERS, named by its file."""
    out = {}
    for folder in FOLDERS:
        d = os.path.join(ROOT, folder)
        for dirpath, dirs, files in os.walk(d):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "__pycache__"]
            if folder == "" and dirpath != d:
                continue
            for f in files:
                if f.endswith(".py"):
                    out.setdefault(f[:-3], []).append(os.path.join(dirpath, f))
    return out


def imports(path, known):
    """Names of known modules that the file imports anywhere (also inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] in PACKAGES:  # the module itself (plumbing.config), or a package's
                found |= {parts[-1]} | {a.name for a in node.names}
            else:
                found.add(parts[0])
    return found & set(known)


def graph(folders=("", "plumbing")):
    mods = modules()
    g = {}
    for name, paths in mods.items():
        for p in paths:
            if os.path.relpath(os.path.dirname(p), ROOT).replace(".", "") in folders:
                g[name] = imports(p, mods) - {name}
    return g


def cycle(g):
    """One import cycle as a list of names, or None (depth-first search)."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = "done"
        stack.pop()
        return None

    for n in sorted(g):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_among_the_top_level_modules():
    g = graph()
    assert LIBRARY | SCRIPTS <= set(g), sorted(LIBRARY | SCRIPTS - set(g))
    assert cycle(g) is None, " -> ".join(cycle(g))


def every_folder():
    """Every folder of FOLDERS with its subfolders, as graph() names them."""
    out = {""}
    for folder in FOLDERS[1:]:
        for dirpath, dirs, _ in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "__pycache__"]
            out.add(os.path.relpath(dirpath, ROOT))
    return tuple(out)


def test_no_import_cycle_with_the_lab_and_exercises():
    g = graph(every_folder())
    assert cycle(g) is None, " -> ".join(cycle(g))


LAB_ON_THE_TRAINING_PATH = ("instruments", "ledger", "residuals", "batch_stats", "diagnostics",
                            "objectives", "engines", "estimators")


@pytest.mark.parametrize("name", sorted(LESSON - {"train"}))
def test_the_lesson_imports_neither_the_lab_nor_the_plumbing(name):
    """model, sampler, toy_tasks, loss and batching stand alone: a student reads them
    without opening lab/ or plumbing/. train.py is the one lesson file that plugs both in."""
    found = top_imports(os.path.join(ROOT, name + ".py"))
    assert not found & {"lab", "plumbing", "exercises"}, (name, found)
    assert not found & SCRIPTS, (name, found)


def test_no_module_imports_a_script_and_only_the_lab_imports_an_experiment():
    g = graph(every_folder())
    experiments = {os.path.basename(p)[:-3] for p in modules_in("lab/experiments")}
    for name, imported in g.items():
        assert not imported & (SCRIPTS - {"train"}), (name, imported)
    outside = [p for ps in modules().values() for p in ps
               if not os.path.relpath(p, ROOT).startswith(("lab", "tests"))]
    for p in outside:
        assert not imports(p, modules()) & (experiments - {"__init__"}), p


def test_at_most_eight_python_files_at_the_top_level():
    assert len([f for f in os.listdir(ROOT) if f.endswith(".py")]) <= 8


def test_train_reads_top_to_bottom():
    """train.py reads in the order its docstring says: main short; inside the phases, every
    function is defined after the functions that call it (a reader meets the call first);
    the main section, at the end, calls up into the phases."""
    path = os.path.join(ROOT, "train.py")
    tree = ast.parse(open(path).read())
    defs = {n.name: n.lineno for n in tree.body if isinstance(n, ast.FunctionDef)}
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    assert main.end_lineno - main.lineno + 1 <= 80
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        if fn.lineno >= main.lineno:
            continue
        for call in ast.walk(fn):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id in defs
            ):
                assert (
                    main.lineno > defs[call.func.id] > fn.lineno
                ), f"{fn.name} calls {call.func.id}, defined before it or in main's section"



def top_imports(path):
    """The top-level packages a file imports anywhere (also inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def source_files(include_tests=False):
    """Every tracked-looking .py file of the project (no venv, caches or runs)."""
    for dirpath, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in (
            "__pycache__", "venv", "out") and not x.startswith("out-")]
        rel = os.path.relpath(dirpath, ROOT)
        if not include_tests and (rel == "tests" or rel.startswith("tests" + os.sep)):
            continue
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


MAX_LINE = 100
MAX_FUNCTION = 60
WHY_LONG = "Long because"  # a function over MAX_FUNCTION lines says why in its docstring


def test_no_line_of_python_over_100_characters():
    long = [f"{os.path.relpath(p, ROOT)}:{i}" for p in source_files(include_tests=True)
            for i, line in enumerate(open(p, encoding="utf-8").read().split("\n"), 1)
            if len(line) > MAX_LINE]
    assert not long, long


def long_functions(path):
    """(name, lines) of the functions of a file over MAX_FUNCTION lines whose
    docstring does not say why (a sentence starting with WHY_LONG)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION and WHY_LONG not in (ast.get_docstring(node) or ""):
                out.append((node.name, n))
    return out


def test_long_function_finder_is_not_vacuous(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION))
    (tmp_path / "a.py").write_text(
        f"def f():\n{body}\n\n\ndef g():\n    '''{WHY_LONG}: a test.'''\n" f"{body}\n"
    )
    assert long_functions(tmp_path / "a.py") == [("f", MAX_FUNCTION + 1)]


def test_no_function_over_60_lines_unless_its_docstring_says_why():
    found = {os.path.relpath(p, ROOT): long_functions(p) for p in source_files()}
    assert not {k: v for k, v in found.items() if v}


def test_the_top_level_is_the_lesson_and_the_scripts():
    """What a student reads to learn the method, and the scripts a user runs; the
    run plumbing lives in plumbing/, the lab in lab/."""
    top = {f[:-3] for f in os.listdir(ROOT) if f.endswith(".py")}
    assert top == LESSON | SCRIPTS, sorted(top ^ (LESSON | SCRIPTS))


def test_no_module_edits_sys_path():
    """Imports are what they say: no module outside tests/ reaches up or sideways by
    putting a folder on sys.path (experiments and exercises run as ``python -m``)."""
    edit = re.compile(r"sys\.path\s*(\+?=|\[|\.(insert|append|extend|remove|pop|clear))")
    for paths in modules().values():
        for path in paths:  # reading it is fine (the sandbox binds what Python imports from)
            assert not edit.search(open(path, encoding="utf-8").read()), path
    assert edit.search("sys.path.insert(0, ROOT)") and not edit.search("'\n'.join(sys.path)")


FACTORIES = {"zeros", "ones", "full", "empty", "arange", "tensor", "as_tensor", "eye", "linspace",
             "rand", "randn", "randint", "randperm"}


def factories_without_device(src):
    """Line numbers of the calls torch.<factory>(...) in ``src`` that name no device."""
    return [n.lineno for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in FACTORIES and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "torch" and not any(k.arg == "device" for k in n.keywords)]


def test_the_device_finder_is_not_vacuous():
    src = "x = torch.zeros(3)\ny = torch.zeros(3, device=d)\nz = torch.randperm(4, generator=g)\n"
    assert factories_without_device(src) == [1, 3]


def test_every_tensor_built_from_nothing_on_the_training_path_names_its_device():
    """A tensor made from nothing lands on torch's default device, the CPU; on a GPU run
    it then meets CUDA tensors and fails (index_add_, scatter_reduce, a CUDA generator
    in randperm, NCCL's all_reduce). So every factory call in the code that
    ``--device=cuda`` runs says where its tensor lives: the data's device, or "cpu"
    for bookkeeping. The test suite runs on CPU, where the default is right by
    accident; this is the check that holds without a GPU."""
    paths = [os.path.join(ROOT, m + ".py") for m in sorted(LESSON | SCRIPTS)]
    paths += [p for p in modules_in("plumbing")]
    paths += [os.path.join(ROOT, "lab", m + ".py") for m in LAB_ON_THE_TRAINING_PATH]
    bad = {os.path.relpath(p, ROOT): factories_without_device(open(p, encoding="utf-8").read())
           for p in paths}
    assert not {k: v for k, v in bad.items() if v}


def modules_in(folder):
    d = os.path.join(ROOT, folder)
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".py"))


def comment_density(path):
    """(comment lines, code lines) of a file: a line with a # comment counts as a
    comment line; code lines are the others that are not blank or a docstring."""
    import io
    import tokenize
    src = open(path, encoding="utf-8").read()
    comments = {t.start[0] for t in tokenize.generate_tokens(io.StringIO(src).readline)
                if t.type == tokenize.COMMENT}
    docs = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(
            node
        ):
            docs |= set(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    code = [i for i, line in enumerate(src.split("\n"), 1)
            if line.strip() and not line.strip().startswith("#") and i not in docs]
    return len(comments), len(code)


def test_train_says_why_at_nanogpts_density():
    """At least one comment line per four lines of code in train.py (nanoGPT's
    train.py has 102 in 336)."""
    comments, code = comment_density(os.path.join(ROOT, "train.py"))
    assert 4 * comments >= code, (comments, code)


def test_nothing_imports_the_trl_extra_but_itself():
    """trl_bridge/ is an optional extra: the lesson, the lab, the plumbing and the exercises
    run without TRL, so none of them imports it (it imports loss.py and the lab)."""
    for folder in FOLDERS:
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "__pycache__"]
            if folder == "" and dirpath != os.path.join(ROOT, folder):
                continue
            for f in files:
                if f.endswith(".py"):
                    found = top_imports(os.path.join(dirpath, f))
                    assert not found & {"trl_bridge", "trl"}, os.path.join(dirpath, f)
