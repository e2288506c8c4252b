"""Retrieval heads at decode time: needle-in-a-haystack copying read from each head's top-1 attention.

Definition (Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context Factuality", arXiv 2404.15574,
code ``nightdessert/Retrieval_Head``, ``retrieval_head_detection.py``: ``retrieval_calculate``, ``decode``,
``evaluate_and_log``). A needle sentence is placed in a haystack at a chosen depth; a question about it
follows; the model answers greedily with its KV cache. At every decode step ``s`` the query is the token
fed at that step (the prompt's last token at step 0, then each generated token) and ``g_s`` is the token the
step produces. Head ``(l, h)`` *copies* at step ``s`` when its top-1 attended key position ``j`` (``top_k = 1``;
with ``top_k > 1`` any of its ``k`` largest, counted once) lies in the needle span ``[start, end)`` and the
prompt holds ``g_s`` there (``prompt[j] == g_s``). Per trial, the head's score is
``#copy steps / (end - start)`` (the reference adds ``1 / (needle_end - needle_start)`` per copy; nothing caps
it at 1). A trial counts only if the model itself retrieved the answer: ROUGE-1 recall of the answer in the
response ``> 0.5`` (the reference's ``score > 50``); the head's **retrieval score** is the mean of its trial
scores over those trials (the reference's ``np.mean`` over ``head_counter``). The reference prefills the
prompt without its last token and decodes from that token, so the last prompt token's query is scored too;
this module does the same. It decodes at most 50 tokens and stops after a token holding a newline (the
reference's ``'<0x0A>'`` / id 144 test) or an end-of-sequence token.

What differs here, and why:

- haystack: windows of the Python language reference (``interp.corpus.pydoc_text``), not Paul Graham's
  essays; needle: a seeded random sentence ``"The secret code of the <adjective> <animal> is <w1> <w2> <w3>
  <w4>."`` with the question ``"What is the secret code of the <adjective> <animal>?"`` and the answer
  ``"<w1> <w2> <w3> <w4>"`` (random common words: the model cannot guess them, it must copy); the prompt is
  the reference's non-chat one, ``context + "\\nBased on the content of the document, Question: <q>\\nAnswer:"``
  (``template="chat"``: the tokenizer's chat template around ``<document>...</document>`` and the same question,
  as the reference does for its chat models).
- the prompt is assembled from token ids (prefix, haystack before, needle, haystack after, question), so the
  needle span is known exactly; the reference re-tokenises the text and finds the span by a >90% token-set
  overlap. ``length`` counts every prompt token (BOS and question included); the needle is inserted after the
  last token ending in ``.`` at or before ``depth x`` the haystack (the reference's period rule), and the depth
  it actually got is reported (``needle_depth``).
- ROUGE-1 recall is computed here without the ``rouge_score`` package: lower-cased ``[a-z0-9]+`` words, clipped
  unigram counts, no Porter stemming (the answers are fixed lists of plain words, so stemming rarely matters).
- the score is also given over all trials (``retrieval_score_all``), so a model that rarely copies still shows
  which heads point at the source; the reference keeps only retrieved trials.
- no key positions are excluded (unlike the slash scores' sink positions 0..3): a head whose top-1 is a sink
  simply does not copy at that step.

Attention at decode time is the model's own: ``interp.models.taps`` hands every layer's call, with the query
of the single new token ``[1, head, d_head]`` and the cached keys ``[K, kv_head, d_head]`` (post-RoPE). The
probabilities are recomputed exactly for that one row (``decode_probs``: the model's scale and soft-cap, the
GQA mapping ``h -> h // (n_heads / n_kv_heads)``, the sliding window; a sliding layer's cache holds only the
last ``K`` positions, so cache slot ``m`` is absolute position ``pos - (K - 1) + m``); the layer's output is the
model's normal attention. The tests hold these rows to the materialised pattern of the whole sequence.

Imports ``interp.hooks``, ``interp.attention``, ``interp.corpus``, ``interp.errors``, ``interp.experiments.units``.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int

from interp.attention import expand_kv
from interp.errors import ConfigError, PromptError, ShapeError
from interp.experiments.units import keep_units, read_pickle, write_pickle

SOURCE = "Wu et al. 2024 (arXiv 2404.15574), nightdessert/Retrieval_Head retrieval_head_detection.py"
QUESTION = "\nBased on the content of the document, Question: {question}\nAnswer:"
TEMPLATES = ("auto", "plain", "chat")

_ADJECTIVES = ["red", "green", "blue", "silver", "golden", "quiet", "brave", "tiny", "giant", "sleepy", "happy",
               "purple", "ancient", "clever", "wild", "frozen"]
_ANIMALS = ["fox", "owl", "whale", "tiger", "rabbit", "falcon", "turtle", "panda", "wolf", "dolphin", "camel",
            "parrot", "otter", "badger", "lizard", "heron"]
_WORDS = ["apple", "river", "candle", "mountain", "window", "garden", "pencil", "harbor", "violin", "castle", "blanket",
          "meadow", "lantern", "bicycle", "compass", "orchard", "kettle", "island", "ribbon", "thunder", "saddle",
          "marble", "forest", "ladder", "pepper", "rocket", "anchor", "basket", "cabbage", "desert", "feather", "glacier",
          "hammer", "jungle", "kitten", "lemon", "mirror", "needle", "ocean", "pillow", "quilt", "sunset", "teapot",
          "tunnel", "wagon", "yogurt", "zipper", "copper"]


@dataclass(frozen=True)
class Needle:
    """A needle sentence, the question that asks for it and the answer the model should copy (all plain text)."""

    sentence: str
    question: str
    answer: str


def random_needle(seed: int, n_words: int = 4) -> Needle:
    """A seeded random needle: ``"The secret code of the <adj> <animal> is <w1> ... <wn>."`` (module docstring)."""
    rng = random.Random(seed)
    owner = f"the {rng.choice(_ADJECTIVES)} {rng.choice(_ANIMALS)}"
    answer = " ".join(rng.sample(_WORDS, n_words))
    return Needle(f"The secret code of {owner} is {answer}.", f"What is the secret code of {owner}?", answer)


@dataclass(frozen=True)
class RetrievalConfig:
    """The needle-in-a-haystack grid and the scoring rule (defaults: the reference's rule, small lengths).

    Attributes:
        lengths: prompt lengths in tokens (everything: BOS, haystack, needle, question).
        depths: needle depths as fractions of the haystack, each in [0, 1].
        needles: random needles per (length, depth); needle ``n`` uses seed ``seed + n`` and its own haystack window.
        seed: base seed (needle words and haystack start).
        max_new_tokens: greedy decode budget (reference: 50).
        top_k: attended positions checked per head and step (reference: 1).
        gate: ROUGE-1 recall a trial needs to count in ``retrieval_score`` (reference: > 0.5).
        template: ``"plain"`` (the reference's non-chat prompt), ``"chat"`` (the tokenizer's chat template, as the
            reference does for its chat models) or ``"auto"`` (chat where the tokenizer has a template, else plain).
        stop_at_newline: stop after a generated token that holds a newline (the reference does).
    """

    lengths: tuple[int, ...] = (256, 512, 1024)
    depths: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    needles: int = 1
    seed: int = 0
    max_new_tokens: int = 50
    top_k: int = 1
    gate: float = 0.5
    template: str = "auto"
    stop_at_newline: bool = True

    def check(self, context_length: int | None = None) -> "RetrievalConfig":
        """Returns self; raises ConfigError with one line naming the bad field."""
        if not self.lengths or any(n < 16 for n in self.lengths):
            raise ConfigError(f"--lengths must be token counts of at least 16; got {list(self.lengths)}")
        if context_length is not None and max(self.lengths) + self.max_new_tokens > context_length:
            raise ConfigError(f"--lengths up to {max(self.lengths)} plus {self.max_new_tokens} generated tokens exceed the "
                              f"model's context ({context_length}); use lengths up to {context_length - self.max_new_tokens}")
        if not self.depths or any(not (0.0 <= d <= 1.0) for d in self.depths):
            raise ConfigError(f"--depths must be fractions in [0, 1] (e.g. 0.1,0.5,0.9); got {list(self.depths)}")
        if self.needles < 1 or self.max_new_tokens < 1 or self.top_k < 1:
            raise ConfigError(f"--needles, --max-new-tokens and --top-k must be >= 1; got {self.needles}, {self.max_new_tokens}, {self.top_k}")
        if not (0.0 <= self.gate < 1.0):
            raise ConfigError(f"--gate must lie in [0, 1); got {self.gate}")
        if self.template not in TEMPLATES:
            raise ConfigError(f"--template must be one of {', '.join(TEMPLATES)}; got {self.template!r}")
        return self


def needle_seeds(cfg: RetrievalConfig) -> frozenset[int]:
    """The needle seeds of ``cfg``'s trials: needle ``n`` uses seed ``cfg.seed + n`` for its words (``random_needle``)
    and ``cfg.seed * 1_000_003 + n`` for its haystack window (``build_trial``)."""
    return frozenset(range(cfg.seed, cfg.seed + cfg.needles))


def held_out(test: RetrievalConfig, selection: RetrievalConfig) -> RetrievalConfig:
    """``test`` moved to needles not used by ``selection``: its seed becomes the first seed after ``selection``'s
    needles, so every needle (words and haystack window) of the returned config is new.

    Selecting heads on some needles and testing the heads on the same needles inflates the effect (the heads are
    chosen for those trials); Wu et al. 2024 detect and mask on one needle task, issue 45 asks for held-out needles.
    Only seeds are changed; lengths, depths and the decode budget stay ``test``'s. The haystack windows start at other
    seeded positions of the same pydoc corpus, so they differ but may share text by chance.

    Returns:
        A ``RetrievalConfig`` with ``needle_seeds`` disjoint from ``needle_seeds(selection)``.
    """
    from dataclasses import replace

    return replace(test, seed=selection.seed + selection.needles) if needle_seeds(test) & needle_seeds(selection) else test


# ---------------------------------------------------------------------------------------------- decode-time attention

def decode_probs(query: Float[torch.Tensor, "1 head d_head"], key: Float[torch.Tensor, "K kv_head d_head"], scale: float,
                 window: int | None = None, softcap: float | None = None) -> Float[torch.Tensor, "head K"]:
    """Exact attention probabilities of one decode query over the cached keys (float32).

    The query sits at the last cache slot (lag ``K - 1 - m`` to slot ``m``); slots with lag ``>= window`` are masked
    (exactly 0); query head ``h`` reads kv head ``h // (n_heads // n_kv_heads)``.

    Raises:
        ShapeError: not one query, or head / d_head mismatch.
    """
    if query.dim() != 3 or query.shape[0] != 1 or key.dim() != 3 or key.shape[2] != query.shape[2] or query.shape[1] % key.shape[1]:
        raise ShapeError(f"decode_probs expects query [1, head, d_head] and key [K, kv_head, d_head]; "
                         f"got {tuple(query.shape)}, {tuple(key.shape)}")
    k = expand_kv(key.float(), query.shape[1])  # [K, head, d]
    s = torch.einsum("hd,khd->hk", query[0].float() * scale, k)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    K = key.shape[0]
    if window is not None:
        lag = torch.arange(K - 1, -1, -1, device=s.device)
        s = s.masked_fill(lag[None, :] >= window, float("-inf"))
    return torch.softmax(s, dim=-1)


@dataclass
class Decode:
    """One greedy decode with its attention read at every step.

    Attributes:
        prompt: ``[pos]`` prompt ids. generated: ``[step]`` generated ids (the stop token included).
        top: ``[step, layer, head, top_k]`` int64 absolute key positions of each head's largest probabilities at the
            step (query = the token fed: ``prompt[-1]`` at step 0, then ``generated[s - 1]``), largest first.
        probs: per step, per layer ``[head, pos + 1]`` probabilities over absolute positions (0 outside a sliding
            layer's cache); only with ``keep_probs``.
        seconds: wall-clock seconds (prefill + decode).
    """

    prompt: torch.Tensor
    generated: torch.Tensor
    top: torch.Tensor
    probs: list[list[torch.Tensor]] | None = None
    seconds: float = 0.0


def greedy_decode(model, prompt: Int[torch.Tensor, "pos"], max_new_tokens: int, *, top_k: int = 1,
                  stop: Callable[[int], bool] | None = None, keep_probs: bool = False) -> Decode:
    """Greedy decode with the KV cache on and every head's top-k attended positions recorded at each step.

    As the reference: prefill ``prompt[:-1]``, then feed ``prompt[-1]`` and each generated token one at a time; the
    token a step produces is the argmax of its logits. ``stop(token_id)`` ends the decode after that token.

    Args:
        model: ``interp.models.LoadedModel`` (any family ``interp.models.taps`` covers).
        prompt: ``[pos]`` token ids, at least 1.
        max_new_tokens: decode steps at most.
        top_k: positions kept per head and step.
        keep_probs: also keep every step's probabilities (``Decode.probs``; for tests and short prompts).

    Raises:
        PromptError: empty prompt. ShapeError: a cache longer than the sequence (batch > 1 or padding).
        UnsupportedModelError: see ``interp.models.arch.family``.
    """
    from interp.models.taps import AttentionCall, attention_taps

    prompt = torch.as_tensor(prompt, dtype=torch.long).flatten()
    if prompt.numel() < 1:
        raise PromptError("greedy_decode needs a prompt of at least one token")
    c = model.card
    L, H = c.n_layers, c.n_heads
    state = {"pos": -1}
    step_top = torch.zeros(L, H, top_k, dtype=torch.long)
    step_probs: list[torch.Tensor | None] = [None] * L

    def handler(call: AttentionCall):
        if call.query.shape[0] != 1 or state["pos"] < 0:
            return None  # prefill: the layer's normal attention, nothing read
        pos, K = state["pos"], call.key.shape[0]
        if K > pos + 1:
            raise ShapeError(f"layer {call.layer}: {K} cached keys for a query at position {pos} (batch 1, no padding expected)")
        p = decode_probs(call.query, call.key, call.scale, call.window, call.softcap)  # [head, K]
        k = min(top_k, K)
        idx = p.topk(k, dim=-1).indices + (pos - (K - 1))
        step_top[call.layer, :, :k] = idx.cpu()
        step_top[call.layer, :, k:] = -1
        if keep_probs:
            full = torch.zeros(H, pos + 1)
            full[:, pos + 1 - K:] = p.cpu()
            step_probs[call.layer] = full
        return None

    t0 = time.perf_counter()
    dev = model.device
    tops, gen, probs = [], [], []
    with torch.no_grad(), attention_taps(model, handler):
        past = None
        if prompt.numel() > 1:
            past = model.hf(prompt[None, :-1].to(dev), use_cache=True).past_key_values
        inp = prompt[-1:]
        for step in range(max_new_tokens):
            state["pos"] = prompt.numel() - 1 + step
            out = model.hf(inp[None].to(dev), past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = int(out.logits[0, -1].argmax())
            gen.append(nxt)
            tops.append(step_top.clone())
            if keep_probs:
                probs.append(list(step_probs))
            if stop is not None and stop(nxt):
                break
            inp = torch.tensor([nxt])
    return Decode(prompt, torch.tensor(gen, dtype=torch.long), torch.stack(tops), probs if keep_probs else None,
                  time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------------------- the rule

def copy_hits(top: Int[torch.Tensor, "step layer head k"], generated: Int[torch.Tensor, "step"],
              prompt: Int[torch.Tensor, "pos"], span: tuple[int, int]) -> torch.Tensor:
    """``[step, layer, head]`` bool: the head copies at the step (Wu et al.'s rule, module docstring).

    A hit: one of the head's top-k positions ``j`` (``-1`` = none) has ``start <= j < end`` and ``prompt[j] == generated[step]``.
    """
    start, end = span
    if not (0 <= start < end <= prompt.numel()):
        raise ShapeError(f"needle span {span} must lie inside the prompt (0..{prompt.numel()})")
    inside = (top >= start) & (top < end)
    src = prompt[top.clamp(0, prompt.numel() - 1)]
    return (inside & (src == generated[:, None, None, None])).any(-1)


def trial_scores(hits: torch.Tensor, span: tuple[int, int]) -> Float[torch.Tensor, "layer head"]:
    """One trial's score per head: ``#copy steps / needle length`` (float64)."""
    return hits.sum(0).double() / (span[1] - span[0])


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def rouge1_recall(reference: str, response: str) -> float:
    """ROUGE-1 recall: clipped unigram matches / reference words (lower-cased ``[a-z0-9]+`` words, no stemming)."""
    ref, got = Counter(_words(reference)), Counter(_words(response))
    n = sum(ref.values())
    return sum(min(c, got[w]) for w, c in ref.items()) / n if n else 0.0


# --------------------------------------------------------------------------------------------------------- prompts

@dataclass
class Trial:
    """One needle-in-a-haystack prompt: its ids, where the needle sits, and what it asks."""

    length: int
    depth: float
    needle_index: int
    needle: Needle
    ids: torch.Tensor
    span: tuple[int, int]
    hay_len: int
    needle_depth: float


def _split_template(model, template: str, question: str) -> tuple[list[int], list[int]]:
    """Token ids before and after the context: (prefix with BOS where the model adds one, question suffix)."""
    tok = model.tokenizer
    q = QUESTION.format(question=question)
    if template == "auto":
        template = "chat" if getattr(tok, "chat_template", None) else "plain"
    if template == "plain":
        before, after = "", q
    else:
        if not getattr(tok, "chat_template", None):
            raise ConfigError(f"{model.card.name}'s tokenizer has no chat template; use --template plain")
        mark = "\x00CONTEXT\x00"
        text = tok.apply_chat_template([{"role": "user", "content": f"<document>{mark}</document>{q}"}], tokenize=False,
                                       add_generation_prompt=True)
        before, after = text.split(mark)
    pre = tok(before, add_special_tokens=False)["input_ids"] if before else []
    bos = model.bos_token_id
    if bos is not None and (not pre or pre[0] != bos):
        pre = [bos] + pre
    return pre, tok(after, add_special_tokens=False)["input_ids"]


class _Haystack:
    """The pydoc token stream of a model, with each token's text (for the period rule), tokenised once."""

    def __init__(self, model):
        from interp.corpus import pydoc_text

        self.tok = model.tokenizer
        self.ids = self.tok(pydoc_text(), add_special_tokens=False)["input_ids"]

    def window(self, start: int, n: int) -> list[int]:
        if n > len(self.ids):
            raise PromptError(f"the pydoc haystack holds {len(self.ids):,} tokens; {n} were asked for")
        start = start % (len(self.ids) - n + 1)
        return self.ids[start:start + n]

    def ends_sentence(self, token_id: int) -> bool:
        return self.tok.decode([token_id]).rstrip().endswith(".")


def build_trial(model, hay: _Haystack, length: int, depth: float, needle_index: int, cfg: RetrievalConfig) -> Trial:
    """The prompt ids of one (length, depth, needle): prefix, haystack[:i], needle, haystack[i:], question.

    Raises:
        PromptError: the length leaves no room for a haystack.
    """
    needle = random_needle(cfg.seed + needle_index)
    pre, post = _split_template(model, cfg.template, needle.question)
    nid = model.tokenizer(" " + needle.sentence, add_special_tokens=False)["input_ids"]
    n_hay = length - len(pre) - len(nid) - len(post)
    if n_hay < 1:
        raise PromptError(f"length {length} leaves no room for a haystack (needle, question and template take "
                          f"{length - n_hay} tokens); use --lengths above {length - n_hay}")
    start = random.Random(cfg.seed * 1_000_003 + needle_index).randrange(len(hay.ids))
    h = hay.window(start, n_hay)
    ins = int(n_hay * depth)
    while ins > 0 and not hay.ends_sentence(h[ins - 1]):
        ins -= 1
    ids = pre + h[:ins] + nid + h[ins:] + post
    s = len(pre) + ins
    return Trial(length, depth, needle_index, needle, torch.tensor(ids, dtype=torch.long), (s, s + len(nid)), n_hay,
                 ins / n_hay)


# ------------------------------------------------------------------------------------------------------------ run

@dataclass
class RetrievalResult:
    """Scores of every head and the model's copy accuracy per trial.

    Attributes:
        heads: one row per (layer, head): ``layer, head, kv_head, retrieval_score`` (mean trial score over retrieved
            trials; NaN if none), ``retrieval_score_all`` (over all trials), ``hits`` / ``hits_all`` (copy steps
            summed over retrieved / all trials), ``trials_retrieved``, ``trials``.
        trials: one row per (length, depth, needle): ``length, depth, needle, needle_depth, needle_start, needle_end,
            needle_tokens, answer, response, rouge1_recall, retrieved, generated_tokens, copy_steps`` (steps whose
            token occurs in the needle: the most any head can copy), ``best_head_hits``, ``seconds``.
        config: the config used. seconds: total wall-clock seconds. meta: the model's name and the rule's source;
            ``partial`` (``"K of N trials"``) when the run was stopped early (``run_retrieval(stop_on=...)``).
        stopped: the exception that stopped the run early, else None.
    """

    heads: pd.DataFrame
    trials: pd.DataFrame
    config: RetrievalConfig
    seconds: float = 0.0
    meta: dict = field(default_factory=dict)
    stopped: BaseException | None = None

    @property
    def summary(self) -> pd.DataFrame:
        """Copy accuracy per (length, depth): mean ROUGE-1 recall, share of trials retrieved, trials."""
        g = self.trials.groupby(["length", "depth"])
        return g.agg(rouge1_recall=("rouge1_recall", "mean"), retrieved=("retrieved", "mean"),
                     trials=("retrieved", "size")).reset_index()


def _stopper(model, cfg: RetrievalConfig) -> Callable[[int], bool]:
    tok = model.tokenizer
    eos = {i for i in [tok.eos_token_id] if i is not None}
    gen_cfg = getattr(model.hf, "generation_config", None)
    extra = getattr(gen_cfg, "eos_token_id", None)
    eos |= set(extra if isinstance(extra, (list, tuple)) else [extra] if extra is not None else [])
    cache: dict[int, bool] = {}

    def stop(t: int) -> bool:
        if t not in cache:
            cache[t] = t in eos or (cfg.stop_at_newline and "\n" in tok.decode([t]))
        return cache[t]
    return stop


def run_retrieval(model, cfg: RetrievalConfig = RetrievalConfig(), *, progress: bool = False,
                  log: Callable[[str], None] = print, store=None,
                  stop_on: tuple[type[BaseException], ...] = ()) -> RetrievalResult:
    """Run the grid (lengths x depths x needles), greedy decode each prompt, and score every head.

    ``store``: a folder keeping each finished trial (``trial-LLLLLL-DDDDD-NNNN.pkl``: its ``trials`` row and its
    ``[layer, head]`` copy hits, written atomically and read back) from which finished trials are read back instead of
    decoded (``interp retrieval --resume``; each trial depends only on its length, depth and needle;
    ``interp.experiments.units.keep_units``). ``stop_on``: exception types (e.g. ``interp.cli.longrun.Interrupted``)
    that end the run early: the trial in flight is dropped (one stopped after its unit's rename counts) and the result
    covers the finished trials, with ``meta["partial"] = "K of N trials"`` and ``stopped`` set.

    Raises:
        ConfigError: a bad config (``RetrievalConfig.check``). PromptError: a length too short for needle and question.
    """
    cfg.check(model.card.context_length)
    c = model.card
    t0 = time.perf_counter()
    hay = _Haystack(model)
    stop = _stopper(model, cfg)
    trials = [(a, b, k) for a in cfg.lengths for b in cfg.depths for k in range(cfg.needles)]
    names = [f"trial-{a:06d}-{round(b * 10_000):05d}-{k:04d}.pkl" for a, b, k in trials]
    grid = dict(zip(names, trials))

    def compute(todo: list[str]):
        for name in todo:
            yield name, _trial(model, hay, stop, *grid[name], cfg, progress, log)

    got, stopped = keep_units(Path(store) if store is not None else None, names, compute, read_pickle, write_pickle,
                              stop_on=stop_on)
    done = [got[n] for n in names if n in got]  # a depth given twice: its trial twice, as the grid has it
    rows = [g["row"] for g in done]
    scores = [torch.as_tensor(g["hits"]) for g in done]
    gated = [r["retrieved"] for r in rows]
    n_all = len(cfg.lengths) * len(cfg.depths) * cfg.needles
    meta = {"model": c.name, "source": SOURCE}
    if stopped is not None:
        meta.update(partial=f"{len(rows)} of {n_all} trials", stopped_by=str(stopped))
        if not rows:
            return RetrievalResult(pd.DataFrame(), pd.DataFrame(), cfg, time.perf_counter() - t0, meta, stopped)
    heads = retrieval_table(torch.stack(scores), torch.tensor([r["needle_tokens"] for r in rows]), torch.tensor(gated),
                            c.n_heads, c.n_kv_heads)
    return RetrievalResult(heads, pd.DataFrame(rows), cfg, time.perf_counter() - t0, meta, stopped)


def _trial(model, hay: "_Haystack", stop, length: int, depth: float, n: int, cfg: RetrievalConfig, progress: bool,
           log: Callable[[str], None]) -> dict:
    """One trial of ``run_retrieval``: ``{"row": its trials row, "hits": [layer, head] copy hits}``."""
    trial = build_trial(model, hay, length, depth, n, cfg)
    d = greedy_decode(model, trial.ids, cfg.max_new_tokens, top_k=cfg.top_k, stop=stop)
    hits = copy_hits(d.top, d.generated, trial.ids, trial.span)
    response = model.tokenizer.decode(d.generated.tolist(), skip_special_tokens=True).strip()
    recall = rouge1_recall(trial.needle.answer, response)
    needle_ids = set(trial.ids[trial.span[0]:trial.span[1]].tolist())
    row = dict(length=length, depth=depth, needle=n, needle_depth=round(trial.needle_depth, 4),
               needle_start=trial.span[0], needle_end=trial.span[1],
               needle_tokens=trial.span[1] - trial.span[0], answer=trial.needle.answer, response=response,
               rouge1_recall=recall, retrieved=recall > cfg.gate, generated_tokens=len(d.generated),
               copy_steps=sum(t in needle_ids for t in d.generated.tolist()),
               best_head_hits=int(hits.sum(0).max()), seconds=round(d.seconds, 3))
    if progress:
        log(f"length {length} depth {depth:g} needle {n}: recall {recall:.2f}, {len(d.generated)} tokens, "
            f"{d.seconds:.1f} s: {ascii(response[:60])}")
    return {"row": row, "hits": hits.sum(0)}


def retrieval_table(hits: Int[torch.Tensor, "trial layer head"], needle_tokens: Int[torch.Tensor, "trial"],
                    retrieved: torch.Tensor, n_heads: int, n_kv_heads: int) -> pd.DataFrame:
    """Per-head table from per-trial copy-step counts (``RetrievalResult.heads``'s columns).

    ``retrieval_score`` = mean over retrieved trials of ``hits / needle_tokens`` (NaN with none retrieved);
    ``retrieval_score_all`` the same over every trial.
    """
    T, L, H = hits.shape
    per = hits.double() / needle_tokens.double()[:, None, None]
    r = retrieved.bool()
    score = per[r].mean(0) if r.any() else torch.full((L, H), float("nan"), dtype=torch.float64)
    group = n_heads // n_kv_heads
    layer, head = np.meshgrid(np.arange(L), np.arange(H), indexing="ij")
    return pd.DataFrame({"layer": layer.ravel(), "head": head.ravel(), "kv_head": head.ravel() // group,
                         "retrieval_score": score.numpy().ravel(), "retrieval_score_all": per.mean(0).numpy().ravel(),
                         "hits": hits[r].sum(0).numpy().ravel(), "hits_all": hits.sum(0).numpy().ravel(),
                         "trials_retrieved": int(r.sum()), "trials": T})


# ------------------------------------------------------------------------------------------------ masking (Wu et al.)

def greedy_answer(model, prompt: Int[torch.Tensor, "pos"], max_new_tokens: int,
                  stop: Callable[[int], bool] | None = None) -> torch.Tensor:
    """The tokens ``greedy_decode`` generates, without reading any attention: prefill ``prompt[:-1]``, feed
    ``prompt[-1]`` and then each generated token (KV cache on, only the last position through the LM head).

    Runs whatever forward hooks are active, so inside ``interp.hooks.heads.head_intervention`` it decodes the
    intervened model (Wu et al.'s masking test).

    Returns:
        ``[step]`` int64 generated ids (the stop token included).

    Raises:
        PromptError: empty prompt.
    """
    prompt = torch.as_tensor(prompt, dtype=torch.long).flatten()
    if prompt.numel() < 1:
        raise PromptError("greedy_answer needs a prompt of at least one token")
    dev, gen, past = model.device, [], None
    with torch.inference_mode():
        if prompt.numel() > 1:
            past = model.hf(prompt[None, :-1].to(dev), use_cache=True, logits_to_keep=1).past_key_values
        inp = prompt[-1:]
        for _ in range(max_new_tokens):
            out = model.hf(inp[None].to(dev), past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, int(out.logits[0, -1].argmax())
            gen.append(nxt)
            if stop is not None and stop(nxt):
                break
            inp = torch.tensor([nxt])
    return torch.tensor(gen, dtype=torch.long)


def masked_recall(model, cfg: RetrievalConfig, head_sets: dict[str, list[tuple[int, int]]], kind: str = "zero",
                  log: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Needle-in-a-haystack accuracy with sets of heads removed (Wu et al. 2024, Sec. 4 / Fig. 6: masking the top
    retrieval heads against as many random heads).

    Every set in ``head_sets`` (name -> ``(layer, head)`` pairs; an empty list: the unmodified model) runs every trial
    of ``cfg``'s grid (``build_trial``: the same prompts as ``run_retrieval``) under
    ``head_intervention(model, heads, kind)``, decoding greedily (``greedy_answer``); the answer's ROUGE-1 recall
    (``rouge1_recall``) is the accuracy.

    Returns:
        One row per (set, trial): ``set, length, depth, needle, needle_depth, rouge1_recall, response, seconds``.

    Raises:
        ConfigError: a bad config, an unknown ``kind`` or a head outside the grid. PromptError: a length too short.
    """
    from contextlib import nullcontext

    from interp.hooks.heads import check_kind, head_intervention

    cfg.check(model.card.context_length)
    check_kind(kind)
    hay = _Haystack(model)
    stop = _stopper(model, cfg)
    trials = [build_trial(model, hay, n, d, k, cfg) for n in cfg.lengths for d in cfg.depths for k in range(cfg.needles)]
    rows = []
    for name, heads in head_sets.items():
        ctx = head_intervention(model, heads, kind) if heads else nullcontext()
        with ctx:
            for tr in trials:
                t0 = time.perf_counter()
                gen = greedy_answer(model, tr.ids, cfg.max_new_tokens, stop)
                response = model.tokenizer.decode(gen.tolist(), skip_special_tokens=True).strip()
                rows.append(dict(set=name, length=tr.length, depth=tr.depth, needle=tr.needle_index,
                                 needle_depth=round(tr.needle_depth, 4), rouge1_recall=rouge1_recall(tr.needle.answer, response),
                                 response=response, seconds=round(time.perf_counter() - t0, 3)))
        if log:
            done = [r["rouge1_recall"] for r in rows if r["set"] == name]
            log(f"{model.card.name} {name}: recall {np.mean(done):.2f} over {len(done)} trials")
    return pd.DataFrame(rows)
