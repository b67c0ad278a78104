#!/usr/bin/env python3
"""Compares the builds of an A/B run (scripts/ab-addons.sh) and, with --candidates, picks a winner.

Reads every bench-<letter>-<rep>.txt in DIR (the bench's tables, one per preset), takes each
option's median µs over the reps, and prints per preset, batch size and option the cost over
plain fused of every build and its difference from the base build in points: --base LETTER, by
default `a`, or the first letter when there is no build a. A cell whose call sent rows to the
extra pass (the bench's "(n/B)", its untimed call; a "; k/C calls" after n/B is read past) ends in
`fbN`, the most over the reps: a heuristic that sends more rows there shows as a cost and as a count.

  python3 scripts/ab-pick.py DIR [--paired]
  python3 scripts/ab-pick.py DIR --candidates gij --options listed512,listed4096 --preset llama3-8b \\
      --batch 16,64,128 [--guard topk50] [--gain 1.5] [--slack 1.0] [--map g=k,i=l,j=m,none=s]

With --paired, each cell also shows the range of its per-rep differences [min, max]: rep r of a
build against rep r of the base (ab-addons.sh alternates the builds within a rep, so the two ran
seconds apart); a range that excludes 0 is an effect every rep saw, one that holds 0 is noise.

With --candidates, the last line printed is the winner's letter (or its --map name, `none` when
no candidate wins), so that one device call can run the winner's suite after its A/B:
the candidate with the lowest mean cost over --options at --preset (one or several, comma-separated)
and --batch wins when that mean is at least --gain points below a's, and its plain µs (relative
to a's) and each --guard option's cost stay within --slack points of a's at every one of those
cells, and no --options or --guard cell sends more than --fb-slack (1) rows more than a's to the
extra pass. A --preset or --batch that names no cell of the base build's tables is an error. The option
`fused` in --options is the plain call's own µs, in % of the base build's (a change to plain
sampling: --options fused --batch 160,200,300).
"""
import argparse
import glob
import os
import re
import statistics
import sys

BASE = "fused"  # the table's own `fused µs` column: the costs' base
CELL = re.compile(r"^([0-9.]+) [+-][0-9]+% \((\d+)/\d+(?:; \d+/\d+ calls)?\)$")


def parse_file(path):
    """{(preset, B): ({BASE: µs, option: µs}, {option: extra-pass rows})} from one bench output."""
    out = {}
    preset = None
    columns = None
    with open(path, errors="replace") as f:
        for line in f:
            head = re.match(r"^(\S+) — ", line)
            if head:
                preset = head.group(1)
                columns = None
                continue
            if re.match(r"^\s+B\s+fused µs", line):
                # the header's columns are separated by two or more spaces
                columns = re.split(r"\s{2,}", line.strip())
                continue
            if columns is None or preset is None:
                continue
            row = re.split(r"\s{2,}", line.strip())
            if not row or not row[0].isdigit() or len(row) != len(columns):
                continue
            b = int(row[0])
            cells, fb = {BASE: float(row[1])}, {}
            for name, cell in zip(columns, row):
                m = re.match(r"^fused\[(.+)\] µs \(fb rows\)$", name)
                c = CELL.match(cell)
                if m and c:
                    cells[m.group(1)] = float(c.group(1))
                    fb[m.group(1)] = int(c.group(2))
            out[(preset, b)] = (cells, fb)
    return out


def load(directory):
    """{letter: {(preset, B): {option: median µs}}}, the `fused µs` column as BASE,
    {letter: {(preset, B): {option: the most extra-pass rows over the reps}}} and
    {letter: {rep: {(preset, B): {option: µs}}}}, each rep's own tables."""
    fbs, reps = {}, {}
    for path in sorted(glob.glob(os.path.join(directory, "bench-*-*.txt"))):
        m = re.match(r"bench-([a-z])-(\d+)\.txt$", os.path.basename(path))
        if not m:
            continue
        for key, (cells, fb) in parse_file(path).items():
            reps.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[key] = cells
            for option, n in fb.items():
                row = fbs.setdefault(m.group(1), {}).setdefault(key, {})
                row[option] = max(row.get(option, 0), n)
    medians = {}
    for letter, tables in reps.items():
        runs = {}  # {(preset, B): {option: [µs of each rep]}}
        for rep in sorted(tables):
            for key, cells in tables[rep].items():
                for option, us in cells.items():
                    runs.setdefault(key, {}).setdefault(option, []).append(us)
        medians[letter] = {k: {o: statistics.median(v) for o, v in cells.items()} for k, cells in runs.items()}
    return medians, fbs, reps


def paired_range(reps, letter, base, key, option):
    """(min, max) over the reps both builds ran of the option's cost difference, in points, or None."""
    diffs = []
    for r, tables in reps.get(letter, {}).items():
        c = cost(tables.get(key, {}), option)
        ca = cost(reps.get(base, {}).get(r, {}).get(key, {}), option)
        if c is not None and ca is not None:
            diffs.append(c - ca)
    return (min(diffs), max(diffs)) if diffs else None


def cost(cells, option):
    """An option's cost over the row's plain fused µs, in points."""
    base = cells.get(BASE)
    us = cells.get(option)
    if base is None or us is None:
        return None
    return 100.0 * (us / base - 1.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--candidates", default="")
    ap.add_argument("--options", default="")
    ap.add_argument("--preset", default="")
    ap.add_argument("--batch", default="")
    ap.add_argument("--guard", default="")
    ap.add_argument("--gain", type=float, default=1.5)
    ap.add_argument("--slack", type=float, default=1.0)
    ap.add_argument("--fb-slack", type=int, default=1)
    ap.add_argument("--map", default="")
    ap.add_argument("--base", default="")
    ap.add_argument("--paired", action="store_true")
    args = ap.parse_args()
    data, fbs, reps = load(args.dir)
    if not data:
        sys.exit(f"ab-pick: no bench-<letter>-<rep>.txt tables in {args.dir}")
    letters = sorted(data)
    base = args.base or ("a" if "a" in data else letters[0])
    if base not in data:
        sys.exit(f"ab-pick: no bench-{base}-*.txt tables in {args.dir} (builds: {''.join(letters)})")
    keys = sorted({k for l in letters for k in data[l]})
    options = sorted({o for l in letters for k in data[l] for o in data[l][k] if o != BASE})
    print("preset B option: " + " ".join(f"{l:>14}" for l in letters) + f"   (cost over plain, points; Δ vs {base})")
    for preset, b in keys:
        for option in [BASE] + options:
            vals = []
            for l in letters:
                cells = data[l].get((preset, b), {})
                if option == BASE:
                    us, ref = cells.get(BASE), data[base].get((preset, b), {}).get(BASE)
                    vals.append(f"{us:8.1f}µs" + (f"{100 * (us / ref - 1):+4.0f}" if us and ref else "    ") if us else " " * 14)
                else:
                    c, ca = cost(cells, option), cost(data[base].get((preset, b), {}), option)
                    n = fbs.get(l, {}).get((preset, b), {}).get(option, 0)
                    span = paired_range(reps, l, base, (preset, b), option) if args.paired and l != base else None
                    vals.append((f"{c:+8.1f} ({c - ca:+5.1f})" if c is not None and ca is not None else " " * 14)
                                + (f" [{span[0]:+.1f}, {span[1]:+.1f}]" if span else "")
                                + (f" fb{n}" if n else ""))
            if any(v.strip() for v in vals):
                print(f"{preset} {b} {option}: " + " ".join(f"{v:>14}" for v in vals))
    if not args.candidates:
        return
    mapping = dict(kv.split("=") for kv in args.map.split(",") if kv)
    picked = [o for o in args.options.split(",") if o]
    guards = [o for o in args.guard.split(",") if o]
    batches = [int(b) for b in args.batch.split(",") if b]
    presets = [p for p in args.preset.split(",") if p]
    missing = [f"{p} B = {b}" for p in presets for b in batches if (p, b) not in data[base]]
    if not presets or not batches or missing:
        sys.exit("ab-pick: --preset and --batch must name cells of the base build's tables"
                 + (f" (none for {', '.join(missing)})" if missing else ""))
    base_cells = data[base]
    best, best_mean = None, None
    for l in args.candidates:
        if l not in data:
            print(f"ab-pick: {l}: no tables (a build that did not run)")
            continue
        gains, ok = [], True
        for key in [(p, b) for p in presets for b in batches]:
            for o in picked:
                if o == BASE:  # the plain call itself: its µs against the base build's, in %
                    us, ref = data[l].get(key, {}).get(BASE), base_cells.get(key, {}).get(BASE)
                    c, ca = (100.0 * (us / ref - 1.0), 0.0) if us and ref else (None, None)
                else:
                    c, ca = cost(data[l].get(key, {}), o), cost(base_cells.get(key, {}), o)
                if c is None or ca is None:
                    ok = False
                else:
                    gains.append(c - ca)
            for o in guards:
                c, ca = cost(data[l].get(key, {}), o), cost(base_cells.get(key, {}), o)
                if c is None or ca is None or c - ca > args.slack:
                    ok = False
            for o in picked + guards:
                n, na = (fbs.get(x, {}).get(key, {}).get(o, 0) for x in (l, base))
                if n > na + args.fb_slack:
                    ok = False
            us, ref = data[l].get(key, {}).get(BASE), base_cells.get(key, {}).get(BASE)
            if us is None or ref is None or 100.0 * (us / ref - 1.0) > args.slack:
                ok = False
        mean = statistics.mean(gains) if gains else None
        print(f"ab-pick: {l}: mean Δ {mean:+.2f} points over {len(gains)} cells, guards {'held' if ok else 'broken'}"
              if mean is not None else f"ab-pick: {l}: no cells")
        if ok and mean is not None and mean <= -args.gain and (best_mean is None or mean < best_mean):
            best, best_mean = l, mean
    winner = best or "none"
    print(mapping.get(winner, winner))


if __name__ == "__main__":
    main()
