"""The token-ids route on real text, with a real server tokenizer (transformers >= 5).

Documents of the python3.11-doc corpus where digits follow white space: transformers 5 builds
SmolLM2's GPT2Tokenizer without the Digits pre-tokenizer step that tokenizer.json declares, so it
tokenizes them differently from ucm (and from the `tokenizers` library ucm follows).

  * text route: a server tokenizing template + document + question with transformers misses the
    blocks after the first difference (measured here, so the test shows the problem is real);
  * token-ids route: `python -m ucm.tokenize` writes the server's ids, `ucm precompute` stores
    them, and the server's lookup finds every full block before the question;
  * `ucm tokenize --compare` names the first divergence, checked against `tokenizers` vs
    transformers computed here;
  * bad token-ids entries are skipped with their line and reason, nothing else is lost;
  * --chunks from ids: the chunk prefix comes from the entries' prefix_tokens.
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import ucm
from doc_corpus import run, write_corpus
from ucm.corpus import read_template

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["c-api/apiabiversion.rst.txt", "library/pickletools.rst.txt", "library/sched.rst.txt",
        "library/urllib.robotparser.rst.txt", "c-api/bool.rst.txt"]
TEMPLATE = ROOT / "configs" / "template_chat.txt"
QUESTION = "\nQuestion: what is 2 + 2? Answer in 3 words."
T = 16
# These tests check token ids, block hashes and registry entries, never K/V values: the faster
# compute path where the CPU has one (--compute-dtype auto: bf16 on AMX or AMD's AVX512-BF16,
# else fp32),
# on one thread, as ctest runs two model tests side by side (5 documents, 4,464 tokens, one core:
# 12.0 s with bf16 on AMX, 18.8 s with fp32).
FAST = ["--compute-dtype", "auto", "--threads", "1"]

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory, "tokids", DOCS)


@pytest.fixture(scope="module")
def server_tok(model_dir):
    return transformers.AutoTokenizer.from_pretrained(str(model_dir))


def template_parts():
    return read_template(str(TEMPLATE))  # split as precompute splits it (ucm/corpus.h)


def server_prompt_ids(tok, text):
    pre, suf = template_parts()
    return tok(pre + text + suf + QUESTION)["input_ids"]


def found_blocks(store_path, tok, texts):
    """Per document, (blocks a transformers-tokenizing server finds, full blocks before the question)."""
    pre, suf = template_parts()
    out = []
    with ucm.Store(str(store_path)) as s:
        ns = s.namespace(s_namespace_name(s))
        for text in texts:
            ids = server_prompt_ids(tok, text)
            before_q = len(tok(pre + text + suf)["input_ids"]) // T
            hit = s.lookup(ns, ucm.hash_blocks(ns.hash_seed, ids, ns.block_size))
            out.append((hit.prefix_blocks, before_q))
    return out


def s_namespace_name(store):
    # The store holds one namespace, precompute's default name; find it through inspect's JSON.
    rep = json.loads(run([os.environ.get("UCM_BIN", ROOT / "build/bin/ucm"), "inspect", store.path, "--json"]).stdout)
    names = [n["name"] for n in rep["namespaces"]]
    assert len(names) == 1, names
    return names[0]


def test_text_route_misses_and_token_ids_route_finds_every_block(corpus, model_dir, server_tok, ucm_bin):
    d, docs = corpus
    texts = [json.loads(l)["text"] for l in open(docs)]
    # The text route (ucm's own tokenizer): the problem, measured.
    text_store = d / "text-store"
    out = run([ucm_bin, "precompute", *FAST, "--model", model_dir, "--corpus", docs, "--store", text_store,
               "--template", TEMPLATE, "--json"])
    assert json.loads(out.stdout)["documents"] == len(DOCS)
    assert "GPT2Tokenizer" in out.stderr and "token_ids" in out.stderr, "precompute on text must warn"
    before = found_blocks(text_store, server_tok, texts)
    assert sum(f for f, _ in before) < sum(n for _, n in before), before

    # The token-ids route: the server's tokenizer writes the ids, precompute stores them.
    ids_path = d / "ids.jsonl"
    run([sys.executable, "-m", "ucm.tokenize", "--tokenizer", model_dir, "--template", TEMPLATE,
         "--corpus", docs, "--out", ids_path], env={**os.environ, "PYTHONPATH": str(ROOT / "lib/python")})
    entries = [json.loads(l) for l in open(ids_path)]
    assert [e["id"] for e in entries] == DOCS
    pre, suf = template_parts()
    for e, text in zip(entries, texts):
        assert e["token_ids"] == server_tok(pre + text + suf)["input_ids"]
    ids_store = d / "ids-store"
    out = run([ucm_bin, "precompute", *FAST, "--model", model_dir, "--corpus", ids_path, "--store", ids_store, "--json"])
    rep = json.loads(out.stdout)
    assert rep["documents"] == len(DOCS) and not rep.get("skipped_entries")
    assert "GPT2Tokenizer" not in out.stderr, "no tokenizer warning when every entry is token ids"
    after = found_blocks(ids_store, server_tok, texts)
    assert all(f == n for f, n in after), after
    # Every registry entry says it came as ids (store_v1.md §5.6 "input").
    insp = json.loads(run([ucm_bin, "inspect", ids_store, "--docs", "--json"]).stdout)
    assert sorted(x["id"] for x in insp["docs"]) == sorted(DOCS)
    assert {x["input"] for x in insp["docs"]} == {"token_ids"}
    insp = json.loads(run([ucm_bin, "inspect", text_store, "--docs", "--json"]).stdout)
    assert {x["input"] for x in insp["docs"]} == {"text"}
    print("blocks found by a transformers-tokenizing server, text route:", before, "token-ids route:", after)


def test_tokenize_compare_names_the_first_divergence(corpus, model_dir, server_tok, ucm_bin):
    d, docs = corpus
    ids_path = d / "cmp.jsonl"
    ref = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))  # what ucm follows
    pre, suf = template_parts()
    want = {}
    with open(ids_path, "w") as f:
        for l in open(docs):
            e = json.loads(l)
            server = server_tok(pre + e["text"] + suf)["input_ids"]
            f.write(json.dumps({"id": e["id"], "token_ids": server}) + "\n")
            ours = ref.encode(pre + e["text"] + suf, add_special_tokens=False).ids
            i = next((k for k, (a, b) in enumerate(zip(ours, server)) if a != b), min(len(ours), len(server)))
            want[e["id"]] = None if ours == server else (i, ours[i] if i < len(ours) else -1,
                                                          server[i] if i < len(server) else -1)
    assert any(v is not None for v in want.values()), "these documents were chosen because the tokenizers differ"
    p = run([ucm_bin, "tokenize", "--model", model_dir, "--template", TEMPLATE, "--corpus", docs,
             "--compare", ids_path, "--json"], ok=(6,))
    rep = json.loads(p.stdout)
    assert rep["compared"] == len(DOCS) and rep["differ"] == sum(v is not None for v in want.values())
    for e in rep["entries"]:
        w = want[e["id"]]
        assert e["match"] == (w is None), e["id"]
        if w is None:
            continue
        fd = e["first_difference"]
        assert (fd["position"], fd["ours"]["id"], fd["given"]["id"]) == w, (e["id"], fd, w)
        assert fd["ours"]["token"] == ref.id_to_token(w[1])
        assert fd["given"]["token"] == ref.id_to_token(w[2])
        assert fd["text_before"], "the text before the difference is shown"
    # Text form: one DIFFER line per differing document naming the position.
    p = run([ucm_bin, "tokenize", "--model", model_dir, "--template", TEMPLATE, "--corpus", docs,
             "--compare", ids_path], ok=(6,))
    texts = {json.loads(l)["id"]: json.loads(l)["text"] for l in open(docs)}
    for doc_id, w in want.items():
        if w is not None:
            n_ours = len(ref.encode(pre + texts[doc_id] + suf, add_special_tokens=False).ids)
            assert f"DIFFER  {doc_id} at token {w[0]} (ucm {n_ours} tokens" in p.stdout, p.stdout
    for e in rep["entries"]:
        assert e["tokens"] == len(ref.encode(pre + texts[e["id"]] + suf, add_special_tokens=False).ids)
    # Without --compare: a token-ids corpus equal to `tokenizers`' ids.
    p = run([ucm_bin, "tokenize", "--model", model_dir, "--template", TEMPLATE, "--corpus", docs])
    lines = [json.loads(l) for l in p.stdout.splitlines()]
    assert [e["id"] for e in lines] == DOCS
    for e in lines:
        assert e["token_ids"] == ref.encode(pre + texts[e["id"]] + suf, add_special_tokens=False).ids


def test_bad_token_id_entries_are_skipped_with_reasons(corpus, model_dir, ucm_bin):
    d, _ = corpus
    path = d / "bad.jsonl"
    good = list(range(100, 100 + 3 * T))
    lines = [{"id": "good", "token_ids": good},
             {"id": "oov", "token_ids": good[:20] + [49152] + good[20:]},
             {"id": "empty", "token_ids": []},
             {"id": "float", "token_ids": [1, 2.5, 3]},
             {"id": "neg", "token_ids": [1, -4, 3]},
             {"id": "str", "token_ids": "1 2 3"},
             {"id": "prefix", "token_ids": good, "prefix_tokens": 999},
             {"id": "good2", "token_ids": good[:T] + [7] * (2 * T), "text": "ignored: ids win"}]
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    p = run([ucm_bin, "precompute", *FAST, "--model", model_dir, "--corpus", path, "--store", d / "bad-store", "--json"])
    rep = json.loads(p.stdout)
    assert rep["documents"] == 2
    by_line = {e["location"].rsplit(":", 1)[1]: e for e in rep["skipped_entries"]}
    assert set(by_line) == {"2", "3", "4", "5", "6", "7"}, rep["skipped_entries"]
    assert "49152" in by_line["2"]["reason"] and "vocabulary" in by_line["2"]["reason"]
    assert by_line["2"]["kind"] == "out_of_vocabulary"
    assert by_line["3"]["kind"] == "empty"
    assert "token_ids\"[1]" in by_line["4"]["reason"] and "2.5" in by_line["4"]["reason"]
    assert "token_ids\"[1]" in by_line["5"]["reason"] and "-4" in by_line["5"]["reason"]
    assert "not an array" in by_line["6"]["reason"]
    assert "prefix_tokens" in by_line["7"]["reason"]
    with ucm.Store(str(d / "bad-store")) as s:
        ns = s.namespace(s_namespace_name(s))
        assert s.document(ns, "good").tokens == 3 * T
        hit = s.lookup(ns, ucm.hash_blocks(ns.hash_seed, good, T))
        assert hit.prefix_blocks == 3
    # --strict: the first bad entry stops the run, naming it.
    p = run([ucm_bin, "precompute", *FAST, "--model", model_dir, "--corpus", path, "--store", d / "strict-store",
             "--strict", "--json"], ok=(1,))
    assert "oov" in p.stderr or "49152" in p.stderr


def test_chunks_from_token_ids(corpus, model_dir, server_tok, ucm_bin):
    d, docs = corpus
    ids_path = d / "chunks.jsonl"
    tpl = d / "chunk_template.txt"
    tpl.write_text(template_parts()[0])  # a chunk template has no suffix
    run([sys.executable, "-m", "ucm.tokenize", "--tokenizer", model_dir, "--template", tpl, "--corpus", docs,
         "--chunks", "--out", ids_path], env={**os.environ, "PYTHONPATH": str(ROOT / "lib/python")})
    entries = [json.loads(l) for l in open(ids_path)]
    prefix = server_tok(tpl.read_text())["input_ids"]
    assert all(e["prefix_tokens"] == len(prefix) and e["token_ids"][:len(prefix)] == prefix for e in entries)
    store = d / "chunk-store"
    rep = json.loads(run([ucm_bin, "precompute", *FAST, "--model", model_dir, "--corpus", ids_path, "--store", store,
                          "--chunks", "--json"]).stdout)
    assert rep["documents"] == len(DOCS)
    texts = [json.loads(l)["text"] for l in open(docs)]
    with ucm.Store(str(store)) as s:
        ns = s.namespace(s_namespace_name(s))
        assert s.chunk_prefix(ns).tolist() == prefix
        assert s.rope_params(ns).head_dim == 64
        for e, text in zip(entries, texts):
            assert s.document(ns, "chunk:" + e["id"]).tokens == len(e["token_ids"]) // T * T
            # A blending server: its chunk prefix from the store, the document tokenized on its own.
            ids = list(s.chunk_prefix(ns)) + server_tok(text, add_special_tokens=False)["input_ids"]
            hit = s.lookup(ns, ucm.hash_blocks(ns.hash_seed, ids, T))
            assert hit.prefix_blocks == len(ids) // T
    # An entry whose prefix differs from the namespace's is skipped, naming where.
    bad = d / "chunks-bad.jsonl"
    e = dict(entries[0], id="other-prefix")
    e["token_ids"] = [5] + e["token_ids"][1:]
    bad.write_text(json.dumps(e) + "\n")
    rep = json.loads(run([ucm_bin, "precompute", *FAST, "--model", model_dir, "--corpus", bad, "--store", store,
                          "--chunks", "--json"]).stdout)
    assert rep["documents"] == 0 and "differs from the namespace's" in rep["skipped_entries"][0]["reason"]
