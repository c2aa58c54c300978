#!/usr/bin/env python3
"""Find instructions that touch a wgmma's accumulators while it may still be running (SASS).

    cuobjdump -sass build/apply_wgmma_fold.hip.o > fold.sass
    python benchmarks/harness/wgmma_acc_check.py fold.sass     # exit 1 if any kernel has one

Between an HGMMA and the next `WARPGROUP.DEPBAR.LE gsb0, 0x0` (wgmma.wait_group 0) a group may
still write its accumulator registers; any other instruction that names one of them reads or
writes a value the tensor cores have not finished. ptxas warns (C7514) only about reads it sees in
the PTX: the folded-scale kernel's first version passed it, and the compiler's own copies of the
accumulators on leaving the loop (IMAD.MOV from them before the final wait) lost the last
half-step of every tile (docs/PERF_LOG.md, eighth round, runs 41-43). A linear scan: branches are
not followed, which is exact for straight-line tails and conservative inside loops whose body
starts after a wait.
"""

import re
import sys


def hazards(function_text):
    """(accumulator register count, [offending instructions]) of one function's SASS."""
    in_flight, acc, bad = False, set(), []
    for line in function_text.splitlines():
        if not re.search(r"/\*[0-9a-f]{4,}\*/", line):
            continue
        ins = re.sub(r"/\*[0-9a-f]+\*/|/\* 0x[0-9a-f]+ \*/|;", "", line).strip()
        m = re.match(r"HGMMA\.64x(\d+)x16\S* R(\d+),", ins)
        if m:
            acc = set(range(int(m.group(2)), int(m.group(2)) + int(m.group(1)) // 2))
            in_flight = True
            continue
        if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in ins:
            in_flight = False
            continue
        if in_flight and acc & {int(r) for r in re.findall(r"\bR(\d+)\b", ins)}:
            bad.append(ins)
    return len(acc), bad


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    text = open(sys.argv[1]).read()
    status = 0
    for chunk in re.split(r"\n\s*Function : ", text)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        if "HGMMA" not in chunk:
            continue
        count, bad = hazards(chunk)
        print(f"{'ok  ' if not bad else 'FAIL'} {len(bad):4d} {name[:110]}")
        for ins in bad[:3]:
            print(f"         {ins}")
        status |= bool(bad)
    sys.exit(status)


if __name__ == "__main__":
    main()
