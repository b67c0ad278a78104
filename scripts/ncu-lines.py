#!/usr/bin/env python3
"""Stall samples and executed instructions per CUDA source line of one profiled kernel.

ncu's CSV source page (`ncu -i R.ncu-rep --page source --csv --print-source sass`) lists the
kernel's SASS in address order with its samples; `nvdisasm -g` of the same cubin lists the same
instructions with the source line each was compiled from (the build passes -lineinfo). This pairs
them row by row and sums per line (the innermost one: an inlined helper's own line), then per file.

  python3 scripts/ncu-lines.py R-sass.csv DISASM NAME [TOP]

DISASM: `nvdisasm -g` of every cubin that may hold the kernel (concatenated); NAME: a substring of
its mangled name. Of the functions whose name holds NAME, the one with the same instructions as the
CSV is used (the tile and dtype instantiations differ in length and opcodes).
Used by scripts/profile-epilogue.sh when nvdisasm and cuobjdump are on the PATH.

Reading it: samples are taken per SM sub-partition at a fixed interval, so a line's share of the
samples is its share of the warps' resident time. Warps waiting at a barrier count too: a line with
many samples and few instructions executed is a wait (a barrier, an mbarrier loop) for other code."""
import collections
import re
import sys

from ncu_source_page import SourcePage, num, opcode


def read_profile(path):
    page = SourcePage(path)
    return [(opcode(r[page.src]), num(r[page.samples]), num(r[page.executed])) for r in page.body]


def read_disasm(path):
    funcs, name, where = {}, None, "?"
    for line in open(path, errors="replace"):
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            name, where = m.group(1), "?"
            funcs[name] = []
            continue
        if name is None:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            where = m.group(1).rsplit("/", 1)[-1] + ":" + m.group(2)
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            funcs[name].append((where, opcode(m.group(1))))
    return funcs


def main(csv_path, disasm_path, name, top=40):
    prof = read_profile(csv_path)
    funcs = read_disasm(disasm_path)
    same = [f for f, ins in funcs.items() if name in f and len(ins) == len(prof)
            and all(a[1] == b[0] for a, b in zip(ins, prof))]
    if not same:
        near = [(f[:90], len(ins)) for f, ins in funcs.items() if name in f]
        sys.exit(f"no function holding {name!r} has the profile's {len(prof)} instructions: {near[:8]}")
    ins = funcs[same[0]]
    by_line, by_file = collections.Counter(), collections.Counter()
    ex_line, ex_file = collections.Counter(), collections.Counter()
    for (where, _), (_, s, e) in zip(ins, prof):
        by_line[where] += s
        ex_line[where] += e
        by_file[where.split(":")[0]] += s
        ex_file[where.split(":")[0]] += e
    ts = sum(by_line.values()) or 1.0
    te = sum(ex_line.values()) or 1.0
    print(f"{same[0][:120]}: {len(ins)} instructions, {ts:.0f} samples")
    print("-- files: % of samples, % of instructions executed")
    for f, s in by_file.most_common(12):
        print(f"{100 * s / ts:5.1f} {100 * ex_file[f] / te:5.1f}  {f}")
    print("-- lines")
    for where, s in by_line.most_common(top):
        print(f"{100 * s / ts:5.1f} {100 * ex_line[where] / te:5.1f}  {where}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 40)
