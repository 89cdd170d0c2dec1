#!/usr/bin/env python3
"""Rebuild a Hugging Face ``tokenizer.json`` / ``tokenizer_config.json`` from GGUF metadata.

A GGUF file carries no ``tokenizer.json``; it stores the vocabulary, merges, token types and
special-token ids under llama.cpp key names (``tokenizer.ggml.*``). This module turns those back
into the two JSON documents the ``tokenizers`` library and ``transformers`` load, for byte-level
BPE vocabularies (``tokenizer.ggml.model == "gpt2"``), which is what SmolLM2 uses.

What is produced (and why):

* model: ``BPE`` with ``vocab`` = ``tokenizer.ggml.tokens`` (index = id; the strings are already
  in the GPT-2 byte-to-unicode alphabet) and ``merges`` = ``tokenizer.ggml.merges`` in the list
  form ``[left, right]`` (rank = position), ``byte_fallback=false``, ``ignore_merges=false``.
* added_tokens: every token whose ``tokenizer.ggml.token_type`` is 3 (CONTROL) becomes a special
  added token, type 4 (USER_DEFINED) a non-special added token (as transformers'
  ``add_gguf_special_tokens`` does), ``normalized=false``.
* pre_tokenizer: chosen from ``tokenizer.ggml.pre``. ``smollm`` (llama.cpp's name for the
  StarCoder/SmolLM vocabulary) is ``Sequence[Digits(individual_digits=true),
  ByteLevel(add_prefix_space=false, trim_offsets=true, use_regex=true)]``, exactly what the
  original SmolLM2 ``tokenizer.json`` has; ``gpt2``/``default``/absent is plain GPT-2
  ``ByteLevel(use_regex=true)``. Other pre-tokenizer names raise ``ValueError`` (add a mapping).
* normalizer: none; decoder: ``ByteLevel``; post_processor: ``ByteLevel`` (adds no tokens;
  ``tokenizer.ggml.add_bos_token`` is false for SmolLM2).

Only ``gguf``, ``numpy`` and the standard library are used. Command line (for inspection)::

    python scripts/gguf_tokenizer.py MODEL.gguf OUT_DIR   # writes tokenizer.json + tokenizer_config.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import gguf  # PyPI package "gguf"

# llama.cpp token types (llama_token_type / gguf.TokenType).
TOKEN_NORMAL = 1
TOKEN_UNKNOWN = 2
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4
TOKEN_UNUSED = 5
TOKEN_BYTE = 6

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}

# tokenizer.ggml.pre -> HF pre_tokenizer. Extend here for other byte-level vocabularies.
_PRE_TOKENIZERS: dict[str, dict[str, Any]] = {
    "smollm": {
        "type": "Sequence",
        "pretokenizers": [{"type": "Digits", "individual_digits": True}, dict(_BYTE_LEVEL)],
    },
    "starcoder": {
        "type": "Sequence",
        "pretokenizers": [{"type": "Digits", "individual_digits": True}, dict(_BYTE_LEVEL)],
    },
    "gpt2": dict(_BYTE_LEVEL),
    "default": dict(_BYTE_LEVEL),
}


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    """Value of metadata ``key`` as a Python object (str, int, bool, list), or ``default``."""
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character map (openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def _require_byte_level(reader: gguf.GGUFReader) -> None:
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(
            f"GGUF tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') can be converted "
            "to tokenizer.json by scripts/gguf_tokenizer.py"
        )


def build_tokenizer_json(reader: gguf.GGUFReader) -> dict:
    """The HF ``tokenizer.json`` content (a dict ready for ``json.dump``) for the GGUF's tokenizer.

    Raises ``ValueError`` when the GGUF is not byte-level BPE, lacks tokens/merges, names an
    unknown ``tokenizer.ggml.pre``, or has a normal token outside the byte-level alphabet.
    """
    _require_byte_level(reader)
    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = _field(reader, "tokenizer.ggml.merges")
    if not tokens or merges is None:
        raise ValueError("GGUF has no tokenizer.ggml.tokens / tokenizer.ggml.merges")
    types = _field(reader, "tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise ValueError(f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")

    pre_name = _field(reader, "tokenizer.ggml.pre", "default")
    if pre_name not in _PRE_TOKENIZERS:
        raise ValueError(
            f"GGUF tokenizer.ggml.pre {pre_name!r} has no mapping in scripts/gguf_tokenizer.py "
            f"(known: {sorted(_PRE_TOKENIZERS)})"
        )
    if _field(reader, "tokenizer.ggml.add_space_prefix", False):
        raise ValueError("tokenizer.ggml.add_space_prefix=true is not supported for byte-level BPE")

    alphabet = set(_bytes_to_unicode().values())
    vocab: dict[str, int] = {}
    added = []
    for idx, (tok, ttype) in enumerate(zip(tokens, types)):
        if tok in vocab:
            raise ValueError(f"duplicate token {tok!r} at ids {vocab[tok]} and {idx}")
        vocab[tok] = idx
        if ttype in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
            added.append(
                {
                    "id": idx,
                    "content": tok,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": ttype == TOKEN_CONTROL,
                }
            )
        elif not set(tok) <= alphabet:
            raise ValueError(f"token {idx} {tok!r} is not spelled in the byte-level alphabet")

    merge_pairs = []
    for rank, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2:
            raise ValueError(f"merge {rank} {m!r} is not two space-separated symbols")
        merge_pairs.append(parts)

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": json.loads(json.dumps(_PRE_TOKENIZERS[pre_name])),
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merge_pairs,
        },
    }


def build_tokenizer_config(reader: gguf.GGUFReader) -> dict:
    """The HF ``tokenizer_config.json`` content: special tokens, chat template, BOS/EOS flags.

    bos/eos/unk/pad come from ``tokenizer.ggml.{bos,eos,unknown,padding}_token_id``;
    ``chat_template`` from ``tokenizer.chat_template`` when present; ``model_max_length`` from
    ``<arch>.context_length``.
    """
    _require_byte_level(reader)
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens)

    def tok(key: str) -> str | None:
        i = _field(reader, f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    decoder = {}
    for idx, ttype in enumerate(types):
        if ttype in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
            decoder[str(idx)] = {
                "content": tokens[idx],
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": ttype == TOKEN_CONTROL,
            }
    cfg: dict[str, Any] = {
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": tok("bos_token_id"),
        "eos_token": tok("eos_token_id"),
        "unk_token": tok("unknown_token_id"),
        "pad_token": tok("padding_token_id"),
        "clean_up_tokenization_spaces": False,
        "tokenizer_class": "GPT2Tokenizer",
        "vocab_size": len(tokens),
    }
    specials = [t for t in (cfg["bos_token"], cfg["eos_token"]) if t is not None]
    if specials:
        cfg["additional_special_tokens"] = list(dict.fromkeys(specials))
    arch = _field(reader, "general.architecture")
    ctx = _field(reader, f"{arch}.context_length") if arch else None
    if ctx is not None:
        cfg["model_max_length"] = int(ctx)
    template = _field(reader, "tokenizer.chat_template")
    if template:
        cfg["chat_template"] = template
    return cfg


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} MODEL.gguf OUT_DIR", file=sys.stderr)
        return 2
    reader = gguf.GGUFReader(argv[1])
    out = Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(build_tokenizer_json(reader), ensure_ascii=False, indent=2), "utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(build_tokenizer_config(reader), ensure_ascii=False, indent=2), "utf-8")
    print(f"wrote {out}/tokenizer.json and tokenizer_config.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
