"""Paper 000 Table 5 at zoo scale: fine-tune one pretrained model twice (RoPE kept, 2D-RoPE) on binary copying (claim 000f).

000 Sec. 5, App. G.3, G.5, N (Tables 1, 4, 5): Qwen3-style models of 350M-1.4B parameters, *pretrained* with RoPE or
2D-RoPE on DCLM, then fine-tuned on the Imbalanced binary copy task (200K examples, batch 64, strings of up to 1K
tokens in a 2K context, the prompt templates of App. N in the chat template ``### user:\\n{input}\\n\\n### assistant:\\n
{output}``, AdamW betas 0.9 / 0.95, weight decay 0.1, clip 1.0, 100 warmup steps then cosine to 0, lr 5e-5 of the
swept 3e-5 / 5e-5 / 1e-4) and tested on Imbalanced (in-domain) and Recursive-Flip (out-of-domain) strings of 1K, 2K,
4K, 8K: at 1.4B and lr 5e-5, Imbalanced 99.6 / 26.8 / 0.0 / 0.0 with RoPE against 100.0 / 100.0 / 92.0 / 61.8 with
2D-RoPE (Table 5; Recursive-Flip 15.5 / 4.9 / 0 / 0 against 66.0 / 54.4 / 26.6 / 1.8).

Here: one zoo model (``--model``, SmolLM2-135M) fine-tuned twice from the same weights with the same batches,

- ``rope``: unchanged;
- ``rope2d``: every layer's RoPE tables replaced through the intervention layer's ``rope`` site (``interp.hooks.edit``)
  by 2D-RoPE's (``interp.rope.variants.Rope2D``: row = line breaks before the token, column = offset in its line;
  row half of the planes first, both halves at ``beta_j = theta ** (-4 j / d_head)``), with ``theta = --rope2d-base``
  (1000, 000 Table 4's 2D-RoPE theta; ``0``: the layer's own base), for every row of a batch (``rope2d``);

on the copy task in 000's format: a template of App. N (uniformly drawn, the 13 with a line break before the string
and the 7 without), the Imbalanced string ``s`` as one token per bit (``0`` / ``1``: single tokens in SmolLM2's
tokenizer, as in 000's Llama-2 tokenizer), the chat template, ``s`` again and the end-of-text token; the loss on the
copied ``s`` and the end token (000 App. D; ``interp.lab.copy_task``'s distributions). Test: whole-string exact
match, teacher forced (every argmax of the copy and the end token right, the same event as greedy decoding;
``interp.lab.copy_task.copy_correct``), on ``--eval`` strings per bin of Imbalanced and Recursive-Flip strings with
lengths uniform in ``(f L / 2, f L]`` for ``f`` in ``--factors`` (1, 2, 4, 8) and ``L = --train-max``: the same
strings and templates for both models; 95% percentile bootstrap intervals over strings, and of the paired difference
2D-RoPE minus RoPE.

Where this differs from 000: 135M parameters, not 1.4B; 2D-RoPE swapped in at fine-tuning on RoPE-pretrained weights
(000 pretrains each model with its own encoding: here the model must adapt in the fine-tuning itself); ``--steps``
(400) steps of 64 strings (26K examples, not 200K) of 1..``--train-max`` (256) bits, not 1K, so the tests at
256-2048 bits are 1x-8x the fine-tuning length as 000's 1K-8K, but they stay inside SmolLM2's 8192-token pretraining
context (000's 8K strings are 8x its 2K context); bf16 autocast on a GPU; one seed. The script's ``verdict``:
``reproduced`` (the difference's interval lies above 0 at every length beyond ``L``, both distributions), ``in
part`` (at some), ``not reproduced`` (at none), ``no copier in range`` (neither model reaches 0.9 exact match on
Imbalanced strings at 1x: 000's fine-tuned models all exceed 0.97 there, and 0.9 is the lab curriculum's "copies
them" level). The claims table reads a ``reproduced`` here as "reproduced in part" (model size, the swap).

**Size.** Sized for one device call of at most 8 minutes on an H100 (``device_check.sh copy_finetune``, not yet timed).
A step of 64 strings pads to about 550 tokens (35K tokens); at about 0.8 GFLOP per token for SmolLM2-135M
(6 x 106M non-embedding parameters, the tied head on the targets only, attention at 550 tokens) that is 28 TFLOP. At
an assumed 200 TFLOP/s in bf16 (a fifth of the H100's peak: width 576 keeps the matmuls small; the project's measured
Llama-3.1-8B forward reaches 530 TFLOP/s, ``figures/gpu_scan.csv``) a step takes 0.14 s; at a pessimistic 150K tokens
per second (plain transformers, no fused kernels) 0.23 s. So the 2 x 400 steps take 2 to 3 minutes; the tests (2 x
1.2M tokens of forward) and the one model load (both fine-tunings start from a copy of its weights) well under one
more. The tables are written after each model, so a run stopped by the step's time limit keeps the RoPE model's.

Writes ``copy_finetune_strings.csv`` (``pe, distribution, factor, length, template, correct``), ``copy_finetune.csv``
(``pe`` = rope, rope2d or ``rope2d-rope`` (the paired difference), ``distribution, factor, length_lo, length_hi,
strings, exact_match, lo, hi``) and ``copy_finetune_verdict.csv`` (``verdict``, each model's in-range exact match,
final loss and training seconds, the settings).

    python -m analyses.p000_copy.copy_finetune [--model smollm2-135m] [--steps 400] [--batch 64] [--lr 5e-5]
        [--train-max 256] [--factors 1,2,4,8] [--eval 100] [--rope2d-base 1000] [--device auto] [--quick] [--out DIR]

Full mode needs a CUDA GPU unless ``--device cpu`` is given; ``--quick`` (tiny-llama, 8-bit strings, 20 steps)
checks the script on a CPU in seconds.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import torch

import interp
from interp.experiments.stats import bootstrap_interval
from interp.hooks.edit import Edit, edit
from interp.hooks.intervene import variant_tables
from interp.lab import TrainConfig, train_model
from interp.lab.copy_task import sample_strings
from interp.models.arch import rope_specs
from interp.rope import RopeSpec, default_inv_freq
from interp.rope.variants import Rope2D, newline_token_ids

from analyses._common import one_thread, parser
from analyses.benchmarks._device import length_factors, pick_device

PES = ("rope", "rope2d")
DISTRIBUTIONS = ("imbalanced", "recursive_flip")
IN_RANGE = 0.9
CHAT = "### user:\n{input}\n\n### assistant:\n"  # 000 App. N's chat template, up to its {output}
TEMPLATES = (  # 000 App. N, verbatim: the first 13 put a line break before the string, the last 7 do not
    "Please echo the next sequence verbatim (no extra text). Here it is:\n{s}",
    "Copy the text below exactly as-is (keep every character):\n{s}",
    "Task: return the string shown below. Do not add or remove anything.\n{s}",
    "Print the following content exactly, unchanged. Output only the content:\n{s}",
    "Write the following string exactly as it is:\n{s}",
    "I want you to say the following string and nothing else:\n{s}",
    "Say the following string exactly as it is:\n{s}",
    "Here is a string:\n{s}\n\nPlease print the string exactly as it is.",
    "I will give you a string. You need to repeat it exactly as it is. Here it is:\n{s}",
    "{s}\n\nPlease print the above string exactly as it is.",
    "{s}\n\nCan you write out the above string and nothing else.",
    "Can you copy a string of characters? Here is the string I want you to copy:\n{s}",
    "Repeat this string and say nothing else:\n{s}",
    "Repeat the following string after me (output only the string): {s}",
    "Echo this sequence exactly (no extra characters): {s}",
    "Return the exact same string and nothing else -> {s}",
    "Copy-paste the following payload exactly as written: {s}",
    "Output EXACTLY the string below, unchanged: {s}",
    'Just say "{s}" and nothing else.',
    "Say '{s}' and say nothing else.",
)
SETTINGS = ("model", "steps", "batch", "lr", "train_max", "rope2d_base", "seed", "device")


@dataclass(frozen=True)
class CopyFormat:
    """000's copy prompt in one tokenizer's ids: ``[bos] pre_t s post_t s eos`` for template ``t``.

    Attributes:
        bits: the ids of ``"0"`` and ``"1"``. eos: the end token (a target). pad: the right-padding id.
        bos: ``[bos]`` where the tokenizer adds one by default, else ``[]``.
        pre, post: per template, the ids of the text before and after ``{s}`` (the chat template's user turn and the
            assistant header included).
    """

    bits: tuple[int, int]
    eos: int
    pad: int
    bos: tuple[int, ...]
    pre: tuple[tuple[int, ...], ...]
    post: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, tokenizer) -> "CopyFormat":
        """The format in ``tokenizer``'s ids.

        Raises:
            ValueError: ``"0"`` or ``"1"`` is not a single token, or the tokenizer has no end-of-text token.
        """
        bits = [tokenizer("0" + c, add_special_tokens=False).input_ids for c in "01"]
        if any(len(b) != 2 or b[0] != bits[0][0] for b in bits):
            raise ValueError("copy_finetune needs one token per bit ('0' and '1' single tokens that do not merge); "
                             "this tokenizer merges them: pick a model with digit-level tokens")
        if tokenizer.eos_token_id is None:
            raise ValueError("copy_finetune needs an end-of-text token (the copy's last target); this tokenizer has none")
        ids = tokenizer("x").input_ids
        bos = (ids[0],) if tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id else ()
        pre, post = [], []
        for t in TEMPLATES:
            a, b = CHAT.format(input=t).split("{s}")
            pre.append(tuple(tokenizer(a, add_special_tokens=False).input_ids))
            post.append(tuple(tokenizer(b, add_special_tokens=False).input_ids))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return cls((bits[0][0], bits[1][1]), int(tokenizer.eos_token_id), int(pad), bos, tuple(pre), tuple(post))

    def encode(self, strings: list[np.ndarray], templates: list[int]) -> dict[str, torch.Tensor]:
        """``input_ids`` ``[batch, pos]`` (right-padded with ``pad``) and ``loss_mask`` ``[batch, pos]`` (True on the
        copied bits and the end token), the convention of ``interp.lab.train_model``."""
        bit = np.asarray(self.bits, dtype=np.int64)
        rows, marks = [], []
        for s, t in zip(strings, templates):
            head = [*self.bos, *self.pre[t], *bit[np.asarray(s)], *self.post[t]]
            rows.append(head + [*bit[np.asarray(s)], self.eos])
            marks.append(len(head))
        T = max(len(r) for r in rows)
        ids = torch.full((len(rows), T), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), T), dtype=torch.bool)
        for i, (r, m) in enumerate(zip(rows, marks)):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, m: len(r)] = True
        return {"input_ids": ids, "loss_mask": mask}


def rope2d_tables(spec: RopeSpec, tokens: torch.Tensor, newline_ids: tuple[int, ...], base: float = 0.0,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)``, each ``[batch, pos, rotary_dim]``: 2D-RoPE's tables (000 Sec. 4.1) of every row of ``tokens``
    ``[batch, pos]`` (``interp.hooks.intervene.variant_tables`` of ``Rope2D`` per row), at ``theta = base`` (0: the
    layer's own frequencies; else ``beta_j = base ** (-4 j / d_head)``, 000 Table 4's ``theta_x = theta_y``)."""
    if base:
        spec = RopeSpec(default_inv_freq(base, spec.d_head), spec.scaling, spec.pairing)
    variant = Rope2D(newline_ids)
    pos = torch.arange(tokens.shape[1], device=tokens.device)
    tabs = [variant_tables(spec, variant, pos, row) for row in tokens]
    return torch.stack([c for c, _ in tabs]), torch.stack([s for _, s in tabs])


@contextmanager
def rope2d(model, newline_ids: tuple[int, ...], base: float = 0.0) -> Iterator[None]:
    """Inside the block every forward of ``model`` (a ``LoadedModel``; any batch size, training included) runs with
    2D-RoPE (``rope2d_tables``) in every layer, through ``rope`` site edits. The tokens come from the input ids of the
    forward (``EditContext.tokens`` of the ``rope`` site, so ``hf(...)`` and ``hf.base_model(...)`` both work); the
    tables are computed once per forward and layer spec. The model is as before on exit.

    Raises:
        ValueError: at a forward, no ``input_ids`` (2D positions need the tokens).
    """
    cache: dict = {}

    def fn_of(spec: RopeSpec) -> Callable:
        key = (tuple(spec.inv_freq.tolist()), spec.scaling, spec.pairing)

        def fn(cos, sin, ctx):
            ids = ctx.tokens
            if not isinstance(ids, torch.Tensor):
                raise ValueError("2D-RoPE needs the forward's input_ids (rows and columns come from the line breaks)")
            if cache.get("ids") is not ids:
                cache.clear()
                cache["ids"] = ids
            if key not in cache:
                cache[key] = rope2d_tables(spec, ids, newline_ids, base)
            c, s = cache[key]
            return c.to(cos.dtype), s.to(sin.dtype)
        return fn

    try:
        with edit(model, *(Edit(("rope", l), "fn", fn_of(spec)) for l, spec in enumerate(rope_specs(model.hf)))):
            yield
    finally:
        cache.clear()


def target_logits(hf, ids: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """``[n_targets, vocab]``: the logits that predict each target token (``tgt`` ``[batch, pos - 1]``: True where the
    token at ``t + 1`` is a target), from the output embedding applied to those positions' final hidden states only
    (a full ``[batch, pos, vocab]`` would dominate memory at 49K ids; families without a final logit soft-cap)."""
    h = hf.base_model(input_ids=ids, use_cache=False).last_hidden_state
    return hf.get_output_embeddings()(h[:, :-1][tgt])


def copy_loss(model, batch: dict) -> torch.Tensor:
    """``train_model`` loss of an HF causal LM: mean cross-entropy of the copied bits and the end token."""
    ids, tgt = batch["input_ids"], batch["loss_mask"][:, 1:]
    return torch.nn.functional.cross_entropy(target_logits(model, ids, tgt).float(), ids[:, 1:][tgt])


def rows_correct(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """``[batch]`` bool: every target of the row predicted by the argmax of its ``target_logits`` (whole-string exact
    match, teacher forced: ``interp.lab.copy_task.copy_correct`` on the target rows only)."""
    ids, tgt = batch["input_ids"], batch["loss_mask"][:, 1:]
    wrong = logits.argmax(-1).cpu() != ids[:, 1:][tgt]
    rows = tgt.nonzero()[:, 0]
    return torch.bincount(rows[wrong], minlength=ids.shape[0]) == 0


@torch.no_grad()
def exact_match(logits_fn: Callable, fmt: CopyFormat, strings: list[np.ndarray], templates: list[int],
                tokens: int = 65536) -> np.ndarray:
    """``[len(strings)]`` bool: whole-string exact match of each string under its template. ``logits_fn(ids, tgt)``
    returns ``target_logits``; strings go in batches of at most ``tokens`` padded tokens, longest first."""
    order = np.argsort([-len(s) for s in strings], kind="stable")
    out = np.zeros(len(strings), dtype=bool)
    i = 0
    while i < len(order):
        width = 2 * len(strings[order[i]]) + 64
        idx = order[i: i + max(1, tokens // width)]
        batch = fmt.encode([strings[k] for k in idx], [templates[k] for k in idx])
        out[idx] = rows_correct(logits_fn(batch["input_ids"], batch["loss_mask"][:, 1:]), batch).numpy()
        i += len(idx)
    return out


def eval_strings(args) -> list[dict]:
    """The test set, the same for both models: per distribution and factor ``f``, ``args.eval`` strings of lengths
    uniform in ``(f L / 2, f L]`` and a uniform template each (seeded by distribution and factor)."""
    out = []
    for d, dist in enumerate(DISTRIBUTIONS):
        for f in args.factors:
            rng = np.random.default_rng([args.seed, 1000 + d, f])
            lo, hi = f * args.train_max // 2 + 1, f * args.train_max
            for s in sample_strings(dist, args.eval, lo, hi, rng):
                out.append({"distribution": dist, "factor": f, "length_lo": lo, "length_hi": hi, "bits": s,
                            "template": int(rng.integers(len(TEMPLATES)))})
    return out


def finetune_and_test(pe: str, model, init: dict, args, fmt: CopyFormat, newline_ids: tuple[int, ...], tests: list[dict],
                      ) -> tuple[np.ndarray, dict]:
    """Fine-tune ``model`` from its pretrained weights ``init`` (a state dict) with encoding ``pe`` and test it:
    ``(correct [len(tests)], meta)``."""
    model.hf.load_state_dict(init)
    cuda = args.device.startswith("cuda")
    n_t = len(TEMPLATES)

    def batch_fn(step: int, rng: np.random.Generator) -> dict:
        return fmt.encode(sample_strings("imbalanced", args.batch, 1, args.train_max, rng),
                          [int(t) for t in rng.integers(n_t, size=args.batch)])

    cfg = TrainConfig(steps=args.steps, lr=args.lr, warmup=min(100, args.steps // 10), weight_decay=0.1, betas=(0.9, 0.95),
                      min_lr_frac=0.0, clip=1.0, seed=args.seed, log_every=0 if args.quick else 50)
    ctx = rope2d(model, newline_ids, args.rope2d_base) if pe == "rope2d" else contextlib.nullcontext()
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else one_thread()  # small CPU ops: one thread (analyses._common)
    t0 = time.perf_counter()
    with ctx, amp:
        losses = train_model(model.hf, batch_fn, cfg, loss_fn=copy_loss)
        secs = time.perf_counter() - t0
        dev = model.device
        correct = exact_match(lambda ids, tgt: target_logits(model.hf, ids.to(dev), tgt.to(dev)), fmt,
                              [t["bits"] for t in tests], [t["template"] for t in tests], args.eval_tokens)
    print(f"{pe}: loss {np.mean(losses[-20:]):.4f}, fine-tuned in {secs:.0f} s, tested in {time.perf_counter() - t0 - secs:.0f} s",
          flush=True)
    return correct, {"final_loss": float(np.mean(losses[-20:])), "train_seconds": round(secs, 1)}


def summarise(strings: pd.DataFrame, boot: int) -> pd.DataFrame:
    """``copy_finetune.csv`` from ``copy_finetune_strings.csv``: exact match per model, distribution and length bin with
    its 95% bootstrap interval over strings, and the paired difference ``rope2d - rope`` over the same strings."""
    rows = []
    keys = ["distribution", "factor", "length_lo", "length_hi"]
    for k, g in strings.groupby(keys, sort=False):
        wide = g.pivot(index="string", columns="pe", values="correct").astype(float)
        vals = {pe: wide[pe].to_numpy() for pe in PES if pe in wide}
        if len(vals) == 2:
            vals["rope2d-rope"] = vals["rope2d"] - vals["rope"]
        lo, hi = bootstrap_interval(np.stack(list(vals.values())), boot)
        for j, (pe, v) in enumerate(vals.items()):
            rows.append({"pe": pe, **dict(zip(keys, k)), "strings": len(v), "exact_match": float(v.mean()),
                         "lo": float(lo[j]), "hi": float(hi[j])})
    return pd.DataFrame(rows)


def verdict(summary: pd.DataFrame) -> str:
    """The script's verdict word (module docstring) from ``summarise``'s table."""
    s = summary.set_index(["pe", "distribution", "factor"])
    if max(s.loc[(pe, "imbalanced", 1), "exact_match"] for pe in PES) < IN_RANGE:
        return "no copier in range"
    diff = summary[(summary.pe == "rope2d-rope") & (summary.factor > 1)]
    better = diff["lo"] > 0
    return "reproduced" if better.all() else "in part" if better.any() else "not reproduced"


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = parser(__doc__, "tiny-llama, strings of 1-8 bits, 20 steps of 8, tests at 1x and 2x, on the CPU (seconds)")
    ap.add_argument("--model", default="smollm2-135m", help="a zoo model with one token per bit and d_head divisible by 4")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=64, help="strings per step (000: 64)")
    ap.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (000's main value)")
    ap.add_argument("--train-max", type=int, default=256, help="longest fine-tuning string, bits (000: 1K tokens)")
    ap.add_argument("--factors", default="1,2,4,8", help="test bins (f L / 2, f L] for these f (1 first)")
    ap.add_argument("--eval", type=int, default=100, help="test strings per bin and distribution")
    ap.add_argument("--eval-tokens", type=int, default=65536, help="padded tokens per test forward")
    ap.add_argument("--rope2d-base", type=float, default=1000.0, help="2D-RoPE theta (000 Table 4: 1000); 0: the model's own base")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto (a GPU where there is one), cpu or cuda")
    args = ap.parse_args(argv)
    if args.quick:
        args.model, args.steps, args.batch, args.train_max, args.factors = "tiny-llama", 20, 8, 8, "1,2"
        args.eval, args.boot, args.device, args.lr = 8, 200, "cpu", 1e-3
    args.factors = length_factors(ap, args.factors, "--train-max (the fine-tuning range)")
    if args.train_max < 2 or args.steps < 1 or args.batch < 1 or args.eval < 2:
        ap.error("--train-max must be >= 2, --steps and --batch >= 1, --eval >= 2")
    if not pick_device(ap, args, "copy_finetune"):
        return pd.DataFrame()
    model = interp.load_model(args.model, device=args.device)
    try:
        fmt = CopyFormat.of(model.tokenizer)
    except ValueError as e:
        ap.error(f"--model {args.model}: {e}")
    if model.card.d_head % 4:
        ap.error(f"--model {args.model}: d_head {model.card.d_head} is not divisible by 4 (2D-RoPE splits the planes into rows and columns)")
    newline_ids = newline_token_ids(model.tokenizer)
    init = {k: v.detach().clone() for k, v in model.hf.state_dict().items()}  # both fine-tunings start from these weights
    tests = eval_strings(args)
    t0 = time.perf_counter()
    per, meta = [], {}
    for pe in PES:
        correct, meta[pe] = finetune_and_test(pe, model, init, args, fmt, newline_ids, tests)
        per += [{"pe": pe, "string": i, "distribution": t["distribution"], "factor": t["factor"], "length_lo": t["length_lo"],
                 "length_hi": t["length_hi"], "length": len(t["bits"]), "template": t["template"], "correct": bool(c)}
                for i, (t, c) in enumerate(zip(tests, correct))]
        strings = pd.DataFrame(per)  # written after each model: a run stopped by its time limit keeps the first
        summary = summarise(strings, args.boot)
        strings.to_csv(args.out / "copy_finetune_strings.csv", index=False)
        summary.to_csv(args.out / "copy_finetune.csv", index=False)
    s = summary.set_index(["pe", "distribution", "factor"])
    row = {"verdict": verdict(summary), "claim": "000f", "in_range": IN_RANGE, "newline_ids": len(newline_ids),
           **{f"{pe}_{k}": v for pe in PES for k, v in meta[pe].items()},
           **{f"{pe}_in_range": float(s.loc[(pe, "imbalanced", 1), "exact_match"]) for pe in PES},
           **{k: getattr(args, k) for k in SETTINGS}}
    out = pd.DataFrame([row])
    out.to_csv(args.out / "copy_finetune_verdict.csv", index=False)
    print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"verdict: {row['verdict']} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


if __name__ == "__main__":
    main()
