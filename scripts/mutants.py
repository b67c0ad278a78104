#!/usr/bin/env python3
"""Mutation run over the CPU backend, the binding and lib/: does some test fail when the code is wrong?

Each mutant of scripts/mutants.json replaces one exact string of one file (it must occur once).
For each, this builds the CPU-only addon (into $MUTANTS_BUILD, default /tmp/fs-mutants), runs jest
on the mutant's test files and reports it killed (some test failed) or alive, then restores the
file. At the end the addon is rebuilt from the restored sources and copied back to build/Release.

  python3 scripts/mutants.py [NAME ...]        # every mutant, or those named

A mutant the suites let live is a test that cannot fail, unless it is equivalent within what
docs/SEMANTICS.md promises (an `alive` entry's `why` says so, and the run then expects it alive).
No GPU: the CPU backend's and lib/'s semantics only (cuda/include's shared headers included, as
the CPU compiles them). About 45 s a mutant on 2 cores.
"""
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("MUTANTS_BUILD", "/tmp/fs-mutants")


def build():
    r = subprocess.run(["npx", "cmake-js", "compile", "--out", BUILD, "--CDFLASHSAMPLE_CPU_ONLY=ON"],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        return False
    os.makedirs(os.path.join(ROOT, "build", "Release"), exist_ok=True)
    shutil.copy(os.path.join(BUILD, "Release", "flashsample.node"),
                os.path.join(ROOT, "build", "Release", "flashsample.node"))
    return True


# Whether build/Release holds the addon of the unmutated sources (unknown at the start).
state = {"clean": False}


def ensure_clean_addon():
    if not state["clean"]:
        state["clean"] = build()
    return state["clean"]


def run(m):
    path = os.path.join(ROOT, m["file"])
    native = False
    with open(path) as f:
        original = f.read()
    if original.count(m["old"]) != 1:
        return "stale", f"{m['file']}: the string occurs {original.count(m['old'])} times"
    try:
        with open(path, "w") as f:
            f.write(original.replace(m["old"], m["new"]))
        native = not m["file"].endswith(".ts")
        if native:
            if not build():
                return "unbuilt", "the mutant does not compile"
        elif not ensure_clean_addon():  # (a TypeScript mutant runs on the restored sources' addon)
            return "unbuilt", "the restored sources do not build"
        r = subprocess.run(["npx", "jest", *m["tests"]], cwd=ROOT, capture_output=True, text=True)
        out = r.stdout + r.stderr
        count = re.findall(r"^(\d+) passed, (\d+) failed", out, re.M)
        failed = int(count[-1][1]) if count else -1
        first = next((l.strip() for l in out.splitlines() if "✕" in l), "")
        if failed > 0:
            return "killed", first[:140]
        return ("alive", "") if failed == 0 else ("error", "no test count: " + out[-300:])
    finally:
        with open(path, "w") as f:
            f.write(original)
        if native:
            state["clean"] = False


def main():
    with open(os.path.join(ROOT, "scripts", "mutants.json")) as f:
        mutants = json.load(f)
    names = set(sys.argv[1:])
    unknown = names - {m["name"] for m in mutants}
    if unknown:
        sys.exit(f"mutants.py: no mutant named {', '.join(sorted(unknown))}")
    surprises = 0
    for m in mutants:
        if names and m["name"] not in names:
            continue
        result, detail = run(m)
        expected = "alive" if "alive" in m else "killed"
        mark = "" if result == expected else "   <-- expected " + expected
        surprises += result != expected
        print(f"{m['name']:5} {result:7} {m['file']}: {m.get('what', '')}{mark}", flush=True)
        if detail and result != "killed":
            print(f"      {detail}")
        if result == "alive" and "alive" in m:
            print(f"      (equivalent: {m['alive']})")
    if not ensure_clean_addon():
        sys.exit("mutants.py: the restored sources did not build")
    print(f"{surprises} unexpected")
    sys.exit(1 if surprises else 0)


if __name__ == "__main__":
    main()
