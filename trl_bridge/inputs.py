"""inputs.py: what train_lm.py reads, loaded and checked before anything is written.

What it teaches: a run that fails should fail in its first seconds, in one line. Each check
here raises CliError (one ``error: ...`` line, exit status 2) for a fault the user can fix:
a model that is not there, a dataset line that is not a prompt and an answer, a reward
function that cannot be imported, a completion longer than the model's positions, a batch
that cannot fit in memory. A hub name is looked up in the local cache first; offline, a
name that is not there is refused at once, not after the hub's retries. Then the model,
its tokenizer, the rows and the reward are loaded, and the optional warm-up runs.
"""
import importlib
import json
import os
import random

from trl_bridge.lesson import load

(errors,) = load("plumbing.errors")
CliError = errors.CliError


def looks_like_path(name):
    """A hub name is ``name`` or ``owner/name``; anything else is meant as a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith("/")


def model_source(name):
    """Where --model's files come from: ("tiny", None), ("folder", path) or ("hub", name).
    A hub name must be in the local cache, or the hub must answer (one try, 10 s)."""
    if not name:
        raise CliError("--model is empty; give a hub name, a model folder, or tiny")
    if name == "tiny":
        return "tiny", None
    path = os.path.expanduser(name)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise CliError(f"--model={name} is a file, not a model folder")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise CliError(f"--model={name} is a folder without config.json: not a saved "
                           f"model (save_pretrained writes one)")
        return "folder", path
    if looks_like_path(name):
        raise CliError(f"--model={name}: no such folder")
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise CliError(f"--model={name} is neither a folder nor a hub name") from None
    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return "hub", name  # cached: loaded with local_files_only, no network
    if constants.HF_HUB_OFFLINE:
        raise CliError(f"--model={name} is not in the local hub cache and HF_HUB_OFFLINE is "
                       f"set; download it first (hf download {name}) or give a folder")
    from huggingface_hub import model_info
    try:
        model_info(name, timeout=10)
    except Exception as e:  # noqa: BLE001 (not found, no network, refused: one line each)
        raise CliError(f"--model={name} is not in the local hub cache and the hub did not "
                       f"give it ({type(e).__name__}); download it first or give a folder"
                       ) from None
    return "downloaded", name


def model_config(kind, where):
    """The model's config, without its weights (tiny: built here)."""
    from transformers import AutoConfig
    if kind == "tiny":
        from trl_bridge import tiny
        return tiny.model(tiny.tokenizer()).config
    try:
        return AutoConfig.from_pretrained(where, local_files_only=kind != "downloaded")
    except (OSError, ValueError) as e:
        raise CliError(f"--model={where}: its config.json cannot be read ({first_line(e)})"
                       ) from None


def first_line(e):
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def read_dataset(path):
    """A JSONL file's rows: each line a JSON object with a string "prompt" and "answer"
    (other keys are kept and passed to the reward function, as TRL does)."""
    if not os.path.exists(path):
        raise CliError(f"--dataset={path}: no such file")
    if not os.path.isfile(path):
        raise CliError(f"--dataset={path} is a folder, not a JSONL file")
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise CliError(f"--dataset={path} line {n} is not JSON") from None
            if not (isinstance(row, dict) and isinstance(row.get("prompt"), str)
                    and isinstance(row.get("answer"), str) and row["prompt"]):
                raise CliError(f"--dataset={path} line {n} needs a non-empty string "
                               f"\"prompt\" and a string \"answer\"")
            rows.append(row)
    if not rows:
        raise CliError(f"--dataset={path} has no line")
    keys = set(rows[0])
    if any(set(r) != keys for r in rows):
        raise CliError(f"--dataset={path}: every line needs the same keys as the first")
    return rows


def reward_function(spec):
    """--reward=module:function, imported from the current folder or the installed
    packages; TRL calls it as function(prompts=..., completions=..., answer=..., **kw)."""
    module, colon, name = spec.partition(":")
    if not (module and colon and name):
        raise CliError(f"--reward={spec}: give module:function (my_rewards:exact)")
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise CliError(f"--reward={spec}: cannot import {module} ({first_line(e)})") from None
    except AttributeError:
        raise CliError(f"--reward={spec}: {module} has no {name}") from None
    except Exception as e:  # noqa: BLE001 (the user's module failed while importing)
        raise CliError(f"--reward={spec}: importing {module} failed: {type(e).__name__}: "
                       f"{first_line(e)}") from None
    if not callable(fn):
        raise CliError(f"--reward={spec}: {name} is not a function")
    return fn


def exact_match(completions, answer, **kw):
    """1 where the completion, less its leading whitespace, starts with the answer followed
    by whitespace or nothing (a real model's trailing text does not count), else 0."""
    out = []
    for c, a in zip(completions, answer):
        c, a = c.lstrip(), a.strip()
        out.append(float(c.startswith(a) and c[len(a):len(a) + 1] in ("", " ", "\n", "\t")))
    return out


def positions(config):
    """The model's positions (None when its config does not say)."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        if isinstance(getattr(config, key, None), int):
            return getattr(config, key)
    return None


def check_lengths(config, longest_prompt, completion):
    """The longest prompt plus --max_completion_length fit the model's positions."""
    n = positions(config)
    if n is not None and longest_prompt + completion > n:
        raise CliError(f"--max_completion_length={completion} plus the longest prompt "
                       f"({longest_prompt} tokens) exceeds the model's {n} positions")


def memory_need(config, rows, length, batch):
    """Bytes a run needs, roughly: weights, gradients and AdamW's moments (16 B a parameter);
    a micro-batch's logits, their log-softmax and gradient (3 x 4 B each); the KV cache and
    activations of a generation batch's ``rows`` at ``length`` tokens."""
    width = getattr(config, "hidden_size", 0) or 0
    layers = getattr(config, "num_hidden_layers", 0) or 0
    vocab = getattr(config, "vocab_size", 0) or 0
    params = 12 * layers * width ** 2 + vocab * width
    logits = 3 * 4 * batch * length * vocab
    cache = (2 + 20) * 4 * rows * length * layers * width
    return 16 * params + logits + cache


def check_memory(config, rows, length, batch):
    (config_mod,) = load("plumbing.config")
    need, have = memory_need(config, rows, length, batch), config_mod.available_memory()
    if need > have:
        raise CliError(f"--batch={batch} at {length} tokens needs about {need / 2**30:.1f} GiB, "
                       f"more than the {have / 2**30:.1f} GiB here; use a smaller --batch, "
                       f"--steps_per_generation or --max_completion_length")


def task_rows(name, n, seed):
    """n prompts of a toy task, the task's reward (its verifier on the completion up to its
    first whitespace), and its teacher: a fresh problem's prompt and solution."""
    (toy_tasks,) = load("toy_tasks")
    load("lab")  # the lab's testbeds join toy_tasks.TASKS
    if name not in toy_tasks.TASKS:
        raise CliError(f"unknown task {name!r}; choose one of " + ", ".join(toy_tasks.TASKS))
    task, rng = toy_tasks.make_task(name), random.Random(seed)
    probs = [task.sample(rng) for _ in range(n)]
    rows = [{"prompt": task.prompt(p), "problem": json.dumps(p)} for p in probs]

    def reward(completions, problem, **kw):
        return [task.reward(tuple(json.loads(p)), (c.split() or [""])[0])
                for c, p in zip(completions, problem)]

    def teach(r):
        p = task.sample(r)
        return task.prompt(p), task.solution(p, r)
    return rows, reward, teach


def inputs_of(o):
    """The model's source and config, the tokenizer, the rows, the reward and the warm-up's
    teacher (rng -> prompt, answer): all checked (lengths, memory) before anything is
    written."""
    kind, where = model_source(o["model"])
    config = model_config(kind, where)
    if o["dataset"]:
        rows = read_dataset(o["dataset"])
        reward = exact_match
        teach = lambda r: (lambda row: (row["prompt"], row["answer"]))(r.choice(rows))
    else:
        rows, reward, teach = task_rows(o["task"], min(64 * o["batch"], 2**16), o["seed"])
    if o["reward"]:
        reward = reward_function(o["reward"])
    tok = tokenizer(kind, where)
    longest = max(len(tok(r["prompt"]).input_ids) for r in rows)
    check_lengths(config, longest, o["max_completion_length"])
    check_memory(config, o["batch"] * o["steps_per_generation"],
                 longest + o["max_completion_length"], o["batch"])
    return kind, where, tok, rows, reward, teach


def tokenizer(kind, where):
    if kind == "tiny":
        from trl_bridge import tiny
        return tiny.tokenizer()
    from transformers import AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(where, local_files_only=kind != "downloaded")
    except (OSError, ValueError) as e:
        raise CliError(f"--model={where}: no tokenizer can be loaded from it "
                       f"({type(e).__name__})") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(kind, where, tok, seed):
    if kind == "tiny":
        from trl_bridge import tiny
        return tiny.model(tok, seed=seed)
    from transformers import AutoModelForCausalLM
    try:
        return AutoModelForCausalLM.from_pretrained(where, local_files_only=kind != "downloaded")
    except (OSError, ValueError) as e:
        raise CliError(f"--model={where}: its weights cannot be loaded ({type(e).__name__})"
                       ) from None


def warm_up(model, tok, teach, o, device):
    """--sft_steps of supervised learning on prompt, answer, EOS (AdamW at --sft_lr,
    --sft_batch pairs a step from ``teach``, drawn with --seed), on the device RL uses."""
    import torch
    rng = random.Random(o["seed"] + 1)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=o["sft_lr"])
    for _ in range(o["sft_steps"]):
        seqs = [tok("".join(teach(rng))).input_ids + [tok.eos_token_id]
                for _ in range(o["sft_batch"])]
        width = max(map(len, seqs))
        ids = torch.tensor([s + [tok.pad_token_id] * (width - len(s)) for s in seqs],
                           device=device)
        seen = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs],
                            device=device)
        out = model(input_ids=ids, attention_mask=seen, labels=ids.masked_fill(seen == 0, -100))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return model

