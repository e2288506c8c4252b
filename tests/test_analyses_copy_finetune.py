"""analyses/p000_copy/copy_finetune.py: the batched 2D-RoPE of the ``rope`` site equals ``Rope2D`` applied row by row
through ``rope_intervention``, its tables follow 000's closed form at theta = 1000, a hand-built copier scores exactly
what it copies, and the verdict follows the paired intervals."""

import numpy as np
import pandas as pd
import pytest
import torch

import interp
from analyses.p000_copy.copy_finetune import (CopyFormat, TEMPLATES, exact_match, main, rope2d, rope2d_tables, summarise,
                                              target_logits, verdict)
from interp.hooks.intervene import rope_intervention
from interp.lab.copy_task import sample_strings
from interp.models.arch import rope_specs
from interp.rope.variants import Rope2D

NL = 10  # the tiny models' byte tokenizer: "\n" is id 10


@pytest.fixture(scope="module")
def tiny():
    return interp.load_model("tiny-llama", device="cpu")


def test_batched_rope2d_equals_rope2d_row_by_row(tiny):
    """Two rows with their line breaks in different places, in one batch under ``rope2d``, give the logits of each row
    alone under ``rope_intervention(Rope2D)`` (batch 1: the intervention layer's own token-aware path)."""
    rows = torch.tensor([[256, 48, 49, NL, 49, 48, 120, NL, 48, 49, 49, 50],
                         [256, 65, NL, NL, 66, 67, 68, 69, 70, NL, 71, 72]])
    with rope2d(tiny, (NL,)):
        got = tiny.hf(rows).logits
    for i in range(2):
        with rope_intervention(tiny, Rope2D((NL,))):
            want = tiny.hf(rows[i: i + 1]).logits
        torch.testing.assert_close(got[i: i + 1], want, rtol=1e-5, atol=1e-5)
    plain = tiny.hf(rows).logits  # restored on exit, and 2D positions do change the model
    assert not torch.allclose(plain, got, atol=1e-3)


def test_rope2d_tables_at_theta_1000_follow_the_closed_form(tiny):
    """000 Sec. 4.1: plane j < d/4 turns by ``r * 1000 ** (-4 j / d)``, plane d/4 + j by ``c * 1000 ** (-4 j / d)``, with
    (r, c) = (line breaks before the token, offset in its line), counted here by hand."""
    tokens = torch.tensor([[5, 6, NL, 7, 8, 9, NL, 11]])
    rc = torch.tensor([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [1, 3], [2, 0]], dtype=torch.float64)
    spec = rope_specs(tiny.hf)[0]
    d = spec.d_head
    cos, sin = rope2d_tables(spec, tokens, (NL,), base=1000.0)
    beta = 1000.0 ** (-4.0 * torch.arange(d // 4, dtype=torch.float64) / d)
    ang = torch.cat([rc[:, :1] * beta, rc[:, 1:] * beta], 1)  # [pos, d/2]: the row half, then the column half
    for half in (0, d // 2):  # rotate_half: plane l is channels l and l + d/2
        torch.testing.assert_close(cos[0, :, half: half + d // 2].double(), ang.cos(), rtol=0, atol=1e-6)
        torch.testing.assert_close(sin[0, :, half: half + d // 2].double(), ang.sin(), rtol=0, atol=1e-6)


def test_target_logits_equal_the_models_own_logits(tiny):
    fmt = CopyFormat.of(tiny.tokenizer)
    rng = np.random.default_rng(0)
    batch = fmt.encode(sample_strings("imbalanced", 3, 2, 9, rng), [0, 13, 19])
    ids, tgt = batch["input_ids"], batch["loss_mask"][:, 1:]
    with torch.no_grad():
        torch.testing.assert_close(target_logits(tiny.hf, ids, tgt), tiny.hf(ids).logits[:, :-1][tgt], rtol=1e-5, atol=1e-5)


def test_encoding_marks_the_copy_and_the_end_token(tiny):
    fmt = CopyFormat.of(tiny.tokenizer)
    s = np.array([1, 0, 0, 1, 1], dtype=np.int8)
    batch = fmt.encode([s, s[:2]], [4, 9])
    for row, bits in zip(range(2), (s, s[:2])):
        ids, mask = batch["input_ids"][row], batch["loss_mask"][row]
        want = [fmt.bits[b] for b in bits] + [fmt.eos]
        assert ids[mask].tolist() == want  # the targets: the copy, then the end token
        assert tiny.tokenizer.decode(ids[~mask][: mask.nonzero()[0, 0]].tolist()).count("### assistant:") == 1
    assert len(TEMPLATES) == 20


def _copier(fmt: CopyFormat, vocab: int, flip_at: int | None = None):
    """A hand-built copier: it reads the first run of bit tokens of each row (the string to copy: the templates hold
    no digits) and predicts it, then the end token, at the target positions; ``flip_at`` flips that bit of its copy."""
    bit_ids = torch.tensor(fmt.bits)

    def logits_fn(ids, tgt):
        preds = []
        for row, t in zip(ids, tgt):
            is_bit = torch.isin(row, bit_ids)
            start = int(is_bit.int().argmax())
            end = start + int((~is_bit[start:]).int().argmax())
            copy = row[start:end].clone()
            if flip_at is not None and flip_at < len(copy):
                copy[flip_at] = fmt.bits[1] if int(copy[flip_at]) == fmt.bits[0] else fmt.bits[0]
            preds.append(torch.cat([copy, torch.tensor([fmt.eos])])[: int(t.sum())])
        return torch.nn.functional.one_hot(torch.cat(preds), vocab).float()
    return logits_fn


def test_a_hand_built_copier_scores_one_and_a_faulty_one_what_it_gets_right(tiny):
    fmt = CopyFormat.of(tiny.tokenizer)
    rng = np.random.default_rng(1)
    strings = sample_strings("recursive_flip", 40, 1, 30, rng)
    templates = [int(t) for t in rng.integers(len(TEMPLATES), size=40)]
    vocab = tiny.hf.config.vocab_size
    assert exact_match(_copier(fmt, vocab), fmt, strings, templates, tokens=300).all()  # several batches
    got = exact_match(_copier(fmt, vocab, flip_at=5), fmt, strings, templates, tokens=300)
    np.testing.assert_array_equal(got, [len(s) <= 5 for s in strings])


def _summary(acc: dict) -> pd.DataFrame:
    """A ``summarise`` table from per-string 0/1 results ``{(pe, distribution, factor): [string]}``."""
    rows = [{"pe": pe, "string": i, "distribution": d, "factor": f, "length_lo": 1, "length_hi": 2, "correct": bool(c)}
            for (pe, d, f), v in acc.items() for i, c in enumerate(v)]
    return summarise(pd.DataFrame(rows), 500)


def test_summary_pairs_the_strings_and_the_verdict_reads_the_intervals():
    ones, zeros, half = [1] * 20, [0] * 20, [1, 0] * 10
    acc = {(pe, d, f): ones for pe in ("rope", "rope2d") for d in ("imbalanced", "recursive_flip") for f in (1,)}
    acc |= {("rope", d, f): zeros for d in ("imbalanced", "recursive_flip") for f in (2, 4)}
    acc |= {("rope2d", d, f): ones for d in ("imbalanced", "recursive_flip") for f in (2, 4)}
    s = _summary(acc)
    diff = s[s.pe == "rope2d-rope"].set_index(["distribution", "factor"])
    assert diff.loc[("imbalanced", 2), "exact_match"] == 1.0 and diff.loc[("imbalanced", 1), "exact_match"] == 0.0
    assert verdict(s) == "reproduced"
    acc[("rope2d", "recursive_flip", 4)] = zeros
    assert verdict(_summary(acc)) == "in part"
    acc |= {("rope2d", d, f): zeros for d in ("imbalanced", "recursive_flip") for f in (2, 4)}
    assert verdict(_summary(acc)) == "not reproduced"
    acc |= {(pe, "imbalanced", 1): half for pe in ("rope", "rope2d")}
    assert verdict(_summary(acc)) == "no copier in range"


def test_quick_run_writes_paired_tables(tmp_path):
    out = main(["--quick", "--out", str(tmp_path)])
    strings = pd.read_csv(tmp_path / "copy_finetune_strings.csv")
    summary = pd.read_csv(tmp_path / "copy_finetune.csv")
    assert len(strings) == 2 * 2 * 2 * 8  # models x distributions x factors x strings
    assert (strings.groupby("string")[["length", "template"]].nunique() == 1).all().all()  # the same test strings
    wide = summary.pivot_table(index=["distribution", "factor"], columns="pe", values="exact_match")
    np.testing.assert_allclose(wide["rope2d-rope"], wide["rope2d"] - wide["rope"])
    assert out["verdict"].iloc[0] == verdict(summary)


def test_each_fine_tuning_starts_from_the_pretrained_weights():
    """``finetune_and_test`` reloads the saved weights first: the same run twice gives the same loss (on one thread),
    which a second run continuing from the first one's weights would not."""
    from argparse import Namespace

    from analyses.p000_copy.copy_finetune import finetune_and_test, eval_strings
    from interp.rope.variants import newline_token_ids

    model = interp.load_model("tiny-llama", device="cpu")
    init = {k: v.detach().clone() for k, v in model.hf.state_dict().items()}
    args = Namespace(steps=3, lr=1e-3, seed=0, quick=True, batch=4, train_max=6, rope2d_base=1000.0, device="cpu",
                     eval_tokens=4096, eval=2, factors=[1])
    fmt, nl = CopyFormat.of(model.tokenizer), newline_token_ids(model.tokenizer)
    runs = [finetune_and_test("rope2d", model, init, args, fmt, nl, eval_strings(args))[1] for _ in range(2)]
    assert runs[0]["final_loss"] == runs[1]["final_loss"]
    assert not torch.equal(model.hf.lm_head.weight, init["lm_head.weight"])  # it did train
