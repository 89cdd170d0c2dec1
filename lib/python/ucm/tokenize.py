"""Write a token-ids corpus with a server's tokenizer: ``python -m ucm.tokenize``.

A server hashes the token ids *its* tokenizer produces; `ucm precompute` must store blocks of
those same ids or the server finds none past the first difference (transformers >= 5 rebuilds
some tokenizers' pre-tokenizers, docs/python.md). This tool tokenizes template + document with a
Hugging Face tokenizer exactly as a server builds the prompt's start, and writes one JSONL line
per document that `ucm precompute --corpus` takes as it is:

    {"id": ..., "source": ..., "token_ids": [...]}                       (whole-prompt mode)
    {"id": ..., "source": ..., "token_ids": [...], "prefix_tokens": P}   (--chunks: C ++ D)

Ids and order follow ucm's corpus reader (docs/corpus.md): a directory gives every file (with
--corpus-suffix) in bytewise order of its relative path; a JSONL file its entries, with "id" as
written (absent: the line number). transformers is imported only when this runs.

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
from typing import Any, Dict, Iterator, Optional, Tuple


def read_template(path: Optional[str]) -> Tuple[str, str]:
    """(prefix, suffix) of a template file: split at the first "{document}", else all prefix."""
    if not path:
        return "", ""
    text = Path(path).read_bytes().decode("utf-8")
    i = text.find("{document}")
    return (text, "") if i < 0 else (text[:i], text[i + len("{document}"):])


def _number_as_written(value: Any) -> str:
    # ucm's reader writes a numeric id as nlohmann::json dumps it: integers plainly, floats
    # shortest round-trip (json.dumps agrees for the common cases).
    return json.dumps(value)


def read_corpus(corpus: str, suffix: str = "", limit: int = 0) -> Iterator[Dict[str, Any]]:
    """Entries of a corpus in ucm's order: {"id", "source", "text"} or, for JSONL entries that carry
    token_ids already, {"id", "source", "token_ids", ...} (passed through). Malformed entries are
    reported on stderr and left out, as precompute would skip them."""
    p = Path(corpus)
    n = 0
    if p.is_dir():
        files = []
        for root, _dirs, names in os.walk(p, followlinks=False):
            for name in names:
                f = Path(root) / name
                if not f.is_file() or (suffix and not name.endswith(suffix)):
                    continue
                files.append(f.relative_to(p).as_posix())
        for rel in sorted(files, key=lambda s: s.encode()):
            if limit and n >= limit:
                return
            data = (p / rel).read_bytes()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                print(f"ucm.tokenize: {p / rel}: invalid UTF-8 at byte {e.start}, skipped", file=sys.stderr)
                continue
            if not text:
                continue
            n += 1
            yield {"id": rel, "source": str(p / rel), "text": text}
        return
    with open(p, "rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            if limit and n >= limit:
                return
            line = raw.decode("utf-8", "replace")
            if not line.strip(" \t\r\n"):
                continue
            loc = f"{p}:{line_no}"
            try:
                j = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"ucm.tokenize: {loc}: bad JSON ({e}), skipped", file=sys.stderr)
                continue
            if not isinstance(j, dict) or ("text" not in j and "token_ids" not in j):
                print(f"ucm.tokenize: {loc}: not an object with \"text\", skipped", file=sys.stderr)
                continue
            if "id" not in j:
                doc_id = str(line_no)
            elif isinstance(j["id"], str):
                doc_id = j["id"]
            elif isinstance(j["id"], (int, float)) and not isinstance(j["id"], bool):
                doc_id = _number_as_written(j["id"])
            else:
                print(f"ucm.tokenize: {loc}: \"id\" is neither a string nor a number, skipped", file=sys.stderr)
                continue
            n += 1
            out = {"id": doc_id, "source": loc}
            if "token_ids" in j:
                out["token_ids"] = j["token_ids"]
                if "prefix_tokens" in j:
                    out["prefix_tokens"] = j["prefix_tokens"]
            else:
                if not isinstance(j["text"], str) or not j["text"]:
                    print(f"ucm.tokenize: {loc}: \"text\" is not a non-empty string, skipped", file=sys.stderr)
                    continue
                out["text"] = j["text"]
            yield out


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
