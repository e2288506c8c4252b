"""Sparse parity, PoSE and Predictive Position Coupling (paper 003, Sec. 5.1 / 5.2, App. B.3, E.1, E.2).

Generator invariants checked against direct recomputation from the decoded symbols, PoSE id invariants,
the coupled-id rule of App. E.2.1 tied to the scratchpad targets, and the evaluation plumbing (oracle models,
greedy generation against teacher forcing).
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from interp.lab import LabConfig, LabForCausalLM, Vocab, lm_loss
from interp.lab import parity as sp
from interp.lab import ppc
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- sparse parity (003 App. E.1.1, eq. 19)

def test_ids_match_the_lab_vocab():
    for n in (2, 20):
        v, ids = Vocab(sp.sparse_parity_symbols(n)), sp.SparseParityIds(n)
        assert len(v) == ids.vocab_size
        assert [v.id(str(j)) for j in range(1, n + 1)] == list(ids.marker(np.arange(1, n + 1)))
        assert (v.id("t0"), v.id("t1"), v.id("<SEP>"), v.id("<bos>")) == (ids.t0, ids.t1, ids.sep, sp.BOS)
    v = Vocab(ppc.ppc_symbols())
    assert (v.id("0"), v.id("1"), v.id("<SEP>"), len(v)) == (ppc.ZERO, ppc.ONE, ppc.SEP, ppc.VOCAB_SIZE)


@pytest.mark.parametrize("ell,k,n", [(10, 1, 20), (25, 4, 20), (250, 8, 20), (12, 11, 2)])
def test_sparse_parity_sample_invariants(ell, k, n):
    rng = np.random.default_rng(0)
    ids = sp.SparseParityIds(n)
    J, bits, label = sp.sample_sparse_parity(rng, 200, ell, k, n)
    tok = sp.encode_sparse_parity(J, bits, label, ids)
    assert tok.shape == (200, 2 * ell + 3)
    vocab = Vocab(sp.sparse_parity_symbols(n))
    for row in tok[:50]:  # recompute everything from the decoded symbols
        s = vocab.decode(row)
        assert s[0] == "<bos>" and s[-2] == "<SEP>" and s[-1] in ("t0", "t1")
        marks, tbits = [int(x) for x in s[1:-2:2]], s[2:-2:2]
        assert len(marks) == ell and all(1 <= m <= n for m in marks) and set(tbits) <= {"t0", "t1"}
        marked = [b == "t1" for m, b in zip(marks, tbits) if m <= n // 2]
        assert len(marked) == k  # exactly k markers
        assert s[-1] == f"t{sum(marked) % 2}"  # the label is the parity of the marked bits
    assert ((J <= n // 2).sum(1) == k).all()


def test_sparse_parity_law():
    """Marked slots uniform (each slot with probability k/l), marker values uniform on 1..N/2, others on N/2+1..N,
    label ~ Bernoulli(1/2): frequencies within 5 standard errors."""
    rng = np.random.default_rng(1)
    n, ell, k, m = 20, 12, 3, 20000
    J, bits, label = sp.sample_sparse_parity(rng, m, ell, k, n)
    p_slot = (J <= n // 2).mean(0)
    assert np.abs(p_slot - k / ell).max() < 5 * np.sqrt(k / ell * (1 - k / ell) / m)
    counts = np.bincount(J.ravel(), minlength=n + 1)[1:]
    lo, hi = counts[: n // 2] / counts[: n // 2].sum(), counts[n // 2:] / counts[n // 2:].sum()
    for c, tot in ((lo, m * k), (hi, m * (ell - k))):
        assert np.abs(c - 2 / n).max() < 5 * np.sqrt(2 / n * (1 - 2 / n) / tot)
    assert abs(label.mean() - 0.5) < 5 * np.sqrt(0.25 / m)


@pytest.mark.parametrize("ell,k,n", [(5, 5, 20), (5, 0, 20), (5, 2, 3), (5, 2, 0)])
def test_sparse_parity_bad_input(ell, k, n):
    with pytest.raises(ValueError):
        sp.sample_sparse_parity(np.random.default_rng(0), 4, ell, k, n)


def test_sparse_parity_batch_layout():
    rng = np.random.default_rng(2)
    ids = sp.SparseParityIds(20)
    b = sp.sparse_parity_batch(rng, 64, (10, 25), (1, 4), ids)
    tok, mask, pos = b["input_ids"].numpy(), b["loss_mask"].numpy(), b["position_ids"].numpy()
    for r in range(64):
        ell, k = int(b["ell"][r]), int(b["k"][r])
        n = 2 * ell + 3
        assert 10 <= ell <= 25 and 1 <= k <= 4
        assert list(np.flatnonzero(mask[r])) == [n - 1] and (tok[r, n:] == sp.PAD).all()
        assert tok[r, n - 1] == ids.t0 + int(b["label"][r]) and tok[r, n - 2] == ids.sep
        assert (ids.marker(1) <= tok[r, 1:n - 2:2]).all() and (tok[r, 1:n - 2:2] <= ids.marker(10)).sum() == k
        p = pos[r, :n]
        assert p[0] == 0 and (np.diff(p) >= 1).all() and p[-1] < sp.L_MAX and (np.diff(p) > 1).sum() <= 1
    plain = sp.sparse_parity_batch(rng, 8, (10, 25), (1, 4), ids, pose=False)["position_ids"]
    assert (plain == torch.arange(plain.shape[1])).all()


# ---------------------------------------------------------------- PoSE (003 App. B.3)

@pytest.mark.parametrize("n,l_max,chunks", [(23, 510, 2), (53, 510, 3), (40, 41, 4), (7, 7, 2), (30, 100, 1)])
def test_pose_ids_invariants(n, l_max, chunks):
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = sp.pose_position_ids(rng, n, l_max, chunks)
        d = np.diff(p)
        assert p.shape == (n,) and p.dtype == np.int64 and p[0] == 0 and p[-1] <= l_max - 1
        assert (d >= 1).all()  # strictly increasing
        assert (d > 1).sum() <= chunks - 1  # step 1 inside each chunk, a skip only at a chunk boundary
        assert p[-1] - (n - 1) <= l_max - n  # total skip within PoSE's budget
    if n == l_max or chunks == 1:
        assert (p == np.arange(n)).all()


def test_pose_covers_all_test_ids():
    """Over training draws, PoSE ids cover every id a test sequence of up to L_max tokens uses (App. B.3 (a))."""
    rng = np.random.default_rng(4)
    seen = np.zeros(sp.L_MAX, bool)
    for _ in range(5000):
        seen[sp.pose_position_ids(rng, 23, sp.L_MAX, 2)] = True
    assert seen.all()


@pytest.mark.parametrize("n,l_max,chunks", [(5, 4, 2), (3, 10, 4), (5, 10, 0)])
def test_pose_bad_input(n, l_max, chunks):
    with pytest.raises(ValueError):
        sp.pose_position_ids(np.random.default_rng(0), n, l_max, chunks)


class _SparseParityOracle(torch.nn.Module):
    """Reads the answer off the tokens (or its negation): logits with the right (wrong) label at every <SEP>."""

    def __init__(self, ids, wrong=False):
        super().__init__()
        self.ids, self.wrong, self.w = ids, wrong, torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, position_ids=None):
        ids = self.ids
        lab = torch.zeros(len(input_ids), dtype=torch.long)
        for r, row in enumerate(input_ids):
            sep = int((row == ids.sep).nonzero()[0])
            marks, bits = row[1:sep:2] - (ids.marker(1) - 1), row[2:sep:2] - ids.t0
            lab[r] = int(bits[marks <= ids.n // 2].sum()) % 2 ^ int(self.wrong)
        logits = torch.zeros(*input_ids.shape, ids.vocab_size)
        logits[:, :, ids.t0] += 0.5  # a default elsewhere, to catch an off-by-one read
        logits[torch.arange(len(lab)), (input_ids == ids.sep).int().argmax(1), ids.t0 + lab] = 9.0
        return type("Out", (), {"logits": logits})


def test_sparse_parity_accuracy_plumbing():
    ids = sp.SparseParityIds(20)
    rng = np.random.default_rng(5)
    assert sp.sparse_parity_accuracy(_SparseParityOracle(ids), rng, (10, 60), 5, 100, ids, batch_size=32) == 1.0
    assert sp.sparse_parity_accuracy(_SparseParityOracle(ids, True), rng, (10, 60), 5, 100, ids, batch_size=32) == 0.0
    with pytest.raises(ValueError):
        sp.sparse_parity_accuracy(_SparseParityOracle(ids), rng, (4, 60), 4, 10, ids)


# ---------------------------------------------------------------- scratchpad + coupling (003 Sec. 5.2.1, App. E.2.1)

@pytest.mark.parametrize("jump", [1, 2, 3, 4])
def test_scratchpad_targets_and_coupled_ids(jump):
    rng = np.random.default_rng(6)
    ell = 12 * jump
    bits = rng.integers(0, 2, ell)
    sp_bits = ppc.scratchpad_targets(bits, jump)
    direct = [sum(bits[: jump * i]) % 2 for i in range(1, ell // jump + 1)]  # b'_i = XOR of the first k*i bits
    assert list(sp_bits) == direct and sp_bits[-1] == bits.sum() % 2
    tok = ppc.scratchpad_tokens(bits, jump)
    pid = ppc.coupled_position_ids(ell, jump)
    assert len(tok) == len(pid) == ell + ell // jump + 2
    assert tok[0] == ppc.BOS and tok[ell + 1] == ppc.SEP and pid[0] == pid[ell + 1] == 0
    assert list(pid[1:ell + 1]) == [-(-j // jump) for j in range(1, ell + 1)]  # ceil(j / k): each id k times
    assert list(pid[ell + 2:]) == list(range(1, ell // jump + 1))
    # the coupled id ties b'_i to exactly the input bits it adds: b'_i = b'_{i-1} xor (bits with id i)
    inp_tok, inp_id, prev = tok[1:ell + 1] - ppc.ZERO, pid[1:ell + 1], 0
    for i, t in zip(pid[ell + 2:], tok[ell + 2:] - ppc.ZERO):
        assert (inp_id == i).sum() == jump and t == (prev + inp_tok[inp_id == i].sum()) % 2
        prev = t


@pytest.mark.parametrize("coupled", [True, False])
def test_ppc_batch_offsets_and_mask(coupled):
    rng = np.random.default_rng(7)
    for jump in (1, 3):
        b = ppc.ppc_batch(rng, 32, (5, 20), jump, coupled=coupled)
        t0 = ppc.ppc_batch(rng, 32, (5, 20), jump, coupled=coupled, shift=False)
        offsets = []
        for r in range(32):
            ell = int(b["ell"][r])
            n = ell + ell // jump + 2
            want = ppc.coupled_position_ids(ell, jump) if coupled else np.arange(n)
            got = b["position_ids"][r, :n].numpy()
            off = got - want
            assert ell % jump == 0 and 5 <= ell <= 20 and (off == off[0]).all() and off[0] >= 0 and got.max() < ppc.L_MAX
            offsets.append(off[0])
            assert list(np.flatnonzero(b["loss_mask"][r])) == list(range(ell + 2, n))
            e0 = int(t0["ell"][r])
            n0 = e0 + e0 // jump + 2
            want0 = ppc.coupled_position_ids(e0, jump) if coupled else np.arange(n0)
            assert (t0["position_ids"][r, :n0].numpy() == want0).all()
        assert len(set(offsets)) > 5  # a random shift per sequence
    with pytest.raises(ValueError):
        ppc.coupled_position_ids(10, 3)


def test_l_max_for():
    assert ppc.l_max_for(100, 1, coupled=False) == 210  # 003 Table 2: 2l <= 200 without coupling
    for jump in (1, 2, 4):
        for coupled in (True, False):
            top = ppc.l_max_for(100, jump, coupled) - 1
            used = max(ppc.coupled_position_ids(100, jump)) if coupled else len(ppc.scratchpad_tokens(np.zeros(100, int), jump)) - 1
            assert used < top < used + 10
            b = ppc.ppc_batch(np.random.default_rng(0), 4, (96, 100), jump, coupled, l_max=top + 1)
            assert int(b["position_ids"].max()) <= top
    with pytest.raises(ValueError):
        ppc.l_max_for(10, 3, True)


def _tiny_ppc(seed=0):
    torch.manual_seed(seed)
    lm = LabForCausalLM(LabConfig(vocab_size=ppc.VOCAB_SIZE, n_layers=1, n_heads=2, d_model=16, d_mlp=32, pe="learned",
                                  max_positions=ppc.L_MAX))
    return ppc.PPCModel(lm, ppc.L_MAX).eval()


def test_ppc_loss_is_token_plus_position_ce():
    m = _tiny_ppc()
    b = ppc.ppc_batch(np.random.default_rng(8), 8, (5, 20), 2)
    tl, pl = m(b["input_ids"], b["position_ids"])
    assert tl.shape == (*b["input_ids"].shape, ppc.VOCAB_SIZE) and pl.shape == (*b["input_ids"].shape, ppc.L_MAX)
    mask = b["loss_mask"][:, 1:]
    pos_ce = torch.nn.functional.cross_entropy(pl[:, :-1][mask], b["position_ids"][:, 1:][mask])
    with torch.no_grad():
        assert torch.allclose(ppc.ppc_loss(m, b), lm_loss(m.lm, b) + pos_ce, atol=1e-5)


@pytest.mark.parametrize("plain", [False, True])
def test_generation_matches_teacher_forcing(plain):
    """Greedy generation feeding back predicted tokens and ids, re-read under teacher forcing, is all-correct:
    the reason ``teacher_forced_exact`` equals exact match under generation."""
    m = _tiny_ppc(1)
    model = m.lm if plain else m
    bits = np.random.default_rng(9).integers(0, 2, (4, 12))
    prompt = torch.from_numpy(ppc.scratchpad_tokens(bits, 3)[:, :14])
    pid = torch.from_numpy(np.tile(ppc.coupled_position_ids(12, 3)[:14] if not plain else np.arange(14), (4, 1)))
    tok, pos = ppc.generate(model, prompt, pid, 4)
    assert tok.shape == pos.shape == (4, 18) and (tok[:, :14] == prompt).all()
    if plain:
        assert (pos == torch.arange(18)).all()
    mask = torch.zeros_like(tok, dtype=torch.bool)
    mask[:, 14:] = True
    assert ppc.teacher_forced_exact(model, dict(input_ids=tok, position_ids=pos, loss_mask=mask)).all()
    # a corrupted target is caught
    tok2 = tok.clone()
    tok2[:, 16] = (tok2[:, 16] + 1) % ppc.VOCAB_SIZE  # another token than the argmax
    assert not ppc.teacher_forced_exact(model, dict(input_ids=tok2, position_ids=pos, loss_mask=mask)).any()


# ---------------------------------------------------------------- the analysis script, quick mode

def test_quick_sparse_parity_script(tmp_path):
    a = load_script(ROOT / "analyses" / "p003_sparsity/sparse_parity.py").main(["--quick", "--out", str(tmp_path)])
    assert list(pd_read(tmp_path / "sparse_parity.csv").columns) == ["k_train", "k_test", "length_lo", "length_hi", "accuracy", "seed"]
    assert a.accuracy.between(0, 1).all() and set(a.seed) == {0}
    assert (a.length_lo <= a.length_hi).all() and (a.k_test < a.length_lo / 2).all()  # k < l in every bin
    assert len(a) == 8 * 6 and (tmp_path / "sparse_parity.html").exists()


def pd_read(path):
    import pandas as pd
    return pd.read_csv(path)
