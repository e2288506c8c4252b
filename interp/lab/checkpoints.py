"""Train a small byte-level language model and save checkpoints with their training log: the input of
``interp trajectory`` (issue 49).

One command::

    python -m interp.lab.checkpoints runs/induction --steps 300 --save-every 50
    interp trajectory runs/induction --out out/trajectory

The model (``interp.lab``): a ``--layers``-layer RoPE decoder (``--heads`` heads, ``--d-model`` wide, SwiGLU MLP of
``4 d_model``) trained with AdamW (``--lr`` 3e-3, 50 warmup steps at most a quarter of ``--steps``, cosine to a
tenth, weight decay 0.1, betas 0.9 / 0.95) on batches of ``--batch`` windows of ``--length`` tokens of ``--corpus``
(``interp.lab.text_lm.split_text``: the first 90%), a share ``--repeat-frac`` of them repeated random sequences
(``<bos>, r, r``; ``interp.lab.text_lm.lm_batch_fn``), on which small models form induction heads within a few
hundred steps (the positive control of ``analyses/emergence/induction_text.py``: layer-1 induction heads at steps
109-144 of 3 seeds, with 3 layers and windows of 256).

Written into the folder: ``step-S/`` at step 0, every ``--save-every`` steps and at the last step (``save_lab``:
``interp.load_model("local:OUT/step-S")`` reads each; written under a temporary name, then renamed, so a stopped run
leaves whole checkpoints only), and ``train_log.csv`` (``interp.experiments.trajectory.TRAIN_LOG``: columns
``step, loss``, the training loss of every optimiser step in nats per token; rewritten atomically at each
checkpoint), which ``interp trajectory`` reads for its loss panel and ``train_loss`` column. Quiet: one line per
checkpoint, no progress bars.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pandas as pd
import torch
import typer

from interp.errors import ConfigError, InterpError

__all__ = ["train_checkpoints", "main"]


def train_checkpoints(out: str | Path, *, steps: int = 300, save_every: int = 50, layers: int = 3, heads: int = 4,
                      d_model: int = 64, length: int = 256, batch: int = 16, repeat_frac: float = 0.25,
                      corpus: str = "pydoc", lr: float = 3e-3, seed: int = 0, device: str = "cpu",
                      log=print) -> pd.DataFrame:
    """Train a byte-level RoPE decoder (module docstring) and save ``out/step-S/`` checkpoints and ``out/train_log.csv``.

    Args:
        out: the run's folder (created; must not hold checkpoints already).
        steps: AdamW steps. save_every: steps between checkpoints (step 0 and the last step are always saved).
        layers, heads, d_model: the decoder's depth, heads per layer and residual width (``d_model / heads`` even).
        length: tokens per training window (``<bos>`` included). batch: windows per step.
        repeat_frac: share of each batch's windows that are repeated random sequences (0: text only).
        corpus: ``pydoc`` or ``stdlib`` (``interp.lab.text_lm.split_text``). device: ``cpu`` or ``cuda``.
        log: called with one line per checkpoint (``print``; ``None``: silent).

    Returns:
        The training log: ``[step, loss]``, one row per optimiser step (nats per target token).

    Raises:
        ConfigError: a bad size, count or fraction, an unknown corpus or device, or ``out`` already holding ``step-*``
            folders.
        PathError: ``out`` is not a folder that can be created or written (``interp.io.check_output_dir``).
    """
    from interp import io
    from interp.experiments.trajectory import TRAIN_LOG
    from interp.lab import LabConfig, LabForCausalLM, TrainConfig, lm_loss, save_lab, train_model
    from interp.lab import text_lm

    _check(steps=steps, save_every=save_every, layers=layers, heads=heads, d_model=d_model, length=length, batch=batch)
    if not 0 <= repeat_frac <= 1:
        raise ConfigError(f"--repeat-frac must lie in [0, 1], got {repeat_frac:g}")
    if corpus not in text_lm.TEXT_CORPORA:
        raise ConfigError(f"--corpus {corpus!r}: use {' or '.join(text_lm.TEXT_CORPORA)}")
    if device not in ("cpu", "cuda") or (device == "cuda" and not torch.cuda.is_available()):
        raise ConfigError(f"--device {device!r}: use cpu, or cuda where a GPU and a CUDA build of torch are present")
    if d_model % heads or (d_model // heads) % 2:
        raise ConfigError(f"--d-model {d_model} must split into {heads} heads of an even width (e.g. --d-model {4 * heads})")
    out = io.check_output_dir(out, "the run folder")
    if out.is_dir() and any(out.glob("step-*")):
        raise ConfigError(f"{out} already holds checkpoints (step-*/): give a new folder, or remove them first")

    train, _ = text_lm.split_text(corpus)
    torch.manual_seed(seed)
    model = LabForCausalLM(LabConfig(vocab_size=len(text_lm.BYTE_VOCAB), n_layers=layers, n_heads=heads, d_model=d_model,
                                     d_mlp=4 * d_model, max_positions=length, pe="rope")).to(device)
    losses: list[tuple[int, float]] = []
    saves = set(range(0, steps + 1, save_every)) | {steps}
    t0 = time.perf_counter()

    def checkpoint(step: int, m: torch.nn.Module, loss: float | None) -> None:
        if loss is not None:
            losses.append((step, loss))
        if step not in saves:
            return
        final, tmp = out / f"step-{step}", out / f".step-{step}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        save_lab(m, text_lm.BYTE_VOCAB, tmp)
        os.replace(tmp, final)
        frame = pd.DataFrame(losses, columns=["step", "loss"])
        io.write_atomic(out / TRAIN_LOG, lambda p: frame.to_csv(p, index=False))
        if log is not None:
            shown = f"loss {loss:.3f}" if loss is not None else "untrained"
            log(f"step {step}/{steps}: {shown}, saved {final} ({time.perf_counter() - t0:.0f} s)")

    out.mkdir(parents=True, exist_ok=True)
    train_model(model, text_lm.lm_batch_fn(train, length, batch, passkey_frac=0.0, repeat_frac=repeat_frac),
                TrainConfig(steps=steps, lr=lr, warmup=min(50, steps // 4), weight_decay=0.1, betas=(0.9, 0.95), seed=seed),
                loss_fn=lm_loss, callbacks=[checkpoint])
    return pd.DataFrame(losses, columns=["step", "loss"])


def _check(**values: int) -> None:
    for name, v in values.items():
        if v < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {v}")


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def main(
    out: Path = typer.Argument(..., help="the run's folder (created): step-S/ checkpoints and train_log.csv go in it"),
    steps: int = typer.Option(300, help="AdamW steps"),
    save_every: int = typer.Option(50, "--save-every", help="steps between checkpoints (step 0 and the last are always saved)"),
    layers: int = typer.Option(3, help="decoder layers"),
    heads: int = typer.Option(4, help="heads per layer"),
    d_model: int = typer.Option(64, "--d-model", help="residual width (d_model / heads even)"),
    length: int = typer.Option(256, help="tokens per training window (<bos> included)"),
    batch: int = typer.Option(16, help="windows per step"),
    repeat_frac: float = typer.Option(0.25, "--repeat-frac", help="share of each batch that is repeated random sequences "
                                      "(<bos>, r, r: induction heads form on them); 0: text only"),
    corpus: str = typer.Option("pydoc", help="training text: pydoc (Python's language reference) | stdlib (its source)"),
    lr: float = typer.Option(3e-3, help="peak learning rate"),
    seed: int = typer.Option(0, help="seeds the weights and the batches"),
    device: str = typer.Option("cpu", help="cpu | cuda"),
) -> None:
    """Train a small byte-level RoPE decoder and save checkpoints (OUT/step-S/) with their training log
    (OUT/train_log.csv), for interp trajectory OUT: python -m interp.lab.checkpoints OUT --steps 300 --save-every 50."""
    from rich.markup import escape

    from interp.cli.common import console, fail

    try:
        t0 = time.perf_counter()
        log = train_checkpoints(out, steps=steps, save_every=save_every, layers=layers, heads=heads, d_model=d_model,
                                length=length, batch=batch, repeat_frac=repeat_frac, corpus=corpus, lr=lr, seed=seed,
                                device=device, log=lambda line: console.print(escape(line), soft_wrap=True))
    except InterpError as err:
        fail(err)
    console.print(escape(f"{len(list(out.glob('step-*')))} checkpoints and train_log.csv ({len(log)} steps) in {out}, "
                         f"{time.perf_counter() - t0:.0f} s; next: interp trajectory {out} --out {out}/trajectory"), soft_wrap=True)


if __name__ == "__main__":
    app(prog_name="python -m interp.lab.checkpoints")
