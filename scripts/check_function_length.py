#!/usr/bin/env python3
"""Lists the functions of 120 lines or more (DEVELOPERS.md: "functions under 120 lines").

    scripts/check_function_length.py [--max-lines 119] [--json] [DIR ...]

DIRs default to the project's code folders (cmd lib pipelines formats kernels scripts). C, C++
and CUDA function definitions are found by Universal Ctags (Debian `universal-ctags`); each one's
body is measured from the line of its name to the brace that closes it, matched with comments,
strings and character literals skipped (ctags' own end lines are wrong for some local classes).
Python functions and methods come from the `ast` module; a nested function counts on its own
and inside the function that holds it. A function may stay long only when the line just above
it (or above its template line) is a comment that starts `long-function:` and says why.

Exit codes: 0 none over the limit; 1 some (each printed as `LINES NAME FILE:LINE`); 2 usage or
a missing ctags.
"""
import argparse
import ast
import json
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIRS = ["cmd", "lib", "pipelines", "formats", "kernels", "scripts"]
C_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".inc"}
EXEMPT = re.compile(r"^\s*(//|#)\s*long-function:\s*\S")


def strip_code(text):
    """The text with comments, strings and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def body_end(code_lines, start):
    """The line (1-based) of the brace closing the body that opens at or after line `start`;
    None for a declaration (a ';' before any '{')."""
    depth, opened = 0, False
    for ln in range(start - 1, len(code_lines)):
        for ch in code_lines[ln]:
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
                if opened and depth == 0:
                    return ln + 1
            elif ch == ";" and not opened:
                return None
    return None


def exempt(lines, start):
    k = start - 2  # the line above, 0-based
    while k >= 0 and lines[k].lstrip().startswith("template"):
        k -= 1
    return k >= 0 and bool(EXEMPT.match(lines[k]))


def c_functions(files):
    if not files:
        return []
    ctags = shutil.which("ctags")
    if not ctags:
        sys.exit("check_function_length: ctags not found: install Universal Ctags (apt install universal-ctags; "
                 "scripts/deps.sh does)")
    cmd = [ctags, "-x", "--_xformat=%n\t%N\t%F", "--languages=C,C++", "--map-C++=+.cu", "--map-C++=+.cuh", "--map-C++=+.inc",
           "--kinds-C=f", "--kinds-C++=f", "-o", "-"] + [str(f) for f in files]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    tags = {}
    for row in out.splitlines():
        line, name, path = row.split("\t", 2)
        tags.setdefault(path, []).append((int(line), name))
    found = []
    for path, fns in tags.items():
        text = pathlib.Path(path).read_text(errors="replace")
        lines, code = text.split("\n"), strip_code(text).split("\n")
        for start, name in fns:
            end = body_end(code, start)
            if end is not None:
                found.append((end - start + 1, name, path, start, exempt(lines, start)))
    return found


def py_functions(files):
    found = []
    for f in files:
        text = f.read_text(errors="replace")
        lines = text.split("\n")
        for node in ast.walk(ast.parse(text, str(f))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                found.append((node.end_lineno - start + 1, node.name, str(f), start, exempt(lines, start)))
    return found


def tracked_files(dirs):
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "--"] +
                         dirs, capture_output=True, text=True)
    if out.returncode == 0:
        return [ROOT / p for p in out.stdout.split()]
    return [p for d in dirs for p in (ROOT / d).rglob("*") if p.is_file()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", default=DIRS, help="folders, relative to the project root")
    ap.add_argument("--max-lines", type=int, default=119, help="the longest a function may be")
    ap.add_argument("--json", action="store_true", help="every function over the limit as JSON on stdout")
    a = ap.parse_args()
    files = [f for f in tracked_files(a.dirs) if f.is_file()]
    found = c_functions([f for f in files if f.suffix in C_SUFFIXES])
    found += py_functions([f for f in files if f.suffix == ".py"])
    over = sorted((x for x in found if x[0] > a.max_lines and not x[4]), key=lambda x: -x[0])
    kept = sorted((x for x in found if x[0] > a.max_lines and x[4]), key=lambda x: -x[0])
    def rel(p):
        p = pathlib.Path(p).resolve()
        return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)

    if a.json:
        print(json.dumps({"max_lines": a.max_lines, "functions": len(found),
                          "over": [{"lines": n, "name": f, "file": rel(p), "line": s} for n, f, p, s, _ in over],
                          "kept_long": [{"lines": n, "name": f, "file": rel(p), "line": s} for n, f, p, s, _ in kept]},
                         indent=1))
    else:
        for n, f, p, s, _ in over:
            print(f"{n} {f} {rel(p)}:{s}")
        for n, f, p, s, _ in kept:
            print(f"{n} {f} {rel(p)}:{s} (kept long: long-function comment)")
        print(f"check_function_length: {len(found)} functions, {len(over)} of more than {a.max_lines} lines",
              file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
