#!/usr/bin/env python3
"""Summarizes one kernel's ncu source page (`ncu -i R.ncu-rep --page source --csv --print-source sass`):
  * the stall reasons over the whole kernel, and the instructions executed per warp;
  * the basic blocks (runs of instructions executed equally often) that execute the most
    instructions, with their dominant opcodes (DFMA runs are double-precision math, long runs of
    IMAD / LOP3 after a Philox call are the noise, ATOMS.CAST.SPIN is a CAS loop);
  * the instructions that hold the most stall samples, with their reasons.
Used by scripts/profile-epilogue.sh; also on its own:  python3 scripts/ncu-sass-summary.py R-sass.csv"""
import collections
import sys

from ncu_source_page import SourcePage, num, opcode


def main(path, top_blocks=12, top_instructions=25):
    page = SourcePage(path)
    cols, body, src = page.cols, page.body, page.src
    reasons = [i for i, c in enumerate(cols) if c.startswith("stall_") and "Not Issued" not in c]
    S = [num(r[page.samples]) for r in body]
    E = [num(r[page.executed]) for r in body]
    total_s, total_e = sum(S) or 1.0, sum(E) or 1.0

    stalls = collections.Counter()
    for r in body:
        for i in reasons:
            stalls[cols[i].replace("stall_", "")] += num(r[i])
    all_stalls = sum(stalls.values()) or 1.0
    print(f"{len(body)} instructions, {total_e:.0f} warp instructions executed, {total_s:.0f} samples")
    print("stalls: " + ", ".join(f"{k} {100 * v / all_stalls:.1f} %" for k, v in stalls.most_common(10)))

    blocks, start = [], 0
    for i in range(1, len(body) + 1):
        if i == len(body) or E[i] != E[start]:
            blocks.append((start, i))
            start = i
    ranked = []
    for a, b in blocks:
        ops = collections.Counter(opcode(body[j][src]) for j in range(a, b))
        ranked.append((sum(E[a:b]), sum(S[a:b]), a, b, E[a], ops))
    ranked.sort(key=lambda x: -x[0])
    print("-- basic blocks by instructions executed (rows are SASS lines of the source page)")
    for e, s, a, b, each, ops in ranked[:top_blocks]:
        top = " ".join(f"{k}x{v}" for k, v in ops.most_common(6))
        print(f"{100 * e / total_e:5.1f} % executed {100 * s / total_s:5.1f} % samples  rows {a}-{b - 1}, "
              f"each {each:.0f} times  {top}")

    print("-- instructions by stall samples")
    for i in sorted(range(len(body)), key=lambda i: -S[i])[:top_instructions]:
        top = sorted(((num(body[i][j]), cols[j].replace("stall_", "")) for j in reasons), reverse=True)[:2]
        why = ", ".join(f"{n} {v:.0f}" for v, n in top if v > 0)
        print(f"{100 * S[i] / total_s:5.1f} %  [{i}] {body[i][src].strip()[:80]:80s}  {why}")


if __name__ == "__main__":
    main(sys.argv[1])
