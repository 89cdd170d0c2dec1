"""A model's namespace identity has one owner, libucm (ucm_model_fingerprint; ucm/model/identity.h):
the Python package (ucm.model: the vLLM connector, the SGLang backend, the golden-model scripts)
and `ucm precompute` (the model runner) must get the same fingerprint for the same directory, and
that fingerprint must be the one store_v1.md §7 specifies (computed here from the spec, with
hashlib, independently of ucm). Servers find, or create, the namespace precompute registers by
the one rule of store_v1.md §7.3 (ucm_store_namespace_match / _create)."""
import hashlib
import json
import os
import shutil
import struct
import subprocess

import pytest

import ucm
from ucm import model as M


def spec_digest(model_dir):
    """store_v1.md §7: MD5 over every tensor's name NUL dtype NUL raw bytes, names sorted byte-wise."""
    idx = model_dir / "model.safetensors.index.json"
    files = sorted(set(json.loads(idx.read_text())["weight_map"].values())) if idx.exists() else ["model.safetensors"]
    entries = []
    for fn in files:
        with open(model_dir / fn, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for name, e in header.items():
            if name != "__metadata__":
                b, t = e["data_offsets"]
                entries.append((name.encode(), e["dtype"], fn, 8 + n + b, t - b))
    h = hashlib.md5()
    for name, dtype, fn, off, size in sorted(entries):
        h.update(name + b"\0" + dtype.encode() + b"\0")
        with open(model_dir / fn, "rb") as f:
            f.seek(off)
            h.update(f.read(size))
    return h.hexdigest()


def test_the_fingerprint_is_the_one_the_spec_defines(model_dir):
    d = M.descriptor(str(model_dir))
    cfg = json.loads((model_dir / "config.json").read_text())
    assert d["weights_digest"] == spec_digest(model_dir)
    name = (cfg.get("_name_or_path") or "").rstrip("/")  # absent: the directory's name
    assert d["model_id"] == (os.path.basename(name) if name else model_dir.resolve().name)
    assert (d["num_layers"], d["num_kv_heads"], d["head_dim"]) == (
        cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"])
    assert (d["dtype"], d["block_size"], d["extra"]["hash_bits"], d["extra"]["dense_layers"]) == ("bf16", 16, 128, [0, 1])
    assert M.fingerprint(str(model_dir)) == {"model_id": d["model_id"], "weights_digest": d["weights_digest"]}
    o = M.descriptor(str(model_dir), dtype="fp32", block_size=128, dense_layers=[3, 1, 1], namespace_name="x")
    assert (o["dtype"], o["block_size"], o["extra"]["dense_layers"], o["name"]) == ("fp32", 128, [1, 3], "x")


def test_precompute_and_servers_use_the_same_namespace(tmp_path, ucm_bin, model_dir):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "d", "text": "The fingerprint of a model has one owner. " * 8}) + "\n")
    store = tmp_path / "store"
    p = subprocess.run([ucm_bin, "precompute", "--model", str(model_dir), "--corpus", str(corpus), "--store",
                        str(store), "--compute-dtype", "fp32", "--threads", "1", "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    with ucm.Store(str(store)) as s:
        (registered,) = s.namespaces()
    mine = M.descriptor(str(model_dir))
    for k in ("model_id", "weights_digest", "dtype", "block_size", "num_layers", "num_kv_heads", "head_dim"):
        assert registered[k] == mine[k], k
    assert ucm.namespace_id(mine).hex() == registered["id"]
    # The one rule (store_v1.md §7.3): what a server (vLLM block 16, SGLang page 64) finds is the
    # namespace precompute registered; a server creating it in an empty store makes the same one,
    # with the same r4_projection, in-process (no `ucm` binary).
    with ucm.Store(str(store)) as s:
        for engine_block in (16, 64):
            assert s.match_namespace(mine, engine_block).id.hex() == registered["id"]
        proj = s.attachment(registered["id"], "r4_projection")
        with pytest.raises(ucm.NotFound, match="dtype bf16 \\(store\\) vs fp16"):
            s.match_namespace(M.descriptor(str(model_dir), dtype="fp16"), 16)
    with ucm.Store(str(tmp_path / "fresh"), "c") as f:
        made = f.create_namespace(mine)
        assert made.id.hex() == registered["id"]
        assert f.attachment(made, "r4_projection") == proj
        assert f.create_namespace(mine).id == made.id  # idempotent


def test_any_decoder_family_and_clear_errors(tmp_path, model_dir):
    # A family the model runner does not run (vLLM serves it): the identity is still defined.
    other = tmp_path / "other"
    other.mkdir()
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg.update(model_type="gemma2", architectures=["Gemma2ForCausalLM"], hidden_act="gelu_pytorch_tanh")
    (other / "config.json").write_text(json.dumps(cfg))
    os.symlink(model_dir / "model.safetensors", other / "model.safetensors")
    assert M.descriptor(str(other))["weights_digest"] == spec_digest(model_dir)
    with pytest.raises(ucm.Invalid, match="config.json"):
        M.descriptor(str(tmp_path / "missing"))
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(model_dir / "config.json", broken / "config.json")
    (broken / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad}")
    with pytest.raises(ucm.Invalid, match="model.safetensors"):
        M.descriptor(str(broken))
    with pytest.raises(ucm.Invalid, match="hash_bits"):
        M.descriptor(str(model_dir), hash_bits=12)
    with pytest.raises(ucm.Invalid, match="unknown key 'colour'"):
        M.descriptor(str(model_dir), colour="blue")
