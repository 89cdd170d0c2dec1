#!/usr/bin/env python3
"""Which tokenizer classes does transformers (>= 5) rebuild instead of loading tokenizer.json as is?

Development-time measurement behind the class list of
`ucm::tokenize::transformers_rebuilt_tokenizer_class` (pipelines/token_ids/token_ids.cc) and the
table in docs/python.md. For each class name it writes a copy of a model directory whose
tokenizer_config.json names that class, loads it with transformers.AutoTokenizer, and tokenizes
probe texts (digits after white space, runs of spaces, newlines, code). A class "differs" when
its ids differ from the `tokenizers` library's on tokenizer.json itself (which is what ucm's C++
tokenizer reproduces).

Usage: .venv/bin/python scripts/measure_tokenizer_classes.py [--model models/SmolLM2-135M-Instruct]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

CLASSES = ["GPT2Tokenizer", "GPT2TokenizerFast", "LlamaTokenizer", "LlamaTokenizerFast", "Qwen2Tokenizer",
           "Qwen2TokenizerFast", "CodeLlamaTokenizer", "GemmaTokenizerFast", "PreTrainedTokenizerFast",
           "TokenizersBackend"]
PROBES = ["Inc.\n 51 Franklin Street, Fifth Floor", "   1. item\n  22 items", "x = 3.14159 * r ** 2",
          "Python 3.11.7 (May 2024)", "def f(a, b):\n    return a + b  # 12 spaces"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct")
    args = ap.parse_args()
    import tokenizers
    import transformers
    src = Path(args.model)
    ref = tokenizers.Tokenizer.from_file(str(src / "tokenizer.json"))
    want = [ref.encode(p, add_special_tokens=False).ids for p in PROBES]
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cls in CLASSES:
            d = Path(tmp) / cls
            d.mkdir()
            for f in ("tokenizer.json", "config.json"):
                shutil.copy(src / f, d / f)
            cfg = json.loads((src / "tokenizer_config.json").read_text())
            cfg["tokenizer_class"] = cls
            (d / "tokenizer_config.json").write_text(json.dumps(cfg))
            try:
                tk = transformers.AutoTokenizer.from_pretrained(str(d))
                got = [tk.encode(p, add_special_tokens=False) for p in PROBES]
                same = sum(g == w for g, w in zip(got, want))
                verdict = "same" if same == len(PROBES) else f"DIFFERS ({len(PROBES) - same}/{len(PROBES)} probes)"
                rows.append((cls, type(tk).__name__, verdict))
            except Exception as e:  # a class that cannot load this tokenizer.json at all
                rows.append((cls, "-", f"fails to load: {type(e).__name__}: {str(e)[:80]}"))
    print("| tokenizer_class | transformers builds | ids vs tokenizer.json |")
    print("|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
