"""Pairs for patching (``interp.experiments.patch_tasks``): every bad line of a pairs file is one error naming its line;
tokenisation follows the corpus's BOS rule; the built-in tasks are seeded, have equal-length pairs and one-token
answers on SmolLM2's tokenizer, and say plainly when a tokenizer cannot serve them."""

import json

import pytest

from interp.errors import ConfigError
from interp.experiments.patch_tasks import (IOI_TEMPLATES, NAMES, Pair, check_one_template, greater_than_pairs,
                                            induction_pairs, ioi_pairs, prompt_ids, read_pairs, task_pairs,
                                            tokenize_pairs)
from interp.models.grid import load_tokenizer
from interp.models.tiny import byte_tokenizer

GOOD = {"clean": "abcd", "corrupt": "abce", "answer": "x", "wrong": "y"}


def _file(tmp_path, lines):
    p = tmp_path / "pairs.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


@pytest.mark.parametrize("lines,message", [
    ([GOOD, {k: v for k, v in GOOD.items() if k != "wrong"}], "pairs.jsonl line 2: missing key wrong"),
    ([{"clean": "a"}], "pairs.jsonl line 1: missing keys corrupt, answer, wrong"),
    ([GOOD, "{not json"], "pairs.jsonl line 2: not JSON"),
    (["[1, 2]"], "line 1: a JSON list, not an object"),
    ([{**GOOD, "answer": 3}], "line 1: answer must be a string, got int"),
    ([{**GOOD, "clean": "  "}], "line 1: the clean prompt is empty"),
    (["", "  "], "pairs.jsonl holds no pairs (empty file)"),
])
def test_bad_files_are_one_error_naming_the_line(tmp_path, lines, message):
    with pytest.raises(ConfigError) as err:
        read_pairs(_file(tmp_path, lines))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("rec,message", [
    ({**GOOD, "corrupt": "abcde"}, "line 3: clean and corrupt prompts have different token lengths (5 and 6)"),
    ({**GOOD, "answer": ""}, "line 3: answer '' is empty after tokenisation"),
    ({**GOOD, "wrong": "xz"}, "line 3: answer 'x' and wrong 'xz' start with the same token"),
])
def test_token_checks_name_the_line(tmp_path, rec, message):
    recs = read_pairs(_file(tmp_path, [GOOD, "", rec]))
    assert [r["line"] for r in recs] == [1, 3]  # blank lines skipped, still counted
    with pytest.raises(ConfigError, match="pairs.jsonl " + message.replace("(", r"\(").replace(")", r"\)")):
        tokenize_pairs(byte_tokenizer(), recs, where="pairs.jsonl")


def test_tokenisation_follows_the_corpus_bos_rule_and_nll_needs_no_answer(tmp_path):
    tok = byte_tokenizer()
    [p] = tokenize_pairs(tok, read_pairs(_file(tmp_path, [{**GOOD, "answer": " xy"}])))
    assert p.clean == (256, 97, 98, 99, 100) and p.corrupt[-1] == 101  # BOS: the byte tokenizer adds one
    assert p.answer == 32 and p.wrong == ord("y")  # the first token, leading space kept, no BOS
    recs = read_pairs(_file(tmp_path, [{"clean": "ab", "corrupt": "ac"}]), metric="nll")
    [q] = tokenize_pairs(tok, recs, metric="nll")
    assert q.answer is None and q.wrong is None
    with pytest.raises(ConfigError, match="--metric logit_diff needs clean, corrupt, answer, wrong"):
        read_pairs(_file(tmp_path, [{"clean": "ab", "corrupt": "ac"}]))
    with pytest.raises(ConfigError, match="unknown --metric"):
        read_pairs(_file(tmp_path, [GOOD]), metric="kl")


def test_one_template_check():
    a, b = Pair((1, 2, 3), (1, 2, 4), 5, 6, 1), Pair((1, 2), (1, 3), 5, 6, 2)
    assert check_one_template([a, a]) == 3
    with pytest.raises(ConfigError, match="one template .* line 2 has 2 tokens, line 1 has 3"):
        check_one_template([a, b])


def test_induction_pairs_repeat_the_first_half():
    tok = byte_tokenizer()
    pairs = induction_pairs(tok, 5, seed=3, half=6)
    assert pairs == induction_pairs(tok, 5, seed=3, half=6) and pairs != induction_pairs(tok, 5, seed=4, half=6)
    for p in pairs:
        r = p.clean[1:7]
        assert p.clean[0] == 256 and len(set(r)) == 6 and p.clean == (256, *r, *r[:-1]) and p.answer == r[-1]
        assert p.corrupt[:7] == p.clean[:7] and len(p.corrupt) == len(p.clean) == 12
        fresh = p.corrupt[7:]
        assert not set(fresh) & set(r) and p.wrong not in set(r) | set(fresh)
        assert max(p.clean + p.corrupt) <= 256 and 257 not in p.clean  # special tokens only as BOS


def test_tasks_that_a_tokenizer_cannot_serve_say_so():
    tok = byte_tokenizer()
    with pytest.raises(ConfigError, match="--task ioi needs 3 names that are one token"):
        ioi_pairs(tok, 4)
    with pytest.raises(ConfigError, match="two-digit year tokens"):
        greater_than_pairs(tok, 4)
    with pytest.raises(ConfigError, match="unknown --task 'copy'"):
        task_pairs("copy", tok)
    with pytest.raises(ConfigError, match="--n-pairs must be >= 1"):
        task_pairs("induction", tok, 0)


class TwoDigitTokenizer:
    """A word-level tokenizer with GPT-2's year split (' 1732' -> ' 17', '32'), no BOS: for greater-than."""

    bos_token_id = None
    all_special_ids: list = []

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def _id(self, piece):
        return self.vocab.setdefault(piece, len(self.vocab))

    def __call__(self, text, add_special_tokens=True):
        import re

        pieces = []
        for w in re.findall(r" ?[^ ]+", text):
            digits = w.strip()
            if digits.isdigit() and len(digits) == 4:
                pieces += [w[:-2], digits[2:]]
            else:
                pieces.append(w)
        return {"input_ids": [self._id(p) for p in pieces]}

    def decode(self, ids):
        inv = {v: k for k, v in self.vocab.items()}
        return "".join(inv[i] for i in ids)


def test_greater_than_pairs_where_years_are_two_digit_tokens():
    tok = TwoDigitTokenizer()
    pairs = greater_than_pairs(tok, 20, seed=1)
    inv = lambda i: {v: k for k, v in tok.vocab.items()}[i]  # noqa: E731
    for p in pairs:
        yy = int(inv(p.clean[-5]))  # ... 17 YY to the year 17
        assert inv(p.corrupt[-5]) == "01" and int(inv(p.answer)) > yy > int(inv(p.wrong)) and 2 <= yy <= 98
        assert len(p.clean) == len(p.corrupt) and inv(p.clean[-1]) == inv(p.clean[-6]) == " " + inv(p.clean[-1]).strip()


@pytest.fixture(scope="module")
def smol_tok():
    tok = load_tokenizer("smollm2-135m")
    if tok is None:
        pytest.skip("smollm2-135m has no cached converted copy (load it once)")
    return tok


def test_ioi_pairs_on_smollm2(smol_tok):
    pairs = ioi_pairs(smol_tok, 32, seed=0)
    assert pairs == ioi_pairs(smol_tok, 32, seed=0)
    text = [smol_tok.decode(list(p.clean)) for p in pairs]
    assert text[0].startswith(IOI_TEMPLATES[0].split("{")[0])
    for p, t in zip(pairs, text):
        assert len(p.clean) == len(p.corrupt)
        diff = [i for i, (a, b) in enumerate(zip(p.clean, p.corrupt)) if a != b]
        assert len(diff) == 1  # S2 only
        io, s = smol_tok.decode([p.answer]), smol_tok.decode([p.wrong])
        assert io.startswith(" ") and io.strip() in NAMES and s.strip() in NAMES and io != s
        assert smol_tok.decode([p.clean[diff[0]]]) == s and t.count(s.strip()) == 2 and t.count(io.strip()) == 1
    one = ioi_pairs(smol_tok, 16, seed=2, one_template=True)
    assert check_one_template(one) == len(one[0].clean)


def test_builtin_tasks_on_smollm2_have_equal_lengths_and_one_token_answers(smol_tok):
    for task in ("ioi", "induction"):
        pairs = task_pairs(task, smol_tok, 16, seed=0)
        assert all(len(p.clean) == len(p.corrupt) for p in pairs)
        assert all(p.answer != p.wrong for p in pairs)
    for p in task_pairs("ioi", smol_tok, 8):
        assert len(smol_tok(smol_tok.decode([p.answer]), add_special_tokens=False)["input_ids"]) == 1
    assert prompt_ids(smol_tok, "When")[0] != smol_tok.bos_token_id  # SmolLM2's tokenizer adds no BOS
    with pytest.raises(ConfigError, match=r"splits ' 1732' into \[' ', '1', '7', '3', '2'\]"):
        task_pairs("greater-than", smol_tok, 4)


def test_load_tokenizer_without_weights():
    assert load_tokenizer("tiny-qwen2")("a")["input_ids"] == [256, 97]
    assert load_tokenizer("some-org/some-model") is None and load_tokenizer("local:/nonexistent") is None
