"""The parts of an HTML page that :func:`~hopsearch.loaders.extract.extract_html` reads as more than a
paragraph: a ``<table>`` as records under its header row (its ``<caption>`` the caption; ``colspan`` and
``rowspan`` put each cell under its column) and a nested ``<li>`` after the items it is nested in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hopsearch.loaders.blocks import Block, collapse
from hopsearch.loaders.tables import path_of, table_blocks

if TYPE_CHECKING:
    from selectolax.lexbor import LexborNode

#: The longest list item that names the items nested in it (``本社 > 管理本部``); a longer one is a sentence.
PARENT_CHARS = 40
_BLOCK_TAGS = frozenset({"p", "div", "pre", "blockquote", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6"})
_SPAN_LIMIT = 100  # a colspan/rowspan beyond it is a page's mistake, not a table


def _span(cell: LexborNode, name: str) -> int:
    value = (cell.attributes.get(name) or "1").strip()
    return min(int(value), _SPAN_LIMIT) if value.isdigit() and int(value) > 0 else 1


def closest(node: LexborNode, tag: str) -> LexborNode | None:
    """Return the nearest ancestor of ``node`` with ``tag``, if any."""
    parent = node.parent
    while parent is not None and parent.tag != tag:
        parent = parent.parent
    return parent


def _rows(table: LexborNode) -> list[list[str]]:
    """Return the table's own rows (not a nested table's), each cell under its column."""
    rows: list[list[str]] = []
    carried: dict[int, tuple[str, int]] = {}  # column -> (text, rows it still spans)
    for tr in table.css("tr"):
        owner = closest(tr, "table")
        if owner is None or owner.mem_id != table.mem_id:
            continue
        row: list[str] = []
        for cell in (child for child in tr.iter() if child.tag in ("td", "th")):
            while len(row) in carried:
                row.append(carried[len(row)][0])
            text = collapse(cell.text(separator=""))
            for _ in range(_span(cell, "colspan")):
                if _span(cell, "rowspan") > 1:
                    carried[len(row)] = (text, _span(cell, "rowspan"))
                row.append(text)
        while len(row) in carried:
            row.append(carried[len(row)][0])
        carried = {col: (text, left - 1) for col, (text, left) in carried.items() if left > 1}
        rows.append(row)
    return rows


def html_table(table: LexborNode, level: int) -> list[Block]:
    """Return a ``<table>``'s blocks: its caption, then its rows as records (see :func:`table_blocks`)."""
    caption = table.css_first("caption")
    rows = _rows(table)
    if caption is not None and (text := collapse(caption.text(separator=""))):
        rows.insert(0, [text])
    return table_blocks(rows, level=level)


def own_text(item: LexborNode) -> str:
    """Return a list item's own text (its paragraphs included), without the lists and tables nested in it."""
    nested = ("ul", "ol", "table")
    parts = [
        f"\n{child.text(separator='')}\n" if child.tag in _BLOCK_TAGS else child.text(separator="")
        for child in item.iter(include_text=True)
        if child.tag not in nested
    ]
    return collapse("".join(parts))


def item_text(item: LexborNode) -> str:
    """Return a list item's own text after the (short) texts of the items it is nested in."""
    parents: list[str] = []
    parent = closest(item, "li")
    while parent is not None:
        text = own_text(parent)
        if text and len(text) <= PARENT_CHARS:
            parents.insert(0, text)
        parent = closest(parent, "li")
    return path_of(parents, own_text(item))
