#!/usr/bin/env bash
# Builds the addon of git refs as ab/<letter>.node.xz: the builds scripts/ab-addons.sh alternates;
# beside each, the ref's tree (ab/<letter>.tree.tar.xz), whose own suite scripts/ab-suite.sh runs.
#   bash scripts/ab-build.sh a=main g=exp-split-dynamic-items h=exp-split-dynamic-items+FS_EXP_DYNAMIC_ONE_CHUNK
# A spec is <letter>=<ref>, then optionally +MACRO (repeatable): MACRO is defined as 1 in every CUDA
# file (CMAKE_CUDA_FLAGS), for a branch's variant or timing-only switches. Every ref is built in one
# worktree (ab-build/tree, git-ignored) with a build folder per set of macros, for sm_90a only (the
# H200's code), so the checkout and its build/ stay as they are and a ref's unchanged objects are
# reused. Committed refs only: what is built is what the log can name. Then, as scripts/ab-addons.sh
# says: bash ../shared/gpu/pack && rm -rf .gpu/build, and the device call with carry
# [".gpu", "dist", "ab"] (keep in ab/ only the builds the call should alternate).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
if [ $# -lt 1 ]; then
  echo "usage: bash scripts/ab-build.sh <letter>=<ref>[+MACRO...] ..." >&2
  exit 2
fi
wt=$root/ab-build/tree
mkdir -p ab ab-build
[ -e "$wt/.git" ] || git worktree add --detach "$wt" HEAD > /dev/null
ln -sfn "$root/node_modules" "$wt/node_modules"
for spec in "$@"; do
  letter=${spec%%=*}
  rest=${spec#*=}
  ref=${rest%%+*}
  macros=""
  [[ $rest == *+* ]] && macros=${rest#*+}
  if [[ ! $letter =~ ^[a-z]$ || $spec != *=* || -z $ref ]]; then
    echo "ab-build: '$spec' is not <letter>=<ref>[+MACRO...] (one lower-case letter)" >&2
    exit 2
  fi
  flags=""
  for m in ${macros//+/ }; do flags="$flags -D$m=1"; done
  build=$root/ab-build/build-${macros:-plain}
  git -C "$wt" checkout -q --detach "$ref"
  if ! (cd "$wt" && npx cmake-js compile --out "$build" --CDCMAKE_CUDA_ARCHITECTURES=90a-real \
        --CDCMAKE_CUDA_FLAGS="$flags") > "$root/ab-build/$letter.log" 2>&1; then
    echo "ab-build: $spec did not build; see ab-build/$letter.log" >&2
    exit 1
  fi
  # a symbol of ours left undefined: refs linked before -z now die at its first call, later ones at load
  undefined=$(nm -D --undefined-only "$build/Release/flashsample.node" | c++filt | grep flashsample || true)
  if [ -n "$undefined" ]; then
    echo "ab-build: $spec links with undefined symbols of its own:" >&2
    echo "$undefined" >&2
    exit 1
  fi
  xz -T0 -6 -c "$build/Release/flashsample.node" > "ab/$letter.node.xz"
  # the ref's tree, for its own suite (scripts/ab-suite.sh); ~0.5 MB
  git -C "$wt" archive HEAD ':!bench/results' | xz -T0 -6 > "ab/$letter.tree.tar.xz"
  echo "$ref at $(git -C "$wt" rev-parse --short HEAD)${macros:+, with $macros}" > "ab/$letter.ref"
  echo "ab/$letter.node.xz, ab/$letter.tree.tar.xz: $(cat "ab/$letter.ref")"
done
