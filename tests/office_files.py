"""Real .xlsx/.pptx files from a JSON spec (openpyxl, python-pptx), and zip bombs, built at test time.

Spreadsheet::

    {"title": "…", "sheets": [{"name": "申請書", "cells": [["A1", "出張申請書"], ["B3", 123],
      ["D9", {"formula": "=SUM(D6:D8)", "cached": 58000}]], "merged": ["A1:J1"], "grid": "A1:AH20",
      "hidden": false}]}

``grid`` gives every cell of the range a thin border, as a 方眼紙 form has (Excel then stores each of
them, empty, in the sheet). A formula cell's ``cached`` value is what Excel stores beside the formula
when it saves (openpyxl writes formulas without one: the builder puts it in). Slides::

    {"title": "…", "slides": [{"title": "…", "texts": ["…"], "table": [["品番", "単価"]], "notes": "…"}]}

:func:`zip_bomb` turns any zip-based file into a bomb: one member replaced by (or added as) ``size``
zero bytes, deflated, written without ever holding or deflating them: zlib's output for a mebibyte of
zeros after a full flush is the same 1,037 bytes each time, so the stream is that piece repeated.
"""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any

_PIECE = 1 << 20


def xlsx_bytes(spec: dict[str, Any]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)  # type: ignore[arg-type]
    cached: dict[tuple[int, str], str] = {}  # (sheet number, cell) -> cached formula value
    for number, sheet_spec in enumerate(spec["sheets"], start=1):
        sheet = book.create_sheet(sheet_spec["name"])
        for ref, value in sheet_spec.get("cells", []):
            if isinstance(value, dict):
                sheet[ref] = value["formula"]
                if "cached" in value:
                    cached[(number, ref)] = str(value["cached"])
            else:
                sheet[ref] = value
        if sheet_spec.get("grid"):
            from openpyxl.styles import Border, Side

            thin = Side(style="thin")
            for row in sheet[sheet_spec["grid"]]:
                for cell in row:
                    cell.border = Border(left=thin, right=thin, top=thin, bottom=thin)
        for cells in sheet_spec.get("merged", []):
            sheet.merge_cells(cells)
        if sheet_spec.get("hidden"):
            sheet.sheet_state = "hidden"
    if spec.get("title"):
        book.properties.title = spec["title"]
    buffer = io.BytesIO()
    book.save(buffer)
    return _with_cached_values(buffer.getvalue(), cached) if cached else buffer.getvalue()


def _with_cached_values(data: bytes, cached: dict[tuple[int, str], str]) -> bytes:
    """The workbook with each formula's cached value written into its empty ``<v></v>``."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info)
            match = re.fullmatch(r"xl/worksheets/sheet(\d+)\.xml", info.filename)
            if match:
                text = body.decode()
                for (number, ref), value in cached.items():
                    if number == int(match.group(1)):
                        pattern = rf'(<c r="{ref}"[^>]*><f>[^<]*</f>)<v\s*/?>(</v>)?'
                        text, n = re.subn(pattern, rf"\g<1><v>{value}</v>", text)
                        assert n == 1, (ref, text)
                body = text.encode()
            dst.writestr(info, body)
    return out.getvalue()


def pptx_bytes(spec: dict[str, Any]) -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for slide_spec in spec["slides"]:
        texts = slide_spec.get("texts", [])
        layout = deck.slide_layouts[1] if texts else deck.slide_layouts[5]  # title and content / title only
        slide = deck.slides.add_slide(layout)
        if slide.shapes.title is not None:
            slide.shapes.title.text = slide_spec.get("title", "")
        if texts:
            body = slide.placeholders[1].text_frame
            body.text = texts[0]
            for text in texts[1:]:
                body.add_paragraph().text = text
        if slide_spec.get("table"):
            rows = slide_spec["table"]
            frame = slide.shapes.add_table(len(rows), len(rows[0]), Inches(1), Inches(4), Inches(8), Inches(2))
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    frame.table.cell(r, c).text = str(value)
        if slide_spec.get("notes"):
            slide.notes_slide.notes_text_frame.text = slide_spec["notes"]  # type: ignore[union-attr]
    if spec.get("title"):
        deck.core_properties.title = spec["title"]
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def write_office(path: Path, spec: dict[str, Any] | str) -> Path:
    """``spec`` (a dict or its JSON) as a real file at ``path``, by its suffix (.xlsx or .pptx)."""
    spec = json.loads(spec) if isinstance(spec, str) else spec
    path.write_bytes(xlsx_bytes(spec) if path.suffix == ".xlsx" else pptx_bytes(spec))
    return path


# --- zip bombs ---------------------------------------------------------------------------------

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_END = struct.Struct("<4s4H2LH")
_DATE = (1 << 5) | 1  # 1980-01-01, the zip epoch


def _times(matrix: list[int], vector: int) -> int:
    """A 32x32 matrix over GF(2) (its columns as ints) times a 32-bit vector."""
    out, bit = 0, 0
    while vector:
        if vector & 1:
            out ^= matrix[bit]
        vector >>= 1
        bit += 1
    return out


def crc32_of_zeros(size: int) -> int:
    """``zlib.crc32(bytes(size))`` without reading ``size`` bytes: appending zeros to a CRC is affine,
    ``crc32(zeros(n), v) = L_n(v) ^ crc32(zeros(n))``, so whole mebibytes go by squaring ``L`` (what zlib's
    ``crc32_combine`` does)."""
    zeros = bytes(_PIECE)
    base = zlib.crc32(zeros)
    step = [zlib.crc32(zeros, 1 << bit) ^ base for bit in range(32)]  # L for one mebibyte
    whole, rest = divmod(size, _PIECE)
    crc, run = 0, base  # crc: of the zeros so far; run: of 2**k mebibytes
    while whole:
        if whole & 1:
            crc = _times(step, crc) ^ run
        whole >>= 1
        if whole:
            run = _times(step, run) ^ run
            step = [_times(step, column) for column in step]
    return zlib.crc32(bytes(rest), crc)


@lru_cache(maxsize=4)
def zeros_deflated(size: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``size`` zero bytes and their CRC-32, without deflating ``size`` bytes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = compressor.compress(bytes(_PIECE)) + compressor.flush(zlib.Z_FULL_FLUSH)
    whole, rest = divmod(size, _PIECE)
    return piece * whole + compressor.compress(bytes(rest)) + compressor.flush(), crc32_of_zeros(size)


def zip_bomb(base: bytes, member: str, size: int, *, extra: int = 0) -> bytes:
    """``base`` (a zip) with ``member`` replaced by ``size`` deflated zeros; ``extra`` more such members
    (``bomb-1.bin``…) alongside. Under 4 GiB per member (no ZIP64)."""
    with zipfile.ZipFile(io.BytesIO(base)) as src:
        entries = [(info.filename, src.read(info)) for info in src.infolist() if info.filename != member]
    out = bytearray()
    central = bytearray()
    count = 0

    def add(name: str, stream: bytes, crc: int, usize: int) -> None:
        nonlocal count
        raw = name.encode()
        offset = len(out)
        out.extend(_LOCAL.pack(b"PK\3\4", 20, 0, 8, 0, _DATE, crc, len(stream), usize, len(raw), 0) + raw)
        out.extend(stream)
        central.extend(
            _CENTRAL.pack(b"PK\1\2", 20, 20, 0, 8, 0, _DATE, crc, len(stream), usize, len(raw), 0, 0, 0, 0, 0, offset)
            + raw
        )
        count += 1

    for name, body in entries:
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        add(name, compressor.compress(body) + compressor.flush(), zlib.crc32(body), len(body))
    stream, crc = zeros_deflated(size)
    for name in [member, *(f"bomb-{n}.bin" for n in range(1, extra + 1))]:
        add(name, stream, crc, size)
    start = len(out)
    out.extend(central)
    out.extend(_END.pack(b"PK\5\6", 0, 0, count, count, len(central), start, 0))
    return bytes(out)


_OLE_FREE, _OLE_END, _OLE_FAT = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD


def _dir_entry(name: str, kind: int, child: int, start: int, size: int) -> bytes:
    encoded = (name + "\0").encode("utf-16-le") if name else b""
    return struct.pack(
        "<64sHBBIII16sIQQIQ",
        encoded,
        len(encoded),
        kind,
        1 if kind else 0,  # black in the red-black tree; an unused entry is all zeros
        _OLE_FREE,
        _OLE_FREE,
        child,
        b"\0" * 16,
        0,
        0,
        0,
        start,
        size,
    )


def ole_file(stream: str, data: bytes) -> bytes:
    """A minimal valid OLE compound file (CFB version 3, 512-byte sectors) holding one stream ``stream``
    of ``data`` (padded to 4,096 bytes, so it lives in ordinary sectors, not the mini stream): what an old
    ``.doc`` (``WordDocument``) or a password-protected ``.docx`` (``EncryptedPackage``) is made of."""
    body = data.ljust(4096, b"\0")
    sectors = -(-len(body) // 512)
    fat = [_OLE_FAT, _OLE_END] + [2 + n + 1 for n in range(sectors - 1)] + [_OLE_END]
    header = struct.pack(
        "<8s16sHHHHH6sIIIIIIIII",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",
        b"\0" * 16,
        0x3E,
        3,
        0xFFFE,
        9,
        6,
        b"\0" * 6,
        0,  # directory sectors (0 in version 3)
        1,  # FAT sectors
        1,  # first directory sector
        0,
        4096,  # mini stream cutoff
        _OLE_END,  # first mini FAT sector: none
        0,
        _OLE_END,  # first DIFAT sector: none
        0,
    ) + struct.pack("<109I", 0, *([_OLE_FREE] * 108))
    fat_sector = struct.pack(f"<{len(fat)}I", *fat) + struct.pack("<I", _OLE_FREE) * (128 - len(fat))
    directory = (
        _dir_entry("Root Entry", 5, 1, _OLE_END, 0)
        + _dir_entry(stream, 2, _OLE_FREE, 2, len(body))
        + _dir_entry("", 0, _OLE_FREE, 0, 0) * 2
    )
    return header + fat_sector + directory + body.ljust(sectors * 512, b"\0")
