#!/usr/bin/env python3
"""Prints one line per CUDA kernel and architecture: `arch  sha256-of-.text  kernel`, for proving
that a refactor left the machine code alone. Compiles each launcher file (cuda/*.cu) to a cubin
for sm_80 and sm_90a with the build's own flags (CMakeLists.txt), then hashes every .text section.
Run from the repository root; needs nvcc only (no GPU, no cuobjdump).

  python3 scripts/kernel-text.py > before.txt   # on the old commit
  python3 scripts/kernel-text.py > after.txt    # on the new one
  python3 scripts/kernel-text.py --compare before.txt after.txt

KT_FILES="cuda/a.cu cuda/b.cu" limits both runs to the launcher files a change can reach (a header
included by two files needs only those two).

--compare matches kernels by the hash of their code, so a renamed template parameter or moved
file still compares equal; it lists code that exists on one side only."""
import glob, hashlib, os, struct, subprocess, sys, tempfile
from collections import Counter

ARCHS = ["sm_80", "sm_90a"]
FLAGS = ["-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr", "-DFLASHSAMPLE_WITH_CUDA=1", "-I."]


def text_sections(path):
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_off = sections[shstrndx][4]
    for name, _type, _flags, _addr, off, size, *_ in sections:
        end = data.index(b"\0", names_off + name)
        section = data[names_off + name:end].decode()
        if section.startswith(".text."):
            yield section[len(".text."):], data[off:off + size]


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return out.splitlines()


def hashes():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for source in os.environ.get("KT_FILES", "").split() or sorted(glob.glob("cuda/*.cu")):
            for arch in ARCHS:
                cubin = os.path.join(tmp, os.path.basename(source) + "." + arch + ".cubin")
                subprocess.run(["nvcc", "-cubin", "-arch=" + arch, *FLAGS, "-o", cubin, source], check=True)
                found = list(text_sections(cubin))
                for (mangled, code), name in zip(found, demangle([m for m, _ in found])):
                    rows.append((arch, hashlib.sha256(code).hexdigest()[:16], name))
    return rows


def compare(before_path, after_path):
    def load(path):
        return [line.rstrip("\n").split("  ", 2) for line in open(path) if line.strip()]
    before, after = load(before_path), load(after_path)
    kb, ka = Counter((a, h) for a, h, _ in before), Counter((a, h) for a, h, _ in after)
    status = 0
    for label, rows, mine, other in (("only before", before, kb, ka), ("only after", after, ka, kb)):
        for arch, h, name in rows:
            if mine[(arch, h)] > other[(arch, h)]:
                print(f"{label}: {arch} {h} {name}")
                status = 1
    print(f"{len(before)} kernels before, {len(after)} after; "
          f"{sum((kb & ka).values())} with identical .text on both sides")
    return status


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    for arch, h, name in hashes():
        print(f"{arch}  {h}  {name}")
