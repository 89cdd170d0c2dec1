"""`pip install lib/python` installs the whole package: ucm, ucm.vllm and every module under
lib/python/ucm, with the one version number (lib/python/ucm/VERSION, which CMake reads too).

Builds the wheel with the test interpreter's own pip and setuptools (no network: no build
isolation), installs it into a scratch venv (no dependencies: the wheel's files are what is under
test), and imports from there, outside the source tree.
"""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "lib" / "python"


def test_wheel_installs_every_module_with_the_one_version(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(wheels), str(PKG)], check=True,
                   cwd=tmp_path)
    (wheel,) = wheels.glob("ucm-*.whl")
    version = (PKG / "ucm" / "VERSION").read_text().strip()
    assert wheel.name.startswith(f"ucm-{version}-"), wheel.name
    if os.environ.get("UCM_EXPECT_VERSION"):
        assert version == os.environ["UCM_EXPECT_VERSION"], "CMake's project version is not lib/python/ucm/VERSION"
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(PKG)) for p in (PKG / "ucm").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert sources <= names, f"missing from the wheel: {sorted(sources - names)}"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--disable-pip-version-check",
                    "--target", site, str(wheel)], check=True)
    # numpy comes from the test interpreter (a dependency, not under test); nothing from lib/python.
    import numpy
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(Path(numpy.__file__).parents[1])
    probe = ("import importlib.util, ucm, ucm.vllm, ucm.tokenize, ucm.retrieval, ucm.blend; "
             "spec = importlib.util.find_spec('ucm.vllm.connector'); "
             "print(ucm.__file__); print(spec.origin); print(ucm.__version__)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], check=True, capture_output=True, text=True,
                         cwd=tmp_path, env=env).stdout.split()
    assert out[0].startswith(site) and out[1].startswith(site), out   # imported from the install
    assert out[1].endswith(os.path.join("ucm", "vllm", "connector.py"))
    assert out[2] == version
