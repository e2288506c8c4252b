"""Symbol vocabularies of the lab's synthetic tasks, and the matching Hugging Face tokenizer.

A lab task speaks in a handful of symbols (``"0"``, ``"1"``, ``"("``, ``"<EOS>"`` ...). ``Vocab`` fixes
their ids: ``0 = <pad>``, ``1 = <bos>``, ``2 = <unk>``, then the task's symbols in the order given.
``Vocab.tokenizer()`` is a ``PreTrainedTokenizerFast`` over the same ids whose text form is the symbols
separated by spaces, so interp's text APIs (``interp.capture(model, "0 1 1 <O:>")``, the token viewer,
reports) work on lab models like on any other.

Leaf module (imports nothing from interp).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

SPECIALS = ("<pad>", "<bos>", "<unk>")
PAD, BOS, UNK = 0, 1, 2
_FILE = "lab_vocab.json"


class Vocab:
    """An ordered set of symbols with fixed ids (``<pad>`` 0, ``<bos>`` 1, ``<unk>`` 2, then ``symbols``).

    Args:
        symbols: the task's symbols; each a non-empty string without whitespace, all distinct, none of
            ``<pad>``, ``<bos>``, ``<unk>``.

    Raises:
        ValueError: an empty, duplicated, reserved or whitespace-containing symbol.
    """

    def __init__(self, symbols: Sequence[str]):
        symbols = list(symbols)
        for s in symbols:
            if not isinstance(s, str) or not s or any(ch.isspace() for ch in s):
                raise ValueError(f"Vocab: symbol {s!r} must be a non-empty string without whitespace")
            if s in SPECIALS:
                raise ValueError(f"Vocab: {s!r} is reserved (ids 0..2 are {', '.join(SPECIALS)})")
        if len(set(symbols)) != len(symbols):
            dup = sorted({s for s in symbols if symbols.count(s) > 1})
            raise ValueError(f"Vocab: duplicated symbols {dup}")
        self.symbols = tuple(symbols)
        self._ids = {s: i for i, s in enumerate(SPECIALS + self.symbols)}

    def __len__(self) -> int:
        return len(SPECIALS) + len(self.symbols)

    def __repr__(self) -> str:
        return f"Vocab({list(self.symbols)})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocab) and other.symbols == self.symbols

    def id(self, symbol: str) -> int:
        """The id of one symbol (specials included).

        Raises:
            KeyError: an unknown symbol (the message lists the known ones).
        """
        try:
            return self._ids[symbol]
        except KeyError:
            raise KeyError(f"unknown symbol {symbol!r}; this vocabulary has {list(self._ids)}") from None

    def encode(self, symbols: Iterable[str]) -> list[int]:
        """Ids of a sequence of symbols (``KeyError`` on an unknown one)."""
        return [self.id(s) for s in symbols]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Symbols of a sequence of ids.

        Raises:
            ValueError: an id outside ``[0, len(vocab))``.
        """
        names = SPECIALS + self.symbols
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(names):
                raise ValueError(f"token id {i} outside [0, {len(names)}) for {self!r}")
            out.append(names[i])
        return out

    def tokenizer(self):
        """A ``transformers.PreTrainedTokenizerFast`` with these ids: text = symbols separated by whitespace.

        It adds no BOS by itself (lab tasks put ``<bos>`` in their sequences); unknown words map to ``<unk>``.
        """
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        core = Tokenizer(models.WordLevel(vocab=dict(self._ids), unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
        tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", unk_token="<unk>")
        tok.init_kwargs.update(name_or_path="interp-lab-vocab")
        return tok

    def save(self, directory: str | Path) -> Path:
        """Write ``lab_vocab.json`` and the tokenizer files into ``directory``; returns the vocabulary file."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / _FILE).write_text(json.dumps({"symbols": list(self.symbols)}, indent=1))
        self.tokenizer().save_pretrained(d)
        return d / _FILE

    @classmethod
    def load(cls, directory: str | Path) -> "Vocab":
        """Read the vocabulary saved by ``save``.

        Raises:
            FileNotFoundError: no ``lab_vocab.json`` in ``directory``.
        """
        path = Path(directory) / _FILE
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: save the vocabulary with Vocab.save(directory)")
        return cls(json.loads(path.read_text())["symbols"])
