#!/usr/bin/env bash
# gpu_check.sh: the GPU's numbers in one command of under 10 minutes (one H100 or H200).
#
#   bash lab/gpu_check.sh OUT          # OUT: where the logs and gpu_check.json go
#
# Each part runs under its own time limit, so one that hangs costs only its share:
#   demo         the default demo (SFT, then GRPO with the lab), SFT and RL timed apart
#   demo_plain   the same with --instruments=false (the plain loop)
#   chain        --task=chain
#   bench        python -m lab.bench --quick (the sampler, the step, the host reads)
#   e12          E12's evaluation (lab/experiments/e12_covariance.py) for up to 80 s: its
#                records in OUT/e12 say how far it got (one run at a time, not yet batched)
#   bridge       where TRL is installed: trl_bridge/gpu_step.py, a random 0.5B Qwen2 trained
#                3 steps with the ledger and without it (seconds, their ratio, peak memory)
# It writes OUT/gpu_check.json: the device, torch's version, and per part its exit status,
# wall seconds and the numbers its output gives. results/README.md's Measurements quote it.
set -u
OUT=${1:-${OUT:-gpu_check}}
mkdir -p "$OUT"
PY=${PYTHON:-python}
: > "$OUT/parts.jsonl"

part() {  # part NAME LIMIT_S COMMAND...: run it, log it, time it
    local name=$1 limit=$2
    shift 2
    local t0
    t0=$(date +%s.%N)
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    "$PY" - "$name" "$rc" "$t0" "$(date +%s.%N)" >> "$OUT/parts.jsonl" <<'EOF'
import json, sys
name, rc, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
print(json.dumps({"name": name, "rc": rc, "wall_s": round(t1 - t0, 1)}))
EOF
    echo "$name: exit $rc"
}

part demo 80 "$PY" train.py --device=cuda --out_dir="$OUT/demo"
part demo_plain 80 "$PY" train.py --device=cuda --instruments=false --out_dir="$OUT/demo_plain"
part chain 110 "$PY" train.py --device=cuda --task=chain --out_dir="$OUT/chain"
part bench 90 "$PY" -m lab.bench --quick --device=cuda --out="$OUT/bench.json"
if [ -f lab/experiments/e12_covariance.py ]; then
    part e12 80 "$PY" -m lab.experiments.e12_covariance --device=cuda --out="$OUT/e12"
fi
if "$PY" -c "import trl" 2> /dev/null; then
    part bridge 90 "$PY" -m trl_bridge.gpu_step --steps=3 --out="$OUT/bridge"
fi

"$PY" - "$OUT" <<'EOF'
import json, os, re, sys
out = sys.argv[1]
rec = {"parts": [json.loads(line) for line in open(os.path.join(out, "parts.jsonl"))]}
try:
    import torch
    rec["torch"] = torch.__version__
    rec["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"
except Exception as e:  # the numbers of the parts still come back
    rec["device"] = f"unknown ({type(e).__name__})"
for p in rec["parts"]:  # what a run printed: warm start and final accuracy, SFT and RL seconds
    log = os.path.join(out, p["name"] + ".log")
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    m = re.search(r"rl step 0: eval_acc ([\d.]+) \(warm start\)\s+\[(\d+)s\]", text)
    if m:
        p["warm_start_acc"], p["sft_and_first_eval_s"] = float(m.group(1)), int(m.group(2))
    m = re.search(r"-> after RL ([\d.]+) .* in (\d+) s", text)
    if m:
        p["final_acc"], p["train_s"] = float(m.group(1)), int(m.group(2))
        if "sft_and_first_eval_s" in p:
            p["rl_s"] = p["train_s"] - p["sft_and_first_eval_s"]
bridge = os.path.join(out, "bridge", "gpu_step.json")  # its seconds, ratio and memory
if os.path.exists(bridge):
    rec["bridge"] = json.load(open(bridge))
json.dump(rec, open(os.path.join(out, "gpu_check.json"), "w"), indent=1)
print(json.dumps(rec, indent=1))
EOF
