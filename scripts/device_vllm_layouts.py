#!/usr/bin/env python3
"""The vLLM connector's GPU load and save path on real CUDA tensors (scripts/device_check.sh, step
vllm_layouts; no vLLM needed): KV caches built as vLLM 0.32 builds them (one int8 buffer on the
device, the 5D [L, B, H, N, C bytes] view with the byte strides of each KVCacheLayout permutation,
one bf16 view per layer: allocate_kv_cache / create_kv_cache_views / compute_layout_strides),
loaded through ucm.vllm.gpu_layout.load (the connector's _load: Store.load_device into device
scratch pages, then the strided copy into the K/V views) and read back through gpu_layout.read (the
connector's _copy_out). Every byte of the device buffer is compared with a host reference that
places the stored payload by the 5D strides directly; the copy-out with the payload.

    UCM_LIB=build-device/lib/libucm.so python3 scripts/device_vllm_layouts.py [--json out.json]
    # dry run on a CPU machine, through the stand-in plugin:
    UCM_LIB=build/lib/libucm.so UCM_CUDA_PLUGIN=build/tests/kernels/libucm_fake_cuda_plugin.so \\
        python3 scripts/device_vllm_layouts.py --device cpu

Prints one line per case and a last summary line; exits 1 on any difference, 2 when it cannot run.
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError as _e:
    print(f"device_vllm_layouts: cannot import numpy: {_e}")
    sys.exit(2)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib", "python"))

LAYOUTS = {"LBHNC": (0, 1, 2, 3, 4), "LBNHC": (0, 1, 3, 2, 4), "LHBNC": (0, 2, 1, 3, 4),
           "BLHNC": (1, 0, 2, 3, 4), "BLNHC": (1, 0, 3, 2, 4), "BHLNC": (1, 2, 0, 3, 4)}
L, T, H, D, S = 4, 16, 8, 128, 2          # layers, ucm block, KV heads, head dim, bf16 bytes
NBLK = 24                                  # stored blocks
CASES = [(lay, 16, None, None) for lay in LAYOUTS] + [
    ("LBNHC", 16, None, (2, 4)), ("LBHNC", 16, None, (6, 7)), ("BLHNC", 32, None, (0, 4)),
    ("LBNHC", 32, 16, None), ("LBHNC", 64, 16, (4, 8))]


def payload(i):
    return np.random.default_rng(1000 + i).integers(0, 256, L * 2 * T * H * D * S, dtype=np.uint8)


def strides_of(order, shape):  # compute_layout_strides (v1/kv_cache_interface.py:338), no fixed strides
    st, cur = [0] * 5, 1
    for dim in reversed(order):
        st[dim] = cur
        cur *= shape[dim]
    return st


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", help="cuda, or cpu with UCM_CUDA_PLUGIN naming the stand-in")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    try:
        import torch
        import ucm
        from ucm.vllm import gpu_layout as gl
    except Exception as e:
        print(f"device_vllm_layouts: cannot import torch / ucm: {e}")
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("device_vllm_layouts: torch sees no CUDA device")
        return 2
    dev = torch.device(a.device)
    desc = {"model_id": "device-layouts", "weights_digest": "0", "dtype": "bf16", "block_size": T, "num_layers": L,
            "num_kv_heads": H, "head_dim": D, "name": "dl"}
    tmp = tempfile.mkdtemp(prefix="ucm-vllm-layouts-")
    tokens = list(range(5000, 5000 + NBLK * T))
    with ucm.Store(os.path.join(tmp, "s"), mode="c") as w:
        ns = w.register_namespace(desc)
        hashes = ucm.hash_blocks(ns.hash_seed, tokens, T)
        st = w.dump(ns, hashes, ucm.parents_of(ns.hash_seed, hashes), [payload(i) for i in range(NBLK)])
        assert not st.any(), st
    pays = [payload(i).reshape(L, 2, T, H, D * S) for i in range(NBLK)]
    results, failed = [], 0
    print(f"{'layout':6} {'eb':>3} {'kb':>3} {'heads':>6} {'blocks':>6} {'load ms':>8} {'load GB/s':>9} "
          f"{'read ms':>8}  result")
    with ucm.Store(os.path.join(tmp, "s")) as r:
        for layout, eb, kb, heads in CASES:
            kb = kb or eb
            h0, h1 = heads or (0, H)
            hs, ratio = h1 - h0, eb // kb
            nb = 2 * NBLK * T // eb + 3                         # engine blocks in the cache
            shape = (L, nb * ratio, hs, kb, 2 * D * S)
            st5 = strides_of(LAYOUTS[layout], shape)
            rng = np.random.default_rng(7)
            init = rng.integers(-128, 128, math.prod(shape), dtype=np.int8)
            raw = torch.from_numpy(init).to(dev)
            v5 = torch.as_strided(raw, shape, st5)
            caches = [v5[l].view(torch.bfloat16) for l in range(L)]
            block_ids = [int(x) for x in rng.permutation(nb)[:NBLK * T // eb]]
            first_token = T * (2 if eb == 16 else eb // T)      # vLLM holds the first engine block(s)
            first = first_token // T
            n = NBLK - first
            note = ""
            try:
                lays = [gl.describe(c, eb, D, torch.bfloat16, device_types=("cuda", "cpu")) for c in caches]
                stream = torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else 0
                t0 = time.perf_counter()
                good, status = gl.load(r, ns, hashes[first:], caches, lays, block_ids, first_token, eb, (h0, h1), H,
                                       stream=stream, device=dev.index or 0)
                t_load = time.perf_counter() - t0
                # The host reference: every loaded (layer, K|V, token, head) row at its 5D byte offset.
                expect = init.copy()
                pos = first_token + np.arange(n * T)
                e = np.asarray(block_ids)[pos // eb]
                off = pos % eb
                kblk, row = e * ratio + off // kb, off % kb
                for l in range(L):
                    for kv in range(2):
                        for h in range(hs):
                            base = l * st5[0] + kblk * st5[1] + h * st5[2] + row * st5[3] + kv * D * S
                            src = np.stack([pays[first + i][l, kv, :, h0 + h] for i in range(n)]).reshape(n * T, D * S)
                            expect[base[:, None] + np.arange(D * S)[None]] = src
                got = raw.cpu().numpy()
                ok_load = good == n and not status.any() and np.array_equal(got, expect)
                out = torch.empty((n, L, 2, T, hs, D), dtype=torch.bfloat16)
                t0 = time.perf_counter()
                gl.read(caches, lays, block_ids, first_token, NBLK * T, eb, T, out)
                t_read = time.perf_counter() - t0
                want = np.stack([pays[first + i].reshape(L, 2, T, H, D * S)[:, :, :, h0:h1] for i in range(n)])
                ok_read = out.view(torch.int16).numpy().tobytes() == want.tobytes()
                if not ok_load:
                    bad = np.flatnonzero(got != expect)
                    note = f"load: good {good}/{n}, {len(bad)} bytes differ (first at {bad[0] if len(bad) else '-'})"
                if not ok_read:
                    note += ("; " if note else "") + "copy-out differs from the payload"
                ok = ok_load and ok_read
            except Exception as ex:  # one case's error is that case's failure
                ok, t_load, t_read, note = False, 0.0, 0.0, f"{type(ex).__name__}: {ex}"
            failed += not ok
            nbytes = n * L * 2 * T * hs * D * S
            gbs = nbytes / t_load / 1e9 if t_load else 0.0
            hstr = f"{h0}-{h1}"
            print(f"{layout:6} {eb:>3} {kb:>3} {hstr:>6} {n:>6} {t_load * 1e3:>8.1f} {gbs:>9.2f} {t_read * 1e3:>8.1f}  "
                  f"{'bit-exact' if ok else 'FAILED ' + note}", flush=True)
            results.append({"layout": layout, "engine_block": eb, "kernel_block": kb, "heads": [h0, h1], "blocks": n,
                            "load_s": t_load, "read_s": t_read, "ok": ok, "note": note})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": str(dev), "cases": results, "failed": failed}, f, indent=1)
    print(f"device_vllm_layouts: {len(CASES) - failed} of {len(CASES)} cases bit-exact (6 KVCacheLayouts, kernel "
          f"blocks, TP head ranges) on {dev}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
