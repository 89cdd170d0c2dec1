#!/usr/bin/env python3
"""Stored KV, loaded through the ucm Python package into a transformers DynamicCache, continues to
transformers' own greedy tokens; and how many blocks a transformers-tokenizing server finds.

Run by scripts/test_python_hf.sh in .venv-torch (it needs torch). For each document of CORPUS
(JSONL {"id", "text"}), the server's prompt is template + document + QUESTION tokenized by
transformers.AutoTokenizer (as vLLM does):

  blocks found   ucm.hash_blocks + Store.lookup on the prompt's ids, in TEXT_STORE (precompute from
                 text: ucm's tokenizer) and IDS_STORE (precompute from `python -m ucm.tokenize`
                 ids), against the full blocks before the question.
  exactness      the prefix found in IDS_STORE is loaded with Store.load into a bf16 tensor
                 [n][L][2][T][H][D], put into a DynamicCache (per layer K, V: [1][H][n*T][D]),
                 and the rest of the prompt plus STEPS teacher-forced tokens run over it. The exact
                 path is transformers' own fp32 prefill and greedy decode of the same prompt.
                 Reported: top-1 agreement (the cached path's argmax equals the exact greedy
                 token) and mean KL(p_exact || p_cached) over the STEPS steps.

Exit 1 unless every document has top-1 >= 0.99 and KL <= 1e-3 and every full block before the
question is found in IDS_STORE. Writes a JSON report with --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--template", required=True)
    ap.add_argument("--text-store", required=True)
    ap.add_argument("--ids-store", required=True)
    ap.add_argument("--question", default="\nQuestion: summarise the document above in one sentence.\nAnswer:")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--out")
    a = ap.parse_args()

    import torch
    import transformers
    import ucm
    import ucm.corpus

    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(a.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    model.eval()
    pre, suf = ucm.corpus.read_template(a.template)  # precompute's split (ucm_corpus_template)
    docs = [json.loads(l) for l in open(a.corpus) if l.strip()]
    rows, ok = [], True
    with ucm.Store(a.text_store) as ts, ucm.Store(a.ids_store) as ids_s:
        ns_t = ts.namespace(only_namespace(a.text_store))
        ns_i = ids_s.namespace(only_namespace(a.ids_store))
        for d in docs:
            prompt = tok(pre + d["text"] + suf + a.question)["input_ids"]
            before_q = len(tok(pre + d["text"] + suf)["input_ids"]) // ns_i.block_size
            hs_t = ucm.hash_blocks(ns_t.hash_seed, prompt, ns_t.block_size)
            hs_i = ucm.hash_blocks(ns_i.hash_seed, prompt, ns_i.block_size)
            found_text = ts.lookup(ns_t, hs_t).prefix_blocks
            found_ids = ids_s.lookup(ns_i, hs_i).prefix_blocks
            row = {"id": d["id"], "prompt_tokens": len(prompt), "full_blocks_before_question": before_q,
                   "found_text_route": found_text, "found_token_ids_route": found_ids}
            row.update(exactness(torch, model, ids_s, ns_i, prompt, hs_i[:found_ids], a.steps))
            rows.append(row)
            good = found_ids == before_q and row["top1"] >= 0.99 and row["mean_kl"] <= 1e-3
            ok &= good
            print(f"{d['id']}: {len(prompt)} prompt tokens; blocks found by a transformers server: "
                  f"text route {found_text}/{before_q}, token-ids route {found_ids}/{before_q}; "
                  f"over {a.steps} steps top-1 {row['top1']:.3f}, mean KL {row['mean_kl']:.2e}"
                  f"{'' if good else '  FAIL'}", flush=True)
    tot = {k: sum(r[k] for r in rows) for k in ("full_blocks_before_question", "found_text_route",
                                                "found_token_ids_route")}
    print(f"total: text route {tot['found_text_route']}/{tot['full_blocks_before_question']} blocks, "
          f"token-ids route {tot['found_token_ids_route']}/{tot['full_blocks_before_question']}")
    if a.out:
        Path(a.out).write_text(json.dumps({"documents": rows, "total": tot, "torch": torch.__version__,
                                           "transformers": transformers.__version__}, indent=1))
    return 0 if ok else 1


def only_namespace(store_path: str) -> str:
    """The one namespace of a store precompute wrote (its name, from the descriptor list)."""
    import subprocess
    import os
    ucm_bin = os.environ.get("UCM_BIN", "build/bin/ucm")
    rep = json.loads(subprocess.run([ucm_bin, "inspect", store_path, "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    names = [n["name"] for n in rep["namespaces"]]
    if len(names) != 1:
        raise SystemExit(f"{store_path}: expected one namespace, found {names}")
    return names[0]


def exactness(torch, model, store, ns, prompt, hashes, steps):
    """Teacher-forced comparison of the cached path against transformers' exact path."""
    from transformers import DynamicCache
    import ucm
    n = len(hashes)
    T, L, H, D = ns.block_size, ns.num_layers, ns.num_kv_heads, ns.head_dim
    ids = torch.tensor([prompt])
    with torch.no_grad():
        # Exact: transformers' own greedy continuation (argmax at every step, through an end of turn
        # as well: generate() would stop there, or with min_new_tokens suppress it), then one pass
        # over prompt + continuation for the logits.
        cont, past = [], DynamicCache()
        logits = model(ids, past_key_values=past).logits[0, -1]
        for _ in range(steps):
            cont.append(int(logits.argmax()))
            logits = model(torch.tensor([[cont[-1]]]), past_key_values=past).logits[0, -1]
        full = torch.tensor([prompt + cont])
        exact = model(full).logits[0, len(prompt) - 1: len(prompt) - 1 + steps].float()
        # Cached: stored K/V for the first n blocks, through the Python package into a bf16 tensor.
        kv = torch.empty((n, L, 2, T, H, D), dtype=torch.bfloat16)
        st = store.load(ns, hashes, kv)
        if n and int(np.count_nonzero(st)):
            raise SystemExit(f"load failed: statuses {st.tolist()}")
        cache = DynamicCache()
        for l in range(L):
            k = kv[:, l, 0].reshape(n * T, H, D).permute(1, 0, 2).unsqueeze(0).float()  # [1][H][n*T][D]
            v = kv[:, l, 1].reshape(n * T, H, D).permute(1, 0, 2).unsqueeze(0).float()
            cache.update(k, v, l)
        rest = torch.tensor([prompt[n * T:] + cont])
        out = model(rest, past_key_values=cache).logits[0].float()
        first = len(prompt) - 1 - n * T  # the logits after the last prompt token
        cached = out[first: first + steps]
    pe = torch.softmax(exact, -1)
    kl = (pe * (torch.log_softmax(exact, -1) - torch.log_softmax(cached, -1))).sum(-1)
    top1 = (cached.argmax(-1) == torch.tensor(cont[:steps])).float().mean().item()
    return {"loaded_blocks": n, "top1": top1, "mean_kl": kl.mean().item(), "steps": steps}


if __name__ == "__main__":
    sys.exit(main())
