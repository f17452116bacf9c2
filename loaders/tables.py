"""Tables as records, and outlines as paths: what every extractor that reads a table or a nested list shares.

A table's data row is one paragraph that carries its header: ``部署: 第二製造部 | 部長: 山﨑雅人 | 次長: 三枝智子``
(:func:`record`), so that each row — and each chunk of a long table, whatever rows it holds — says what
its values are. :func:`table_blocks` reads a table given as rows of cell texts (positional, ``""`` for an
empty cell): rows above the header that hold one value (a merged title, the table's caption) become a
heading before the rows; the header is the first row with two or more values, none of them a number or a
date (a form's ``申請日 | 2025-04-01`` is no header); a row whose cells all repeat one value (a section row
merged across the table) stays a paragraph of its own. A table without such a header is read row by row as
before, its non-empty cells joined by `` | ``.

:func:`outline` gives a heading below another heading its path (``本社 > 管理本部 > 総務部``), and
:func:`path_of` does the same for an item of a nested list, so an org chart written as nested headings
or lists reads ``parent > child`` in its chunks (a chunk's ``headings`` as in its text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, zip_longest

from hopsearch.loaders.blocks import Block

#: Between the parts of an outline path.
PATH_SEP = " > "
#: A cell that is a number or a date (with its separators), which a header row never holds.
_VALUE = re.compile(r"[-+]?[\d０-９][\d０-９,.:/\-年月日 ]*%?")


#: A row's column names together may be at most this many times its own cells' length, plus
#: :data:`LABEL_SLACK` characters: a long header repeated on every row of a wide table would make its text
#: grow with rows × header (a 240 KiB CSV into tens of MiB); past the budget, cells stand alone.
LABEL_RATIO = 2
LABEL_SLACK = 64


def record(header: Sequence[str], cells: Sequence[str]) -> str:
    """Return one row as ``name: value`` pairs joined by `` | `` (see :func:`record_cut`)."""
    return record_cut(header, cells)[0]


def record_cut(header: Sequence[str], cells: Sequence[str]) -> tuple[str, bool]:
    """Return one row as ``name: value`` pairs joined by `` | ``, and whether its label budget left a name out.

    Empty cells are left out; a cell under no header name, or beyond the header, stands alone; a pair that
    repeats the one before it (a merged cell) is said once. The names may total :data:`LABEL_RATIO` times
    the row's text plus :data:`LABEL_SLACK`: once a name is over the budget, it and the rest of the row's
    cells stand alone (no gaps to misread), so a row's text stays linear in the row.
    """
    budget = LABEL_RATIO * sum(map(len, cells)) + LABEL_SLACK
    pairs = zip_longest(header, cells, fillvalue="")
    named: list[str] = []
    for name, cell in pairs:
        if not cell:
            continue
        if len(name) > budget:
            named.append(cell)
            named.extend(rest for _, rest in pairs if rest)
            return " | ".join(named), True
        budget -= len(name)
        pair = f"{name}: {cell}" if name and name != cell else cell
        if not named or named[-1] != pair:
            named.append(pair)
    return " | ".join(named), False


def _values(row: Sequence[str]) -> list[str]:
    return [cell for cell in row if cell]


def is_header(row: Sequence[str]) -> bool:
    """Whether a row can head a table: two or more values, none a number or a date."""
    values = _values(row)
    return len(set(values)) >= 2 and not any(_VALUE.fullmatch(value) for value in values)


def _plain(row: Sequence[str]) -> str:
    values = _values(row)
    return " | ".join(value for n, value in enumerate(values) if n == 0 or value != values[n - 1])


def one_value(row: Sequence[str]) -> bool:
    """Whether a row holds one value only (a title merged across a table, or repeated in every cell)."""
    return len(set(_values(row))) == 1


def records(header: Sequence[str], rows: Iterable[Sequence[str]]) -> Iterator[Block]:
    """Rows under ``header``: each a :func:`record`, but a section row (one value in every cell) stays as it is."""
    for row in rows:
        values = _values(row)
        if values:
            spanning = len(values) > 1 and len(set(values)) == 1  # a section row merged across the table
            yield Block(values[0] if spanning else record(header, row))


def read_table(rows: Iterable[Sequence[str]], *, level: int) -> tuple[list[str] | None, Iterator[Block]]:
    """Return a table's header row (``None`` where it has none to read records by) and its blocks (see the module
    docstring), read as they are iterated: its caption as a heading of ``level`` (a paragraph where
    ``level`` is 0) where it has one, then its rows as records under the header."""
    rows = (row for row in rows if _values(row))
    head: list[Sequence[str]] = []  # the caption rows, then the header row
    for row in rows:
        head.append(row)
        if not one_value(row):
            break
    following = next(rows, None) if head and not one_value(head[-1]) else None
    if following is None or not is_header(head[-1]):
        return None, (Block(_plain(row)) for row in chain(head, [following] if following else [], rows))
    caption = " ".join(dict.fromkeys(_values(row)[0] for row in head[:-1]))
    body = records(head[-1], chain([following], rows))
    return list(head[-1]), chain([Block(caption, level)] if caption else [], body)


def table_blocks(rows: Iterable[Sequence[str]], *, level: int) -> list[Block]:
    """Return a table's blocks (see :func:`read_table`)."""
    return list(read_table(rows, level=level)[1])


def outline(blocks: Sequence[Block]) -> list[Block]:
    """Return the blocks with each heading below another heading written as its path (``本社 > 管理本部 > 総務部``)."""
    path: list[tuple[int, str]] = []
    out: list[Block] = []
    for block in blocks:
        if not block.level:
            out.append(block)
            continue
        path = [(level, text) for level, text in path if level < block.level]
        path.append((block.level, block.text))
        out.append(Block(PATH_SEP.join(text for _, text in path), block.level))
    return out


def path_of(parents: Sequence[str], text: str) -> str:
    """Return a nested list item's text after its parents' (``本社 > 管理本部 > 総務部``)."""
    return PATH_SEP.join([*parents, text]) if parents else text
