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


def test_launches_table_is_the_rule_the_gpu_tests_restate():
    """The table of launches past 256 tokens (the planner's fold_split_tokens and fold_tile) says what
    tests/reference.py's expected_fold_launches, which the GPU tests check the profiler against, says
    for every token count of 257-1024 at k = 4096 and 5120."""
    tables = planner_tables()
    if tables is None:
        pytest.skip("no C++ compiler (c++, g++, clang++ or $CXX)")
    from reference import expected_fold_launches

    section = tables.split("more than 256 tokens: the folding kernel's launches", 1)[1]
    seen = {4096: set(), 5120: set()}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        k, (lo, _, hi), said = int(cells[0]), cells[1].partition("-"), cells[2]
        for m in range(int(lo), int(hi or lo) + 1):
            want = expected_fold_launches(m, k)
            if len(want) == 1:
                text = f"one launch: {-(-m // 256)} x {want[0]}"
            else:
                text = f"two: {m // 256} x {want[0]}, then the rest as 1 x {want[1]}"
            assert said == text, (k, m, said, text)
            seen[k].add(m)
    assert seen == {k: set(range(257, 1025)) for k in seen}


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
