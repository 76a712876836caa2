"""train_lm.py: GRPO on a causal LM and data you name, with loss.py's objective and the ledger.

The model is a Hugging Face hub name, a local model folder, or ``tiny`` (a Qwen2 of about
30k parameters built on the spot, nothing downloaded). The data is a JSONL file of
prompts and answers (--dataset), or one of this project's toy tasks (--task: the prompt is
``47+85=``, the reward the task's verifier on the completion's first word). The reward of
--dataset is an exact match (the completion starts with the answer, then whitespace or
nothing), or your own function: --reward=module:function, imported from the current
folder, called as TRL calls a reward function (prompts, completions, the dataset's
columns such as answer, as keywords; it returns one float per completion).

--sft_steps first fits the model to the answers (a plain supervised loop, as the lesson's
warm start): a model that is never right gives groups without a signal. It is off by
default. The run trains in OUT.partial (TRL's checkpoints every --save_every steps; Ctrl-C
or a crash keeps them, and --resume=true continues from the last). At the end OUT.partial
becomes OUT, in one rename: the model and tokenizer (from_pretrained loads them),
metrics.jsonl (the config, TRL's log history with ledger/* and lengthcov/*, the ledger's
summary) and run.json (the flags).

    python -m trl_bridge.train_lm --model=tiny --sft_steps=300          # seconds, on a CPU
    python -m trl_bridge.train_lm --model=Qwen/Qwen2.5-0.5B --dataset=my.jsonl --loss=dapo
    accelerate launch --num_processes=4 -m trl_bridge.train_lm --model=Qwen/Qwen2.5-0.5B

Flags take --name=value, each at most once (--objective is another name for --loss):
"""
import json
import math
import os
import shutil
import sys

from trl_bridge.lesson import load, refuse_without_extra

if __name__ == "__main__":  # a command: a missing extra is one line
    refuse_without_extra()

config_mod, errors = load("plumbing.config", "plumbing.errors")
CliError = errors.CliError

OBJECTIVES = ("grpo", "dr_grpo", "dapo", "dfpo_min", "dfpo_orth")  # the trainer's
FLAGS = {  # name: (default, what it sets); --help lists them with their defaults
    "model": ("tiny", "a hub name, a model folder, or tiny"),
    "dataset": ("", "a JSONL file of {\"prompt\", \"answer\"} lines (empty: --task)"),
    "task": ("add", "a toy task (toy_tasks.py), when there is no --dataset"),
    "reward": ("", "module:function (empty: exact match, or the task's verifier)"),
    "loss": ("grpo", "the objective: " + ", ".join(OBJECTIVES)),
    "keep_groups": ("true", "whole groups per optimizer step (false: TRL's row shuffle)"),
    "steps": ("20", "optimizer steps"),
    "group_size": ("8", "completions per prompt (TRL's num_generations)"),
    "batch": ("16", "completions per process and micro-batch"),
    "accumulation": ("2", "micro-batches per optimizer step"),
    "steps_per_generation": ("2", "micro-batches per generation batch"),
    "num_iterations": ("1", "passes over each generation batch (TRL's num_iterations)"),
    "lr": ("1e-5", "the learning rate of RL"),
    "max_completion_length": ("16", "tokens per completion at most"),
    "temperature": ("1.0", "the sampling temperature"),
    "beta": ("0", "KL penalty towards the model at the start of RL (TRL's k3)"),
    "entropy_coef": ("0", "TRL's entropy bonus"),
    "importance_sampling_level": ("token", "token, or sequence (GSPO)"),
    "ledger_every": ("1", "the ledger of every N-th generation batch (0: never)"),
    "sft_steps": ("0", "supervised warm-up steps on the answers before RL"),
    "sft_lr": ("3e-3", "the warm-up's learning rate (AdamW)"),
    "sft_batch": ("32", "the warm-up's prompts per step"),
    "save_every": ("10", "a TRL checkpoint every N steps, for --resume (0: none)"),
    "seed": ("0", "the seed of the data, the warm-up and TRL"),
    "out": ("out/trl", "the run's folder (trained in OUT.partial, renamed at the end)"),
    "overwrite": ("false", "replace a run already in --out"),
    "resume": ("false", "continue the run in OUT.partial from its last checkpoint"),
}
ALIASES = {"objective": "loss"}
# whole numbers >= 1 (COUNTS) and >= 0 (the rest of WHOLE)
COUNTS = ("steps", "group_size", "batch", "accumulation", "steps_per_generation",
          "num_iterations", "max_completion_length", "sft_batch")
WHOLE = COUNTS + ("ledger_every", "sft_steps", "save_every", "seed")
POSITIVE = ("lr", "temperature", "sft_lr")
NONNEGATIVE = ("beta", "entropy_coef")
SWITCHES = ("keep_groups", "overwrite", "resume")
KEEP = ("out", "resume", "overwrite")  # what a resumed run may change


def usage():
    flags = [f"--{k}={d or chr(39) * 2}" for k, (d, _) in FLAGS.items()]
    width = max(map(len, flags))
    lines = [f"  {f:{width}s}  {h}" for f, (_, h) in zip(flags, FLAGS.values())]
    return __doc__.strip() + "\n" + "\n".join(lines)


def given(argv):
    """{flag: value} as written; a flag given twice (also as its alias) is refused."""
    out = {}
    for arg in argv:
        if arg in ("-h", "--help"):
            print(usage())
            sys.exit(0)
        key, eq, val = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        key = ALIASES.get(key, key)
        if key not in FLAGS or not eq:
            raise CliError(f"unknown argument {arg!r}; flags: "
                           + ", ".join(f"--{k}" for k in FLAGS) + " (--help says more)")
        if key in out:
            raise CliError(f"--{key} is given twice; give it once")
        out[key] = val
    return out


def typed(o):
    """The flags' strings as numbers and switches, each checked."""
    out = dict(o)
    for k in WHOLE:
        if not o[k].isdigit() or int(o[k]) > 2**31 - 1 or (k in COUNTS and int(o[k]) < 1):
            raise CliError(f"--{k} takes a whole number {'>= 1' if k in COUNTS else '>= 0'}, "
                           f"got {o[k]!r}")
        out[k] = int(o[k])
    for k in POSITIVE + NONNEGATIVE:
        try:
            out[k] = float(o[k])
        except ValueError:
            raise CliError(f"--{k} takes a number, got {o[k]!r}") from None
        low_ok = out[k] > 0 if k in POSITIVE else out[k] >= 0
        if not (low_ok and math.isfinite(out[k])):
            raise CliError(f"--{k} must be a finite number {'above' if k in POSITIVE else '>='}"
                           f" 0, got {o[k]!r}")
    for k in SWITCHES:
        if o[k] not in ("true", "false"):
            raise CliError(f"--{k} takes true or false, got {o[k]!r}")
        out[k] = o[k] == "true"
    if out["loss"] not in OBJECTIVES:
        raise CliError(f"unknown objective {out['loss']!r}; choose one of "
                       + ", ".join(OBJECTIVES))
    if out["importance_sampling_level"] not in ("token", "sequence"):
        raise CliError(f"--importance_sampling_level takes token or sequence, got "
                       f"{out['importance_sampling_level']!r}")
    return out


def partial_of(out):
    return os.path.normpath(out) + ".partial"


def check_out(o, raw, flags):
    """--out may be written: a new run needs it empty or absent (or --overwrite); --resume
    needs OUT.partial with its run.json, whose flags rule. Returns the flags' strings."""
    config_mod.check_out_dir(o["out"], "--out")
    out, partial = o["out"], partial_of(o["out"])
    config_mod.check_out_dir(partial, "--out")  # OUT.partial: a folder we may write
    if o["resume"] and o["overwrite"]:
        raise CliError("--resume continues the run in --out and --overwrite replaces it: "
                       "give one")
    if o["resume"]:
        if not os.path.isfile(os.path.join(partial, "run.json")):
            done = os.path.isfile(os.path.join(out, "metrics.jsonl"))
            raise CliError(f"--out={out} holds a finished run: --resume has nothing to continue"
                           if done else f"--resume: {partial} holds no unfinished run")
        try:
            with open(os.path.join(partial, "run.json"), encoding="utf-8") as f:
                saved = json.load(f)
            theirs = typed({**raw, **saved})
        except (ValueError, CliError):
            raise CliError(f"--resume: {partial}/run.json is not a run of this script") from None
        mine = typed({**raw, **saved, **flags})
        for k in flags:
            if k not in KEEP and mine[k] != theirs[k]:
                raise CliError(f"--{k}={flags[k]} contradicts the saved run's --{k}={saved[k]} "
                               f"({partial}/run.json rules on --resume)")
        return {**raw, **saved, **{k: raw[k] for k in KEEP}}
    if os.path.isdir(out) and os.listdir(out) and not o["overwrite"]:
        raise CliError(f"--out={out} is not empty (a run?); --overwrite=true replaces it")
    if os.path.exists(partial) and not o["overwrite"]:
        raise CliError(f"{partial} holds an unfinished run: --resume=true continues it, "
                       f"--overwrite=true starts again")
    return raw


def parse(argv):
    """Every flag checked, and --out, before anything is loaded or written. Returns the
    typed flags and their strings (run.json keeps the strings)."""
    flags = given(argv)
    raw = {**{k: d for k, (d, _) in FLAGS.items()}, **flags}
    raw = check_out(typed(raw), raw, flags)
    if raw["dataset"] and raw["task"] != FLAGS["task"][0]:
        raise CliError("--dataset and --task both name the data: give one")
    return typed(raw), raw


def summary(history):
    """The ledger's and lengthcov's logged values, averaged over the steps that logged them."""
    keys = sorted({k for h in history for k in h if k.startswith(("ledger/", "lengthcov/"))})
    return {k: sum(vals) / len(vals) for k in keys
            for vals in [[h[k] for h in history if k in h]]}


def finite(x):
    return x if not isinstance(x, float) or math.isfinite(x) else None  # JSON has no NaN


def write_metrics(path, flags, history, s):
    """metrics.jsonl: the config, TRL's log history (one line per logged step), the summary."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"phase": "config", **flags}) + "\n")
        for h in history:
            f.write(json.dumps({"phase": "rl", **{k: finite(v) for k, v in h.items()}}) + "\n")
        f.write(json.dumps({"phase": "summary", **s}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def last_checkpoint(folder):
    from transformers.trainer_utils import get_last_checkpoint
    return get_last_checkpoint(folder) if os.path.isdir(folder) else None


def settings(o, partial):
    """TRL's config: its own checks give one line each."""
    import torch
    from trl_bridge.trainer import CancellationConfig
    try:
        return CancellationConfig(
            output_dir=partial, objective=o["loss"], keep_groups=o["keep_groups"],
            ledger_every=o["ledger_every"], max_steps=o["steps"],
            num_generations=o["group_size"], per_device_train_batch_size=o["batch"],
            gradient_accumulation_steps=o["accumulation"],
            steps_per_generation=o["steps_per_generation"], learning_rate=o["lr"],
            num_iterations=o["num_iterations"],
            max_completion_length=o["max_completion_length"], temperature=o["temperature"],
            beta=o["beta"], entropy_coef=o["entropy_coef"],
            importance_sampling_level=o["importance_sampling_level"],
            seed=o["seed"], use_cpu=not torch.cuda.is_available(),
            bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
            logging_steps=1, report_to=[], save_total_limit=1,
            save_strategy="steps" if o["save_every"] else "no",
            save_steps=o["save_every"] or 500)
    except ValueError as e:
        raise CliError(str(e).strip().splitlines()[0]) from None


def finish(partial, out):
    """OUT.partial becomes OUT in one rename; a run OUT held (--overwrite) goes after."""
    old = None
    if os.path.isdir(out) and os.listdir(out):
        old = f"{os.path.normpath(out)}.old-{os.getpid()}"
        os.rename(out, old)
    elif os.path.isdir(out):
        os.rmdir(out)  # an empty folder
    os.rename(partial, out)
    if old:
        shutil.rmtree(old)


def train(o, raw, args, parts, state):
    """Writes OUT.partial (run.json, checkpoints), trains, then saves and renames."""
    import torch
    from datasets import Dataset
    from trl_bridge.trainer import CancellationGRPOTrainer
    kind, model, tok, rows, reward, resume = parts
    partial = args.output_dir
    if state.is_main_process:
        if o["overwrite"] and os.path.exists(partial):
            shutil.rmtree(partial)
        os.makedirs(partial, exist_ok=True)
        with open(os.path.join(partial, "run.json.tmp"), "w", encoding="utf-8") as f:
            json.dump(raw, f, indent=1)
        os.replace(os.path.join(partial, "run.json.tmp"), os.path.join(partial, "run.json"))
    if o["beta"] and (kind == "tiny" or o["sft_steps"]):
        # TRL builds its reference model from the policy's path: the model RL starts from
        ref = os.path.join(partial, "reference")
        if state.is_main_process and not os.path.isdir(ref):
            model.save_pretrained(ref)
        state.wait_for_everyone()
        model.config._name_or_path = ref
    state.wait_for_everyone()
    trainer = CancellationGRPOTrainer(model=model, reward_funcs=reward, args=args,
                                      train_dataset=Dataset.from_list(rows),
                                      processing_class=tok)
    try:
        trainer.train(resume_from_checkpoint=resume)
    except BaseException:
        for bar in (getattr(c, "training_bar", None) for c in trainer.callback_handler.callbacks):
            if bar is not None:
                bar.close()  # the progress bar's last line first, then the error's
        raise
    if not all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters()):
        raise CliError(f"the trained weights are not finite (the run diverged): no model "
                       f"saved; {partial} keeps its checkpoints")
    history = trainer.state.log_history
    s = summary(history)
    trainer.save_model(partial)  # the model and its tokenizer, from_pretrained's format
    if state.is_main_process:
        write_metrics(os.path.join(partial, "metrics.jsonl"), raw, history, s)
        finish(partial, o["out"])
        print(f"cancellation ledger ({o['loss']}, groups "
              f"{'kept whole' if o['keep_groups'] else 'shuffled by TRL'}), mean share per "
              f"generation batch:")
        for k, v in s.items():
            print(f"  {k:24s} {v:.4g}")
        if not s:
            print("  no generation batch had a token two completions of a group shared")
        print(f"saved: {o['out']} (model, tokenizer, metrics.jsonl, run.json)")
    state.wait_for_everyone()
    return s


def main(argv):
    o, raw = parse(argv)
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames
    from accelerate import PartialState
    partial = partial_of(o["out"])
    from trl_bridge import inputs
    kind, where, tok, rows, reward, teach = inputs.inputs_of(o)  # the model's faults first
    args = settings(o, partial)
    resume = last_checkpoint(partial) if o["resume"] else None
    if o["resume"] and resume is None:
        raise CliError(f"--resume: {partial} has no checkpoint yet (--save_every); "
                       f"--overwrite=true starts again")
    state = PartialState()
    n = state.num_processes
    step = o["batch"] * o["accumulation"] * n
    if state.is_main_process:
        print(f"{n} process{'es' if n > 1 else ''}; an optimizer step takes {o['batch']} x "
              f"{o['accumulation']} x {n} = {step} completions ({step / o['group_size']:g} "
              f"prompts x {o['group_size']}); a generation batch "
              f"{o['batch'] * o['steps_per_generation'] * n}", flush=True)
    model = inputs.load_model(kind, where, tok, o["seed"])
    if o["sft_steps"] and not resume:
        inputs.warm_up(model, tok, teach, o, state.device)
    try:
        return train(o, raw, args, (kind, model, tok, rows, reward, resume), state)
    except BaseException as e:
        kept = last_checkpoint(partial)
        if not kept and state.is_main_process and os.path.isdir(partial):
            shutil.rmtree(partial)  # nothing worth keeping: the next run starts clean
        if isinstance(e, KeyboardInterrupt):
            raise CliError(f"interrupted; {kept} is kept: --resume=true continues from it"
                           if kept else "interrupted; nothing was saved") from None
        raise


if __name__ == "__main__":
    errors.cli(main, sys.argv[1:])
