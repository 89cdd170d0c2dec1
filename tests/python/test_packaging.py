"""`pip install lib/python` gives a package that stands alone: the wheel holds every module under
lib/python/ucm with the one version number (lib/python/ucm/VERSION, which CMake reads too) and
libucm itself (ucm/_lib/libucm.so, built by CMake through scikit-build-core: the target `ucm`
only, no libtorch). Installed into a scratch venv, with no UCM_LIB, no build tree on the path and
nothing from lib/python, it opens a store, creates a namespace and loads a block back.

The wheel is built with the test interpreter's own pip and scikit-build-core (no network: no
build isolation; scripts/deps.sh installs scikit-build-core in .venv), in a scratch build folder,
so it compiles libucm from scratch (about two minutes on 2 cores).
"""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "lib" / "python"

PROBE = r"""
import json, sys
import numpy as np
import ucm, ucm.vllm, ucm.tokenize, ucm.retrieval, ucm.blend, ucm._lib as L
import importlib.util
store_dir = sys.argv[1]
lib = L.lib()
desc = {"model_id": "wheel-model", "weights_digest": "00", "dtype": "fp16", "block_size": 4, "num_layers": 2,
        "num_kv_heads": 2, "head_dim": 8, "extra": {"hash_bits": 16, "projection_seed": 3}}
with ucm.Store(store_dir, "c") as s:
    ns = s.create_namespace(desc)
    ids = list(range(100, 108))
    hashes = ucm.hash_blocks(ns.hash_seed, ids, 4)
    kv = np.arange(2 * ns.block_bytes(), dtype=np.uint8).reshape(2, -1) % 251
    s.dump(ns, hashes, ucm.parents_of(ns.hash_seed, hashes), kv.copy(), tokens=ids)
with ucm.Store(store_dir) as s:
    ns = s.match_namespace(desc, 16)
    got = np.zeros_like(kv)
    status = s.load(ns, hashes, got)
    proj = s.attachment(ns, "r4_projection")
print(json.dumps({"ucm": ucm.__file__, "connector": importlib.util.find_spec("ucm.vllm.connector").origin,
                  "version": ucm.__version__, "lib": L._path, "same": bool(np.array_equal(got, kv)) and not status.any(),
                  "proj_bytes": len(proj)}))
"""


def test_wheel_bundles_libucm_and_stands_alone(tmp_path):
    pytest.importorskip("scikit_build_core", reason="scripts/deps.sh installs scikit-build-core in .venv")
    wheels = tmp_path / "wheels"
    build = tmp_path / "cmake-build"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-w", str(wheels),
                        "--config-settings", f"build-dir={build}", str(PKG)],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (wheel,) = wheels.glob("ucm-*.whl")
    version = (PKG / "ucm" / "VERSION").read_text().strip()
    assert wheel.name.startswith(f"ucm-{version}-"), wheel.name
    if os.environ.get("UCM_EXPECT_VERSION"):
        assert version == os.environ["UCM_EXPECT_VERSION"], "CMake's project version is not lib/python/ucm/VERSION"
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(PKG)) for p in (PKG / "ucm").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert sources <= names, f"missing from the wheel: {sorted(sources - names)}"
    assert "ucm/_lib/libucm.so" in names
    assert not [n for n in names if "libtorch" in n or n.endswith((".a", ".h"))], names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--disable-pip-version-check",
                    "--target", site, str(wheel)], check=True)
    # numpy comes from the test interpreter (a dependency, not under test); nothing from lib/python,
    # no UCM_LIB, no build tree.
    import numpy
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "UCM_LIB", "UCM_BUILD_DIR")}
    env["PYTHONPATH"] = str(Path(numpy.__file__).parents[1])
    out = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE, str(tmp_path / "store")], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    import json
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["ucm"].startswith(site) and r["connector"].startswith(site), r   # imported from the install
    assert r["connector"].endswith(os.path.join("ucm", "vllm", "connector.py"))
    assert r["lib"] == os.path.join(site, "ucm", "_lib", "libucm.so"), r     # the bundled libucm
    assert r["version"] == version
    assert r["same"], "the block loaded back differs from the one dumped"
    assert r["proj_bytes"] == 2 * 2 * 8 * 16 * 4                               # created with its r4_projection
