"""Text and structure out of company documents, with maintained libraries.

``.md`` markdown-it-py · ``.txt`` blank-line paragraphs · ``.csv`` the csv module, one row a paragraph ·
``.html``/``.htm`` selectolax (Lexbor) (these four decoded by :mod:`hopsearch.loaders.decode`) ·
``.pdf`` pypdf · ``.docx`` python-docx · ``.xlsx`` openpyxl · ``.pptx`` python-pptx (the last three in
:mod:`hopsearch.loaders.office`). Every extractor returns the document title (``None`` when the file has
none) and a list of :class:`Block` in reading order: headings (with their level; one below another written
as its path, ``本社 > 管理本部``) and paragraphs, a table's data rows as records that carry its header
(:mod:`hopsearch.loaders.tables`). A file
that a library cannot read raises :class:`InputError` with the library's reason. The zip-based formats
(docx, xlsx, pptx) are held to :class:`ZipLimits` before their library opens them
(:mod:`hopsearch.loaders.ziplimits`).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from hopsearch.loaders.blocks import Block, collapse
from hopsearch.loaders.decode import decode_text
from hopsearch.loaders.html_parts import PARENT_CHARS, closest, html_table, item_text
from hopsearch.loaders.tables import outline, path_of, record_cut, table_blocks
from hopsearch.loaders.ziplimits import ZIP_FORMATS, ZipLimits, check_zip
from hopsearch.service.errors import InputError

if TYPE_CHECKING:
    from selectolax.lexbor import LexborHTMLParser, LexborNode


_BLANK = re.compile(r"\n\s*\n")


def _paragraphs(text: str) -> list[Block]:
    out = []
    for part in _BLANK.split(text):
        clean = collapse(part)
        if clean:
            out.append(Block(clean))
    return out


def extract_txt(data: bytes) -> tuple[str | None, list[Block]]:
    return None, _paragraphs(decode_text(data))


_UNTIDY_ROW = re.compile(r"[^\S \n]|  |^ | $", re.MULTILINE)  # cells (one a line) that collapse() would change


def _cells(row: list[str]) -> list[str]:
    """Return a row's cells with their whitespace collapsed (checked on the whole row first: most need nothing)."""
    joined = "\n".join(row)
    if joined.isascii() and joined.count("\n") == len(row) - 1 and not _UNTIDY_ROW.search(joined):
        return row
    return [collapse(cell) for cell in row]


def extract_csv(data: bytes) -> tuple[str | None, list[Block]]:
    """Read one paragraph per row: its non-empty cells as ``header: value``, joined by `` | ``.

    The header row names the columns (:func:`~hopsearch.loaders.tables.record_cut`); a cell beyond it stands
    alone, as do the cells past a row's label budget when the header is far longer than the row (then the
    header is a paragraph of its own, first). The delimiter (``,``, tab, ``;``) is sniffed.
    """
    text = decode_text(data)
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:8192], delimiters=",\t;")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    try:
        rows = list(reader)
    except csv.Error as exc:
        raise InputError(f"unreadable CSV at line {reader.line_num}: {exc}") from exc
    header = [collapse(cell) for cell in rows[0]] if rows else []
    blocks: list[Block] = []
    cut = False
    for row in rows[1:]:
        text, row_cut = record_cut(header, _cells(row))
        cut = cut or row_cut
        if text:
            blocks.append(Block(text))
    if cut:  # some names left out: the header said once, first
        blocks.insert(0, Block(" | ".join(name for name in header if name)))
    return None, blocks


def extract_md(data: bytes) -> tuple[str | None, list[Block]]:
    """Headings, paragraphs, code, tables as records (:func:`~hopsearch.loaders.tables.table_blocks`) and a
    nested list item after its parents' text (``本社 > 管理本部 > 総務部``)."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(decode_text(data))
    blocks: list[Block] = []
    level = section = 0
    items: list[str | None] = []  # the open list items' first paragraphs (None until read)
    table: list[list[str]] | None = None
    for token in tokens:
        if token.type == "heading_open":
            level = section = int(token.tag[1])
        elif token.type == "heading_close":
            level = 0
        elif token.type in ("list_item_open", "list_item_close"):
            items = [*items, None] if token.type == "list_item_open" else items[:-1]
        elif token.type in ("table_open", "tr_open"):
            table = [] if token.type == "table_open" else [*(table or []), []]
        elif token.type == "table_close" and table is not None:
            blocks.extend(table_blocks(table, level=min(section + 1, 6)))
            table = None
        elif token.type == "inline" and table:
            table[-1].append(collapse(token.content))
        elif token.type == "inline" and (text := collapse(token.content)):
            if items and items[-1] is None:
                items[-1] = text
                text = path_of([p for p in items[:-1] if p and len(p) <= PARENT_CHARS], text)
            blocks.append(Block(text, level))
        elif token.type in ("fence", "code_block") and token.content.strip():
            blocks.append(Block(token.content.strip()))
    title = next((b.text for b in blocks if b.level == 1), None)
    return title, blocks


_HTML_BLOCKS = "h1,h2,h3,h4,h5,h6,p,li,pre,blockquote,table,dt,dd,figcaption"
#: Page chrome rather than content: navigation, banners, site footers, sidebars; texinfo's
#: "Next: … Previous: … Up: …" panels (``nav-panel``, older ``header``), DocBook's ``navheader``/``navfooter``.
_HTML_CHROME = (
    "nav,aside,[role=navigation],[role=banner],[role=contentinfo],[role=search],"
    ".nav-panel,.navheader,.navfooter,.navigation,.breadcrumb,.breadcrumbs,.skip-link"
)
_SECTIONING = {"article", "main", "section"}
#: A paragraph that is nothing but a navigation line: "Next: X, Previous: Y, Up: Z".
_NAV_LINE = re.compile(r"^(?:\W*(?:next|previous|prev|up|contents|index|home)\s*:[^:]*?){2,}$", re.IGNORECASE)


def _in_sectioning(node: LexborNode) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.tag in _SECTIONING:
            return True
        parent = parent.parent
    return False


def _drop_chrome(tree: LexborHTMLParser) -> None:
    """Remove navigation, header and footer boilerplate (an ``<article>``'s own header, which carries
    its title, stays)."""
    for node in tree.css(_HTML_CHROME):
        node.decompose()
    for node in tree.css("header,footer,div.header,div.footer"):
        if not _in_sectioning(node):
            node.decompose()


def extract_html(data: bytes) -> tuple[str | None, list[Block]]:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(decode_text(data, html=True))
    for node in tree.css("script,style,noscript,template"):
        node.decompose()
    _drop_chrome(tree)
    for br in tree.css("br"):
        br.replace_with("\n")  # a line break; inline markup (<b>, <a>, <span>) joins its text as written
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node is not None else None
    blocks: list[Block] = []
    section = 0
    for node in tree.css(_HTML_BLOCKS):
        if closest(node, "table") is not None:
            continue  # read with its table
        if node.tag == "table":
            blocks.extend(html_table(node, min(section + 1, 6)))
            continue
        if node.tag != "li" and (closest(node, "li") is not None or len(node.css(_HTML_BLOCKS)) > 1):
            continue  # read with its list item, or its inner blocks come on their own (lexbor matches the node too)
        text = item_text(node) if node.tag == "li" else collapse(node.text(separator=""))
        if text and not _NAV_LINE.match(text):
            tag = node.tag or ""
            level = int(tag[1]) if re.fullmatch(r"h[1-6]", tag) else 0
            section = level or section
            blocks.append(Block(text, level))
    if not blocks and tree.body is not None:
        blocks = _paragraphs(tree.body.text(separator="\n"))
    return title or next((b.text for b in blocks if b.level == 1), None), blocks


def extract_pdf(data: bytes) -> tuple[str | None, list[Block]]:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        pages = [page.extract_text() or "" for page in reader.pages]
        meta = reader.metadata
        title = str(meta.title) if meta is not None and meta.title else None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise InputError(f"unreadable PDF: {type(exc).__name__}: {exc}") from exc
    blocks: list[Block] = []
    for page in pages:
        blocks.extend(_paragraphs(page))
    return title, blocks


def extract_docx(data: bytes) -> tuple[str | None, list[Block]]:
    from hopsearch.loaders.office import read_docx  # imported when used (python-docx loads with it)

    return read_docx(data)


def extract_xlsx(data: bytes, *, source: str = "") -> tuple[str | None, list[Block]]:
    from hopsearch.loaders.office import read_xlsx  # imported when used (openpyxl loads with it)

    return read_xlsx(data, source=source)


def extract_pptx(data: bytes) -> tuple[str | None, list[Block]]:
    from hopsearch.loaders.office import read_pptx

    return read_pptx(data)


EXTRACTORS: dict[str, Callable[[bytes], tuple[str | None, list[Block]]]] = {
    ".md": extract_md,
    ".markdown": extract_md,
    ".txt": extract_txt,
    ".csv": extract_csv,
    ".html": extract_html,
    ".htm": extract_html,
    ".pdf": extract_pdf,
    ".docx": extract_docx,
    ".xlsx": extract_xlsx,
    ".pptx": extract_pptx,
}


#: The version of every extractor (see :func:`extractor_version`; bump it when a file's text can come out
#: differently, so that the skip check reads the files again): 2, text files decoded by
#: :mod:`~hopsearch.loaders.decode` (before, latin-1 mojibake) and .docx tables where they stand in the
#: body; 3, table rows as records under their header, nested headings and lists as paths
#: (``本社 > 管理本部``), and the space typed between Japanese words (「佐藤 花子」) kept.
EXTRACTOR_VERSION = 3


def extractor_version(suffix: str) -> int:
    """Return the version of the code that turns a file of this suffix into text, stored with its chunks
    (``metadata.extractor``; chunks without one are version 1): a file whose chunks are older is read
    again even when its bytes are unchanged. One version for every suffix (the rules they share changed
    together)."""
    del suffix
    return EXTRACTOR_VERSION


def extract(
    suffix: str, data: bytes, *, source: str = "", limits: ZipLimits | None = None
) -> tuple[str | None, list[Block]]:
    """Title and blocks of a file's bytes, by its suffix (see :data:`EXTRACTORS`). A zip-based file is
    first checked against ``limits`` (default: the settings' defaults); ``source`` names the file in log
    lines."""
    suffix = suffix.lower()
    if suffix in ZIP_FORMATS:
        check_zip(data, limits or ZipLimits(), suffix.lstrip(".").upper())
    try:
        if suffix == ".xlsx":  # the one extractor that logs (the hidden sheets it skips), so it names the file
            title, blocks = extract_xlsx(data, source=source)
        else:
            title, blocks = EXTRACTORS[suffix](data)
    except InputError:
        raise
    except Exception as exc:  # a library's own failure on a malformed file, whatever its type
        raise InputError(f"cannot extract {suffix} text: {type(exc).__name__}: {exc}") from exc
    return title, outline(blocks)
