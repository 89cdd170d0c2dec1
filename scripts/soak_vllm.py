#!/usr/bin/env python3
"""Soak of the vLLM connector under production conditions (issue 37; not in CI; run in .venv-vllm).

    .venv-vllm/bin/python scripts/soak_vllm.py --out out/soak [--requests 1000 --docs 100]

One server (vLLM's CPU build, fp32, SmolLM2-135M-Instruct, vLLM's own defaults: prefix caching
on, kv_load_failure_policy unset; --settings legacy: issue 37's prefix caching off and policy
"recompute") with the UcmConnector saving and loading, fed python3.11-doc pages as server token ids: a shared system
prompt (configs/template_chat.txt), a document cut at a random length (prompts of about 0.3-1.5K
tokens), one of ten questions, 32-64 generated tokens (ignore_eos), requests arriving in bursts
of 1-32. Its KV cache is small (--blocks, default 24 blocks of 128 tokens), so vLLM preempts.
Measured on 2 cores (fp32): --blocks 24 gave about 6 preemptions per 100 requests, --blocks 20
57 in 1,000 (the rate hardly depends on the burst size: 4.5-8.4 per 100 for bursts of 1-8 to
25-32): vLLM 0.32 admits a request only when its whole prompt fits (scheduler_reserve_full_isl),
and with 32-64 generated tokens a request rarely needs a new block while decoding; a smaller
--max-num-batched-tokens alone preempts even less (0 in 55 requests at 256, 2 in 72 at 768: the
budget then admits fewer requests at once). --over-admit turns the full-prompt check off, so
requests are admitted on their first chunk and outgrow the cache part-way through their prefill:
in the first burst of 25 requests at --blocks 20, 106 preemptions at a budget of 512 (180 s) and
33 at 1024 (142 s), outputs equal to the reference.
Beside it:

  * a loop runs `ucm gc STORE --max-bytes <half the store's bytes>` every --gc-every seconds;
  * every --corrupt-every finished requests one stored block of a finished prompt is corrupted
    (a payload byte flipped in its data file);
  * once, when --kill-at of the requests are done, the server is killed with SIGKILL in the
    middle of a burst and restarted; it goes on from the first request without an output;
  * at the end a fresh server (load only, roomy cache) serves every request again from the
    surviving store; then `ucm gc --verify` removes the corrupt blocks and `ucm inspect --verify`
    must be clean.

Pass: no request fails, every output of the soak server and of the fresh server equals the reference (a separate
vLLM without the connector, roomy cache, vLLM's own prefix caching on to save time), `ucm inspect
--audit --all` finds 0 poisoned blocks in the surviving store, and the store verifies. The report (stdout and OUT/report.json): requests/s, store hit rate (prompt tokens
served by the connector), vLLM's preemptions, gc runs and what they did, load errors recovered,
saves dropped, mismatches.

The driver resumes: run it again with the same --out and it goes on where it stopped (the
reference, the soak server's outputs, gc runs, corruptions and the soak's start and end times are
kept in OUT as they happen, in chunks of 64 requests for the reference and the fresh server: a
restarted fresh server loads only, so it is as fresh as the first one was).
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib/python"))  # the driver's `import ucm` is the children's package
DOCS_DIR = Path("/usr/share/doc/python3.11/html/_sources")
QUESTIONS = ["What is this module for?", "Name one function it provides.", "Summarize the first section.",
             "What does the first example show?", "Which exceptions can it raise?", "Who should use it?",
             "List two classes it defines.", "What changed in recent versions?", "Give a one-line usage example.",
             "What are its main limitations?"]


def build_requests(n, n_docs, seed, tok):
    rng = random.Random(seed)
    docs = sorted(p for p in DOCS_DIR.rglob("*.rst.txt") if p.stat().st_size > 7000)
    rng.shuffle(docs)
    docs = docs[:n_docs]
    from ucm.corpus import read_template  # precompute's split (ucm_corpus_template)
    pre, post = read_template(str(ROOT / "configs/template_chat.txt"))
    texts = {}
    out = []
    for i in range(n):
        d = docs[rng.randrange(len(docs))]
        text = texts.setdefault(d, d.read_text())
        cut = rng.choice([1000, 2000, 3000, 4000, 5000])   # about 0.3-1.5K tokens with the template
        q = "\nQuestion: " + rng.choice(QUESTIONS) + "\nAnswer:"
        while True:
            ids = tok(pre + text[:cut] + post.replace("{question}", "") + q)["input_ids"]
            if len(ids) > 1500:
                cut = cut * 3 // 4
            elif len(ids) < 300 and cut < len(text):
                cut += 500
            else:
                break
        out.append({"i": i, "ids": ids, "max_tokens": rng.randint(32, 64), "doc": str(d)})
    return out


# ----------------------------------------------------------------------------- server (child)
def serve(a):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt
    reqs = json.load(open(a.requests_file))
    done = set()
    if os.path.exists(a.results):
        for line in open(a.results):
            try:
                done.add(json.loads(line)["i"])
            except ValueError:
                pass                                  # a line cut by SIGKILL
    todo = [r for r in reqs if r["i"] not in done]
    kw = {}
    if a.store:
        kw["kv_transfer_config"] = KVTransferConfig(
            kv_connector="UcmConnector", kv_connector_module_path="ucm.vllm.connector", kv_role="kv_both",
            kv_connector_extra_config={"store": a.store, "save": a.save},
            **({} if a.failure_policy == "default" else {"kv_load_failure_policy": a.failure_policy}))
    if a.blocks:
        kw["num_gpu_blocks_override"] = a.blocks
    if a.over_admit:
        kw["scheduler_reserve_full_isl"] = False  # admit on the first chunk's blocks: thrashing
    if a.prefix_caching != "default":
        kw["enable_prefix_caching"] = a.prefix_caching == "on"
    llm = LLM(model=a.model, dtype=a.dtype, max_model_len=a.max_model_len, enforce_eager=True, seed=0,
              max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=32, disable_log_stats=False, **kw)
    rng = random.Random(a.seed + len(done))
    pos = 0
    with open(a.results, "a") as f:
        while pos < len(todo):
            # Without bursts (the reference, the fresh server): chunks of 64, each written when done,
            # so that a driver stopped part-way keeps them (vLLM admits 32 at a time anyway).
            burst = todo[pos: pos + (rng.randint(1, 32) if a.bursts else 64)]
            pos += len(burst)
            t0 = time.time()
            outs = llm.generate([TokensPrompt(prompt_token_ids=r["ids"]) for r in burst],
                                [SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True)
                                 for r in burst], use_tqdm=False)
            dt = time.time() - t0
            for r, o in zip(burst, outs):
                f.write(json.dumps({"i": r["i"], "tokens": list(o.outputs[0].token_ids),
                                    "finish_reason": o.outputs[0].finish_reason,
                                    "cached": o.num_cached_tokens or 0, "prompt_len": len(r["ids"]),
                                    "burst_seconds": dt}) + "\n")
            f.flush()
            # vLLM's own preemption counter, after every burst: a server killed later keeps its count.
            pre = sum(int(getattr(m, "value", 0) or 0) for m in llm.get_metrics() if m.name == "vllm:num_preemptions")
            with open(a.results + ".metrics.jsonl", "a") as mf:
                mf.write(json.dumps({"pid": os.getpid(), "preemptions": pre}) + "\n")
            print(f"soak-server: {len(done) + pos}/{len(reqs)} requests, {pre} preemptions", file=sys.stderr,
                  flush=True)
    llm.llm_engine.engine_core.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ----------------------------------------------------------------------------- driver
def child(a, results, store=None, save=False, blocks=None, prefix_caching=None, bursts=True, log=None,
          requests_file=None):
    """One server process; prefix_caching None: the soak's --settings (defaults: vLLM's own)."""
    cmd = [sys.executable, __file__, "--serve", "--requests-file", str(requests_file or a.out / "requests.json"), "--results",
           str(results), "--model", a.model, "--dtype", a.dtype, "--seed", str(a.seed),
           "--max-model-len", str(a.max_model_len), "--max-num-batched-tokens", str(a.max_num_batched_tokens)]
    if store:
        cmd += ["--store", str(store)] + (["--save"] if save else [])
    if blocks:
        cmd += ["--blocks", str(blocks)] + (["--over-admit"] if a.over_admit else [])
    legacy = a.settings == "legacy"
    cmd += ["--prefix-caching", prefix_caching or ("off" if legacy else "default"),
            "--failure-policy", "recompute" if legacy else "default"]
    if bursts:
        cmd.append("--bursts")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib/python"), "VLLM_CPU_KVCACHE_SPACE": "1",
           "UCM_BIN": a.ucm, "UCM_VLLM_STATS": str(a.out / "connector_events.jsonl")}
    # Its own process group: the SIGKILL below takes the server with vLLM's engine-core process
    # (which renames itself VLLM::EngineCore, so `pkill -f soak_vllm.py` would miss it).
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "a") if log else None, env=env,
                         start_new_session=True)
    _children.append(p)
    return p


_children = []


def _kill_children(*_):
    """A driver that ends (Ctrl-C, SIGTERM, an error) takes its servers' process groups with it."""
    for p in _children:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if _:
        sys.exit(1)


def lines(path):
    out = {}
    if Path(path).exists():
        for line in open(path):
            try:
                r = json.loads(line)
                out[r["i"]] = r
            except ValueError:
                pass
    return out


def lines_list(path):
    out = []
    if Path(path).exists():
        for line in open(path):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass                                  # a line cut by SIGKILL
    return out


def store_bytes(a, store):
    p = subprocess.run([a.ucm, "inspect", str(store), "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        return 0
    j = json.loads(p.stdout)
    t = j.get("totals", j)
    return int(t.get("payload_bytes", 0) or 0) + int(t.get("repr_bytes", 0) or 0) or int(t.get("bytes", 0) or 0)


def corrupt_one(a, store, reqs, done_ids, rng, tok_cache):
    """Flips one payload byte of a stored block of a finished prompt; returns its hash or None."""
    import ucm
    with ucm.Store(str(store)) as s:
        nss = s.namespaces()
        if not nss:
            return None
        ns = s.namespace(nss[0]["id"])
        for _ in range(20):
            r = reqs[rng.choice(sorted(done_ids))]
            hashes = ucm.hash_blocks(ns.hash_seed, r["ids"], ns.block_size)
            present = s.lookup(ns, hashes).present
            idx = [k for k in range(len(hashes)) if present[k]]
            if not idx:
                continue
            h = hashes[rng.choice(idx)].tobytes().hex()
            p = subprocess.run([a.ucm, "inspect", str(store), "--block", h, "--json"], capture_output=True, text=True)
            if p.returncode != 0:
                continue
            blk = json.loads(p.stdout)["block"]
            rec = blk["kv"]
            base = Path(store) / "shards" / blk["shard"] if blk.get("shard") else Path(store)
            data = base / "data" / f"{rec['file']:08d}.ucmd"
            if not data.exists():
                continue
            with open(data, "r+b") as f:
                f.seek(rec["offset"] + rec["length"] // 2)
                b = f.read(1)
                f.seek(rec["offset"] + rec["length"] // 2)
                f.write(bytes([b[0] ^ 0xFF]))
            return h
    return None


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "out/soak")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--blocks", type=int, default=24, help="vLLM KV cache blocks of the soak server")
    ap.add_argument("--max-model-len", type=int, default=2048, help="at most (blocks - 1) x 128")
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048,
                    help="vLLM's token budget per step: below the prompt lengths, prefill is chunked, and "
                         "requests part-way through their prefill hold blocks and ask for more (more preemption)")
    ap.add_argument("--over-admit", action="store_true",
                    help="the soak server admits a request when its first chunk fits "
                         "(vLLM scheduler_reserve_full_isl=False, default True since 0.3x): with a "
                         "--max-num-batched-tokens below the prompt lengths, requests part-way through their "
                         "prefill outgrow the cache and vLLM preempts (the thrashing that setting prevents)")
    ap.add_argument("--gc-every", type=float, default=30.0, help="seconds between gc runs")
    ap.add_argument("--corrupt-every", type=int, default=100)
    ap.add_argument("--kill-at", type=float, default=0.5, help="SIGKILL the server once this share is done")
    ap.add_argument("--fresh", type=int, default=0, help="requests the fresh server replays (0 = all)")
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct"))
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--ucm", default=os.environ.get("UCM_BIN", str(ROOT / "build/bin/ucm")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", choices=["defaults", "legacy"], default="defaults",
                    help="the servers' engine settings: vLLM's own defaults (prefix caching on, "
                         "kv_load_failure_policy unset), or those of issue 37's soak (prefix caching off, "
                         "policy recompute)")
    ap.add_argument("--report", type=Path, help="also write the report (JSON) here, e.g. into docs/results/")
    # child mode
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--requests-file", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--save", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--prefix-caching", choices=["default", "on", "off"], default="default", help=argparse.SUPPRESS)
    ap.add_argument("--failure-policy", choices=["default", "recompute", "fail"], default="default",
                    help=argparse.SUPPRESS)
    ap.add_argument("--bursts", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args()


def main():
    a = parse_args()
    if a.serve:
        return serve(a)

    a.out.mkdir(parents=True, exist_ok=True)
    import atexit
    atexit.register(_kill_children)
    signal.signal(signal.SIGTERM, _kill_children)
    store = a.out / "store"
    log = a.out / "servers.log"
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.model)
    if not (a.out / "requests.json").exists():
        json.dump(build_requests(a.requests, a.docs, a.seed, tok), open(a.out / "requests.json", "w"))
    reqs = json.load(open(a.out / "requests.json"))
    n = len(reqs)
    print(f"soak: {n} requests, prompts {min(len(r['ids']) for r in reqs)}-{max(len(r['ids']) for r in reqs)} tokens",
          file=sys.stderr)

    ref_file = a.out / "reference.jsonl"
    if len(lines(ref_file)) < n:
        t0 = time.time()
        p = child(a, ref_file, prefix_caching="on", bursts=False, log=log)
        assert p.wait() == 0, f"reference server failed: {log}"
        print(f"soak: reference in {time.time() - t0:.0f} s", file=sys.stderr)
    ref = lines(ref_file)

    # --- the soak server, with gc beside it, corruption, one SIGKILL
    soak_file = a.out / "soak.jsonl"
    gc_file = a.out / "gc_runs.jsonl"                  # kept as they happen, so a resumed driver reports all
    corrupt_file = a.out / "corrupted.jsonl"
    times_file = a.out / "soak_times.json"
    gc_runs = lines_list(gc_file)
    stop = threading.Event()

    def gc_loop():
        while not stop.wait(a.gc_every):
            half = store_bytes(a, store) // 2
            if not half:
                continue
            t0 = time.time()
            p = subprocess.run([a.ucm, "gc", str(store), "--max-bytes", str(half), "--json"], capture_output=True,
                               text=True)
            try:
                rep = json.loads(p.stdout)
            except ValueError:
                rep = {"stderr": p.stderr[-500:]}
            run = {"rc": p.returncode, "seconds": round(time.time() - t0, 2), "target_bytes": half, "report": rep}
            gc_runs.append(run)
            with open(gc_file, "a") as f:
                f.write(json.dumps(run) + "\n")

    rng = random.Random(a.seed)
    corrupted = lines_list(corrupt_file)
    times = json.load(open(times_file)) if times_file.exists() else {}
    if "start" not in times:
        times["start"] = time.time()
        json.dump(times, open(times_file, "w"))
    gc_thread = threading.Thread(target=gc_loop, daemon=True)
    gc_thread.start()
    killed = times.get("killed", False)
    restarts = times.get("restarts", 0)
    while len(lines(soak_file)) < n:
        proc = child(a, soak_file, store=store, save=True, blocks=a.blocks, log=log)
        next_corrupt = (len(lines(soak_file)) // a.corrupt_every + 1) * a.corrupt_every
        while proc.poll() is None:
            time.sleep(1.0)
            done = lines(soak_file)
            if len(done) >= next_corrupt:
                h = corrupt_one(a, store, reqs, set(done), rng, None)
                corrupted.append({"after": len(done), "block": h})
                with open(corrupt_file, "a") as f:
                    f.write(json.dumps(corrupted[-1]) + "\n")
                next_corrupt += a.corrupt_every
            if not killed and len(done) >= a.kill_at * n:
                time.sleep(rng.uniform(0.5, 3.0))      # into the next burst
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                killed = True
                times["killed"] = True
                json.dump(times, open(times_file, "w"))
                print(f"soak: SIGKILL after {len(lines(soak_file))} requests", file=sys.stderr)
        if proc.returncode not in (0, -signal.SIGKILL):
            raise SystemExit(f"soak server failed ({proc.returncode}): {log}")
        if proc.returncode != 0:
            restarts += 1
            times["restarts"] = restarts
            json.dump(times, open(times_file, "w"))
    if "end" not in times:
        times["end"] = time.time()
        json.dump(times, open(times_file, "w"))
    soak_seconds = times["end"] - times["start"]
    per_server = {}                                   # the last count of each soak server process
    for r in lines_list(str(soak_file) + ".metrics.jsonl"):
        per_server[r["pid"]] = max(per_server.get(r["pid"], 0), r["preemptions"])
    preemptions = sum(per_server.values())
    stop.set()
    gc_thread.join()
    soak = lines(soak_file)

    return replay_and_report(a, store, log, reqs, ref, soak, soak_seconds, preemptions, restarts, gc_runs, corrupted)


def replay_and_report(a, store, log, reqs, ref, soak, soak_seconds, preemptions, restarts, gc_runs, corrupted):
    """A fresh server replays the requests on the surviving store; then the audit, gc --verify,
    inspect --verify, and the report (stdout, OUT/report.json, --report). Returns the exit code."""
    n = len(reqs)
    # --- a fresh server on the surviving store
    fresh_file = a.out / "fresh.jsonl"                 # a restarted driver resumes it (load only)
    fresh_reqs = reqs if not a.fresh else reqs[: a.fresh]
    if a.fresh:
        json.dump(fresh_reqs, open(a.out / "requests.json.fresh", "w"))
    p = child(a, fresh_file, store=store, bursts=False, log=log,
              requests_file=a.out / "requests.json.fresh" if a.fresh else None)
    assert p.wait() == 0, f"fresh server failed: {log}"
    fresh = lines(fresh_file)

    t0 = time.time()
    aud = subprocess.run([a.ucm, "inspect", str(store), "--audit", "--all", "--model", a.model, "--json"],
                         capture_output=True, text=True)
    try:
        audit = json.loads(aud.stdout)
    except ValueError:
        audit = {"rc": aud.returncode, "stderr": aud.stderr[-500:]}
    audit_seconds = time.time() - t0
    gcv = subprocess.run([a.ucm, "gc", str(store), "--verify", "--json"], capture_output=True, text=True)
    insp = subprocess.run([a.ucm, "inspect", str(store), "--verify", "--json"], capture_output=True, text=True)

    events = [json.loads(l) for l in open(a.out / "connector_events.jsonl")] if (a.out / "connector_events.jsonl").exists() else []
    logtext = log.read_text()
    mism_soak = [i for i in range(n) if soak[i]["tokens"] != ref[i]["tokens"]]
    mism_fresh = [i for i in fresh if fresh[i]["tokens"] != ref[i]["tokens"]]
    prompt_tokens = sum(len(r["ids"]) for r in reqs)
    report = {
        "requests": n, "documents": a.docs, "soak_seconds": round(soak_seconds, 1),
        "requests_per_s": round(n / soak_seconds, 3),
        "store_hit_rate_soak": round(sum(soak[i]["cached"] for i in range(n)) / prompt_tokens, 4),
        "store_hit_rate_fresh": round(sum(fresh[i]["cached"] for i in fresh) / sum(fresh[i]["prompt_len"] for i in fresh), 4),
        "preemptions": preemptions, "restarts_after_sigkill": restarts,
        "gc_runs": len(gc_runs), "gc_ok": sum(1 for g in gc_runs if g["rc"] == 0),
        "corrupted_blocks": len([c for c in corrupted if c["block"]]),
        "load_errors_recovered": sum(1 for e in events if e.get("event") == "load" and e.get("failed")),
        "saves_dropped": logtext.count("dropped, the save queue is full"),
        "settings": a.settings, "blocks": a.blocks, "max_num_batched_tokens": a.max_num_batched_tokens,
        "failed_requests_soak": [i for i in range(n) if soak[i].get("finish_reason") == "error"],
        "failed_requests_fresh": [i for i in fresh if fresh[i].get("finish_reason") == "error"],
        "fresh_replayed": len(fresh),
        "audit_blocks": audit.get("audited"), "audit_poisoned": audit.get("poisoned_total"),
        "audit_seconds": round(audit_seconds, 1),
        "bad_reads_reported": logtext.count("reported to vLLM, which recomputes"),
        "saves_cut_at_bad_kv": logtext.count("do not hold good KV"),
        "mismatches_soak": mism_soak, "mismatches_fresh": mism_fresh,
        "final_gc_verify_rc": gcv.returncode, "inspect_verify_rc": insp.returncode,
        "gc_reports": gc_runs[-3:],
    }
    json.dump(report, open(a.out / "report.json", "w"), indent=1)
    if a.report:
        a.report.parent.mkdir(parents=True, exist_ok=True)
        json.dump(report, open(a.report, "w"), indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "gc_reports"}, indent=1))
    ok = (not mism_soak and not mism_fresh and insp.returncode == 0 and not report["failed_requests_soak"]
          and not report["failed_requests_fresh"] and audit.get("poisoned_total") == 0)
    print("soak: PASS" if ok else "soak: FAIL", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
