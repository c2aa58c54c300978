"""docs/DISPATCH.md shows what the planner decides: its tables are the output of
tests/dispatch_table.cpp, which runs the planner's own decision (hip/dispatch.h, the function
make_plan calls) for fixed descriptions of GPUs. Compiled with the system C++ compiler (no GPU
toolchain needed); skipped where there is none.

After a change to the decision: `python tests/test_dispatch_doc.py` rewrites the tables in the
document (then read the diff: it is the change in what runs when).
"""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "DISPATCH.md")
BEGIN, END = "<!-- dispatch-table: begin (tests/test_dispatch_doc.py writes this part) -->", "<!-- dispatch-table: end -->"


def compiler():
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def planner_tables():
    """The tables as the planner's decision prints them, or None without a C++ compiler."""
    cxx = compiler()
    if cxx is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "dispatch_table")
        subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-I", os.path.join(ROOT, "hip"),
                        "-I", os.path.join(ROOT, "csrc", "include"), os.path.join(ROOT, "tests", "dispatch_table.cpp"),
                        "-o", exe], check=True, capture_output=True, text=True)
        return subprocess.run([exe], check=True, capture_output=True, text=True).stdout


def document_parts():
    with open(DOC) as fh:
        text = fh.read()
    head, rest = text.split(BEGIN + "\n", 1)
    tables, tail = rest.split(END, 1)
    return head, tables, tail


def test_dispatch_doc_matches_the_planner():
    tables = planner_tables()
    if tables is None:
        pytest.skip("no C++ compiler (c++, g++, clang++ or $CXX)")
    _, documented, _ = document_parts()
    assert documented == tables, (
        "docs/DISPATCH.md no longer shows what hip/dispatch.h decides; run `python tests/test_dispatch_doc.py` "
        "to rewrite its tables and read the diff")


def test_dispatch_tables_cover_every_kernel_path():
    tables = planner_tables()
    if tables is None:
        pytest.skip("no C++ compiler (c++, g++, clang++ or $CXX)")
    # every kernel file the planner can name appears in some row
    for source in ("apply_vector", "apply_mma", "apply_stream", "apply_wgmma_pipe", "apply_wgmma_fold", "apply_wmma"):
        assert f"({source})" in tables, source
    # the warp-specialized kernel is the benchmark build's only (its tiles are not in the library)
    assert "(apply_wgmma_ws)" not in tables
    assert tables.count("\n### ") >= 8


def main():
    tables = planner_tables()
    if tables is None:
        sys.exit("no C++ compiler (c++, g++, clang++ or $CXX)")
    head, _, tail = document_parts()
    with open(DOC, "w") as fh:
        fh.write(head + BEGIN + "\n" + tables + END + tail)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
