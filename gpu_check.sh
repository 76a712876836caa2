#!/usr/bin/env bash
# one prepared device check: the GPU's name, the demo (instruments on and off), bench, chain
export PYTHONUNBUFFERED=1
t() { local s=$(date +%s%N); "$@"; echo "wall_ms $(( ($(date +%s%N) - s) / 1000000 ))"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/gpu.txt 2>&1
python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))" >> $OUT/gpu.txt 2>&1
t python train.py --device=cuda --out_dir=/tmp/demo > $OUT/demo.txt 2>&1
t python train.py --device=cuda --out_dir=/tmp/demo_off --instruments=false > $OUT/demo_off.txt 2>&1
cp /tmp/demo/metrics.jsonl $OUT/demo_metrics.jsonl
t timeout 240 python -m lab.bench --device=cuda --out=$OUT/bench.jsonl > $OUT/bench.txt 2>&1
t timeout 150 python train.py --task=chain --device=cuda --out_dir=/tmp/chain > $OUT/chain.txt 2>&1
tail -4 $OUT/*.txt
