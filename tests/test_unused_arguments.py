"""No argument is accepted and then ignored: a parameter that a function's body never
reads is a promise the function does not keep (``eps`` reached no estimator that called
loss.advantages, until it did). An AST scan of every library file finds them; the ones
listed below are slots of a shared signature (a registry's entries, a protocol of Python
or torch, a catalogue of wrong answers that must fit the right one's call), each with
why. A new one fails here until it is read, removed, or listed with its reason."""

import ast
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# file -> {function: why its unread parameters are there}
SHARED = {
    "train.py": dict.fromkeys(
        ("objective", "rl_start", "rollouts", "part", "step", "after", "line", "finish"),
        "the do-nothing Hooks: each takes what the lab's hooks (lab/hooks.py) read there"),
    "batching.py": dict.fromkeys(
        ("full", "shuffle", "length", "query", "balanced", "sign", "query_balanced"),
        "every cut strategy of --minibatch takes (group, advantages, lengths, M, generator)"),
    "lab/engines.py": dict.fromkeys(
        ("cispo", "sapo", "gmpo", "kl_cov", "gpg", "vespo", "dro"),
        "every engine's per-token term takes the same arguments (ENGINES)"),
    "lab/estimators.py": dict.fromkeys(
        ("_grpo_passk", "_opo"),
        "every estimator takes (r, group, mu, n, lengths, baseline, eps); _opo divides by "
        "no sd, so eps does not apply (its formula has none)"),
    "lab/objectives.py": {"sequence_term": "the sequence terms share (x, s)"},
    "loss.py": dict.fromkeys(
        ("grpo", "dr_grpo", "dapo", "min_replace"),
        "the objectives share one signature (loss.LOSSES); min_replace is exercise 3's, "
        "whose signature the student's answer must keep"),
    "lab/syncs.py": {"__torch_dispatch__": "torch's protocol"},
    "lab/experiments/motion_check.py": dict.fromkeys(
        ("part", "step"), "the lesson's hooks (train.Hooks): each takes what the lab's read"),
    "lab/verl_batching.py": {"verl": "every cut strategy of --minibatch takes (group, "
                                     "advantages, lengths, M, generator)"},
    "trl_bridge/lesson.py": {"find_spec": "Python's meta path finder protocol"},
    "trl_bridge/trainer.py": {"compute_loss": "transformers' Trainer.compute_loss signature; "
                              "the step's counts replace TRL's num_items_in_batch"},
    "plumbing/checkpoint.py": {"__exit__": "Python's context-manager protocol"},
    "toy_tasks.py": dict.fromkeys(
        ("solution", "categories", "flawed"),
        "every task's functions share one signature (toy_tasks.Task)"),
    "lab/testbeds.py": {"categories": "every task's functions share one signature "
                                      "(toy_tasks.Task)"},
    "exercises/check.py": {"check": "a property's check takes its (call, result) pairs"},
    "exercises/answers/mistakes.py": {
        "_wrong_ex4": "the three exercises' catalogues share (name, variant, right)"},
    "exercises/answers/wrong_code.py": dict.fromkeys(
        ("whole_batch", "greedy_no_room", "round_robin", "global_rng", "own_length",
         "untransformed", "batch_max_len"),
        "a wrong answer has the right answer's signature: the check calls it the same way"),
}


def unread(path):
    """[(function, [parameters its body never reads])] of a file; lambdas (a registry's
    one-line entries) and bodies that only raise (stubs) aside."""
    out = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        body = [b for b in node.body if not (isinstance(b, ast.Expr)
                                             and isinstance(b.value, ast.Constant))]
        if all(isinstance(b, (ast.Pass, ast.Raise)) for b in body):
            continue
        read = {n.id for b in body for n in ast.walk(b) if isinstance(n, ast.Name)}
        gone = [p for p in params if p not in read and p not in ("self", "cls")
                and not p.startswith("_")]
        if gone:
            out.append((node.name, gone))
    return out


def test_the_scan_finds_an_unread_parameter(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def f(a, eps=1e-6):\n    '''doc'''\n    return a\n\n"
                 "def g(a):\n    raise NotImplementedError\n")
    assert unread(str(f)) == [("f", ["eps"])]


def test_no_library_function_ignores_a_parameter():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                           text=True).stdout.split()
    files = [f for f in files if not f.startswith("tests/") and os.path.exists(
        os.path.join(ROOT, f))] or [f for f in SHARED if os.path.exists(os.path.join(ROOT, f))]
    found = [(f, fn, gone) for f in files for fn, gone in unread(os.path.join(ROOT, f))
             if fn not in SHARED.get(f, {})]
    assert found == [], found
