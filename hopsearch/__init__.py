"""hopsearch — multi-hop question answering over Elasticsearch (DeepRAG, DualRAG, iterative, HyDE).

The names a Python program needs, in one place::

    import asyncio
    from pathlib import Path

    import hopsearch

    async def main() -> None:
        settings = hopsearch.load_settings(es_url=["http://127.0.0.1:9200"])  # or HOPSEARCH_* variables
        async with await hopsearch.open_runtime(settings) as runtime:
            report = await hopsearch.load(runtime, Path("corpus.jsonl"), kind="jsonl")
            assert report.reconciled
            found = await runtime.search("Who directed Jaws?", k=5)
            answer = await runtime.ask("When was the director of Jaws born?", strategy="deeprag")
            answer.raise_for_error()
            print(answer.text, [c.id for c in answer.citations], found.hits[0].title)

    asyncio.run(main())

Everything is imported on first use, so ``import hopsearch`` stays cheap and the service never loads
the loaders. The packages below (``hopsearch.service``, ``hopsearch.loaders``, ``hopsearch.cli``)
hold the rest; names not listed in ``__all__`` may change between releases.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hopsearch.loaders.api import LoadKind, load_docs, load_dpr, load_jsonl, load_qa_contexts
    from hopsearch.loaders.model import LoadOptions, LoadReport, Progress
    from hopsearch.service.app.runtime import STRATEGIES, Runtime
    from hopsearch.service.config.settings import Settings, load_settings
    from hopsearch.service.errors import HopsearchError
    from hopsearch.service.strategies import Answer, AskOptions, Budget
    from hopsearch.service.traces.recorder import Citation, Trace
    from hopsearch.service.types import Hit, RetrievalQuery, SearchResult

__version__ = "0.1.0"

#: Public name → the module that defines it.
_WHERE = {
    "Answer": "hopsearch.service.strategies",
    "AskOptions": "hopsearch.service.strategies",
    "Budget": "hopsearch.service.strategies",
    "Citation": "hopsearch.service.traces.recorder",
    "Hit": "hopsearch.service.types",
    "HopsearchError": "hopsearch.service.errors",
    "LoadKind": "hopsearch.loaders.api",
    "LoadOptions": "hopsearch.loaders.model",
    "LoadReport": "hopsearch.loaders.model",
    "RetrievalQuery": "hopsearch.service.types",
    "Runtime": "hopsearch.service.app.runtime",
    "STRATEGIES": "hopsearch.service.app.runtime",
    "SearchResult": "hopsearch.service.types",
    "Settings": "hopsearch.service.config.settings",
    "Trace": "hopsearch.service.traces.recorder",
    "load_docs": "hopsearch.loaders.api",
    "load_dpr": "hopsearch.loaders.api",
    "load_jsonl": "hopsearch.loaders.api",
    "load_qa_contexts": "hopsearch.loaders.api",
    "load_settings": "hopsearch.service.config.settings",
}

__all__ = [
    "STRATEGIES",
    "Answer",
    "AskOptions",
    "Budget",
    "Citation",
    "Hit",
    "HopsearchError",
    "LoadKind",
    "LoadOptions",
    "LoadReport",
    "RetrievalQuery",
    "Runtime",
    "SearchResult",
    "Settings",
    "Trace",
    "__version__",
    "load",
    "load_docs",
    "load_dpr",
    "load_jsonl",
    "load_qa_contexts",
    "load_settings",
    "open_runtime",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hopsearch' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


async def open_runtime(settings: Settings | None = None, **overrides: Any) -> Runtime:
    """Connect to Elasticsearch and the LLM server: a :class:`Runtime` to ``ask``, ``search`` and load
    with (close it with ``await runtime.close()`` or use it as ``async with``). Without ``settings``
    they are read from ``HOPSEARCH_*`` variables, with ``overrides`` (``es_url=[…]``, ``llm_model=…``)."""
    from hopsearch.service.app.runtime import Runtime
    from hopsearch.service.config.settings import load_settings

    return await Runtime.open(settings or load_settings(**overrides))


async def load(
    runtime: Runtime,
    path: Path,
    *,
    kind: LoadKind,
    options: LoadOptions | None = None,
    progress: Progress | None = None,
) -> LoadReport:
    """Index a corpus into the runtime's passages alias (vectors too where the runtime has an
    embedder): ``dpr`` (psgs_w100.tsv[.gz]), ``jsonl`` (BEIR-style), ``qa`` (the contexts of a HotpotQA /
    2Wiki / MuSiQue file) or ``docs`` (a folder of PDF, Word, HTML, Markdown and text files). The
    report reconciles what was read with what was indexed, rejected (dead letters) and skipped."""
    from hopsearch.loaders.api import LOADERS

    if kind not in LOADERS:
        raise ValueError(f"unknown kind {kind!r}; choose one of {', '.join(LOADERS)}")
    loader = LOADERS[kind].load
    return await loader(runtime.store, Path(path), options, embedder=runtime.embedder, progress=progress)
