"""Benchmark question files: HotpotQA, 2WikiMultihopQA, MuSiQue and questions over indexed documents
(JSON array or JSON Lines).

Each record becomes a :class:`QARecord` with its gold answers (aliases included) and its context
paragraphs, which can also be indexed as a corpus. The dataset is detected per record:
MuSiQue has ``paragraphs``; 2Wiki has ``evidences`` or a 2Wiki question type; HotpotQA has ``level``
or Hotpot's types; ``docs`` has no context but ``supporting``, the file names of the documents (loaded by
``hopsearch index docs``) that answer it, e.g. ``{"id": "ja01", "question": "…", "answer": "…",
"supporting": ["org-chart.md", "offices.html"]}``. A record that fits none of them is an
:class:`InputError` naming file and line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hopsearch.service.errors import InputError

Dataset = Literal["hotpotqa", "2wiki", "musique", "docs"]
_2WIKI_TYPES = frozenset({"comparison", "inference", "compositional", "bridge_comparison"})


@dataclass(frozen=True, slots=True)
class Paragraph:
    title: str
    text: str

    @property
    def passage_id(self) -> str:
        """Deterministic id: the same paragraph in many questions is indexed once."""
        return hashlib.sha1(f"{self.title}\n{self.text}".encode()).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class QARecord:
    id: str
    question: str
    answers: tuple[str, ...]
    dataset: Dataset
    type: str
    paragraphs: tuple[Paragraph, ...]
    position: int  # 1-based line (JSONL) or element (JSON array) number
    #: Titles of the supporting paragraphs, in order, each once (evidence recall in ``hopsearch eval``);
    #: of a ``docs`` record, the file names of its supporting documents.
    supporting: tuple[str, ...] = ()

    @property
    def gold_ids(self) -> frozenset[str]:
        """Passage ids of the supporting paragraphs among the context (as the QA-context loader ids them)."""
        titles = set(self.supporting)
        return frozenset(p.passage_id for p in self.paragraphs if p.title in titles)


def detect(record: Mapping[str, Any]) -> Dataset | None:
    if "paragraphs" in record:
        return "musique"
    if "context" not in record:
        return "docs" if "supporting" in record else None
    if "evidences" in record or record.get("type") in _2WIKI_TYPES:
        return "2wiki"
    return "hotpotqa"


def parse_record(record: Mapping[str, Any], *, source: str, position: int) -> QARecord:
    """One raw record as a :class:`QARecord`; an :class:`InputError` names the field that is wrong."""
    dataset = detect(record)
    if dataset is None:
        raise InputError(
            "not a HotpotQA, 2WikiMultihopQA or MuSiQue record, nor one with 'supporting' documents",
            source=source,
            position=position,
        )
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise InputError("field 'question' is missing or empty", source=source, position=position)
    answer = record.get("answer")
    answers = [answer] if isinstance(answer, str) else []
    answers += [a for a in record.get("answer_aliases") or [] if isinstance(a, str)]
    paragraphs: list[Paragraph] = []
    if dataset == "docs":
        supporting = record["supporting"]
        if not isinstance(supporting, list) or not all(isinstance(s, str) and s.strip() for s in supporting):
            raise InputError("field 'supporting' must be a list of file names", source=source, position=position)
    try:
        if dataset == "musique":
            for para in record["paragraphs"]:
                paragraphs.append(Paragraph(str(para["title"]), str(para["paragraph_text"])))
        elif dataset != "docs":
            for title, sentences in record["context"]:
                text = " ".join(str(s).strip() for s in sentences) if isinstance(sentences, list) else str(sentences)
                paragraphs.append(Paragraph(str(title), text))
    except (KeyError, TypeError, ValueError) as exc:
        field = "paragraphs" if dataset == "musique" else "context"
        raise InputError(f"field '{field}' is malformed ({exc})", source=source, position=position) from exc
    rid = record.get("_id", record.get("id", f"{Path(source).stem}-{position}"))
    return QARecord(
        id=str(rid),
        question=question.strip(),
        answers=tuple(answers),
        dataset=dataset,
        type=str(record.get("type") or (str(rid).split("__")[0] if dataset == "musique" else "")),
        paragraphs=tuple(paragraphs),
        position=position,
        supporting=supporting_titles(record, dataset),
    )


def supporting_titles(record: Mapping[str, Any], dataset: Dataset) -> tuple[str, ...]:
    """Return the supporting paragraphs' titles: ``supporting_facts`` ``[title, sentence]`` pairs (HotpotQA,
    2Wiki) or the MuSiQue paragraphs marked ``is_supporting``; malformed entries are skipped."""
    if dataset == "docs":
        raw = list(record.get("supporting") or [])
    elif dataset == "musique":
        raw = [
            p.get("title") for p in record.get("paragraphs") or [] if isinstance(p, Mapping) and p.get("is_supporting")
        ]
    else:
        raw = [f[0] for f in record.get("supporting_facts") or [] if isinstance(f, list | tuple) and f]
    return tuple(dict.fromkeys(str(title) for title in raw if isinstance(title, str) and title.strip()))


def _raw_records(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as fh:
        head = fh.read(64).lstrip()
    if head.startswith(b"["):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"invalid JSON array ({exc})", source=str(path)) from exc
        yield from enumerate(data, start=1)
        return
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield number, json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InputError(f"invalid JSON ({exc})", source=str(path), position=number) from exc


def read_questions(path: Path, *, limit: int | None = None) -> list[QARecord]:
    """Read up to ``limit`` question records; the first bad record raises with its file and line."""
    if not path.is_file():
        raise InputError("no such file", source=str(path))
    out: list[QARecord] = []
    for position, raw in _raw_records(path):
        if limit is not None and len(out) >= limit:
            break
        if not isinstance(raw, dict):
            raise InputError("a record must be a JSON object", source=str(path), position=position)
        out.append(parse_record(raw, source=str(path), position=position))
    return out
