"""sample.py: print completions of a checkpoint and their rewards.

    python sample.py --init_from=out/ckpt.pt                 # held-out problems
    python sample.py --init_from=out/ckpt.pt --prompt=47+85=  # your own prompt
    python sample.py --init_from=out/ckpt.pt --num_samples=8 --temperature=1.0

With a prompt the task's verifier scores each completion when the prompt
parses as one of its problems; characters outside the alphabet are refused.
"""

import sys
from dataclasses import dataclass

import torch

import toy_tasks
from plumbing.config import _f, once, parse_args
from plumbing import errors
from plumbing.errors import CliError
from sampler import sample
from plumbing.checkpoint import load_checkpoint


@dataclass
class SampleConfig:
    init_from: str = _f("", "checkpoint to sample from (required)")
    prompt: str = _f("", "prompt text, e.g. 47+85= (default: held-out problems)")
    num_samples: int = _f(4, "completions per prompt")
    num_prompts: int = _f(8, "held-out problems to show when no prompt is given")
    temperature: float = _f(0.0, "0 is greedy")
    seed: int = _f(0, "sampling seed")


def parse_problem(task_name, prompt):
    """The problem tuple a prompt states, or None if it is not one of the task's."""
    body = prompt[:-1] if prompt.endswith("=") else None
    if body is None:
        return None
    if task_name in ("chain", "chain_check"):  # 7+8*3-5=: single digits and operators, alternating
        ok = len(body) % 2 == 1 and all(c in "123456789" for c in body[::2]) and \
            all(c in "+-*" for c in body[1::2])
        return tuple(int(c) if i % 2 == 0 else c for i, c in enumerate(body)) if ok else None
    sep = {"add": "+", "mul": "*"}.get(task_name)
    parts = body.split(sep) if sep else [body]
    if not all(p.isdigit() for p in parts) or len(parts) != (2 if sep else 1):
        return None
    return tuple(int(p) for p in parts)


def join_testbeds():
    """The lab's tasks (chain, parity_*: lab/testbeds.py) join toy_tasks.TASKS where lab/ is
    here, so that their checkpoints load; without lab/, the lesson's tasks alone."""
    try:
        import lab  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "lab":
            raise  # a module the lab needs: its own error


MEMORY_LIMIT = 4 * 2 ** 30  # bytes one call may ask for


def memory_need(c, rows):
    """Bytes of one sampling call of ``rows`` completions: the KV cache (keys and
    values of every layer and position) and the logits of every row, in fp32,
    twice for temporaries."""
    return 2 * rows * (2 * c.n_layer * c.block_size * c.n_embd + c.block_size * c.n_out) * 4


def main(cfg):
    if not cfg.init_from:
        raise CliError("--init_from=CKPT is required")
    for name in ("num_samples", "num_prompts"):
        if not 1 <= getattr(cfg, name) <= 4096:
            raise CliError(f"--{name} must be in 1..4096, got {getattr(cfg, name)}")
    if not 0 <= cfg.temperature <= 10:  # also refuses nan
        raise CliError(f"--temperature must be in [0, 10] (0 is greedy), got {cfg.temperature}")
    if not 0 <= cfg.seed < 2 ** 63:
        raise CliError(f"--seed must be in [0, 2**63), got {cfg.seed}")
    join_testbeds()
    model, ck = load_checkpoint(cfg.init_from)
    t = ck["task"]
    task = toy_tasks.make_task(t["task"], t["digits"], t["scratchpad"])
    if cfg.prompt:
        try:
            toy_tasks.check_text(cfg.prompt)
        except ValueError as e:
            raise CliError(str(e)) from None
        problems = [parse_problem(t["task"], cfg.prompt)]
        prompts = [cfg.prompt]
    else:
        seed = ck["config"].get("seed", 0)
        problems = toy_tasks.eval_problems(
            task, cfg.num_prompts, seed if isinstance(seed, int) else 0
        )
        prompts = [task.prompt(p) for p in problems]
    ids = [toy_tasks.encode(p) for p in prompts]
    if max(len(i) for i in ids) + task.max_new_tokens > model.cfg.block_size:
        raise CliError(f"prompt is too long for this model (block_size={model.cfg.block_size})")
    gen = torch.Generator().manual_seed(cfg.seed)
    n = 1 if cfg.temperature == 0 else cfg.num_samples
    need = memory_need(model.cfg, len(ids) * n)
    if need > MEMORY_LIMIT:
        raise CliError(
            f"{len(ids)} prompts x {n} samples would need about {need / 2 ** 30:.1f} GiB "
            f"(limit {MEMORY_LIMIT / 2 ** 30:.0f} GiB); ask for fewer"
        )
    try:
        out = sample(model, ids, n, task.max_new_tokens, cfg.temperature, generator=gen)
    except FloatingPointError as e:
        raise CliError(f"checkpoint {cfg.init_from!r}: {e}") from None
    print(f"checkpoint {cfg.init_from}: task {task.name}, {ck['kind']} step {ck['step']}")
    for row, toks in enumerate(out.tokens.tolist()):
        prob, text = problems[row // n], toy_tasks.decode(toks)
        r = "?" if prob is None else f"{task.reward(prob, text):.0f}"
        print(f"{prompts[row // n]}{text}    reward {r}")


def cli(argv):
    """The command line: bad input and Ctrl-C get one 'error: ...' line and exit status 2."""
    errors.cli(lambda: main(parse_args(once(argv), SampleConfig, doc=__doc__, check=False)))


if __name__ == "__main__":
    cli(sys.argv[1:])
