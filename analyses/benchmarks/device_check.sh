#!/usr/bin/env bash
# The GPU checks of one lent-device session, as one prepared script (the device tool gives a session 15 minutes of one
# H100 / H200, start-up included): run it from the repository root on the device machine, e.g. through the device tool
#     bash analyses/benchmarks/device_check.sh [STEP ...]      (default: tests scan; OUT=<folder> keeps the tables out
#                                                               of figures/)
# Steps, each with its own time limit (pick what fits the session's device time):
#   tests      the GPU tests (tests/engine/test_triton.py: CPU-engine equality, int64 offsets, entropy, both pass-2
#              variants; tests/engine/test_triton_rows.py: the counterfactual's sampled rows and their per-shape
#              choice; tests/measures/test_spectrum.py: the Gram matrices on tensor cores; the lab's and the
#              induction study's CUDA paths), about 3 minutes with compilation;
#   scan       issue 34: analyses/benchmarks/gpu_scan.py, Llama-3.1-8B / Qwen2.5-7B / Gemma-3-4B shapes, random weights,
#              bf16, 4k / 8k / 32k tokens, with its per-phase breakdown and the pass-2 variant picked (about 5 minutes);
#   gram       issue 47: analyses/benchmarks/gram_precision.py on the GPU's own TF32 / bf16 tensor cores (the committed CPU
#              table emulates them): the spectrum measure's Gram matrices of the zoo models' bf16 q / k in float32, TF32
#              and bf16 against float64 (needs the zoo files; about a minute);
#   induction  issue 35: analyses/emergence/induction_text.py on the GPU, 3 seeds of the byte model trained on the
#              standard library's source (pydoc's 419k bytes are memorised long before; see the script's pilots) with
#              64 windows per step for 10000 steps (164M tokens per seed), the seeds in 3 processes at once (the small
#              model leaves the GPU mostly idle): the script's defaults, 5 minutes on an H100 (2026-11-26), at most 9;
#   effects    issue 32 on a GPU: analyses/benchmarks/effects_cost.py at SmolLM2's published config with random weights,
#              8 x 512 tokens, every head x zero / mean / streaming against one scan and the naive loop (30 heads);
#   frayed     claims 001c / 001d / 001e / 001i (issue 45): analyses/p001_frayed/frayed_bootstrap.py on SmolLM2
#              (context 8192) at 1k / 4k / 8k / 16k / 32k / 64k tokens, 16 stdlib prompts each swept alone (pydoc is too short), with bootstrap
#              intervals over prompts of the change from 1k of the key stable ranks, FSV ratio, silhouette, sink weight
#              with and without RoPE and max q.k, within and beyond the context (001 Figs. 4, 6, 11; Fig. 6 at 4-8x);
#              needs the SmolLM2 zoo file (make venv); sized for one call of at most 8 minutes (not yet timed);
#   sink       claims 001d / 001e at 4-8x the context (issue 47): analyses/p001_frayed/sink_beyond.py, 16 stdlib prompts per
#              model captured once at the longest length, every prefix length's sink weight with and without RoPE and
#              max q.k (over all its queries and over its last 256), stable ranks and key FSV ratio, per head with
#              bootstrap intervals over prompts, and the Fig. 6 figure (PNG only where kaleido is installed): SmolLM2 (context
#              8192) at 1k-64k (8x), then Qwen2.5-Coder-0.5B and Gemma-3-270M (context 32768) at 1k-128k (4x), one
#              model per call so a failure keeps the others' tables (the CPU run stopped at 32k, 4x; not yet timed on a
#              GPU: 150 + 165 + 165 s at most);
#   loo        claim 003e: analyses/p003_sparsity/leave_one_out.py with 500 windows (the paper's sample size) on the GPU;
#   rope_id_sink  claim 001h: analyses/p001_frayed/rope_id_sink.py, two lab byte models (RoPE, RoPE-ID; 4 layers x 8 heads,
#              width 512) trained at once for 4000 steps of 64 x 256 stdlib tokens, sink heads (importance of token 0 > 0.3)
#              chosen on 8 held-out windows, their sink weight with and without RoPE swept on 16 others at 1x-8x the
#              training length with bootstrap intervals, and the verdict (no zoo file; estimated 4-5 minutes, not yet timed);
#   copy_finetune  claim 000f: analyses/p000_copy/copy_finetune.py, SmolLM2-135M fine-tuned twice (RoPE kept, 2D-RoPE
#              through the rope site) for 400 steps of 64 Imbalanced strings of 1-256 bits (000 Table 5's protocol at lr
#              5e-5), exact match on Imbalanced and Recursive-Flip at 1x-8x with paired intervals (needs the SmolLM2 zoo
#              file; estimated 3-4 minutes, not yet timed; the tables are written after each model).
# Each step prints its own lines; the tables land in $OUT (default figures/). The scan and effects steps need no zoo
# file (random weights). Provenance names the session's starting commit: check it against the tree that ran (the
# device copies the working tree, not the git history).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-figures}"
mkdir -p "$OUT"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device: this script is for a lent GPU'; print(torch.cuda.get_device_name())"
for step in "${@:-tests scan}"; do
  for s in $step; do
    case "$s" in
      tests) timeout 240 python -m pytest -q -x tests/engine/test_triton.py tests/engine/test_triton_rows.py tests/measures/test_spectrum.py tests/lab/test_model.py tests/test_analyses_emergence.py \
               -k "triton or cuda or gpu or packed or pass2 or fast_gram" -p no:cacheprovider ;;
      scan) timeout 420 python -m analyses.benchmarks.gpu_scan --models llama-3.1-8b qwen2.5-7b gemma-3-4b \
              --lengths 4096 8192 32768 --repeats 2 --out "$OUT/gpu_scan.csv" ;;
      gram) timeout 240 python -m analyses.benchmarks.gram_precision --device cuda --out "$OUT" ;;
      induction) timeout 540 python -m analyses.emergence.induction_text --device cuda --out "$OUT" ;;  # its defaults: the committed run
      effects) timeout 300 python -m analyses.benchmarks.effects_cost --model smollm2-135m --random-weights --device cuda \
                 --prompts 8 --tokens 512 --naive-heads 30 --out "$OUT" ;;
      frayed) timeout 480 python -m analyses.p001_frayed.frayed_bootstrap --models smollm2-135m --device cuda \
                --lengths 1024,4096,8192,16384,32768,65536 --prompts 16 --corpus stdlib --out "$OUT" ;;
      sink) timeout 150 python -m analyses.p001_frayed.sink_beyond --models smollm2-135m --device cuda \
              --lengths 1024,2048,4096,0.5x,1x,2x,4x,8x --prompts 16 --out "$OUT" || echo "sink: smollm2-135m stopped (exit $?)"
            for m in qwen2.5-coder-0.5b gemma-3-270m; do
              timeout 165 python -m analyses.p001_frayed.sink_beyond --models "$m" --device cuda \
                --lengths 1024,4096,0.25x,0.5x,1x,2x,4x --prompts 16 --out "$OUT" || echo "sink: $m stopped (exit $?)"
            done ;;
      loo) timeout 540 python -m analyses.p003_sparsity.leave_one_out --examples 500 --device cuda --out "$OUT" ;;
      rope_id_sink) timeout 480 python -m analyses.p001_frayed.rope_id_sink --device cuda --out "$OUT" ;;  # its defaults
      copy_finetune) timeout 480 python -m analyses.p000_copy.copy_finetune --model smollm2-135m --device cuda --out "$OUT" ;;  # its defaults
      *) echo "device_check.sh: unknown step '$s'; use tests, scan, gram, induction, effects, frayed, sink, loo, rope_id_sink or copy_finetune" >&2; exit 2 ;;
    esac
  done
done
