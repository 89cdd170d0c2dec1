"""Write a token-ids corpus with a server's tokenizer: ``python -m ucm.tokenize``.

A server hashes the token ids *its* tokenizer produces; `ucm precompute` must store blocks of
those same ids or the server finds none past the first difference (transformers >= 5 rebuilds
some tokenizers' pre-tokenizers, docs/python.md). This tool tokenizes template + document with a
Hugging Face tokenizer exactly as a server builds the prompt's start, and writes one JSONL line
per document that `ucm precompute --corpus` takes as it is:

    {"id": ..., "source": ..., "token_ids": [...]}                       (whole-prompt mode)
    {"id": ..., "source": ..., "token_ids": [...], "prefix_tokens": P}   (--chunks: C ++ D)

The corpus is read by ucm's corpus reader, the one precompute uses (libucm's ucm/corpus.h,
docs/corpus.md): a directory gives every file (with --corpus-suffix) in bytewise order of its
relative path; a JSONL file its entries, with "id" as written (absent: the line number); the
template is split by the same reader. transformers is imported only when this runs.

    python -m ucm.tokenize --tokenizer models/SmolLM2-135M-Instruct \\
        --template configs/template_chat.txt --corpus /usr/share/doc/python3.11/html/_sources \\
        --corpus-suffix .rst.txt --limit 20 --out ids.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from .corpus import Corpus, read_template  # noqa: F401  (read_template: ucm.vllm.precompute uses it)


def read_corpus(corpus: str, suffix: str = "", limit: int = 0) -> Iterator[Dict[str, Any]]:
    """Entries of a corpus as `ucm precompute` reads them, through libucm's corpus reader
    (ucm.corpus.Corpus, ucm/corpus.h): {"id", "source", "text"} or, for JSONL entries that carry
    token_ids already, {"id", "source", "token_ids"[, "prefix_tokens"]}. Skipped entries (malformed,
    empty) are reported on stderr and left out, as precompute skips them."""
    def report(kind: str, location: str, reason: str) -> None:
        print(f"ucm.tokenize: {location}: {reason}, skipped ({kind})", file=sys.stderr)

    with Corpus(corpus, suffix=suffix, limit=limit, on_issue=report) as c:
        yield from c


def load_tokenizer(name_or_dir: str):
    """transformers.AutoTokenizer for a model directory or hub name (imported here, not before)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise SystemExit("ucm.tokenize needs transformers (pip install 'transformers>=5'); "
                         "tokenizers need no torch")
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(name_or_dir)


def encode(tokenizer, text: str, add_special_tokens: bool) -> list:
    """The ids a server gets for text: tokenizer(text).input_ids (vLLM's path), as plain ints."""
    return [int(t) for t in tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]]


def entries(tokenizer, corpus: str, *, template: Optional[str] = None, suffix: str = "", limit: int = 0,
            chunks: bool = False, add_special_tokens: bool = True) -> Iterator[Dict[str, Any]]:
    """The token-ids corpus entries (dicts) for every document of a corpus.

    Whole prompts: token_ids = ids(prefix + document + suffix), the prompt's start as a server
    tokenizes it. Chunks (--chunks; store_v1.md §4.4): token_ids = ids(prefix) ++ ids(document),
    each tokenized on its own as a server building a blended prompt does, and prefix_tokens =
    len(ids(prefix)); add_special_tokens applies to the prefix only."""
    prefix, suffix_t = read_template(template)
    if chunks and suffix_t:
        raise SystemExit("ucm.tokenize --chunks: the template has text after {document}; a chunk is the "
                         "template's prefix then the document")
    prefix_ids = encode(tokenizer, prefix, add_special_tokens) if chunks else None
    for e in read_corpus(corpus, suffix, limit):
        if "token_ids" in e:
            yield e
            continue
        if chunks:
            ids = prefix_ids + encode(tokenizer, e["text"], False)
            yield {"id": e["id"], "source": e["source"], "token_ids": ids, "prefix_tokens": len(prefix_ids)}
        else:
            ids = encode(tokenizer, prefix + e["text"] + suffix_t, add_special_tokens)
            yield {"id": e["id"], "source": e["source"], "token_ids": ids}


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ucm.tokenize",
        description="Write a token-ids corpus (JSONL) for `ucm precompute` with a server's Hugging Face tokenizer.")
    ap.add_argument("--tokenizer", required=True, help="model directory or hub name (AutoTokenizer)")
    ap.add_argument("--template", help="prompt template file (text before {document}, and after it)")
    ap.add_argument("--corpus", required=True, help="JSONL file or directory of text files (docs/corpus.md)")
    ap.add_argument("--corpus-suffix", default="", help="directory corpora: only files ending with this")
    ap.add_argument("--out", required=True, help="output JSONL ('-' = stdout)")
    ap.add_argument("--limit", type=int, default=0, help="stop after N documents (default all)")
    ap.add_argument("--chunks", action="store_true",
                    help="chunk entries for `ucm precompute --chunks`: prefix and document tokenized apart")
    ap.add_argument("--no-special-tokens", action="store_true",
                    help="tokenize with add_special_tokens=False (default: the tokenizer's default, as "
                         "vLLM does for a text prompt)")
    a = ap.parse_args(argv)
    if not Path(a.corpus).exists():
        print(f"ucm.tokenize: corpus {a.corpus} does not exist", file=sys.stderr)
        return 1
    tk = load_tokenizer(a.tokenizer)
    out = sys.stdout if a.out == "-" else open(a.out + ".tmp", "w", encoding="utf-8")
    n = tokens = 0
    try:
        for e in entries(tk, a.corpus, template=a.template, suffix=a.corpus_suffix, limit=a.limit,
                         chunks=a.chunks, add_special_tokens=not a.no_special_tokens):
            out.write(json.dumps(e, ensure_ascii=False) + "\n")
            n += 1
            tokens += len(e["token_ids"])
            if sys.stderr.isatty() and n % 10 == 0:
                print(f"\rucm.tokenize: {n} documents, {tokens} tokens", end="", file=sys.stderr)
    finally:
        if out is not sys.stdout:
            out.close()
    if out is not sys.stdout:
        os.replace(a.out + ".tmp", a.out)  # a killed run leaves no half-written corpus
    print(f"ucm.tokenize: {n} documents, {tokens} tokens ({type(tk).__name__}) -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
