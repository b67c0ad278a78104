#!/usr/bin/env bash
# SASS of one kernel without a GPU or a full CUDA toolkit: compiles a launcher file to an sm_90a
# cubin with the build's flags and disassembles the kernels whose mangled name contains PATTERN.
#
#   bash scripts/sass.sh cuda/fused_sample.cu 18wgmma_split_kernelINS1_11WsSplitTileILi128ELi4ELi4EEELb0 > k.sass
#   SASS_CUBIN=/tmp/fs.cubin bash scripts/sass.sh - PATTERN     # an existing cubin (no compile)
#   SASS_ARCH=sm_80 ...                                          # another architecture
#
# nvcc 13 ships no disassembler here, so the script fetches nvdisasm once from Debian's
# nvidia-cuda-toolkit 11.8 package (checked by sha256) into $SASS_TOOLS (~/.cache/flashsample-sass).
# That nvdisasm reads only the ELF header layout of its day: the script rewrites the header of a
# copy of the cubin (OS ABI, ABI version, e_flags) to it. Instructions newer than 11.8 (VIADD, for
# one) are printed as `<opcode 0xNNN, not decoded>` with their encoding, so counts stay right.
# A reading aid for instruction counts and register use; ptxas -v and ncu remain the references.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src=${1:?usage: sass.sh FILE.cu|- PATTERN}
pattern=${2:?usage: sass.sh FILE.cu|- PATTERN}
arch=${SASS_ARCH:-sm_90a}
tools=${SASS_TOOLS:-$HOME/.cache/flashsample-sass}
deb_url="http://deb.debian.org/debian/pool/non-free/n/nvidia-cuda-toolkit/nvidia-cuda-toolkit_11.8.89~11.8.0-5~deb12u1_amd64.deb"
deb_sha256=d1156026e704fe0368b6295db06224ed00a727966fb13454f34e3f3102db0457

if [ ! -x "$tools/nvdisasm" ]; then
  mkdir -p "$tools"
  echo "sass.sh: fetching nvdisasm (84 MB package, once) into $tools" >&2
  curl -fsSL -o "$tools/toolkit.deb" "$deb_url"
  echo "$deb_sha256  $tools/toolkit.deb" | sha256sum -c --quiet -
  dpkg-deb --fsys-tarfile "$tools/toolkit.deb" | tar -x -C "$tools" --strip-components=3 ./usr/bin/nvdisasm
  rm -f "$tools/toolkit.deb"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$src" = - ]; then
  cp "${SASS_CUBIN:?SASS_CUBIN names the cubin when FILE is -}" "$work/k.cubin"
else
  nvcc -arch="$arch" -cubin -O3 -DNDEBUG -std=c++17 --expt-relaxed-constexpr -DFLASHSAMPLE_WITH_CUDA=1 -I. \
    -o "$work/k.cubin" "$src"
fi
python3 - "$work/k.cubin" "$arch" <<'EOF'
import struct, sys
path, arch = sys.argv[1], sys.argv[2]
sm = int(''.join(c for c in arch if c.isdigit()))
d = bytearray(open(path, 'rb').read())
d[7], d[8] = 0x33, 7                                   # OS ABI and ABI version of CUDA 11
struct.pack_into('<I', d, 0x30, sm | 0x0500 | sm << 16)  # EF_CUDA_SM<n>, 64-bit, virtual SM<n>
open(path, 'wb').write(d)
EOF
"$tools/nvdisasm" -hex -c "$work/k.cubin" 2>/dev/null | python3 -c '
import re, sys
pattern = sys.argv[1]
inside, pending = False, 0   # pending: hex-only lines seen since the last decoded instruction
hexonly = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
for line in sys.stdin:
    if line.startswith(".text."):
        inside = pattern in line
        if inside: print(line.rstrip())
        continue
    if not inside: continue
    m = hexonly.match(line)
    if m:
        pending += 1
        if pending % 2 == 0:   # the first word of an instruction nvdisasm did not decode
            word = int(m.group(1), 16)
            print(f"        <opcode 0x{word & 0xfff:03x}, not decoded>  /* {m.group(1)} */")
        continue
    if re.match(r"^\s*/\*[0-9a-f]{4,}\*/", line): pending = 0   # a decoded instruction (labels keep the count)
    print(re.sub(r"\s+/\* 0x[0-9a-f]{16} \*/\s*$", "", line.rstrip()))
' "$pattern"
