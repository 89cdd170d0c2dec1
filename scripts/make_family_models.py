#!/usr/bin/env python3
"""Write the small model families of tests/golden/families/ and their transformers goldens.

Dev-time only: needs torch + transformers (the .venv-torch of scripts/venv_torch.sh) and the
Python 3.11 documentation (the default corpus). The tests read what this writes; they need
neither torch in Python nor a download. Run:
    .venv-torch/bin/python scripts/make_family_models.py [--out tests/golden/families]

For each family (docs/model.md, "Supported families") it writes a directory
    config.json, model.safetensors (bf16), tokenizer.json, tokenizer_config.json, parity.safetensors
- the checkpoint: transformers' own model class built from the config below, initialised at a
  fixed seed (torch.manual_seed), then every norm weight set to 1 + 0.2 N(0, 1) and every bias to
  0.1 N(0, 1) so that norms and biases are exercised, saved in bf16 with save_pretrained;
- the tokenizer: one byte-level BPE (vocabulary 512) trained with `tokenizers` on the corpus,
  the same for every family (the families differ in the model, not in the tokenizer);
- the golden, computed by transformers from the saved directory (so it reads the very config.json
  and bf16 weights the runner reads), fp32, attn_implementation="eager", one prompt at a time:
  the layout of scripts/make_golden_model.py (p{i}.ids, .k, .v post-RoPE [L, T, n_kv, d] fp16,
  .top5_ids, .top5_logits fp32, .last_logits fp16), __metadata__ num_prompts, weights_digest,
  family, torch_version, transformers_version.

Families (small, random weights, GQA everywhere):
  llama3   LlamaForCausalLM, rope_scaling llama3 (original context 64, so it changes the
           frequencies that short prompts use), head_dim 128, tied embeddings; config.json in the
           form Meta's Llama 3.x checkpoints ship (rope_theta + rope_scaling at top level)
  qwen2    Qwen2ForCausalLM, q/k/v bias, head_dim 64 = hidden/heads, 3 layers, untied lm_head
  qwen3    Qwen3ForCausalLM, q/k RMSNorm, no bias, head_dim 128 != hidden/heads, tied
  mistral  MistralForCausalLM, sliding_window 64 (< the longer prompt), head_dim 64 != hidden/heads,
           4 layers
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from make_golden_model import weights_digest  # noqa: E402  (the same digest definition)

DOCS = Path("/usr/share/doc/python3.11/html/_sources")
SEED = 20261126
VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PROMPT_TOKENS = [57, 290]  # the prompts are cut to these lengths (the issue asks for 50 to 300)

COMMON = dict(hidden_size=128, intermediate_size=256, vocab_size=VOCAB, max_position_embeddings=4096,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, initializer_range=0.08)
FAMILIES = {
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
        tie_word_embeddings=True, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
        tie_word_embeddings=False, rope_theta=1000000.0)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
        tie_word_embeddings=True, rope_theta=1000000.0)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=64,
        tie_word_embeddings=False, rope_theta=10000.0)),
}


def corpus_texts() -> list[str]:
    files = sorted(DOCS.rglob("*.rst.txt"))
    if not files:
        sys.exit(f"make_family_models: no documents under {DOCS} (apt install python3.11-doc)")
    return [f.read_text(encoding="utf-8") for f in files]


def make_tokenizer(out: Path, texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != VOCAB:
        sys.exit(f"make_family_models: trained vocabulary has {tok.get_vocab_size()} entries, not {VOCAB}")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "add_bos_token": False, "model_max_length": 4096,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2) + "\n")
    return tok


def perturb(model, torch):
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def write_family(name: str, out: Path, tok_dir: Path, prompts: list[list[int]]):
    import torch
    import transformers
    from safetensors.torch import save_file

    cfg_cls, model_cls, extra = FAMILIES[name]
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).write_bytes((tok_dir / f).read_bytes())

    torch.manual_seed(SEED)
    cfg = getattr(transformers, cfg_cls)(**COMMON, **extra)
    model = getattr(transformers, model_cls)(cfg).to(torch.float32)
    perturb(model, torch)
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    for junk in ("generation_config.json",):
        (d / junk).unlink(missing_ok=True)
    if name == "llama3":
        # Meta's Llama 3.x config.json form (what users download): rope_theta and rope_scaling at
        # the top level. transformers 5 reads it as it reads its own rope_parameters.
        c = json.loads((d / "config.json").read_text())
        rp = c.pop("rope_parameters")
        c["rope_theta"] = rp.pop("rope_theta")
        c["rope_scaling"] = rp
        (d / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")

    ref = getattr(transformers, model_cls).from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    tensors: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            x = torch.tensor([ids], dtype=torch.long)
            # A plain DynamicCache keeps every position (a cache built from the config keeps only
            # the last sliding_window positions of a sliding-window layer).
            cache = transformers.DynamicCache()
            o = ref(input_ids=x, past_key_values=cache, use_cache=True)
            ks = torch.stack([cache.layers[l].keys[0].transpose(0, 1) for l in range(len(cache.layers))])
            vs = torch.stack([cache.layers[l].values[0].transpose(0, 1) for l in range(len(cache.layers))])
            lg = o.logits[0].float()
            top = lg.topk(5, dim=-1)
            p = f"p{i}."
            tensors[p + "ids"] = x[0].contiguous()
            tensors[p + "k"] = ks.to(torch.float16).contiguous()
            tensors[p + "v"] = vs.to(torch.float16).contiguous()
            tensors[p + "top5_ids"] = top.indices.contiguous()
            tensors[p + "top5_logits"] = top.values.contiguous()
            tensors[p + "last_logits"] = lg[-1].to(torch.float16).contiguous()
    meta = {"num_prompts": str(len(prompts)), "family": name, "weights_digest": weights_digest(d),
            "torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "reference": f"transformers {model_cls}, fp32 from bf16 weights, eager attention, batch 1"}
    save_file(tensors, str(d / "parity.safetensors"), metadata=meta)
    size = sum(f.stat().st_size for f in d.iterdir())
    print(f"make_family_models: {d} ({size / 1e6:.2f} MB), digest {meta['weights_digest']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "tests" / "golden" / "families"))
    ap.add_argument("--only", choices=sorted(FAMILIES), action="append", help="write these families only")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok_dir = out / ".tokenizer"
    tok_dir.mkdir(exist_ok=True)
    texts = corpus_texts()
    tok = make_tokenizer(tok_dir, texts)
    intro = (DOCS / "tutorial" / "introduction.rst.txt").read_text(encoding="utf-8")
    ids = tok.encode(intro).ids
    prompts = [ids[:PROMPT_TOKENS[0]], ids[100:100 + PROMPT_TOKENS[1]]]
    for name in args.only or sorted(FAMILIES):
        write_family(name, out, tok_dir, prompts)
    for f in tok_dir.iterdir():
        f.unlink()
    tok_dir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
