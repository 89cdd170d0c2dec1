"""Precompute through vLLM: ``python -m ucm.vllm.precompute --model M --corpus C --store S [--template F]``.

Runs vLLM over a corpus with the UcmConnector saving every full block (one output token per
prompt), so the store holds exactly the server's tokenization and numerics, on whatever device
vLLM runs (a GPU where there is one). The corpus is read as `ucm precompute` reads it
(docs/corpus.md: a directory, or JSONL with "text" or "token_ids"); text is tokenized by vLLM's own
tokenizer after the template is applied. Resume: a document whose last full block is already
stored is skipped (the hash chain makes its last block stand for the whole prefix), so an
interrupted run is simply run again. Progress on stderr; a JSON summary on stdout with --json.
`ucm inspect` and `ucm gc` treat the store like any other.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from typing import List


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ucm.vllm.precompute", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model directory (what vLLM loads)")
    ap.add_argument("--corpus", required=True, help="directory of text files or JSONL (docs/corpus.md)")
    ap.add_argument("--corpus-suffix", default="", help="directory corpora: only files ending with this")
    ap.add_argument("--store", required=True, help="the ucm store (created if missing)")
    ap.add_argument("--template", help="prompt template (text before {document}, and after it)")
    ap.add_argument("--dtype", default="bfloat16", help="vLLM dtype (bfloat16, float16, float32)")
    ap.add_argument("--limit", type=int, default=0, help="stop after N documents (default all)")
    ap.add_argument("--batch", type=int, default=16, help="prompts per vLLM generate call")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    a = ap.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout: the summary alone
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    import ucm
    from ucm import dtypes
    from ucm.tokenize import read_corpus, read_template

    t0 = time.time()
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).lstrip(".") or "host"
    shard = f"vllm-precompute-{host}"  # the connector's writer shard, then the registry's writer
    llm = LLM(model=a.model, dtype=a.dtype, max_model_len=a.max_model_len, enforce_eager=True,
              enable_prefix_caching=False,
              kv_transfer_config=KVTransferConfig(
                  kv_connector="UcmConnector", kv_connector_module_path="ucm.vllm.connector", kv_role="kv_both",
                  kv_connector_extra_config={"store": a.store, "save": True, "load": True, "shard": shard},
                  kv_load_failure_policy="recompute"))
    tok = llm.get_tokenizer()
    pre, suf = read_template(a.template)
    from ucm.model import descriptor
    store = ucm.Store(a.store)
    engine_block = int(llm.llm_engine.vllm_config.cache_config.block_size)
    try:  # the namespace the connector made or found (the rule of store_v1.md §7.3)
        ns = store.match_namespace(descriptor(a.model, dtype=dtypes.from_torch(a.dtype)), engine_block)
    except ucm.NotFound as e:
        print(f"ucm.vllm.precompute: the connector registered no namespace: {e}", file=sys.stderr)
        return 1
    done = skipped = tokens = 0
    sp = SamplingParams(temperature=0.0, max_tokens=1)
    batch: List = []
    summary = {"documents": 0, "resumed": 0, "tokens": 0, "too_short": 0, "registered": 0}
    docs: List = []  # (id, source, ids, input) of every document with at least one full block

    def flush():
        nonlocal batch
        if batch:
            llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in batch], sp, use_tqdm=False)
            batch = []

    for e in read_corpus(a.corpus, a.corpus_suffix, a.limit):
        ids = list(e["token_ids"]) if "token_ids" in e else tok(pre + e["text"] + suf)["input_ids"]
        ids = ids[: a.max_model_len - 1]
        hashes = ucm.hash_blocks(ns.hash_seed, ids, ns.block_size)
        if len(hashes) == 0:
            summary["too_short"] += 1
            continue
        docs.append((e["id"], e.get("source", ""), ids, "token_ids" if "token_ids" in e else ""))
        store.refresh()
        if store.lookup(ns, hashes[-1:]).present[0]:
            summary["resumed"] += 1
            continue
        # vLLM writes the K/V of every prompt token; the connector saves the full blocks.
        batch.append(ids)
        summary["documents"] += 1
        summary["tokens"] += len(hashes) * ns.block_size
        if len(batch) >= a.batch:
            flush()
        if sys.stderr.isatty() or summary["documents"] % 10 == 0:
            el = time.time() - t0
            print(f"\rucm.vllm.precompute: {summary['documents']} documents ({summary['resumed']} resumed), "
                  f"{summary['tokens'] / max(el, 1e-9):.0f} tok/s", end="", file=sys.stderr)
    flush()
    store.close()
    llm.llm_engine.engine_core.shutdown()  # the worker's connector finishes its queued dumps
    summary["registered"] = register(a.store, shard, ns.id, docs)
    summary["seconds"] = time.time() - t0
    summary["namespace"] = ns.name
    print("", file=sys.stderr)
    if a.json:
        print(json.dumps(summary))
    else:
        print(f"ucm.vllm.precompute: {summary['documents']} documents stored ({summary['resumed']} resumed, "
              f"{summary['too_short']} shorter than a block, {summary['registered']} registered), "
              f"{summary['tokens']} tokens in {summary['seconds']:.1f} s into {a.store} ({ns.name})")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # past vLLM's interpreter teardown, which can abort on CPU after all work is done


def register(store_path: str, shard: str, ns_id: bytes, docs: List) -> int:
    """Registers every document whose last full block is stored (its blocks are durable once the
    engine has shut down); returns how many. A document whose blocks were not all saved (a dropped
    save) stays unregistered, so a rerun computes it again."""
    import ucm
    n = 0
    with ucm.Store(store_path, mode="c", shard=shard) as st:
        for doc_id, source, ids, kind in docs:
            try:
                st.put_document(ns_id, doc_id, ids, source=source, input=kind)
                n += 1
            except ucm.NotFound as e:
                print(f"ucm.vllm.precompute: document {doc_id} not registered: {e}", file=sys.stderr)
    return n


if __name__ == "__main__":
    sys.exit(main())
