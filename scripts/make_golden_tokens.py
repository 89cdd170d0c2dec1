#!/usr/bin/env python3
"""Write the tokenizer golden files with Hugging Face ``tokenizers`` (development time only).

Outputs (in --out-dir, default tests/golden/):
  tokens_python311_doc.tsv  one line per corpus document, sorted by path:
                            ``<relative path>\\t<token count>\\t<hex MD5 of the ids as little-endian uint32>``
  tokens_cases.json         hand-picked strings with their full id lists:
                            ``[{"name": ..., "text": ..., "ids": [...]}, ...]``

Documents are read as raw bytes and decoded as UTF-8 exactly (no newline conversion) and
encoded with ``add_special_tokens=False``.

Optional cross-check (--gguf MODEL.gguf): transformers' own GGUF -> tokenizer conversion
(independent of scripts/gguf_tokenizer.py) must give the same ids on every document. Its
``smollm`` pre-tokenizer lacks SmolLM2's ``Digits(individual_digits=True)`` step, so the check is
reported twice: as transformers builds it, and with that Digits step prepended.

Usage:
  .venv/bin/pip install tokenizers transformers gguf
  .venv/bin/python scripts/make_golden_tokens.py \\
      [--tokenizer models/SmolLM2-135M-Instruct/tokenizer.json] \\
      [--corpus /usr/share/doc/python3.11/html/_sources] [--gguf path/to/model.gguf]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, pre_tokenizers

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TOKENIZER = REPO / "models" / "SmolLM2-135M-Instruct" / "tokenizer.json"
DEFAULT_CORPUS = Path("/usr/share/doc/python3.11/html/_sources")
SUFFIX = ".rst.txt"

CASES = [
    ("ascii", "Hello, world! This is a test."),
    ("contractions", "I'm sure you'll see they've done it, don't you? It's JOHN'S."),
    ("digits", "In 2024 there were 1234567 items; 3.14159 and 1e-10, v2.0.1, 0x1F."),
    ("space_before_digits", "a  1\n   22 x\t3"),
    ("whitespace_runs", "a  b   c    \n\n\n    d\t\t e \r\n f  "),
    ("trailing_spaces", "end with spaces   "),
    ("only_space", "     "),
    ("unicode_latin", "Café naïve résumé Straße Ærøskøbing"),
    ("unicode_cjk", "日本語のテキスト、中文文本。한국어"),
    ("emoji", "Emoji 😀👍🏽 and 🇫🇷 flags ❤️"),
    ("combining", "e\u0301 versus \u00e9, A\u030a"),
    ("unicode_spaces", "nbsp\u00a0here, em\u2003space, ideographic\u3000space, nel\u0085x, mvs\u180ey, zwsp\u200bz"),
    ("special_chat", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"),
    ("special_adjacent", "x<|endoftext|>y<|im_end|><|im_end|>  <repo_name>"),
    ("special_partial", "<|im_start <|im_end| <|endoftext"),
    ("code", "def f(x):\n    return x ** 2  # square\n\nprint(f(12))\n"),
    ("rst", ".. note::\n\n   See :func:`os.path.join` and ``sys.argv[1:]``.\n\n=====\n"),
    ("punctuation_run", "!!!??? ... --- === ***"),
    ("empty", ""),
]


def ids_md5(ids: list[int]) -> str:
    return hashlib.md5(np.asarray(ids, dtype="<u4").tobytes()).hexdigest()


def corpus_docs(corpus: Path) -> list[tuple[str, str]]:
    paths = sorted(p for p in corpus.rglob("*") if p.is_file() and p.name.endswith(SUFFIX))
    # Sort by the relative path as bytes, the order the C++ corpus reader uses.
    rel = sorted(((p.relative_to(corpus).as_posix(), p) for p in paths), key=lambda x: x[0].encode())
    return [(r, p.read_bytes().decode("utf-8")) for r, p in rel]


def transformers_tokenizer(gguf_path: Path):
    """transformers' tokenizer for the GGUF, built by transformers' own converter."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        return tok.backend_tokenizer, "AutoTokenizer.from_pretrained(gguf_file=...)"
    except ModuleNotFoundError as e:  # transformers' GGUF reader imports torch
        import gguf
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )

        reader = gguf.GGUFReader(str(gguf_path))
        d = {}
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items():
            f = reader.fields.get(f"tokenizer.{key}")
            if f is not None:
                d[name] = f.contents()
        arch = reader.fields["general.architecture"].contents()
        backend, _ = convert_gguf_tokenizer(arch, d)
        return backend, f"convert_gguf_tokenizer (metadata via gguf.GGUFReader; AutoTokenizer needs {e.name})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--out-dir", type=Path, default=REPO / "tests" / "golden")
    ap.add_argument("--gguf", type=Path, help="also cross-check against transformers' GGUF conversion")
    args = ap.parse_args()

    if not args.tokenizer.is_file():
        print(f"error: {args.tokenizer} not found; run scripts/fetch_model.py first", file=sys.stderr)
        return 1
    if not args.corpus.is_dir():
        print(f"error: corpus {args.corpus} not found; apt-get install python3.11-doc", file=sys.stderr)
        return 1
    tok = Tokenizer.from_file(str(args.tokenizer))
    docs = corpus_docs(args.corpus)
    encs = tok.encode_batch([t for _, t in docs], add_special_tokens=False)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    total = 0
    with open(args.out_dir / "tokens_python311_doc.tsv", "w", encoding="utf-8", newline="\n") as f:
        for (rel, _), enc in zip(docs, encs):
            f.write(f"{rel}\t{len(enc.ids)}\t{ids_md5(enc.ids)}\n")
            total += len(enc.ids)
    cases = [{"name": n, "text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for n, t in CASES]
    with open(args.out_dir / "tokens_cases.json", "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(docs)} documents, {total} tokens, {len(cases)} cases -> {args.out_dir}")

    if args.gguf:
        ref, how = transformers_tokenizer(args.gguf)
        print(f"cross-check against transformers {how}")
        print(f"  transformers pre_tokenizer: {json.loads(ref.to_str())['pre_tokenizer']}")
        texts = [t for _, t in docs] + [t for _, t in CASES]
        ours = [e.ids for e in encs] + [c["ids"] for c in cases]
        for label in ("as built by transformers", "with Digits(individual_digits=True) prepended"):
            if label.startswith("with"):
                ref.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), ref.pre_tokenizer])
            theirs = [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
            same = sum(a == b for a, b in zip(ours, theirs))
            diff = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
            ex = ""
            if diff:
                i = diff[0]
                name = docs[i][0] if i < len(docs) else CASES[i - len(docs)][0]
                ex = f"; first difference in {name}"
            print(f"  {label}: {same}/{len(texts)} texts identical{ex}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
