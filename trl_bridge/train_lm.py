"""train_lm.py: GRPO on a causal LM you name, with loss.py's objective and the ledger on.

The model is a Hugging Face hub name, a local folder, or ``tiny`` (a Qwen2 of about 30k
parameters built on the spot, nothing downloaded). The task is one of this project's
verifiable tasks (toy_tasks.py): the prompt is the task's (``47+85=``), and the reward is
the task's verifier applied to the completion up to its first whitespace, so that a real
model's trailing text does not count. ``--sft_steps`` first fits the model to the task's
teacher (a plain supervised loop), as the lesson does: a model that is never right gives
groups without a signal. At the end it prints the cancellation ledger and the
length-reward lines, averaged over the generation batches.

    python -m trl_bridge.train_lm --model=tiny --sft_steps=300          # seconds, on a CPU
    python -m trl_bridge.train_lm --model=Qwen/Qwen2.5-0.5B --objective=dapo --steps=200
    accelerate launch --num_processes=4 -m trl_bridge.train_lm --model=Qwen/Qwen2.5-0.5B

Flags (--name=value): model, task, objective, keep_groups (true/false), steps, group_size,
batch (prompts x group per device and micro-batch), accumulation, steps_per_generation,
lr, max_completion_length, temperature, ledger_every, sft_steps, seed, out.
"""
import json
import os
import random
import sys

from plumbing.errors import CliError, cli

FLAGS = {"model": "tiny", "task": "add", "objective": "grpo", "keep_groups": "true",
         "steps": "20", "group_size": "8", "batch": "16", "accumulation": "2",
         "steps_per_generation": "2", "lr": "1e-5", "max_completion_length": "16",
         "temperature": "1.0", "ledger_every": "1", "sft_steps": "0", "seed": "0",
         "out": "out/trl"}
COUNTS = ("steps", "group_size", "batch", "accumulation", "steps_per_generation",
          "max_completion_length")


def parse(argv):
    """Every flag checked before anything is imported or written."""
    o = dict(FLAGS)
    for arg in argv:
        if arg in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        key, eq, val = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if key not in FLAGS or not eq:
            raise CliError(f"unknown argument {arg!r}; flags: "
                           + ", ".join(f"--{k}" for k in FLAGS))
        o[key] = val
    out = {k: o[k] for k in ("model", "task", "objective", "out")}
    for k in COUNTS + ("ledger_every", "sft_steps", "seed"):
        if not o[k].isdigit() or int(o[k]) > 2**31 - 1 or (k in COUNTS and int(o[k]) < 1):
            raise CliError(f"--{k} takes a whole number {'>= 1' if k in COUNTS else '>= 0'}, "
                           f"got {o[k]!r}")
        out[k] = int(o[k])
    for k in ("lr", "temperature"):
        try:
            out[k] = float(o[k])
        except ValueError:
            raise CliError(f"--{k} takes a number, got {o[k]!r}") from None
        if not 0 < out[k] < float("inf"):
            raise CliError(f"--{k} must be a finite number above 0, got {o[k]!r}")
    if o["keep_groups"] not in ("true", "false"):
        raise CliError(f"--keep_groups takes true or false, got {o['keep_groups']!r}")
    out["keep_groups"] = o["keep_groups"] == "true"
    import lab  # noqa: F401 (the bridge uses the lab; its testbeds join toy_tasks.TASKS)
    import toy_tasks
    if out["task"] not in toy_tasks.TASKS:
        raise CliError(f"unknown task {out['task']!r}; choose one of "
                       + ", ".join(toy_tasks.TASKS))
    from plumbing.config import check_out_dir
    check_out_dir(out["out"], "--out")
    return out


def task_data(name, n, seed):
    """A dataset of n prompts of the task, and its reward function (the task's verifier on
    the completion up to its first whitespace)."""
    from datasets import Dataset
    import toy_tasks
    task = toy_tasks.make_task(name)
    rng = random.Random(seed)
    probs = [task.sample(rng) for _ in range(n)]
    data = Dataset.from_dict({"prompt": [task.prompt(p) for p in probs],
                              "problem": [json.dumps(p) for p in probs]})

    def reward(completions, problem, **kw):
        return [task.reward(tuple(json.loads(p)), (c.split() or [""])[0])
                for c, p in zip(completions, problem)]
    return data, reward


def model_and_tokenizer(name, seed):
    if name == "tiny":
        from trl_bridge import tiny
        tok = tiny.tokenizer()
        return tiny.model(tok, seed=seed), tok
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return AutoModelForCausalLM.from_pretrained(name), tok


def warm_up(model, tok, name, steps, seed, batch=32, lr=3e-3):
    """``steps`` of supervised learning on the task's teacher: prompt, solution, EOS."""
    import torch
    import toy_tasks
    task, rng = toy_tasks.make_task(name), random.Random(seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        seqs = []
        for p in (task.sample(rng) for _ in range(batch)):
            seqs.append(tok(task.prompt(p) + task.solution(p, rng)).input_ids + [tok.eos_token_id])
        width = max(map(len, seqs))
        ids = torch.tensor([s + [tok.pad_token_id] * (width - len(s)) for s in seqs],
                           device=model.device)
        seen = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs],
                            device=model.device)
        out = model(input_ids=ids, attention_mask=seen, labels=ids.masked_fill(seen == 0, -100))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return model


def summary(history):
    """The ledger's and lengthcov's logged values, averaged over the steps that logged them."""
    keys = sorted({k for h in history for k in h if k.startswith(("ledger/", "lengthcov/"))})
    return {k: sum(vals) / len(vals) for k in keys
            for vals in [[h[k] for h in history if k in h]]}


def main(argv):
    o = parse(argv)
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames
    import torch
    from trl_bridge.trainer import CancellationConfig, CancellationGRPOTrainer
    try:
        args = CancellationConfig(
            output_dir=o["out"], objective=o["objective"], keep_groups=o["keep_groups"],
            ledger_every=o["ledger_every"], max_steps=o["steps"],
            num_generations=o["group_size"], per_device_train_batch_size=o["batch"],
            gradient_accumulation_steps=o["accumulation"],
            steps_per_generation=o["steps_per_generation"], learning_rate=o["lr"],
            max_completion_length=o["max_completion_length"], temperature=o["temperature"],
            # dr_grpo's and DFPO's Â is r - mu, not divided by the group's sd (loss.py)
            scale_rewards="group" if o["objective"] in ("grpo", "dapo") else "none",
            seed=o["seed"], use_cpu=not torch.cuda.is_available(),
            bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
            logging_steps=1, report_to=[], save_strategy="no")
    except ValueError as e:
        raise CliError(str(e).splitlines()[0]) from None
    data, reward = task_data(o["task"], 64 * o["batch"], o["seed"])
    model, tok = model_and_tokenizer(o["model"], o["seed"])
    if o["sft_steps"]:
        warm_up(model, tok, o["task"], o["sft_steps"], o["seed"])
    trainer = CancellationGRPOTrainer(model=model, reward_funcs=reward, args=args,
                                      train_dataset=data, processing_class=tok)
    trainer.train()
    s = summary(trainer.state.log_history)
    if trainer.accelerator.is_main_process:
        print(f"cancellation ledger ({o['objective']}, groups "
              f"{'kept whole' if o['keep_groups'] else 'shuffled by TRL'}), mean share per "
              f"generation batch:")
        for k, v in s.items():
            print(f"  {k:24s} {v:.4g}")
        if not s:
            print("  no generation batch had a token two completions of a group shared")
    return s


if __name__ == "__main__":
    cli(main, sys.argv[1:])
