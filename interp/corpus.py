"""Prompt sources that ship with Python: real text, real code, and random tokens.

- ``pydoc``: the Python language reference (``pydoc_data.topics.topics``, ~465k characters), topics
  joined in sorted order.
- ``stdlib``: the standard library's own ``.py`` source files, in sorted path order.
- ``random``: token ids drawn i.i.d. uniformly from the vocabulary (special tokens excluded), the OOD
  prompts of paper 004, Sec. 3.1.

Text prompts are non-overlapping windows of exactly ``n_tokens`` tokens of the tokenised source,
chosen by a seeded permutation; where the model's tokenizer adds BOS (Gemma-3) the window is
preceded by BOS and counts it. The same (model, corpus, n_prompts, n_tokens, seed) always gives
the same prompts.

Leaf module: needs only a tokenizer-like object (``LoadedModel`` qualifies).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch

from interp.errors import PromptError

CORPORA = ("pydoc", "stdlib", "random", "repeated-random")


def pydoc_text() -> str:
    """The Python language reference text shipped with every CPython (``pydoc_data.topics``)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def stdlib_files() -> list[Path]:
    """Standard-library ``.py`` files (no site-packages, no tests), sorted by path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("site-packages", "test", "tests", "idlelib", "lib2to3")
    return sorted(p for p in root.rglob("*.py") if not any(part in skip for part in p.relative_to(root).parts))


def _stdlib_file_text(path: Path) -> str:
    """One stdlib file as the ``stdlib`` corpus holds it: a ``# file: NAME`` line, the source, a blank line."""
    return f"# file: {path.name}\n" + path.read_text(encoding="utf-8", errors="replace") + "\n\n"


def stdlib_text() -> str:
    """The whole ``stdlib`` corpus as one string (about 11 MB on CPython 3.11): every file of ``stdlib_files``."""
    return "".join(_stdlib_file_text(p) for p in stdlib_files())


def _text_tokens(tokenizer, corpus: str, need: int) -> list[int]:
    """Token ids of a text corpus; stops reading stdlib files once ``need`` tokens are there."""
    if corpus == "pydoc":
        return tokenizer(pydoc_text(), add_special_tokens=False)["input_ids"]
    ids: list[int] = []
    for path in stdlib_files():
        ids += tokenizer(_stdlib_file_text(path), add_special_tokens=False)["input_ids"]
        if len(ids) >= need:
            break
    return ids


def prompts(model, corpus: str = "pydoc", n_prompts: int = 8, n_tokens: int = 1024, seed: int = 0, *,
            beyond_context: bool = False, repeats: int = 2) -> torch.Tensor:
    """``[prompt, pos]`` int64 token ids, each prompt exactly ``n_tokens`` long.

    Args:
        model: a ``LoadedModel`` (its tokenizer, card and BOS rule are used).
        corpus: ``"pydoc"``, ``"stdlib"``, ``"random"`` or ``"repeated-random"`` (BOS, then random tokens r of length
            ``ceil(body / repeats)`` repeated ``repeats`` times, the last copy cut to fit: induction heads' test input,
            TransformerLens' and RazorAttention's, which uses four copies).
        n_prompts, n_tokens: how many prompts and tokens each (BOS included where the model adds one).
        seed: selects the windows (text) or draws the tokens (random).
        beyond_context: allow ``n_tokens`` above the model's context (for length sweeps).
        repeats: copies of r in ``"repeated-random"`` (2: BOS, r, r).

    Raises:
        PromptError: unknown corpus, ``n_tokens`` above the model's context, non-positive sizes, or
            more tokens asked for than the corpus holds (the message gives the corpus size).
    """
    if corpus not in CORPORA:
        raise PromptError(f"unknown corpus {corpus!r}; choose one of {', '.join(CORPORA)}")
    card = model.card
    if n_prompts < 1 or n_tokens < 2:
        raise PromptError(f"need at least 1 prompt of at least 2 tokens; got {n_prompts} x {n_tokens}")
    if n_tokens > card.context_length and not beyond_context:
        raise PromptError(
            f"{n_tokens} tokens exceed the context of {card.name} ({card.context_length}); use --tokens {card.context_length} or fewer"
        )
    bos = model.bos_token_id
    body = n_tokens - (bos is not None)
    gen = torch.Generator().manual_seed(seed)
    if corpus in ("random", "repeated-random"):
        if repeats < 1 or (corpus == "repeated-random" and repeats > body):
            raise PromptError(f"--repeats must lie in 1..{body} for {n_tokens} tokens; got {repeats}")
        special = set(getattr(model.tokenizer, "all_special_ids", []))
        vocab = min(card.vocab_size, len(model.tokenizer))
        allowed = torch.tensor([i for i in range(vocab) if i not in special])
        width = -(-body // repeats) if corpus == "repeated-random" else body
        out = allowed[torch.randint(0, allowed.numel(), (n_prompts, width), generator=gen)]
        if corpus == "repeated-random":
            out = out.repeat(1, repeats)[:, :body]
    else:
        ids = _text_tokens(model.tokenizer, corpus, n_prompts * body)
        n_windows = len(ids) // body
        if n_windows < n_prompts:
            raise PromptError(
                f"corpus {corpus!r} holds {len(ids):,} tokens for {card.name}: {n_windows} windows of {body}, "
                f"but {n_prompts} prompts were asked for; ask for fewer prompts or tokens"
                + (", or use --corpus stdlib (larger)" if corpus == "pydoc" else "")
            )
        order = torch.randperm(n_windows, generator=gen)[:n_prompts].sort().values
        t = torch.tensor(ids[: n_windows * body], dtype=torch.long).view(n_windows, body)
        out = t[order]
    if bos is not None:
        out = torch.cat([torch.full((n_prompts, 1), bos, dtype=torch.long), out], dim=1)
    return out
