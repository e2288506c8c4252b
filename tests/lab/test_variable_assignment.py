"""Variable assignment with scratchpad under Predictive Position Coupling (paper 003, Sec. 5.2.2, App. E.3.1).

The generator is checked against an independent reading of the decoded symbols: the assignments are parsed into a
dictionary and chain 1 is followed from v_init, the coupled ids are re-derived from where each scratchpad token
occurs in the input, and the batch layout (offsets, mask, padding) is recomputed row by row.
"""

import numpy as np
import pytest
import torch

from interp.lab import LabConfig, LabForCausalLM, Vocab
from interp.lab import ppc
from interp.lab import variable_assignment as va


def test_ids_match_the_lab_vocab():
    v = Vocab(va.va_symbols())
    assert (v.id("<-"), v.id("<SEP1>"), v.id("<SEP2>"), v.id("v0"), v.id("v199")) == (va.ARROW, va.SEP1, va.SEP2, va.VAR0, va.VAR0 + 199)
    assert len(v) == va.vocab_size() == 206 and v.id("<bos>") == ppc.BOS


@pytest.mark.parametrize("ell,depth", [(20, 2), (60, 5), (200, 2), (17, 5), (100, 3)])
def test_sample_follows_chain_one(ell, depth):
    v = Vocab(va.va_symbols())
    rng = np.random.default_rng(ell + depth)
    for _ in range(20):
        tok, pos, start = va.sample_va(rng, ell, depth)
        s = v.decode(tok)
        w = ell // (3 * depth)
        assert 3 * w * depth <= ell < 3 * (w + 1) * depth  # the most chains that fit (App. E.3.1)
        assert s[0] == "<bos>" and s[2] == "<SEP1>" and s[start - 1] == "<SEP2>" and len(s) == start + 3 * depth
        body = s[3:start - 1]
        assert len(body) == 3 * w * depth and body[1::3] == ["<-"] * (w * depth)
        lhs, rhs = body[0::3], body[2::3]
        assert len(set(lhs)) == w * depth  # every variable is assigned once
        assign = dict(zip(lhs, rhs))
        assert len(set(lhs) | set(rhs)) == w * (depth + 1)  # w chains over distinct variables
        x, want = s[1], []
        for _ in range(depth):  # follow chain 1 from v_init with the parsed assignments
            want += [x, "<-", assign[x]]
            x = assign[x]
        assert s[start:] == want
        assert x not in assign  # the chain has exactly `depth` hops
        # coupled ids: true ids before <SEP2>, 0 on it, then each scratchpad token carries the id of the input
        # token it copies: the left-hand side of the same assignment, its arrow and its right-hand side
        assert (pos[:start - 1] == np.arange(start - 1)).all() and pos[start - 1] == 0
        for j in range(depth):
            i_j = pos[start + 3 * j]
            assert tok[i_j] == tok[start + 3 * j] and s[i_j + 1] == "<-" and i_j % 3 == 0
            assert list(pos[start + 3 * j:start + 3 * j + 3]) == [i_j, i_j + 1, i_j + 2]
            assert tok[i_j + 2] == tok[start + 3 * j + 2]
        assert (np.diff(pos[start::3]) > 0).all()  # chain 1 keeps its order in the input


def test_interleaving_is_random():
    """Chain 1's first assignment is not always first: over many draws its slot takes several values."""
    rng = np.random.default_rng(3)
    slots = {int(va.sample_va(rng, 60, 2)[1][-6]) for _ in range(200)}
    assert len(slots) > 5


@pytest.mark.parametrize("coupled", [True, False])
def test_va_batch_offsets_and_mask(coupled):
    rng = np.random.default_rng(5)
    b = va.va_batch(rng, 16, (20, 60), 3, coupled=coupled, l_max=va.L_MAX)
    for r in range(16):
        tok, pos, mask = b["input_ids"][r].numpy(), b["position_ids"][r].numpy(), b["loss_mask"][r].numpy()
        n = int((tok != 0).sum())
        assert mask.sum() == 9 and mask[n - 9:n].all()  # the 3 d scratchpad tokens are the targets
        start = n - 9
        base = np.concatenate([np.arange(start - 1), [0], pos[start:n] - pos[0]]) if coupled else np.arange(n)
        off = pos[:n] - base
        assert (off == off[0]).all() and 0 <= off[0] and pos[:n].max() < va.L_MAX  # one shift per sequence
        assert (pos[n:] == np.minimum(pos[n - 1] + 1 + np.arange(len(tok) - n), va.L_MAX - 1)).all()
    t0 = va.va_batch(rng, 8, (20, 60), 3, coupled=coupled, shift=False)
    assert int(t0["position_ids"][:, 0].max()) == 0


def test_l_max_covers_the_longest_test():
    for depth in (2, 3, 4, 5):
        for coupled in (True, False):
            top = va.l_max_for(200, depth, coupled) - 9
            b = va.va_batch(np.random.default_rng(0), 4, (200, 200), depth, coupled, l_max=top + 1, shift=False)
            assert int(b["position_ids"].max()) == top  # exactly the largest id a test uses
    assert va.l_max_for(200, 2, False) <= va.L_MAX  # within 003 Table 3's L_max = 230


@pytest.mark.parametrize("ell,depth", [(5, 2), (0, 1), (20, 0)])
def test_bad_input(ell, depth):
    with pytest.raises(ValueError, match="depth"):
        va.sample_va(np.random.default_rng(0), ell, depth)
    with pytest.raises(ValueError, match="distinct variables"):
        va.sample_va(np.random.default_rng(0), 200, 2, n_vars=20)
    with pytest.raises(ValueError, match="l_max"):
        va.va_batch(np.random.default_rng(0), 2, (200, 200), 2, coupled=False, l_max=100)


def test_exact_match_of_an_oracle_is_one():
    """A model that puts all logit mass on the true next token and id (read from the batch) scores 1; the same
    model off by one id scores 0: ``exact_match`` counts tokens and predicted ids (003 Sec. 5.2)."""

    class Oracle(ppc.PPCModel):
        shift = 0

        def forward(self, input_ids, position_ids):
            b, n = input_ids.shape
            tl = torch.full((b, n, va.vocab_size()), -1e9)
            pl = torch.full((b, n, 240), -1e9)
            tl[:, :-1].scatter_(-1, input_ids[:, 1:, None], 0.0)
            pl[:, :-1].scatter_(-1, (position_ids[:, 1:, None] + self.shift).clamp(max=239), 0.0)
            return tl, pl

    lm = LabForCausalLM(LabConfig(vocab_size=va.vocab_size(), n_layers=1, n_heads=2, d_model=16, d_mlp=32, pe="learned",
                                  max_positions=240))
    m = Oracle(lm, 240).eval()
    assert va.exact_match(m, np.random.default_rng(0), (20, 60), 2, 10, coupled=True) == 1.0
    m.shift = 1
    assert va.exact_match(m, np.random.default_rng(0), (20, 60), 2, 10, coupled=True) == 0.0
