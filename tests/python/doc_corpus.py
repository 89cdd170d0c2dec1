"""Helpers shared by the tests that run the `ucm` binary on real documents (test_audit.py,
test_token_ids.py): the python3.11-doc pages, a JSONL corpus of them, and a checked subprocess run."""
import json
import os
import subprocess
from pathlib import Path

import pytest

DOCS_DIR = Path(os.environ.get("UCM_CORPUS_DIR", "/usr/share/doc/python3.11/html/_sources"))


def run(cmd, ok=(0,), **kw):
    """Runs cmd (its parts as strings); asserts that its exit code is in `ok`."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert p.returncode in ok, f"{cmd}: exit {p.returncode}\nstdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-3000:]}"
    return p


def write_corpus(tmp_path_factory, name, docs, limit=None):
    """docs.jsonl in a fresh temp dir `name`: one {"id", "text"} line per page of DOCS_DIR in `docs`
    (its first `limit` characters when given); skips the test when a page is missing. Returns
    (dir, path)."""
    if not all((DOCS_DIR / d).exists() for d in docs):
        pytest.skip(f"python3.11-doc documents missing under {DOCS_DIR}")
    d = tmp_path_factory.mktemp(name)
    path = d / "docs.jsonl"
    with open(path, "w") as f:
        for doc in docs:
            f.write(json.dumps({"id": doc, "text": (DOCS_DIR / doc).read_text(encoding="utf-8")[:limit]}) + "\n")
    return d, path
