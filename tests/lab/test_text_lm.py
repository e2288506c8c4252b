"""The byte-level text task and passkey probe (interp.lab.text_lm), RoPE-ID's rescaled wavelengths and the length
temperature of the lab model, and analyses/p001_frayed/rope_id_lm.py in quick mode."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import interp
from interp.attention import attention_pattern
from interp.corpus import pydoc_text, stdlib_text
from interp.lab import LabConfig, LabForCausalLM, lab_loaded, lm_loss
from interp.lab import text_lm as T
from interp.rope import RopeSpec, rotate
from tests.conftest import load_script

ANALYSES = Path(__file__).resolve().parents[2] / "analyses"


class Oracle(torch.nn.Module):
    """Logits that put the maximum on a given "predicted next token" per position: ``pred[b, t]`` at position t."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, input_ids):
        pred = self.fn(input_ids)
        logits = torch.zeros(*input_ids.shape, len(T.BYTE_VOCAB))
        logits.scatter_(-1, pred[..., None], 1.0)
        return type("Out", (), {"logits": logits})()


def needle_reader(ids: torch.Tensor) -> torch.Tensor:
    """Predicts, after the i-th token of the final ``<needle> key``, the (i+1)-th token after the first ``<needle>``."""
    pred = torch.full_like(ids, 3)
    for b, row in enumerate(ids):
        first = int((row == T.NEEDLE_ID).nonzero()[0])
        last = int((row == T.NEEDLE_ID).nonzero()[-1])
        for t in range(last, len(row) - 1):
            pred[b, t] = row[first + 1 + t - last]
    return pred


def test_byte_vocab_and_round_trip():
    assert len(T.BYTE_VOCAB) == 3 + 256 + 10 + 1
    text = "def f(x):\n    return x ** 2  # é"
    ids = T.encode_text(text)
    assert ids.min() >= 3 and T.decode_ids(ids) == text
    assert T.BYTE_VOCAB.decode([T.encode_text("A")[0], T.encode_text(" ")[0]]) == ["A", "<0x20>"]


@pytest.mark.parametrize("corpus, text", [("pydoc", pydoc_text), ("stdlib", stdlib_text)])
def test_split_text_is_a_disjoint_90_10_cut_of_the_text(corpus, text):
    train, test = T.split_text(corpus)
    whole = T.encode_text(text())
    assert len(train) + len(test) == len(whole) and abs(len(test) / len(whole) - 0.1) < 1e-4
    assert np.array_equal(np.concatenate([train, test]), whole)
    with pytest.raises(ValueError, match="held_out"):
        T.split_text(corpus, 1.0)
    with pytest.raises(ValueError, match="use pydoc or stdlib"):
        T.split_text("wiki")


def test_passkey_sequence_layout():
    rng = np.random.default_rng(0)
    x = T.passkey_batch(T.encode_text(pydoc_text()[:5000]), 40, 16, rng, k=3)
    assert x.shape == (16, 40) and (x[:, 0] == 1).all()
    is_key = torch.isin(x, torch.as_tensor(T.KEY_IDS))
    assert (is_key.sum(1) == 6).all() and ((x == T.NEEDLE_ID).sum(1) == 2).all()
    assert (x[:, -4] == T.NEEDLE_ID).all() and is_key[:, -3:].all()
    first = (x == T.NEEDLE_ID).int().argmax(1)
    for b in range(16):  # the key after the needle is the key asked for at the end
        assert torch.equal(x[b, first[b] + 1: first[b] + 4], x[b, -3:])
    with pytest.raises(ValueError, match="no room"):
        T.passkey_batch(T.encode_text("abc" * 10), 9, 1, rng, k=3)


def test_passkey_accuracy_on_constructed_models():
    rng = np.random.default_rng(1)
    x = T.passkey_batch(T.encode_text(pydoc_text()[:5000]), 50, 20, rng, k=4)
    assert T.passkey_accuracy(Oracle(needle_reader), x, k=4) == (1.0, 1.0)

    def wrong_last_in_even_rows(ids):  # right except the last key symbol of every even row
        p = needle_reader(ids)
        p[0::2, -2] = torch.where(ids[0::2, -1] == T.KEY_IDS[0], T.KEY_IDS[1], T.KEY_IDS[0])
        return p
    exact, per_symbol = T.passkey_accuracy(Oracle(wrong_last_in_even_rows), x, k=4)
    assert exact == 0.5 and per_symbol == pytest.approx(1 - 10 / 80)
    copy_prev = Oracle(lambda ids: ids)  # predicts the token it sees: never the key's next symbol unless repeated
    exact, _ = T.passkey_accuracy(copy_prev, x, k=4)
    assert exact <= float((x[:, -4:-1] == x[:, -3:]).all(1).double().mean())


def test_token_nll_and_the_passkey_loss_match_the_models_own_loss():
    torch.manual_seed(0)
    m = LabForCausalLM(LabConfig(vocab_size=len(T.BYTE_VOCAB), n_layers=1, n_heads=2, d_model=32, d_mlp=64, pe="rope")).eval()
    batch = T.lm_batch_fn(T.encode_text(pydoc_text()[:20000]), 24, 6, passkey_frac=0.5, k=2)(0, np.random.default_rng(0))
    x = batch["input_ids"]
    with torch.no_grad():
        ref = m(input_ids=x, labels=x).loss
        assert float(T.token_nll(m, x, batch_size=4).mean()) == pytest.approx(float(ref), rel=1e-6)
        logits = m(input_ids=x).logits
        ans = torch.nn.functional.cross_entropy(logits[3:, -3:-1].flatten(0, 1), x[3:, -2:].flatten())
        assert float(T.lm_passkey_loss(m, batch)) == pytest.approx(float(lm_loss(m, batch) + ans), rel=1e-5)
    assert batch["answer_mask"].sum() == 3 * 2


def test_rope_id_wavelengths_rescale_and_the_temperature_is_the_models_attention():
    cfg = LabConfig(vocab_size=len(T.BYTE_VOCAB), n_layers=1, n_heads=2, d_model=64, d_mlp=64, pe="rope-id",
                    rope_id_wavelengths=(8.0, 32.0), max_positions=64, temperature_length=16)
    torch.manual_seed(0)
    m = LabForCausalLM(cfg).eval()
    f = m.model.rotary_emb.inv_freq.double()
    lam = 8 * 4 ** (torch.arange(8, dtype=torch.float64) / 7)  # 8 of 16 planes, geometric 8..32 tokens
    assert torch.allclose(f[:8], 2 * math.pi / lam, rtol=1e-6) and (f[8:] == 0).all()
    with torch.no_grad():
        for layer in m.model.layers:
            layer.self_attn.q_proj.weight.mul_(20)
            layer.self_attn.k_proj.weight.mul_(20)
    toks = torch.as_tensor(T.encode_text(pydoc_text()[:40]))
    cap = interp.capture(lab_loaded(m, T.BYTE_VOCAB), toks, patterns=True)
    spec, pos = RopeSpec(f.float()), torch.arange(40)
    factor = (0.1 * math.log(40 / 16) + 1) ** 2
    ref = attention_pattern(rotate(cap.q_pre[0], pos, spec), rotate(cap.k_pre[0], pos, spec), factor / math.sqrt(32))
    assert torch.allclose(cap.patterns[0], ref, atol=1e-5)
    with pytest.raises(ValueError, match="rope_id_wavelengths"):
        LabConfig(pe="rope-id", rope_id_wavelengths=(32, 8))


def test_temperature_is_one_within_its_length():
    kw = dict(vocab_size=len(T.BYTE_VOCAB), n_layers=2, n_heads=2, d_model=32, d_mlp=64, pe="rope-id", rope_id_wavelengths=(8.0, 16.0))
    torch.manual_seed(0)
    a = LabForCausalLM(LabConfig(**kw)).eval()
    b = LabForCausalLM(LabConfig(**kw, temperature_length=32)).eval()
    b.load_state_dict(a.state_dict())
    x = torch.as_tensor(T.encode_text(pydoc_text()[:48]))[None]
    with torch.no_grad():
        assert torch.equal(a(input_ids=x[:, :32]).logits, b(input_ids=x[:, :32]).logits)
        assert not torch.allclose(a(input_ids=x).logits, b(input_ids=x).logits)


def test_quick_rope_id_lm(tmp_path):
    df = load_script(ANALYSES / "p001_frayed/rope_id_lm.py").main(["--quick", "--out", str(tmp_path)])
    assert set(df.pe) == {"rope", "partial", "rope-id", "rope-id+temp", "nope"} and set(df.eval_length) == {32, 64}
    assert {"pe", "seed", "train_length", "eval_length", "nll", "passkey_acc", "fsv_ratio_k", "silhouette_rot", "sink_weight"} <= set(df)
    assert df.passkey_acc.between(0, 1).all() and np.isfinite(df.nll).all()
    nope = df[df.pe == "nope"]  # no rotation: post-RoPE geometry equals pre-RoPE geometry
    assert np.allclose(nope.fsv_ratio_k, 1) and np.allclose(nope.silhouette_pre, nope.silhouette_rot)
    assert np.allclose(nope.sink_weight, nope.sink_weight_norope)
    rid, tmp = (df[df.pe == p].set_index("eval_length") for p in ("rope-id", "rope-id+temp"))
    assert rid.nll[32] == tmp.nll[32] and rid.nll[64] != tmp.nll[64]  # the temperature is 1 up to n only
    assert (tmp_path / "rope_id_lm_summary.csv").exists() and (tmp_path / "rope_id_lm.html").exists()


def test_repeated_rows_sit_between_the_text_and_the_passkey_rows():
    """``repeat_frac``: rows <bos>, r, r over the text's own ids, after the text windows and before the passkey rows
    (whose answer mask is unchanged); fractions that do not fit a batch are refused."""
    ids = T.encode_text(pydoc_text()[:20000])
    batch = T.lm_batch_fn(ids, 24, 8, passkey_frac=0.25, k=2, repeat_frac=0.5)(0, np.random.default_rng(0))
    x = batch["input_ids"]
    rep = x[2:6]
    assert (rep[:, 0] == T.BOS).all() and (rep[:, 1:12] == rep[:, 13:]).all()  # the second copy cut to fit
    assert set(rep[:, 1:].unique().tolist()) <= set(np.unique(ids).tolist())
    assert not (x[:2, 1:12] == x[:2, 13:]).all(1).any()  # text windows: not repeats
    assert batch["answer_mask"][6:, -2:].all() and batch["answer_mask"].sum() == 2 * 2
    same = T.lm_batch_fn(ids, 24, 8, passkey_frac=0.25, k=2)(0, np.random.default_rng(0))["input_ids"]
    assert x.shape == same.shape
    with pytest.raises(ValueError, match="more than the 8 rows"):
        T.lm_batch_fn(ids, 24, 8, passkey_frac=0.5, repeat_frac=0.75)
    with pytest.raises(ValueError, match="repeat_frac must lie in"):
        T.lm_batch_fn(ids, 24, 8, repeat_frac=-0.1)
