#!/usr/bin/env python3
"""Builds the store fixtures in tests/fixtures/ byte by byte from formats/store/store_v1.md,
independently of ucm's encoders, so that a C++ encoder and decoder that drift together (which
round-trip tests cannot see) fail tests/tools/test_store_fixtures.cc.

Usage (development time only; the outputs are checked in):
    .venv/bin/pip install xxhash
    .venv/bin/python scripts/make_store_fixtures.py [--out tests/fixtures]

Three stores, each a superblock and one data file, without an index (the data files are the
source of truth, spec §3; the test recovers the index with `ucm build --rebuild-index`):

  store_v4/           format_version 4, min_reader_version 4: what this ucm creates. Its BLOCK_KV
                      records hold their token ids (flag bit 1, tokens_checksum, ids at offset
                      128, §3.2), except block 2's ("tokens unknown", as a writer without ids
                      leaves it).
  store_v2/           format_version 2, min_reader_version 2: what ucm 0.2.0 - 0.6.x wrote. Its
                      NS_ATTACHMENT record is *named* (flag bit 0, §3.3).
  store_v1_unnamed/   format_version 1, min_reader_version 1, as ucm 0.1.0 wrote before named
                      attachments: the NS_ATTACHMENT record holds the bare data, flag 0.

Both hold: a NAMESPACE record (tiny model: 2 layers, 1 KV head, head dim 4, block 4, bf16), its
"r4_projection" attachment, a chain of 3 BLOCK_KV records (tokens 10..21), a BLOCK_REPR record for
block 1, and a DOCUMENT record for the chain. expected.json lists what a reader must find.
"""
import argparse
import hashlib
import json
import os
import shutil
import struct

import xxhash

PAGE = 4096
CREATED_MS = 1767225600000  # 2026-01-01T00:00:00Z, fixed so the bytes are reproducible


def xxh3(b):
    return xxhash.xxh3_64_intdigest(b)


def md5(b):
    return hashlib.md5(b).digest()


def superblock(version, min_reader):
    """§2: magic, format_version, min_reader_version, created_ms, created_by[32], XXH3 of [0,56)."""
    body = b"UCMSTORE" + struct.pack("<IIQ", version, min_reader, CREATED_MS)
    body += b"fixture".ljust(32, b"\0")
    assert len(body) == 56
    return body + struct.pack("<Q", xxh3(body))


def file_header(version, file_id):
    """§3.1: 4096 bytes, XXH3 of [0,4088) at 4088."""
    h = b"UCMDATA1" + struct.pack("<IIQ", version, file_id, CREATED_MS)
    h = h.ljust(4088, b"\0")
    return h + struct.pack("<Q", xxh3(h))


def record(rtype, ns, key, payload, parent=b"\0" * 16, token_count=0, flags=0, tokens=None):
    """§3.2: a 4096-byte record header page, then the payload padded to a page multiple. tokens
    (format 4, BLOCK_KV): flag bit 1, tokens_checksum at 96, the ids (u32 LE) at 128."""
    ids = b""
    if tokens is not None:
        assert len(tokens) == token_count <= 992
        flags |= 2
        ids = struct.pack(f"<{len(tokens)}I", *tokens)
    h = b"UCMR" + struct.pack("<HHII", 1, rtype, PAGE, flags)
    h += ns + key + parent
    h += struct.pack("<QQII", len(payload), xxh3(payload), token_count, 0)
    h += struct.pack("<QQ", CREATED_MS, xxh3(ids) if tokens is not None else 0) + b"\0" * 16
    assert len(h) == 120
    h += struct.pack("<Q", xxh3(h))
    h += ids
    h = h.ljust(PAGE, b"\0")
    pad = (-len(payload)) % PAGE
    return h + payload + b"\0" * pad


def canonical(obj):
    """§7: keys sorted, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def build(out, version, named):
    L, H, D, T, S = 2, 1, 4, 4, 2
    fp = {"model_id": "fixture-model", "weights_digest": "00112233445566778899aabbccddeeff", "dtype": "bf16",
          "block_size": T, "num_layers": L, "num_kv_heads": H, "head_dim": D, "layout": 1,
          "hash_scheme": "md5-chain-v1", "extra": {"hash_bits": 8}}
    ns = md5(canonical(fp))
    name = "fixture-model/bf16/b4/" + ns.hex()[:8]
    ns_payload = canonical(dict(fp, name=name))

    tokens = list(range(10, 10 + 3 * T))
    h = md5(b"ucm.hash.v1" + ns)  # §4.1 h_0
    root = h
    hashes, parents = [], []
    for b in range(3):
        parents.append(h)
        h = md5(h + struct.pack(f"<{T}I", *tokens[b * T:(b + 1) * T]))
        hashes.append(h)

    def kv_payload(b):  # [L][2][T][H][D] bf16: element e holds bf16 bits (b * 1000 + e) & 0xffff
        n = L * 2 * T * H * D
        return struct.pack(f"<{n}H", *[(b * 1000 + e) & 0xFFFF for e in range(n)])

    repr_payload = b"UCMP" + struct.pack("<I", 0)  # an empty section table (§4.3)
    att_data = bytes(range(32))  # the attachment's data
    if named:
        nm = b"r4_projection"
        att_payload = struct.pack("<I", len(nm)) + nm
        att_payload += b"\0" * ((-len(att_payload)) % 8) + att_data
    else:
        att_payload = att_data
    doc = canonical({"id": "fixture-doc", "first_block": hashes[0].hex(), "last_block": hashes[2].hex(),
                     "blocks": 3, "tokens": 3 * T, "source": "fixture.txt", "created_ms": CREATED_MS})

    data = file_header(version, 1)
    data += record(3, ns, b"\0" * 16, ns_payload)
    data += record(4, ns, md5(b"r4_projection"), att_payload, flags=1 if named else 0)
    for b in range(3):
        ids = tokens[b * T:(b + 1) * T] if version >= 4 and b < 2 else None
        data += record(1, ns, hashes[b], kv_payload(b), parent=parents[b], token_count=T, tokens=ids)
    data += record(2, ns, hashes[0], repr_payload, parent=parents[0], token_count=T)
    data += record(5, ns, md5(b"fixture-doc"), doc)

    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "data"))
    with open(os.path.join(out, "UCMSTORE"), "wb") as f:
        f.write(superblock(version, version))
    with open(os.path.join(out, "data", "00000001.ucmd"), "wb") as f:
        f.write(data)
    expected = {
        "format_version": version,
        "namespace_id": ns.hex(), "namespace_name": name, "root": root.hex(),
        "tokens": tokens, "block_hashes": [x.hex() for x in hashes],
        "blocks_with_token_ids": [0, 1] if version >= 4 else [],
        "kv_payload_hex": [kv_payload(b).hex() for b in range(3)],
        "repr_payload_hex": repr_payload.hex(),
        "attachment": {"name": "r4_projection", "data_hex": att_data.hex(), "named": named},
        "document": {"id": "fixture-doc", "blocks": 3, "tokens": 3 * T},
    }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    a = ap.parse_args()
    build(os.path.join(a.out, "store_v4"), 4, True)
    build(os.path.join(a.out, "store_v2"), 2, True)
    build(os.path.join(a.out, "store_v1_unnamed"), 1, False)
    print("wrote store_v4, store_v2 and store_v1_unnamed in", a.out)


if __name__ == "__main__":
    main()
