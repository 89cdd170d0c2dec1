#!/usr/bin/env python3
"""TTFT of vLLM (CPU build) with and without the ucm connector, at 1K, 4K and 8K prompt tokens.

Run in .venv-vllm (scripts/venv_vllm.sh): `.venv-vllm/bin/python scripts/bench_vllm.py [--sizes
1024,4096,8000] [--out out/bench_vllm.json]`. One run measures, on the same prompts (python3.11-doc
text as token ids, plus a short question):

  recompute      a fresh vLLM, prefix caching on, first sight of the prompt: full prefill
  prefix hit     the same vLLM, the same prompt again: vLLM's in-memory prefix-cache hit
  ucm            a fresh vLLM process with the UcmConnector, the prompt's document precomputed by
                 `ucm precompute` (from the same ids): served from the store
  store read     `ucm bench store` on the same disk: the raw O_DIRECT read rate, against the
                 connector's load GB/s (bytes loaded / time in its loads, $UCM_VLLM_STATS)

TTFT is the wall time of llm.generate() of one prompt with max_tokens=1. Targets at 4K: ucm >= 5x
faster than recompute, and within 2x of the in-memory hit. Figures: docs/benchmarks.md.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS_DIR = Path("/usr/share/doc/python3.11/html/_sources/library")


def cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct"))
    ap.add_argument("--sizes", default="1024,4096,8000")
    ap.add_argument("--reps", type=int, default=2, help="prompts per size (distinct documents)")
    ap.add_argument("--out", default=str(ROOT / "out/bench_vllm.json"))
    a = ap.parse_args()
    ucm_bin = os.environ.get("UCM_BIN", str(ROOT / "build/bin/ucm"))
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.model)
    text = "".join(p.read_text() for p in sorted(DOCS_DIR.glob("*.rst.txt"))[:200])
    all_ids = tok(text)["input_ids"]
    question = tok("\nQuestion: what is this about?\nAnswer:", add_special_tokens=False)["input_ids"]
    sizes = [int(x) for x in a.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="ucm-bench-vllm-", dir=str(ROOT / "out") if (ROOT / "out").exists() else None))
    prompts, corpus = [], []
    off = 0
    for n in sizes:
        for r in range(a.reps):
            doc = all_ids[off: off + n - len(question)]
            off += n
            corpus.append({"id": f"{n}-{r}", "token_ids": doc})
            prompts.append({"ids": doc + question, "size": n})
    (work / "ids.jsonl").write_text("".join(json.dumps(c) + "\n" for c in corpus))
    store = work / "store"
    subprocess.run([ucm_bin, "precompute", "--model", a.model, "--corpus", str(work / "ids.jsonl"), "--store",
                    str(store)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib/python"), "VLLM_CPU_KVCACHE_SPACE": "1",
           "UCM_VLLM_STATS": str(work / "stats.jsonl")}
    run = lambda name, extra, ps: _run(a.model, work, name, extra, ps, env)
    # Baselines: each prompt twice in one process (recompute, then the in-memory hit).
    twice = [p for p in prompts for _ in range(2)]
    base = run("baseline", ["--prefix-caching", "on"], twice)
    served = run("ucm", ["--store", str(store)], prompts)
    stats = [json.loads(l) for l in open(work / "stats.jsonl")] if (work / "stats.jsonl").exists() else []
    loads = [s for s in stats if s["event"] == "load"]
    load_gbs = sum(s["bytes"] for s in loads) / max(1e-9, sum(s["seconds"] for s in loads)) / 1e9
    raw = subprocess.run([ucm_bin, "bench", "store", "--store", str(work), "--blocks", "2048", "--lookup-blocks", "0",
                          "--deep-queue-depth", "0", "--buffered-threads", "0", "--json"], capture_output=True,
                         text=True)
    raw_j = json.loads(raw.stdout) if raw.returncode == 0 else {"error": raw.stderr[-500:]}
    rows = []
    for n in sizes:
        idx = [i for i, p in enumerate(prompts) if p["size"] == n]
        rec = min(base[2 * i]["seconds"] for i in idx)
        hit = min(base[2 * i + 1]["seconds"] for i in idx)
        u = min(served[i]["seconds"] for i in idx)
        cached = [served[i]["num_cached_tokens"] for i in idx]
        rows.append({"tokens": n, "recompute_s": rec, "prefix_hit_s": hit, "ucm_s": u, "ucm_cached_tokens": cached,
                     "speedup_vs_recompute": rec / u, "ucm_over_prefix_hit": u / hit})
    report = {"cpu": cpu_model(), "cores": os.cpu_count(), "rows": rows, "connector_load_GBps": load_gbs,
              "store_bench": raw_j, "work": str(work)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=1))
    print(f"CPU: {report['cpu']} ({report['cores']} cores)")
    print("| prompt tokens | recompute (s) | vLLM prefix hit (s) | ucm connector (s) | ucm vs recompute | ucm / prefix hit |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tokens']} | {r['recompute_s']:.3f} | {r['prefix_hit_s']:.3f} | {r['ucm_s']:.3f} | "
              f"{r['speedup_vs_recompute']:.1f}x | {r['ucm_over_prefix_hit']:.2f}x |")
    print(f"connector load: {load_gbs:.2f} GB/s over {len(loads)} loads; store bench: "
          f"{json.dumps(raw_j)[:400]}")


def _run(model, work, name, extra, prompts, env):
    pfile, out = work / f"{name}.prompts.json", work / f"{name}.out.json"
    pfile.write_text(json.dumps(prompts))
    cmd = [sys.executable, str(ROOT / "tests/vllm/vllm_run.py"), "--model", model, "--prompts", str(pfile), "--out",
           str(out), "--max-tokens", "1", "--one-by-one", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    (work / f"{name}.stderr.txt").write_text(p.stderr)
    if p.returncode:
        raise SystemExit(f"{name} failed:\n{p.stderr[-3000:]}")
    return json.loads(out.read_text())["results"]


if __name__ == "__main__":
    sys.exit(main())
