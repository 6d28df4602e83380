#!/usr/bin/env python3
"""Checks a built forwarder facade against NVIDIA's library it stands in
for: the same exported functions under the same version nodes, NVIDIA's
SONAME, RUNPATH $ORIGIN, and rgpu's libcudart.so.13 (its RGPU_PRIVATE_1
node) as its only library of ours.  Shared by the facades' build tests.

usage: rgpu_check_facade.py BUILT NVIDIA SONAME"""
import subprocess
import sys


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def exports(lib):
    """name -> version node of each exported function."""
    out = {}
    for line in run("objdump", "-T", lib).splitlines():
        parts = line.split()
        if len(parts) >= 7 and parts[1] == "g" and parts[2] == "DF" and parts[3] == ".text":
            out[parts[-1]] = parts[-2]
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    built, real, soname = sys.argv[1:]
    ours, theirs = exports(built), exports(real)
    errors = []
    missing = sorted(set(theirs) - set(ours))
    extra = sorted(set(ours) - set(theirs))
    if missing:
        errors.append(f"{len(missing)} exports missing: {' '.join(missing[:10])}")
    if extra:
        errors.append(f"{len(extra)} exports NVIDIA's library does not have: {' '.join(extra[:10])}")
    moved = sorted(n for n in set(ours) & set(theirs) if ours[n] != theirs[n])
    if moved:
        errors.append(f"exports under another version node: {' '.join(moved[:10])}")
    dyn = run("readelf", "-d", built)
    needed = [ln.split("[")[1].rstrip("]") for ln in dyn.splitlines() if "(NEEDED)" in ln]
    if "libcudart.so.13" not in needed or any(n.startswith("librgpu") for n in needed):
        errors.append(f"DT_NEEDED is {needed}: expected rgpu's libcudart.so.13 and system libraries")
    if f"Library soname: [{soname}]" not in dyn:
        errors.append(f"SONAME is not {soname}")
    if "Library runpath: [$ORIGIN]" not in dyn:
        errors.append("RUNPATH is not $ORIGIN")
    if "RGPU_PRIVATE_1" not in run("readelf", "-V", built):
        errors.append("does not bind to libcudart.so.13's RGPU_PRIVATE_1 node")
    if errors:
        print(f"{soname} check failed:\n  " + "\n  ".join(errors))
        return 1
    nodes = sorted(set(ours.values()))
    print(f"{soname}: {len(ours)} exports under {', '.join(nodes)}, the same as {real}; "
          f"needs {', '.join(needed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
