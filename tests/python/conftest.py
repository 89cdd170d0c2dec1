"""pytest setup for the ucm Python package tests (run by ctest, tests/python/CMakeLists.txt).

Environment: UCM_LIB (libucm.so of the build), UCM_BIN (the `ucm` binary; tests that need it
skip without it), UCM_MODEL_DIR (default models/SmolLM2-135M-Instruct; tests on the real model
skip when it is absent). The package is imported from lib/python (no install needed).
"""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lib" / "python"))


@pytest.fixture(scope="session")
def ucm_bin():
    b = os.environ.get("UCM_BIN") or str(ROOT / "build" / "bin" / "ucm")
    if not Path(b).exists():
        pytest.skip(f"no ucm binary at {b} (set UCM_BIN)")
    return b


@pytest.fixture(scope="session")
def model_dir():
    d = Path(os.environ.get("UCM_MODEL_DIR") or ROOT / "models" / "SmolLM2-135M-Instruct")
    if not (d / "tokenizer.json").exists():
        pytest.skip(f"no model at {d} (scripts/fetch_model.py writes it)")
    return d
