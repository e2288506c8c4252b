"""A byte-level language-modelling task on text shipped with Python, with a passkey (needle) retrieval probe.

Paper 001 (Sec. 5) trains RoPE-ID and RoPE decoders on web text and tests them beyond the training length
on retrieval benchmarks (RULER, LongBench). The lab's small analogue:

- **Text**: the Python language reference (``interp.corpus.pydoc_text``: topics in sorted order), UTF-8
  bytes. The last 10% of the bytes are held out (``split_text``), so the NLL is measured on text the
  model never saw.
- **Vocabulary** (``BYTE_VOCAB``): the 256 byte values (printable ASCII ``!``..``~`` as themselves, other
  bytes as ``<0xNN>``; id = byte + 3), then the ten passkey symbols ``<k0>``..``<k9>`` and the marker
  ``<needle>``; ids 0..2 are ``<pad> <bos> <unk>``.
- **Passkey sequence** (``passkey_sequence``) of length ``n``: ``<bos>``, haystack text, at a depth
  ``<needle> k_1 .. k_K``, more haystack, and at the end ``<needle> k_1 .. k_K`` again. The key symbols
  ``k`` are drawn uniformly from the ten ``<kD>`` symbols, which occur nowhere else, so the answer can only
  come from the needle. **Passkey accuracy** (``passkey_accuracy``): the share of sequences whose last
  ``K`` tokens are all predicted exactly, i.e. the argmax of the logits at position ``t - 1`` equals the
  token at ``t`` for each of the ``K`` answer positions (teacher forcing). That is the same event as greedy
  decoding of the ``K`` symbols after the final ``<needle>`` reproducing the key exactly; chance is
  ``10 ** -K`` for a model that knows only that a key symbol comes next.
- **Training batches** (``lm_batch_fn``): random windows of ``n`` tokens (``<bos>`` + ``n - 1`` bytes) of the
  training text; a share ``passkey_frac`` of the rows is made into passkey sequences; every position is a
  target (next-token loss).

Imports ``interp.corpus`` (a leaf) and the lab's vocabulary.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from jaxtyping import Float, Int

from interp.corpus import pydoc_text, stdlib_text
from interp.lab.vocab import BOS, Vocab

OFFSET = 3  # byte b has id b + OFFSET
KEY_SYMBOLS = tuple(f"<k{d}>" for d in range(10))
NEEDLE = "<needle>"


def _byte_symbol(b: int) -> str:
    return chr(b) if 33 <= b <= 126 else f"<0x{b:02X}>"


BYTE_VOCAB = Vocab([_byte_symbol(b) for b in range(256)] + list(KEY_SYMBOLS) + [NEEDLE])
KEY_IDS = np.array([BYTE_VOCAB.id(s) for s in KEY_SYMBOLS])
NEEDLE_ID = BYTE_VOCAB.id(NEEDLE)


def encode_text(text: str) -> np.ndarray:
    """``[bytes]`` int64 token ids of ``text`` (UTF-8 bytes + 3)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64) + OFFSET


def decode_ids(ids) -> str:
    """Text of byte token ids (other ids are written as their symbols)."""
    out, buf = [], bytearray()
    for i in (int(x) for x in ids):
        if OFFSET <= i < OFFSET + 256:
            buf.append(i - OFFSET)
        else:
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            out.append(BYTE_VOCAB.decode([i])[0])
    out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)


TEXT_CORPORA = ("pydoc", "stdlib")  # the text corpora of split_text


def split_text(corpus: str = "pydoc", held_out: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` byte ids of a text corpus: ``"pydoc"`` (``interp.corpus.pydoc_text``: topics sorted by name,
    joined by blank lines; 465k bytes) or ``"stdlib"`` (``interp.corpus.stdlib_text``: the standard library's source,
    about 11 MB). ``test`` is the last ``held_out`` share of the bytes (46k of pydoc's at 0.1), ``train`` the rest.

    Raises:
        ValueError: ``held_out`` outside (0, 1), or another corpus.
    """
    if not 0 < held_out < 1:
        raise ValueError(f"held_out must lie in (0, 1) (the share of the text kept for evaluation), got {held_out}")
    if corpus not in TEXT_CORPORA:
        raise ValueError(f"unknown text corpus {corpus!r}; use {' or '.join(TEXT_CORPORA)}")
    ids = encode_text(pydoc_text() if corpus == "pydoc" else stdlib_text())
    cut = int(round(len(ids) * (1 - held_out)))
    return ids[:cut], ids[cut:]


def text_windows(ids: np.ndarray, n: int, m: int, rng: np.random.Generator) -> Int[torch.Tensor, "batch pos"]:
    """``[m, n]`` windows ``<bos>`` + ``n - 1`` consecutive bytes from random offsets of ``ids``.

    Raises:
        ValueError: ``ids`` shorter than a window.
    """
    if len(ids) < n:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than a window of {n}; use shorter windows")
    start = rng.integers(0, len(ids) - (n - 1) + 1, m)
    body = np.stack([ids[s: s + n - 1] for s in start])
    return torch.as_tensor(np.concatenate([np.full((m, 1), BOS), body], 1), dtype=torch.long)


def disjoint_windows(ids: np.ndarray, n: int, m: int) -> Int[torch.Tensor, "batch pos"]:
    """``[m, n]`` windows ``<bos>`` + the ``m`` first non-overlapping ``n - 1``-byte stretches of ``ids`` (evaluation).

    Raises:
        ValueError: ``ids`` holds fewer than ``m`` such stretches (the message gives how many it holds).
    """
    if m * (n - 1) > len(ids):
        raise ValueError(f"the text holds {len(ids) // (n - 1)} windows of {n - 1} bytes, {m} asked for; ask for fewer")
    body = ids[: m * (n - 1)].reshape(m, n - 1)
    return torch.as_tensor(np.concatenate([np.full((m, 1), BOS), body], 1), dtype=torch.long)


def passkey_sequence(haystack: np.ndarray, key: np.ndarray, depth: int) -> np.ndarray:
    """``[n]`` ids: ``<bos>``, ``haystack[:depth]``, ``<needle> key``, the rest of the haystack, ``<needle> key``.

    Args:
        haystack: ``[n - 2 len(key) - 3]`` text ids (``n`` the sequence length).
        key: ``[K]`` passkey ids (``KEY_IDS`` entries).
        depth: haystack tokens before the needle, ``0 <= depth <= len(haystack)``.

    Raises:
        ValueError: ``depth`` outside the haystack.
    """
    if not 0 <= depth <= len(haystack):
        raise ValueError(f"needle depth {depth} outside 0..{len(haystack)}")
    needle = np.concatenate([[NEEDLE_ID], key])
    return np.concatenate([[BOS], haystack[:depth], needle, haystack[depth:], needle]).astype(np.int64)


def passkey_batch(ids: np.ndarray, n: int, m: int, rng: np.random.Generator, k: int = 4) -> Int[torch.Tensor, "batch pos"]:
    """``[m, n]`` passkey sequences: haystacks from random offsets of ``ids``, keys of ``k`` uniform key symbols,
    needle depth uniform over the haystack (``0 .. n - 2k - 3``).

    Raises:
        ValueError: ``n < 2 k + 4`` (no room for a haystack) or ``ids`` shorter than one haystack.
    """
    h = n - 2 * k - 3
    if h < 1:
        raise ValueError(f"a passkey sequence of {n} tokens has no room for a haystack with a {k}-symbol key; need n >= {2 * k + 4}")
    if len(ids) < h:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than a haystack of {h}")
    start = rng.integers(0, len(ids) - h + 1, m)
    keys = KEY_IDS[rng.integers(0, 10, (m, k))]
    depth = rng.integers(0, h + 1, m)
    return torch.as_tensor(np.stack([passkey_sequence(ids[s: s + h], keys[i], int(depth[i])) for i, s in enumerate(start)]))


def repeat_rows(alphabet: np.ndarray, n: int, m: int, rng: np.random.Generator) -> Int[torch.Tensor, "batch pos"]:
    """``[m, n]`` rows ``<bos>, r, r`` (the second copy cut to fit) with r ``n // 2`` ids drawn uniformly from
    ``alphabet``: sequences only an induction head can predict (the second copy), the synthetic data on which
    small models form induction heads (Olsson et al. 2022, Sec. 3; TransformerLens' repeated-token test)."""
    r = alphabet[rng.integers(0, len(alphabet), (m, n // 2))]
    return torch.as_tensor(np.concatenate([np.full((m, 1), BOS), r, r], 1)[:, :n], dtype=torch.long)


def lm_batch_fn(ids: np.ndarray, n: int, batch: int, passkey_frac: float = 0.25, k: int = 4, repeat_frac: float = 0.0):
    """A ``train_model`` batch function: ``batch`` rows of ``n`` tokens, ``round(passkey_frac * batch)`` of them passkey
    sequences (the last rows), ``round(repeat_frac * batch)`` repeated random sequences (``repeat_rows`` over the ids
    that occur in ``ids``; before the passkey rows), the rest text windows; ``loss_mask`` marks every position >= 1,
    ``answer_mask`` the last ``k`` positions of the passkey rows (for ``lm_passkey_loss``).

    Raises:
        ValueError: ``passkey_frac`` or ``repeat_frac`` outside [0, 1], or the two together above one batch.
    """
    for name, frac in (("passkey_frac", passkey_frac), ("repeat_frac", repeat_frac)):
        if not 0 <= frac <= 1:
            raise ValueError(f"{name} must lie in [0, 1], got {frac}")
    n_key, n_rep = int(round(passkey_frac * batch)), int(round(repeat_frac * batch))
    if n_key + n_rep > batch:
        raise ValueError(f"passkey_frac {passkey_frac} and repeat_frac {repeat_frac} ask for more than the {batch} rows of a batch")
    alphabet = np.unique(ids) if n_rep else None  # once: ids can hold millions of bytes

    def fn(step: int, rng: np.random.Generator) -> dict:
        rows = [text_windows(ids, n, batch - n_key - n_rep, rng)] if batch > n_key + n_rep else []
        if n_rep:
            rows.append(repeat_rows(alphabet, n, n_rep, rng))
        if n_key:
            rows.append(passkey_batch(ids, n, n_key, rng, k))
        x = torch.cat(rows)
        mask = torch.ones_like(x, dtype=torch.bool)
        mask[:, 0] = False
        answer = torch.zeros_like(mask)
        answer[batch - n_key:, -k:] = True
        return {"input_ids": x, "loss_mask": mask, "answer_mask": answer}
    return fn


def lm_passkey_loss(model, batch: dict) -> torch.Tensor:
    """``train_model`` loss: mean next-token cross-entropy over ``loss_mask`` plus the mean over ``answer_mask`` (the
    passkey answers; 0 when there are none), from one forward. The answers are 1-2% of the tokens; the second term
    gives retrieval a gradient of the same size as language modelling.

    Raises:
        KeyError: a batch without ``answer_mask`` (use ``lm_batch_fn``).
    """
    ids = batch["input_ids"]
    logits = model(input_ids=ids).logits[:, :-1].float()
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view(ids.shape[0], -1)
    lm = ce[batch["loss_mask"][:, 1:]].mean()
    ans = batch["answer_mask"][:, 1:]
    return lm + (ce[ans].mean() if ans.any() else 0.0)


@torch.no_grad()
def token_nll(model, input_ids: Int[torch.Tensor, "batch pos"], batch_size: int = 8) -> Float[torch.Tensor, "batch pos"]:
    """``[batch, pos - 1]`` float64 next-token negative log-likelihood (nats): entry ``t - 1`` is
    ``-log p(x_t | x_<t)`` from the logits at ``t - 1`` (one forward per ``batch_size`` rows, on the model's device;
    the result on the CPU)."""
    out = []
    dev = next(model.parameters(), torch.empty(0)).device
    for s in range(0, len(input_ids), batch_size):
        x = input_ids[s: s + batch_size].to(dev)
        logp = torch.log_softmax(model(input_ids=x).logits[:, :-1].double(), -1)
        out.append(-logp.gather(-1, x[:, 1:, None])[..., 0].cpu())
    return torch.cat(out)


@torch.no_grad()
def passkey_accuracy(model, input_ids: Int[torch.Tensor, "batch pos"], k: int = 4, batch_size: int = 8) -> tuple[float, float]:
    """``(exact, per_symbol)``: share of sequences whose last ``k`` tokens all equal the argmax of the logits one
    position earlier (module docstring: the same event as greedy decoding of the key), and share of the
    ``batch * k`` answer symbols predicted so.

    Args:
        model: a causal LM returning ``.logits`` ``[batch, pos, vocab]``.
        input_ids: ``[batch, pos]`` passkey sequences (``passkey_batch``), the answer in the last ``k`` tokens.

    Raises:
        ValueError: ``k < 1`` or sequences of at most ``k`` tokens.
    """
    if k < 1 or input_ids.shape[1] <= k:
        raise ValueError(f"need k >= 1 answer tokens and longer sequences, got k={k}, pos={input_ids.shape[1]}")
    hits = []
    for s in range(0, len(input_ids), batch_size):
        x = input_ids[s: s + batch_size]
        pred = model(input_ids=x).logits[:, -k - 1:-1].argmax(-1)
        hits.append(pred == x[:, -k:])
    h = torch.cat(hits)
    return float(h.all(1).double().mean()), float(h.double().mean())


def chance_exact(k: int = 4) -> float:
    """Exact-match accuracy of a model that picks key symbols uniformly: ``10 ** -k``."""
    return math.pow(10.0, -k)
