"""A device profile of the demo's SFT and RL steps: where the time goes."""
import random, sys, time, torch
import train, toy_tasks
from model import GPT, GPTConfig, amp, completion_logprobs
from plumbing.config import parse_args
from plumbing import dist_utils
from toy_tasks import PAD
cfg = parse_args(["--device=cuda", "--out_dir=/tmp/prof"])
dev = "cuda"
task = toy_tasks.make_task("add", 2, True)
m = GPT(GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT)).to(dev)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0)
draw, rng = toy_tasks.train_sampler(task, [], 0), random.Random(1)
def sync(): torch.cuda.synchronize()
t = time.perf_counter(); batches = list(train.sft_batches(task, draw, 64, rng, dev, 0.7, 50)); sync()
print("sft_batches x50", round(time.perf_counter() - t, 4))
def step(b):
    prompts, tokens, mask = b
    with amp(cfg, dev):
        logp = completion_logprobs(m, prompts, tokens, mask, PAD)
    loss = -dist_utils.token_mean(logp, mask)
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
for b in batches[:5]: step(b)
sync(); t = time.perf_counter()
for b in batches[5:45]: step(b)
sync(); print("sft step ms", round((time.perf_counter() - t) / 40 * 1000, 2))
t = time.perf_counter()
for b in batches[5:45]:
    with amp(cfg, dev):
        logp = completion_logprobs(m, *b, PAD)
sync(); print("forward only ms", round((time.perf_counter() - t) / 40 * 1000, 2))
from plumbing import checkpoint
t = time.perf_counter(); checkpoint.save_checkpoint("/tmp/prof_ck.pt", m, cfg, "sft", 1); print("checkpoint s", round(time.perf_counter() - t, 3))
# sampling
from sampler import sample
prompts = [task.encode(task.prompt(task.sample(rng))) for _ in range(16)]
g = torch.Generator(device=dev).manual_seed(0)
with amp(cfg, dev): sample(m, prompts, 8, task.max_new_tokens, generator=g)
sync(); t = time.perf_counter()
for _ in range(5):
    with amp(cfg, dev): out = sample(m, prompts, 8, task.max_new_tokens, generator=g)
sync(); print("sample ms", round((time.perf_counter() - t) / 5 * 1000, 2), "tokens", out.tokens.shape)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as p:
    for b in batches[:3]: step(b)
    sync()
print(p.key_averages().table(sort_by="cpu_time_total", row_limit=18))
