"""Office files and zip bombs: time and peak memory of extracting, each in a fresh process.

Builds (with ``tests/office_files.py``) a typical workbook (a 方眼紙 form and a ledger sheet of
``--rows`` rows), a typical deck (``--slides`` slides with bullets, tables every fourth slide and speaker
notes) and a zip bomb of each zip-based format (one member of 2.28 GB of zeros, the size of the reported
.docx bomb; 2.2 MB on disk), then runs :func:`hopsearch.loaders.extract.extract` on each file in a child
process and prints its wall time, the child's RSS once it has read the file (libraries imported), the
peak RSS during the extraction (``VmHWM`` after resetting it through ``/proc/self/clear_refs``: Linux)
and their difference, with the file's largest member compression ratio.

``--unguarded`` also opens the .docx bomb with python-docx directly, as the loader did before the zip
check (under a 12 GB address-space limit): the before number.

    .venv/bin/python benchmarks/bench_office.py [--rows 10000] [--slides 40] [--unguarded]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the builders live with the tests

from tests.ja_corpus import write_document  # noqa: E402
from tests.office_files import pptx_bytes, xlsx_bytes, zip_bomb  # noqa: E402

BOMB_BYTES = 2_281_701_376
WORDS = tuple("品質 監査 工場 量産 出荷 検査 部品 在庫 納期 仕様 設計 試作 顧客 価格 改善 報告 計画 承認".split(" "))  # noqa: SIM905


def _form() -> dict[str, Any]:
    """A 方眼紙 form: 34 narrow bordered columns, label and field ranges merged, 20 label/value rows."""
    cells: list[list[Any]] = [["A1", "出張申請書"]]
    merged = ["A1:AH1"]
    for row in range(3, 23):
        for label_col, value_col, end_col in (("A", "G", "P"), ("Q", "W", "AH")):
            cells += [[f"{label_col}{row}", f"項目{row}{label_col}"], [f"{value_col}{row}", f"値{row}{value_col}"]]
            label_end = "F" if label_col == "A" else "V"
            merged += [f"{label_col}{row}:{label_end}{row}", f"{value_col}{row}:{end_col}{row}"]
    return {"name": "申請書", "grid": "A1:AH22", "cells": cells, "merged": merged}


def _ledger(rows: int) -> dict[str, Any]:
    rng = random.Random(7)
    header = ["番号", "日付", "品番", "品名", "数量", "単価", "金額", "担当", "部署", "備考"]
    cells: list[list[Any]] = [[f"{chr(65 + c)}1", h] for c, h in enumerate(header)]
    start = datetime(2025, 4, 1)
    for r in range(2, rows + 2):
        qty, price = rng.randint(1, 500), rng.randint(100, 90000)
        values = [
            r - 1,
            start + timedelta(days=rng.randint(0, 365)),
            f"M{rng.randint(1, 99):02d}-{rng.randint(100, 999)}",
            "".join(rng.sample(WORDS, 2)),
            qty,
            price,
            qty * price,
            rng.choice(["山田", "北村", "佐藤", "高木"]),
            rng.choice(["品質管理課", "製造一課", "購買課"]),
            "" if rng.random() < 0.7 else "".join(rng.sample(WORDS, 4)),
        ]
        cells += [[f"{chr(65 + c)}{r}", v] for c, v in enumerate(values) if v != ""]
    return {"name": "台帳", "cells": cells}


def _deck(slides: int) -> dict[str, Any]:
    rng = random.Random(11)
    out = []
    for n in range(1, slides + 1):
        slide: dict[str, Any] = {
            "title": f"第{n}章 " + "".join(rng.sample(WORDS, 2)),
            "texts": ["".join(rng.sample(WORDS, 6)) + "について報告する。" for _ in range(4)],
            "notes": "".join(rng.sample(WORDS, 10)) + "を説明する。" * 3,
        }
        if n % 4 == 0:
            slide["table"] = [["項目", "目標", "実績", "差異"]] + [
                [rng.choice(WORDS), str(rng.randint(1, 99)), str(rng.randint(1, 99)), "±" + str(rng.randint(0, 9))]
                for _ in range(4)
            ]
        out.append(slide)
    return {"title": "品質報告", "slides": out}


def _largest_ratio(data: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = max(archive.infolist(), key=lambda i: i.file_size / max(i.compress_size, 1))
    return f"{info.file_size / max(info.compress_size, 1):,.0f}:1 ({info.filename}, {info.file_size:,} B)"


def child(kind: str, path: str) -> None:
    """Runs in the child: read the file, note RSS, extract (or open unguarded), note time and RSS."""
    data = Path(path).read_bytes()
    import docx
    import openpyxl  # noqa: F401
    import pptx  # noqa: F401

    from hopsearch.loaders.extract import extract
    from hopsearch.service.errors import InputError

    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS (VmHWM) starts again from the current RSS
    start = time.perf_counter()
    outcome = ""
    try:
        if kind == "unguarded":
            limit = 12 * 1024**3
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            docx.Document(io.BytesIO(data))
            outcome = "opened"
        else:
            _, blocks = extract(Path(path).suffix, data)
            outcome = f"{len(blocks):,} blocks, {sum(len(b.text) for b in blocks):,} chars"
    except (InputError, MemoryError, Exception) as exc:
        outcome = f"{type(exc).__name__}: {str(exc)[:110]}"
    wall = time.perf_counter() - start
    peak = _status("VmHWM")
    print(json.dumps({"wall_s": wall, "before_mib": before, "peak_mib": peak, "outcome": outcome}))


def _status(field: str) -> float:
    """A ``/proc/self/status`` memory field, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000, help="rows of the ledger sheet")
    parser.add_argument("--slides", type=int, default=40)
    parser.add_argument("--unguarded", action="store_true", help="also open the .docx bomb without the check")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        files: list[tuple[str, str, Path]] = []
        workbook = xlsx_bytes({"sheets": [_form(), _ledger(args.rows)]})
        deck = pptx_bytes(_deck(args.slides))
        write_document(base / "base.docx", [(1, "休暇規程"), (0, "年次有給休暇は20日。")])
        for name, data in (("typical.xlsx", workbook), ("typical.pptx", deck)):
            (base / name).write_bytes(data)
            files.append(("extract", name, base / name))
        bombs = {
            ".docx": ((base / "base.docx").read_bytes(), "word/document.xml"),
            ".xlsx": (workbook, "xl/worksheets/sheet1.xml"),
            ".pptx": (deck, "ppt/slides/slide1.xml"),
        }
        for suffix, (data, member) in bombs.items():
            (base / f"bomb{suffix}").write_bytes(zip_bomb(data, member, BOMB_BYTES))
            files.append(("extract", f"bomb{suffix}", base / f"bomb{suffix}"))
        if args.unguarded:
            files.append(("unguarded", "bomb.docx (python-docx, no check: before)", base / "bomb.docx"))
        columns = f"{'size':>11} {'largest ratio':>48} {'wall s':>8} {'RSS':>10} {'peak':>10} {'added':>10}"
        print(f"{'file':44} {columns}  outcome")
        for kind, label, path in files:
            command = [sys.executable, __file__, "--child", kind, str(path)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
            if not done.stdout.strip():
                print(f"{label}: child failed: {done.stderr[-400:]}")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            size = path.stat().st_size
            print(
                f"{label:44} {size:>11,} {_largest_ratio(path.read_bytes()):>48} {row['wall_s']:>8.3f} "
                f"{row['before_mib']:>6.1f} MiB {row['peak_mib']:>6.1f} MiB "
                f"{row['peak_mib'] - row['before_mib']:>6.1f} MiB  {row['outcome']}"
            )


if __name__ == "__main__":
    main()
