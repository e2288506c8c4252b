"""The lab decoder: each position encoding against an independent formula, and interp's tools on lab models."""

from __future__ import annotations

import math

import pytest
import torch

import interp
from interp.attention import attention_pattern
from interp.errors import UnsupportedModelError
from interp.lab import PES, LabConfig, LabForCausalLM, TrainConfig, Vocab, alibi_slopes, lab_loaded, lm_loss, load_lab, pad_batch, save_lab, train_model
from interp.rope import RopeSpec, default_inv_freq, rotate, rotate_variant
from interp.rope.variants import PartialRope, Rope2D, RopeID
from interp.measures.slash import slash_from_pattern

VOCAB = Vocab(["0", "1", "<\\n>", "<O:>", "<EOS>"])
NL = VOCAB.id("<\\n>")


def build(pe: str, n_layers: int = 2, seed: int = 0, **kw) -> LabForCausalLM:
    cfg = LabConfig(vocab_size=len(VOCAB), n_layers=n_layers, n_heads=4, d_model=32, d_mlp=64, pe=pe, newline_ids=(NL,),
                    max_positions=256, **kw)
    torch.manual_seed(seed)
    m = LabForCausalLM(cfg).eval()
    with torch.no_grad():  # larger q/k than the 0.02 init so that patterns are far from uniform
        for layer in m.model.layers:
            layer.self_attn.q_proj.weight.mul_(30)
            layer.self_attn.k_proj.weight.mul_(30)
    return m


def tokens(n: int, seed: int = 0, newlines: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(3, len(VOCAB), (n,), generator=g)
    if not newlines:
        t[t == NL] = VOCAB.id("0")
    return t


def reference_qk(m: LabForCausalLM, toks: torch.Tensor, layer: int = 0):
    """Pre-RoPE q, k ``[pos, head, d]`` of a layer written out from the weights (layer 0: embeddings in)."""
    assert layer == 0
    x = m.model.embed_tokens(toks[None])
    if m.config.pe == "learned":
        x = x + m.model.embed_positions(torch.arange(toks.numel()))[None]
    attn = m.model.layers[0].self_attn
    h = m.model.layers[0].input_layernorm(x)[0]
    d = m.config.proj_dim
    return attn.q_proj(h).view(-1, 4, d), attn.k_proj(h).view(-1, 4, d)


def model_pattern(m: LabForCausalLM, toks: torch.Tensor) -> list[torch.Tensor]:
    cap = interp.capture(lab_loaded(m, VOCAB), toks, patterns=True)
    return cap


@pytest.mark.parametrize("pe", ["rope", "nope", "learned", "partial", "rope-id"])
def test_layer0_pattern_equals_rotation_written_out(pe):
    """The model's own eager attention of layer 0 == softmax of interp.rope-rotated q.k from the weights."""
    m = build(pe)
    toks = tokens(40)
    cap = model_pattern(m, toks)
    with torch.no_grad():
        q, k = reference_qk(m, toks)
        base = RopeSpec(default_inv_freq(1e4, 8))
        freq = {"rope": base.inv_freq, "nope": torch.zeros(4), "learned": torch.zeros(4),
                "partial": PartialRope(0.25).frequencies(base).float(), "rope-id": RopeID().frequencies(base).float()}[pe]
        spec, pos = RopeSpec(freq), torch.arange(40)
        ref = attention_pattern(rotate(q, pos, spec), rotate(k, pos, spec), 1 / math.sqrt(8))
    assert torch.allclose(cap.patterns[0], ref, atol=1e-5)
    assert torch.allclose(cap.q_pre[0], q, atol=1e-5)  # pre-RoPE read back by undoing the model's tables


def test_rope2d_rotation_is_interp_rope2d_variant():
    """2D-RoPE lab tables == interp.rope.variants.Rope2D over the default spec (row half first, shared frequencies)."""
    m = build("rope2d", rope_base=100.0)
    toks = tokens(50)
    assert (toks == NL).sum() >= 3
    cap = model_pattern(m, toks)
    spec = RopeSpec(default_inv_freq(100.0, 8))
    ref = rotate_variant(cap.q_pre[0], torch.arange(50), spec, Rope2D((NL,)), tokens=toks)
    assert torch.allclose(cap.q_rot[0], ref, atol=1e-5)
    # a token's row/column, not its 1D position, set the angle: two tokens at the same (r, c) of different rows
    # differ only by the row rotation


def test_rope_is_shift_invariant_and_learned_is_not():
    """RoPE and NoPE attention depend on i - j only: an offset on all position ids leaves the logits unchanged."""
    toks = tokens(30)[None]
    off = torch.arange(30)[None] + 37
    for pe, invariant in [("rope", True), ("nope", True), ("alibi", True), ("learned", False)]:
        m = build(pe)
        with torch.no_grad():
            a, b = m(toks).logits, m(toks, position_ids=off).logits
        assert torch.allclose(a, b, atol=1e-4) == invariant, pe


def test_alibi_equals_explicit_bias():
    """The ALiBi plane gives softmax(scale q.k - m_h (i - j)) with an explicit bias matrix (Press et al. 2022)."""
    m = build("alibi")
    toks = tokens(40)
    cap = model_pattern(m, toks)
    with torch.no_grad():
        q, k = reference_qk(m, toks)
    i = torch.arange(40)
    bias = -alibi_slopes(4)[:, None, None] * (i[:, None] - i[None, :]).float()
    logits = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(8) + bias
    logits = logits.masked_fill(i[None, None, :] > i[None, :, None], float("-inf"))
    assert torch.allclose(cap.patterns[0], torch.softmax(logits, -1), atol=1e-5)
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))
    assert torch.allclose(alibi_slopes(4), torch.tensor([2.0 ** (-2 * (h + 1)) for h in range(4)]))


@pytest.mark.parametrize("pe", PES)
def test_scan_on_lab_model_matches_materialised_pattern(pe):
    """interp.scan's streaming slash scores == those of the model's own eager patterns; verify_attention passes."""
    m = build(pe)
    model = lab_loaded(m, VOCAB, name=f"lab-{pe}")
    toks = tokens(48)
    assert interp.verify_attention(model, toks).attrs["ok"]
    cap = interp.capture(model, toks, patterns=True)
    res = interp.scan(model, [toks])
    for layer in range(2):
        ref = slash_from_pattern(cap.patterns[layer].double())[:, :5]
        assert torch.allclose(res.scores[layer, :, :5], ref, atol=1e-5)
    heads = res.heads
    assert len(heads) == 8 and heads["slash_score"].notna().all()


def test_explicit_positions_checked_and_padding_harmless():
    m = build("learned")
    with pytest.raises(ValueError, match="max_positions"):
        m(tokens(4)[None], position_ids=torch.tensor([[0, 1, 2, 400]]))
    with pytest.raises(ValueError, match="shape"):
        m(tokens(4)[None], position_ids=torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown pe"):
        LabConfig(pe="sinusoidal")
    t = tokens(20)[None]
    padded = torch.cat([t, torch.zeros(1, 7, dtype=torch.long)], 1)
    with torch.no_grad():
        assert torch.allclose(m(t).logits, m(padded).logits[:, :20], atol=1e-6)


def test_lm_loss_is_masked_next_token_cross_entropy():
    m = build("rope")
    batch = pad_batch([VOCAB.encode(["0", "1", "1", "<EOS>"]), VOCAB.encode(["1", "<EOS>"])],
                      [[False, False, True, True], [False, True]])
    with torch.no_grad():
        logp = torch.log_softmax(m(batch["input_ids"]).logits, -1)
        ids = batch["input_ids"]
        ref = -(logp[0, 1, ids[0, 2]] + logp[0, 2, ids[0, 3]] + logp[1, 0, ids[1, 1]]) / 3
        assert torch.allclose(lm_loss(m, batch), ref, atol=1e-6)


def test_training_learns_a_lag_one_lookup_deterministically():
    """Triples (b, c, b) of random bits: the last b is predicted at c, which only a head reading lag 1 can do.

    Training reaches near-zero loss, and the trained model's own attention at those queries sits on lag 1
    (a real property of the task: the query token c carries no information about b).
    """
    def batch_fn(step, rng):
        bits = rng.integers(0, 2, size=(16, 8, 2)) + 3
        seqs = [[1] + [int(t) for b, c in row for t in (b, c, b)] for row in bits]
        flags = [[False] + [j % 3 == 2 for j in range(24)] for _ in bits]
        return pad_batch(seqs, flags)

    cfg = TrainConfig(steps=150, lr=3e-3, warmup=10, seed=1)
    a, b = build("rope", n_layers=1, seed=3), build("rope", n_layers=1, seed=3)
    la, lb = train_model(a, batch_fn, cfg), train_model(b, batch_fn, cfg)
    assert la == lb  # seeded
    assert sum(la[-10:]) / 10 < 0.05 < sum(la[:10]) / 10
    model = lab_loaded(a, VOCAB)
    seqs = batch_fn(0, __import__("numpy").random.default_rng(9))["input_ids"]
    A = interp.capture(model, seqs[0], patterns=True).patterns[0]
    q = torch.arange(2, 25, 3)  # the c positions
    assert A[:, q, q - 1].max(0).values.mean() > 0.9
    heads = interp.scan(model, list(seqs)).heads
    assert heads.loc[heads["slash_score"].idxmax(), "slash_delta"] == 1  # the scan names that head's lag


def test_save_load_round_trip_through_load_model(tmp_path):
    m = build("rope2d", rope_base=100.0)
    save_lab(m, VOCAB, tmp_path / "lab")
    m2, v2 = load_lab(tmp_path / "lab")
    assert v2 == VOCAB
    loaded = interp.load_model(f"local:{tmp_path / 'lab'}")  # through the interp.models entry point
    t = tokens(30)[None]
    with torch.no_grad():
        ref = m(t).logits
        assert torch.allclose(m2(t).logits, ref, atol=1e-6)
        assert torch.allclose(loaded.hf(t).logits, ref, atol=1e-6)
    assert loaded.card.family == "Lab" and loaded.card.d_head == 8
    assert loaded.tokenizer("0 1 <\\n> <O:>")["input_ids"] == VOCAB.encode(["0", "1", "<\\n>", "<O:>"])
    with pytest.raises(UnsupportedModelError):
        loaded.bridge


def test_vocab_rejects_bad_symbols():
    for bad in (["a b"], ["<pad>"], ["x", "x"], [""]):
        with pytest.raises(ValueError):
            Vocab(bad)
    with pytest.raises(KeyError, match="unknown symbol"):
        VOCAB.id("2")
    assert VOCAB.decode(VOCAB.encode(["<O:>", "1"])) == ["<O:>", "1"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_training_on_a_gpu_follows_the_cpu_run():
    """``train_model`` on a model moved to CUDA: the batch function's CPU tensors go to the GPU, and the losses of a
    short run follow the CPU run's (float32 kernels differ in their last bits, so close, not equal)."""
    def batch_fn(step, rng):
        bits = rng.integers(0, 2, size=(16, 8, 2)) + 3
        seqs = [[1] + [int(t) for b, c in row for t in (b, c, b)] for row in bits]
        return pad_batch(seqs, [[False] + [j % 3 == 2 for j in range(24)] for _ in bits])

    cfg = TrainConfig(steps=20, lr=3e-3, warmup=5, seed=1)
    cpu, gpu = build("rope", n_layers=1, seed=3), build("rope", n_layers=1, seed=3).cuda()
    la, lb = train_model(cpu, batch_fn, cfg), train_model(gpu, batch_fn, cfg)
    assert next(gpu.parameters()).is_cuda
    assert max(abs(x - y) for x, y in zip(la, lb)) < 1e-3
