#!/usr/bin/env bash
# The GPU checks of one lent-device session, as one prepared script (the device tool gives a session 15 minutes of one
# H100 / H200, start-up included): run it from the repository root on the device machine, e.g. through the device tool
#     bash analyses/benchmarks/device_check.sh            (OUT=<folder> keeps the tables out of figures/)
# 1. the Triton engine's tests on the GPU (tests/engine/test_triton.py: CPU-engine equality, int64 offsets, entropy);
# 2. issue 34: analyses/benchmarks/gpu_scan.py, Llama-3.1-8B / Qwen2.5-7B / Gemma-3-4B shapes, random weights, bf16,
#    4k / 8k / 32k tokens, with its per-phase breakdown (about 4 minutes on an H200);
# 3. issue 32: analyses/benchmarks/effects_cost.py at SmolLM2's published config with random weights, 8 x 512 tokens,
#    every head x zero / mean / streaming against one scan and the naive loop (30 heads of it, scaled), on the GPU.
# Each step prints its own lines; the tables land in $OUT (default figures/). Steps 2-3 need no zoo file (random
# weights: the GGUF files cannot travel to the device machine). Provenance names the session's starting commit: check
# it against the tree that ran (the device copies the working tree, not the git history).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-figures}"
mkdir -p "$OUT"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device: this script is for a lent GPU'; print(torch.cuda.get_device_name())"
timeout 240 python -m pytest -q -x tests/engine/test_triton.py -p no:cacheprovider
timeout 420 python analyses/benchmarks/gpu_scan.py --models llama-3.1-8b qwen2.5-7b gemma-3-4b --lengths 4096 8192 32768 \
    --repeats 2 --out "$OUT/gpu_scan.csv"
timeout 300 python analyses/benchmarks/effects_cost.py --model smollm2-135m --random-weights --device cuda --prompts 8 \
    --tokens 512 --naive-heads 30 --out "$OUT"
