"""Bytes of a text file (``.txt``, ``.md``, ``.html``, ``.csv``) as text, never as mojibake.

In order: a byte-order mark (UTF-8, UTF-16, UTF-32); the charset an HTML page declares in its first
bytes (``<meta charset>``, ``http-equiv``), when the bytes decode with it; strict UTF-8; ISO-2022-JP
(7-bit: its escape sequences would pass as ASCII); then detection by charset-normalizer. Shift_JIS is
read as CP932 (Windows' superset: ①, 﨑, 髙 and the NEC/IBM extensions), EUC-JP as EUC-JIS-2004, a
single-byte Western guess as CP1252 where it fits as well as the detector's first choice. Bytes no
encoding explains (or a detected one only with control characters in the text) raise :class:`InputError`: the file is a
dead letter, never garbage in the index.
"""

from __future__ import annotations

import codecs
import re

from hopsearch.service.errors import InputError

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_ISO2022_JP = (b"\x1b$B", b"\x1b$@", b"\x1b(J", b"\x1b(I", b"\x1b$(D")
#: Names that mean CP932 in practice (Windows writes CP932 and labels it Shift_JIS).
_AS_CP932 = {"shift_jis", "shift-jis", "sjis", "x-sjis", "ms_kanji", "csshiftjis", "windows-31j", "cp932", "ms932"}
_SHIFT_JIS_FAMILY = {"cp932", "shift_jis", "shift_jis_2004", "shift_jisx0213"}
_EUC_JP_FAMILY = {"euc_jp", "euc_jis_2004", "euc_jisx0213"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\ufffd]")


def _declared(data: bytes) -> str | None:
    """Return the codec an HTML page's first 4 KiB declare, or None (unknown names count as none)."""
    match = _META_CHARSET.search(data[:4096])
    if match is None:
        return None
    name = match.group(1).decode("ascii").lower()
    if name in _AS_CP932:
        return "cp932"
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _strict(data: bytes, codec: str) -> str | None:
    try:
        return data.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def _detected(data: bytes) -> str | None:
    """charset-normalizer's choice, with Japanese and Western preferences; None when nothing fits."""
    from charset_normalizer import from_bytes

    results = from_bytes(data)
    best = results.best()
    if best is None:
        return None
    ties = [r for r in results if r.chaos == best.chaos and r.coherence == best.coherence]
    names = {name for r in ties for name in r.could_be_from_charset} | {best.encoding}
    for family, codec in ((_SHIFT_JIS_FAMILY, "cp932"), (_EUC_JP_FAMILY, "euc_jis_2004"), ({"cp1252"}, "cp1252")):
        if names & family and _strict(data, codec) is not None:
            return codec
    return best.encoding


def _checked(text: str, codec: str) -> str:
    if _CONTROL.search(text):
        raise InputError(
            f"cannot decode the text with confidence (as {codec} it holds control characters): "
            "save it as UTF-8 to load it"
        )
    return text


def _by_bom(data: bytes) -> str | None:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            text = _strict(data, codec)
            if text is None:
                raise InputError(f"bytes are not {codec} although the file starts with its byte-order mark")
            return text.lstrip("\ufeff")
    return None


def decode_text(data: bytes, *, html: bool = False) -> str:
    """Return the text of ``data`` (see the module docstring); ``html`` also honours a declared charset."""
    if (text := _by_bom(data)) is not None:
        return text
    declared = _declared(data) if html else None
    if declared is not None and (text := _strict(data, declared)) is not None:
        return text
    if any(escape in data for escape in _ISO2022_JP) and (text := _strict(data, "iso2022_jp_2")) is not None:
        return text
    if (text := _strict(data, "utf-8")) is not None:
        return text
    codec = _detected(data)
    text = _strict(data, codec) if codec is not None else None
    if codec is None or text is None:
        raise InputError(
            "cannot decode the text with confidence (not UTF-8, UTF-16, CP932/Shift_JIS, EUC-JP, ISO-2022-JP "
            "or another encoding charset-normalizer recognises): save it as UTF-8 to load it"
        )
    return _checked(text, codec)
