#!/usr/bin/env python3
"""Checks the built libcuda.so.1 against the toolkit's stubs/libcuda.so:
the same exported functions, unversioned, SONAME libcuda.so.1, RUNPATH
$ORIGIN, and rgpu's libcudart.so.13 as its only library of ours (its
RGPU_PRIVATE_1 node).

usage: check_libcuda.py BUILT_LIBCUDA STUB_LIBCUDA"""
import subprocess
import sys


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def exports(lib):
    out = {}
    for line in run("objdump", "-T", lib).splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "g" and parts[3] == ".text":
            # A library without version information has no version column
            # (the size comes before the name); with it, unversioned
            # symbols read "Base".
            ver = parts[-2] if len(parts) >= 7 else "Base"
            out[parts[-1]] = ver
    return out


def main():
    built, stub = sys.argv[1], sys.argv[2]
    ours, theirs = exports(built), exports(stub)
    errors = []
    missing = sorted(set(theirs) - set(ours))
    extra = sorted(set(ours) - set(theirs))
    if missing:
        errors.append(f"{len(missing)} exports missing: {' '.join(missing[:10])}")
    if extra:
        errors.append(f"{len(extra)} exports NVIDIA's libcuda does not have: {' '.join(extra[:10])}")
    versioned = sorted(n for n, v in ours.items() if v != "Base")
    if versioned:
        errors.append(f"versioned exports (NVIDIA's are not): {' '.join(versioned[:10])}")
    dyn = run("readelf", "-d", built)
    needed = [l.split("[")[1].rstrip("]") for l in dyn.splitlines() if "(NEEDED)" in l]
    if "libcudart.so.13" not in needed or any(n.startswith("librgpu") for n in needed):
        errors.append(f"DT_NEEDED is {needed}: expected rgpu's libcudart.so.13 and system libraries")
    if "Library soname: [libcuda.so.1]" not in dyn:
        errors.append("SONAME is not libcuda.so.1")
    if "Library runpath: [$ORIGIN]" not in dyn:
        errors.append("RUNPATH is not $ORIGIN")
    if "RGPU_PRIVATE_1" not in run("readelf", "-V", built):
        errors.append("does not bind to libcudart.so.13's RGPU_PRIVATE_1 node")
    if errors:
        print("libcuda.so.1 check failed:\n  " + "\n  ".join(errors))
        return 1
    print(f"libcuda.so.1: {len(ours)} exports, the same as {stub}; needs {', '.join(needed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
