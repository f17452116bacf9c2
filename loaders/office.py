"""Text out of Word, Excel and PowerPoint files: ``.docx`` with python-docx, ``.xlsx`` with openpyxl,
``.pptx`` with python-pptx.

A Word document is read in its body's order: paragraphs (a ``Title`` or ``Heading n`` style makes a
heading of that level) and tables where they stand among them, each data row one paragraph that carries
its header (:func:`~hopsearch.loaders.tables.table_blocks`) — so a table stays in the section (under the
heading) it belongs to.

A sheet or a slide is a section: a level-1 heading (the sheet's name; the slide's title, or "Slide n"
where it has none) followed by its paragraphs, so the chunker keeps each chunk's sheet or slide in its
headings as it keeps a docx section's.

Sheets are read in openpyxl's read-only mode (rows streamed from the XML, not a cell object per cell
held in memory) with the values Excel cached for formulas (a formula never calculated, as written by
some programs, has none and contributes nothing). A sheet's runs of rows between empty rows are its
table regions, each read under its header row as records (``部署: 第二製造部 | 部長: 山﨑雅人``), the title
above it (a merged range holds its value in its top-left cell only: a row of one value) its caption, a
heading above the rows. A region without a header row is read row by row, its cells left to right
joined by `` | `` with the empty ones left out: on a 方眼紙 form (a grid of small cells merged into labels
and fields) a label and the value beside it end up next to each other. Hidden sheets
(helper tables, lists behind drop-downs) are skipped, with an INFO log line naming them. Excel's error
values (``#N/A``…) are left out.

Slides: the title placeholder is the heading; then each shape's paragraphs in the slide's reading order
(its shape tree, the order PowerPoint's reading-order pane and screen readers use; groups are
entered), tables as records as for docx (a caption row a paragraph), and last the speaker notes. Slide
numbers, dates and footers are left out (the same on every slide); hidden slides are indexed (backup
slides are content).
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import re
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from itertools import chain, groupby
from typing import TYPE_CHECKING

from hopsearch.loaders.blocks import Block, collapse
from hopsearch.loaders.tables import is_header, one_value, read_table, records, table_blocks
from hopsearch.service.errors import InputError

if TYPE_CHECKING:
    from docx.table import Table
    from docx.text.paragraph import Paragraph
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet
    from pptx.shapes.base import BaseShape
    from pptx.slide import Slide

log = logging.getLogger(__name__)

#: What PowerPoint puts in a deck's title property when nobody gave it one (English and Japanese UI).
_TEMPLATE_TITLES = {"PowerPoint Presentation", "PowerPoint プレゼンテーション"}


def _cell_text(value: object) -> str:
    """Return a cell's value as text: integers without ``.0``, floats to Excel's 15 digits, dates without a midnight."""
    from openpyxl.cell.cell import ERROR_CODES

    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.15g}"
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    text = collapse(str(value))
    return "" if text in ERROR_CODES else text


def _sheet_rows(sheet: ReadOnlyWorksheet) -> Iterator[list[str]]:
    """Yield the sheet's rows, each row's cells by column (``""`` for an empty one), streamed."""
    # The stored dimension may be stale or claim the whole grid (A1:XFD1048576), and openpyxl pads every
    # row and every gap to it: without it a row is as wide as its last cell and missing rows cost nothing.
    sheet.reset_dimensions()
    for row in sheet.values:
        yield list(map(_cell_text, row))


def _sheet_blocks(sheet: ReadOnlyWorksheet) -> list[Block]:
    """Return a sheet's rows, streamed: each table region (rows between empty rows) read under its header row as
    records (:func:`~hopsearch.loaders.tables.read_table`); a title above the region, even with an empty
    row between, is its caption; a region below a table that starts with no header row of its own (the
    table went on after an empty row) keeps that table's header."""
    blocks: list[Block] = []
    header: list[str] | None = None
    titles: list[list[str]] = []  # one-value rows waiting for the table below them
    for filled, group in groupby(_sheet_rows(sheet), key=any):
        if not filled:
            continue
        region = iter(group)  # read on below: its lead rows first, then the rest
        lead: list[list[str]] = []
        first = next(region)
        while one_value(first) and (row := next(region, None)) is not None:
            lead.append(first)
            first = row
        if one_value(first):  # a region of titles (or notes): for the table below, if one comes
            titles.extend([*lead, first])
        elif header is not None and not titles and not lead and not is_header(first):
            blocks.extend(records(header, chain([first], region)))
        else:
            header, rows = read_table(chain(titles, lead, [first], region), level=2)
            blocks.extend(rows)
            titles = []
    blocks.extend(table_blocks(titles, level=2))
    return blocks


def read_xlsx(data: bytes, *, source: str = "") -> tuple[str | None, list[Block]]:
    """Title (the workbook's own, or ``None``) and one section per visible sheet."""
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

    with warnings.catch_warnings():
        # openpyxl warns about parts it does not keep (data validation extensions, slicers): none is text
        warnings.simplefilter("ignore", UserWarning)
        try:
            book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        except (InvalidFileException, zipfile.BadZipFile, KeyError, ValueError, TypeError, OSError) as exc:
            raise InputError(f"unreadable XLSX: {type(exc).__name__}: {exc}") from exc
        try:
            blocks: list[Block] = []
            hidden: list[str] = []
            for sheet in book.worksheets:
                if sheet.sheet_state != "visible":
                    hidden.append(sheet.title)
                    continue
                assert isinstance(sheet, ReadOnlyWorksheet)  # what read-only mode makes
                rows = _sheet_blocks(sheet)
                if rows:
                    blocks.append(Block(collapse(sheet.title), 1))
                    blocks.extend(rows)
            title = book.properties.title
        finally:
            book.close()
    if hidden:
        log.info("%s: hidden sheets not indexed: %s", source or "workbook", ", ".join(map(repr, hidden)))
    return title or None, blocks


def _texts(frame_paragraphs: Iterable[str]) -> list[str]:
    return [text for text in map(collapse, frame_paragraphs) if text]


def _shape_blocks(shape: BaseShape) -> Iterator[Block]:
    """Yield the paragraphs of one shape (a group's shapes in order, a table's rows as records)."""
    from pptx.enum.shapes import PP_PLACEHOLDER
    from pptx.shapes.graphfrm import GraphicFrame
    from pptx.shapes.group import GroupShape

    if isinstance(shape, GroupShape):
        for child in shape.shapes:
            yield from _shape_blocks(child)
        return
    chrome = (PP_PLACEHOLDER.SLIDE_NUMBER, PP_PLACEHOLDER.DATE, PP_PLACEHOLDER.FOOTER)
    if shape.is_placeholder and shape.placeholder_format.type in chrome:
        return
    if shape.has_text_frame:
        yield from map(Block, _texts(p.text for p in shape.text_frame.paragraphs))  # type: ignore[attr-defined]
    elif isinstance(shape, GraphicFrame) and shape.has_table:
        yield from table_blocks([[collapse(cell.text) for cell in row.cells] for row in shape.table.rows], level=0)


def _slide_blocks(slide: Slide, number: int) -> tuple[str, list[Block]]:
    """Return the slide's title (empty where it has none) and its section (none for a slide without text)."""
    title_shape = slide.shapes.title
    title = collapse(title_shape.text_frame.text) if title_shape is not None and title_shape.has_text_frame else ""
    title_id = title_shape.shape_id if title_shape is not None else None  # python-pptx makes a new proxy per access
    body = [block for shape in slide.shapes if shape.shape_id != title_id for block in _shape_blocks(shape)]
    notes: list[str] = []
    if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
        notes = _texts(p.text for p in slide.notes_slide.notes_text_frame.paragraphs)
    if not (title or body or notes):
        return title, []
    return title, [Block(title or f"Slide {number}", 1), *body, *(Block(text) for text in notes)]


def read_pptx(data: bytes) -> tuple[str | None, list[Block]]:
    """Title (the deck's own, else the first slide's) and one section per slide."""
    from pptx import Presentation
    from pptx.exc import PackageNotFoundError, PythonPptxError

    try:
        deck = Presentation(io.BytesIO(data))
    except (PackageNotFoundError, PythonPptxError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise InputError(f"unreadable PPTX: {type(exc).__name__}: {exc}") from exc
    blocks: list[Block] = []
    titles: list[str] = []
    for number, slide in enumerate(deck.slides, start=1):
        title, section = _slide_blocks(slide, number)
        titles.append(title)
        blocks.extend(section)
    title = deck.core_properties.title
    if not title or title in _TEMPLATE_TITLES:
        title = next((t for t in titles if t), "")
    return title or None, blocks


def _docx_paragraph(paragraph: Paragraph) -> Block | None:
    text = collapse(paragraph.text)
    if not text:
        return None
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    match = re.fullmatch(r"Heading (\d)", style)
    return Block(text, 1 if style == "Title" else int(match.group(1)) if match else 0)


def _docx_rows(table: Table, level: int) -> list[Block]:
    """Return a table's rows as records under its header row, its caption a heading of ``level``."""
    return table_blocks([[collapse(cell.text) for cell in row.cells] for row in table.rows], level=level)


def read_docx(data: bytes) -> tuple[str | None, list[Block]]:
    """Title (the document's own, else its first level-1 heading) and its paragraphs and table rows in
    body order."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise InputError(f"unreadable DOCX: {type(exc).__name__}: {exc}") from exc
    blocks: list[Block] = []
    section = 0  # the level of the heading the body is under
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            blocks.extend(_docx_rows(item, min(section + 1, 6)))
        elif (block := _docx_paragraph(item)) is not None:
            blocks.append(block)
            section = block.level or section
    title = document.core_properties.title or next((b.text for b in blocks if b.level == 1), None)
    return title, blocks
