"""ucm.corpus (libucm's corpus reader, ucm/corpus.h) and ucm.tokenize over it, without a model:
the entries `ucm precompute` reads (ids, order, suffix, limit, shards, token_ids passed through),
skipped entries reported, errors as ucm exceptions, the template split, and tokenize's entries
with a stand-in tokenizer. The reader's rules themselves: tests/corpus (test_corpus,
test_corpus_capi)."""
import json

import pytest

import ucm
from ucm import corpus, tokenize

JSONL = ('{"id": "a", "text": "alpha"}\n'
         '\n'
         '{"id": 42, "text": "forty-two"}\n'
         '{"id": 1.5e3, "text": "float id"}\n'
         '{bad json\n'
         '{"id": "e", "text": ""}\n'
         '{"id": "t", "token_ids": [1, 2, 3], "prefix_tokens": 1}\n'
         '{"id": "t0", "token_ids": [4], "text": "ignored"}\n'
         '{"id": "neg", "token_ids": [-1]}\n'
         '{"text": "no id"}\n')


@pytest.fixture()
def jsonl(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(JSONL, encoding="utf-8")
    return p


@pytest.fixture()
def docs(tmp_path):
    d = tmp_path / "docs"
    for rel, text in {"b.rst.txt": "bee", "a/z.rst.txt": "zed", "B.rst.txt": "Bee", "a-b.rst.txt": "dash",
                      "notes.md": "not rst", "empty.rst.txt": ""}.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(text.encode())
    return d


def test_jsonl_entries_as_precompute_reads_them(jsonl, capsys):
    got = list(tokenize.read_corpus(str(jsonl)))
    src = f"{jsonl}:"
    assert got == [
        {"id": "a", "source": src + "1", "text": "alpha"},
        {"id": "42", "source": src + "3", "text": "forty-two"},
        {"id": "1500.0", "source": src + "4", "text": "float id"},
        {"id": "t", "source": src + "7", "token_ids": [1, 2, 3], "prefix_tokens": 1},
        {"id": "t0", "source": src + "8", "token_ids": [4]},
        {"id": "10", "source": src + "10", "text": "no id"},
    ]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3, err
    assert err[0].startswith(f"ucm.tokenize: {src}5: bad JSON") and err[0].endswith("skipped (malformed)")
    assert err[1] == f"ucm.tokenize: {src}6: empty document (id e), skipped (empty)"
    assert err[2].startswith(f"ucm.tokenize: {src}9: \"token_ids\"[0] is -1")
    assert list(tokenize.read_corpus(str(jsonl), limit=2)) == got[:2]


def test_directory_bytewise_order_suffix_and_limit(docs):
    got = list(tokenize.read_corpus(str(docs), ".rst.txt"))
    assert [e["id"] for e in got] == ["B.rst.txt", "a-b.rst.txt", "a/z.rst.txt", "b.rst.txt"]
    assert [e["text"] for e in got] == ["Bee", "dash", "zed", "bee"]
    assert got[2]["source"] == str(docs / "a" / "z.rst.txt")
    assert [e["id"] for e in tokenize.read_corpus(str(docs), "", 2)] == ["B.rst.txt", "a-b.rst.txt"]
    assert len(list(tokenize.read_corpus(str(docs)))) == 5  # notes.md too; empty.rst.txt skipped


def test_corpus_shards_stats_issues_and_close(docs):
    seen = []
    with corpus.Corpus(docs, suffix=".rst.txt", shard=(1, 2), on_issue=lambda *a: seen.append(a)) as c:
        # Sorted .rst.txt files: B 0, a-b 1, a/z 2, b 3, empty 4: shard 1 of 2 has a-b and b.
        assert [e["id"] for e in c] == ["a-b.rst.txt", "b.rst.txt"]
        assert c.stats() == {"documents": 2, "malformed": 0, "empty": 0}
    with corpus.Corpus(docs, glob="empty*", on_issue=lambda *a: seen.append(a)) as c:
        assert list(c) == []
        assert c.stats() == {"documents": 0, "malformed": 0, "empty": 1}
    assert seen == [("empty", str(docs / "empty.rst.txt"), "empty document")]
    c.close()  # idempotent
    with pytest.raises(ValueError):
        c.stats()


def test_errors_are_ucm_exceptions(tmp_path, jsonl):
    with pytest.raises(ucm.NotFound, match="does not exist"):
        corpus.Corpus(tmp_path / "missing.jsonl")
    with pytest.raises(ucm.Invalid, match="shard"):
        corpus.Corpus(jsonl, shard=(2, 2))
    with corpus.Corpus(jsonl, strict=True) as c:
        it = iter(c)
        assert next(it)["id"] == "a"
        next(it), next(it)
        with pytest.raises(ucm.Invalid, match=f"{jsonl}:5"):
            next(it)


def test_template_split(tmp_path):
    t = tmp_path / "t.txt"
    t.write_text("<s>system\n{document}\n</s>", encoding="utf-8")
    assert tokenize.read_template(str(t)) == ("<s>system\n", "\n</s>")
    t.write_text("prefix only \u00e9\n", encoding="utf-8")
    assert corpus.read_template(str(t)) == ("prefix only \u00e9\n", "")
    assert corpus.read_template(None) == ("", "")
    t.write_bytes(b"bad \xff")
    with pytest.raises(ucm.Invalid, match="UTF-8"):
        corpus.read_template(str(t))
    with pytest.raises(ucm.NotFound):
        corpus.read_template(str(tmp_path / "none.txt"))


class CharTokenizer:
    """A stand-in for a Hugging Face tokenizer: one id per character, 1 for the BOS."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([1] if add_special_tokens else []) + [ord(ch) for ch in text]}


def test_tokenize_entries_whole_and_chunks(tmp_path, jsonl):
    t = tmp_path / "t.txt"
    t.write_text("P{document}S", encoding="utf-8")
    whole = list(tokenize.entries(CharTokenizer(), str(jsonl), template=str(t), limit=1))
    assert whole == [{"id": "a", "source": f"{jsonl}:1", "token_ids": [1] + [ord(ch) for ch in "PalphaS"]}]
    t.write_text("P{document}", encoding="utf-8")
    chunks = list(tokenize.entries(CharTokenizer(), str(jsonl), template=str(t), chunks=True))
    assert chunks[0] == {"id": "a", "source": f"{jsonl}:1", "token_ids": [1, ord("P")] + [ord(ch) for ch in "alpha"],
                         "prefix_tokens": 2}
    # Entries that carry token ids pass through as the reader gives them.
    assert chunks[3] == {"id": "t", "source": f"{jsonl}:7", "token_ids": [1, 2, 3], "prefix_tokens": 1}
    json.dumps(chunks)  # what main writes, one line each
