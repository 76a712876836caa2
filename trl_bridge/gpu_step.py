"""gpu_step.py: what the ledger costs the bridge at a size where generation is real.

A randomly initialised Qwen2 of about 0.5B parameters (24 layers, width 1280, MLP 3.5 times
as wide, grouped-query attention), built from a config over tiny.py's character tokenizer:
nothing is downloaded. train_lm.py trains it a few steps with the ledger on every generation
batch (--ledger_every=1) and with it off (0), from the same weights and seed: first one
step to warm up (not counted), then on, off, on, off. OUT/gpu_step.json gets the parameter
count, each run's wall seconds, the ratio of the means and, on CUDA, each run's peak memory.
lab/gpu_check.sh runs it where a GPU is lent; on a CPU a small --width and --layers check
the path in seconds.

    python -m trl_bridge.gpu_step --out=DIR [--steps=4] [--width=1280] [--layers=24]
"""
import json
import os
import sys
import time

from trl_bridge.lesson import load, refuse_without_extra

if __name__ == "__main__":  # a command: a missing extra is one line
    refuse_without_extra()

(errors,) = load("plumbing.errors")
CliError = errors.CliError
FLAGS = {"out": "", "steps": "4", "width": "1280", "layers": "24"}
MOST = {"steps": 1000, "width": 8192, "layers": 128}  # more is a typo, not a machine


def parse(argv):
    """The flags, each --name=value at most once, counts >= 1, --out a new folder."""
    if argv in (["--help"], ["-h"]):
        print(__doc__.strip())
        sys.exit(0)
    o = dict(FLAGS)
    seen = set()
    for a in argv:
        key, eq, value = a[2:].partition("=")
        if not a.startswith("--") or not eq or key not in FLAGS:
            raise CliError(f"unknown flag {a!r}; the flags: " + ", ".join(f"--{k}" for k in FLAGS))
        if key in seen:
            raise CliError(f"--{key} is given twice; give it once")
        seen.add(key)
        o[key] = value
    for k in MOST:
        if not o[k].isdigit() or not 1 <= int(o[k]) <= MOST[k]:
            raise CliError(f"--{k} takes a whole number from 1 to {MOST[k]}, got {o[k]!r}")
        o[k] = int(o[k])
    if o["width"] % 64:
        raise CliError(f"--width takes a multiple of 64 (heads of 64), got {o['width']}")
    if not o["out"] or os.path.exists(o["out"]):
        raise CliError("--out takes a new folder" + (f"; {o['out']} exists" if o["out"] else ""))
    return o


def build(where, width, layers, seed=0):
    """Save a random Qwen2 of this size, with tiny.py's tokenizer, to ``where``; its
    parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl_bridge import tiny
    tok = tiny.tokenizer()
    torch.manual_seed(seed)
    heads = width // 64
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=width, intermediate_size=width * 7 // 2,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=2 if heads % 2 == 0 else 1, max_position_embeddings=512,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return sum(p.numel() for p in model.parameters())


def main(argv):
    o = parse(argv)
    import torch
    from trl_bridge import train_lm
    os.makedirs(o["out"])
    params = build(os.path.join(o["out"], "model"), o["width"], o["layers"])
    cuda = torch.cuda.is_available()
    out = {"params": params, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
           "steps": o["steps"], "runs": {}}
    for name, every, steps in (("warm-up", 0, 1), ("on 1", 1, o["steps"]),
                               ("off 1", 0, o["steps"]), ("on 2", 1, o["steps"]),
                               ("off 2", 0, o["steps"])):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        train_lm.main([f"--model={os.path.join(o['out'], 'model')}", f"--steps={steps}",
                       f"--ledger_every={every}", "--max_completion_length=64", "--save_every=0",
                       f"--out={os.path.join(o['out'], name.replace(' ', '_'))}"])
        out["runs"][name] = {
            "ledger_every": every, "seconds": round(time.perf_counter() - t0, 2),
            "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2) if cuda
            else None}
    mean = lambda k: sum(out["runs"][f"{k} {i}"]["seconds"] for i in (1, 2)) / 2
    on, off = mean("on"), mean("off")
    out["ratio"] = round(on / off, 3)
    with open(os.path.join(o["out"], "gpu_step.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(f"{params / 1e6:.1f}M parameters on {out['device']}: {o['steps']} steps with the "
          f"ledger {on:.1f} s, without {off:.1f} s (x{out['ratio']:.2f})")
    return out


if __name__ == "__main__":
    errors.cli(main, sys.argv[1:])
