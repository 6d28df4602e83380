#!/usr/bin/env python3
"""Generates rgpu's driver API facade (libcuda.so.1) from NVIDIA's own files.

usage:
  gen_driver.py tables --cuda-include DIR --exports libcuda.so --annotations FILE
                       --cc CC --out-dir DIR
      writes rgpu_drv_protos.h  (prototype of every rgpu_drv_<export>)
             rgpu_libcuda.c     (libcuda.so.1: every export forwards to rgpu_drv_<export>)
             rgpu_drv_proctable.c (cuGetProcAddress's (name, version, flags) table)
             rgpu_drv_results.c (the CUresult names of cuda.h)
  gen_driver.py stubs --exports libcuda.so --annotations FILE --out FILE OBJ...
      writes the CUDA_ERROR_NOT_SUPPORTED stubs of every export the driver
      objects OBJ... do not define.

Sources of truth:
  * the export list: `nm -D` on the toolkit's stub libcuda.so (the same names
    NVIDIA's libcuda.so.1 exports), so the facade can neither miss a symbol a
    program imports nor export one NVIDIA's does not;
  * the prototypes: cuda.h (and cudaProfiler.h) run through the C
    preprocessor with __CUDA_API_VERSION_INTERNAL, the mode in which every
    exported name (cuMemAlloc and cuMemAlloc_v2, cuMemcpy and cuMemcpy_ptds)
    is declared under its own name instead of behind a #define;
  * cuGetProcAddress's versions: cudaTypedefs.h, whose PFN_<name>_v<ver>
    [_ptds|_ptsz] typedefs say which versions of each API exist.  The symbol
    of a version is derived by rule (see proc_entries) and checked twice: the
    symbol must be exported, and the generated C asserts at compile time that
    the PFN type and the rgpu_drv_ function are the same type.
  * driver/libcuda.annotations: what rgpu implements and what it refuses.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import rgpu_gen_cdecl as cdecl  # noqa: E402  (the shared C declaration reader)

PT_SUFFIXES = ("_ptds", "_ptsz")


def die(msg):
    sys.exit("gen_driver: " + msg)


def nm_defined(paths, dynamic):
    if not paths:
        return set()
    args = ["nm", "--defined-only"] + (["-D"] if dynamic else []) + list(paths)
    res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode != 0:
        die("nm failed: " + res.stderr.strip())
    out = set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "t", "W", "i"):
            out.add(parts[2].split("@")[0])
    return out


def exports_of(lib):
    ex = sorted(s for s in nm_defined([lib], True) if s.startswith("cu"))
    if len(ex) < 400:
        die(f"only {len(ex)} cu* exports in {lib}; is it the toolkit's stubs/libcuda.so?")
    return ex


def read_annotations(path):
    """name -> (status, note).  Status: impl (rgpu implements it: the stubs
    step fails if no object defines it) or refused (deliberately
    CUDA_ERROR_NOT_SUPPORTED: fails if an object defines it)."""
    ann = {}
    for n, line in enumerate(open(path), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 2)
        if len(parts) < 2 or parts[1] not in ("impl", "refused"):
            die(f"{path}:{n}: expected '<export> impl|refused <note>'")
        if parts[0] in ann:
            die(f"{path}:{n}: {parts[0]} annotated twice")
        ann[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return ann


def preprocess(cc, include, text):
    try:
        return cdecl.preprocess(cc, include, text, ["-D__CUDA_API_VERSION_INTERNAL"])
    except cdecl.CdeclError as e:
        die("preprocessing cuda.h failed: " + str(e))


split_params, param_name = cdecl.split_params, cdecl.param_name


def prototypes(cc, include):
    """export name -> list of parameter declarations ([] for (void))."""
    text = preprocess(cc, include, "#include <cuda.h>\n#include <cudaProfiler.h>\n")
    protos = {}
    for stmt in re.split(r"[;{}]", text):
        m = re.fullmatch(r"\s*(?:extern\s+)?(?:__attribute__\s*\(\(.*?\)\)\s*)?CUresult\s+"
                         r"(cu\w+)\s*\((.*)\)\s*", stmt)
        if not m:
            continue
        name, params = m.group(1), m.group(2).strip()
        plist = [] if params in ("", "void") else split_params(params)
        for p in plist:
            if param_name(p) is None:
                die(f"cannot find the parameter name in '{p}' of {name}")
        if name in protos and protos[name] != plist:
            die(f"{name} is declared twice with different parameters")
        protos[name] = plist
    return protos


def result_codes(cc, include):
    """[(name, value)] of the CUresult enum, in cuda.h's order."""
    text = preprocess(cc, include, "#include <cuda.h>\n")
    m = re.search(r"typedef enum cudaError_enum \{(.*?)\} CUresult;", text)
    if not m:
        die("no CUresult enum in cuda.h")
    out = []
    for item in m.group(1).split(","):
        mm = re.fullmatch(r"\s*(CUDA_\w+)\s*=\s*(\d+)\s*", item)
        if mm:
            out.append((mm.group(1), int(mm.group(2))))
    if len(out) < 50:
        die(f"only {len(out)} CUresult codes parsed from cuda.h")
    return out


def proc_entries(include, exports):
    """[(api name, version, pt, symbol)] from cudaTypedefs.h; pt is '', 'ptds'
    or 'ptsz'.

    Rule (checked against the export list): the versions of an API without
    a per-thread suffix, oldest first, are the symbols name, name_v2,
    name_v3...; a per-thread typedef of version V names the symbol of the
    newest plain version <= V with _ptds/_ptsz appended.  A few APIs were
    renamed instead of versioned; OVERRIDES names them."""
    text = open(os.path.join(include, "cudaTypedefs.h")).read()
    versions = {}
    for m in re.finditer(r"\bPFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\)", text):
        versions.setdefault(m.group(1), set()).add((int(m.group(2)), (m.group(3) or "")[1:]))
    expset = set(exports)
    entries = []
    bad = []
    for api, vs in sorted(versions.items()):
        plain = sorted(v for v, pt in vs if not pt)
        sym_of = {}
        for i, v in enumerate(plain):
            sym_of[v] = api if i == 0 else f"{api}_v{i + 1}"
        for v, pt in sorted(vs):
            key = (api, v, pt)
            if key in OVERRIDES:
                sym = OVERRIDES[key]
            elif not pt:
                sym = sym_of[v]
            else:
                base = [p for p in plain if p <= v]
                sym = (sym_of[base[-1]] if base else api) + "_" + pt
            if sym not in expset:
                bad.append(f"PFN_{api}_v{v}{'_' + pt if pt else ''} -> {sym}")
                continue
            entries.append((api, v, pt, sym))
    if bad:
        die("the version rule names symbols libcuda does not export (add them to OVERRIDES): "
            + ", ".join(bad))
    return entries


# (api, version, pt) -> symbol, where NVIDIA renamed an API instead of
# adding a _vN (cudaTypedefs.h's comments and cuda.h's #defines say so).
# Empty for CUDA 13.0: the rule holds for every typedef (the build fails
# when a toolkit breaks it, naming the typedef to add here).
OVERRIDES = {}


def proto_of(name, protos):
    plist = protos.get(name)
    if plist is None:
        return "void", ""
    return ", ".join(plist) if plist else "void", ", ".join(param_name(p) for p in plist)


def write_tables(a):
    exports = exports_of(a.exports)
    ann = read_annotations(a.annotations)
    unknown = sorted(set(ann) - set(exports))
    if unknown:
        die("annotated but not exported by libcuda: " + " ".join(unknown))
    protos = prototypes(a.cc, a.cuda_include)
    untyped = [e for e in exports if e not in protos]
    entries = proc_entries(a.cuda_include, exports)
    os.makedirs(a.out_dir, exist_ok=True)
    head = "/* Generated by driver/gen_driver.py from the CUDA toolkit. Do not edit. */"

    h = [head, "#ifndef RGPU_DRV_PROTOS_H", "#define RGPU_DRV_PROTOS_H",
         "/* Needs cuda.h included with __CUDA_API_VERSION_INTERNAL (old types such as",
         " * CUdeviceptr_v1 exist only then); the driver sources compile that way. */",
         "#include <cuda.h>", "#include <cudaProfiler.h>", "",
         f"/* {len(exports)} exports; {len(untyped)} not declared by cuda.h take no "
         "arguments here. */"]
    for e in exports:
        params, _ = proto_of(e, protos)
        h.append(f"CUresult rgpu_drv_{e}({params});")
    h += ["", "#endif", ""]
    open(os.path.join(a.out_dir, "rgpu_drv_protos.h"), "w").write("\n".join(h))

    f = [head,
         "/* libcuda.so.1: each export of NVIDIA's libcuda forwards to rgpu_drv_<name> in",
         " * rgpu's libcudart.so.13, which holds the session.  cuda.h declares the",
         " * exports (internal mode: every name under its own name), so the compiler",
         " * checks each definition against NVIDIA's prototype. */",
         '#include "rgpu_drv_protos.h"', '#include "rgpu_drv_proctable.h"', "",
         "#define RGPU_EXPORT __attribute__((visibility(\"default\")))", ""]
    for e in exports:
        params, args = proto_of(e, protos)
        if e in protos:
            f.append(f"RGPU_EXPORT CUresult {e}({params}) {{ return rgpu_drv_{e}({args}); }}")
        else:
            f.append(f"RGPU_EXPORT CUresult {e}(void);")
            f.append(f"RGPU_EXPORT CUresult {e}(void) {{ return rgpu_drv_{e}(); }}")
    f += ["",
          "/* This library's own functions by export name (sorted): cuGetProcAddress and",
          " * cudaGetDriverEntryPoint hand these out once the library is loaded, so a",
          " * pointer they return is the one the program links against, as with NVIDIA's. */",
          "static const rgpu_proc_export own[] = {"]
    f += [f'  {{"{e}", (void *){e}}},' for e in exports]
    f += ["};", "",
          "__attribute__((constructor)) static void register_facade(void) {",
          "  rgpu_drv_register_facade(own, sizeof own / sizeof own[0]);",
          "}", ""]
    open(os.path.join(a.out_dir, "rgpu_libcuda.c"), "w").write("\n".join(f))

    pt_code = {"": "RGPU_PROC_PLAIN", "ptds": "RGPU_PROC_PTDS", "ptsz": "RGPU_PROC_PTSZ"}
    t = [head,
         "/* cuGetProcAddress's table: one row per PFN_<api>_v<version>[_ptds|_ptsz]",
         " * typedef of cudaTypedefs.h, sorted by api then version.  Each row's function",
         " * is checked at compile time to have the PFN typedef's type. */",
         '#include "rgpu_drv_proctable.h"', '#include "rgpu_drv_protos.h"',
         "#include <cudaTypedefs.h>", "",
         "#define RGPU_SAME_TYPE(pfn, fn) \\",
         "  _Static_assert(__builtin_types_compatible_p(pfn, __typeof__(&fn)), #fn \" is not \" #pfn)",
         ""]
    for api, v, pt, sym in entries:
        pfn = f"PFN_{api}_v{v}" + (f"_{pt}" if pt else "")
        if sym in protos:
            t.append(f"RGPU_SAME_TYPE({pfn}, rgpu_drv_{sym});")
    t += ["", "const rgpu_proc_entry rgpu_drv_proc_table[] = {"]
    for api, v, pt, sym in entries:
        t.append(f'  {{"{api}", {v}, {pt_code[pt]}, "{sym}", (void *)rgpu_drv_{sym}}},')
    t += ["};", f"const size_t rgpu_drv_proc_table_len = {len(entries)};", ""]
    t += ["/* Every export by its own name (cuGetProcAddress also answers exact symbol",
          " * names that no PFN typedef lists), sorted. */",
          "const rgpu_proc_export rgpu_drv_exports[] = {"]
    for e in exports:
        t.append(f'  {{"{e}", (void *)rgpu_drv_{e}}},')
    t += ["};", f"const size_t rgpu_drv_exports_len = {len(exports)};", ""]
    open(os.path.join(a.out_dir, "rgpu_drv_proctable.c"), "w").write("\n".join(t))

    codes = result_codes(a.cc, a.cuda_include)
    r = [head, '#include "rgpu_drv_proctable.h"', "",
         "/* The CUresult enum of cuda.h: cuGetErrorName's exact names. */",
         "const rgpu_drv_result_name rgpu_drv_result_names[] = {"]
    r += [f'  {{{v}, "{n}"}},' for n, v in codes]
    r += ["};", f"const size_t rgpu_drv_result_names_len = {len(codes)};", ""]
    open(os.path.join(a.out_dir, "rgpu_drv_results.c"), "w").write("\n".join(r))


def write_stubs(a):
    exports = exports_of(a.exports)
    ann = read_annotations(a.annotations)
    have = nm_defined(a.objects, False)
    have = {s[len("rgpu_drv_"):] for s in have if s.startswith("rgpu_drv_cu")}
    missing = sorted(e for e, (st, _) in ann.items() if st == "impl" and e not in have)
    if missing:
        die("annotated 'impl' but no driver object defines rgpu_drv_<name>: " + " ".join(missing))
    refused = sorted(e for e, (st, _) in ann.items() if st == "refused" and e in have)
    if refused:
        die("annotated 'refused' but defined by a driver object: " + " ".join(refused))
    todo = [e for e in exports if e not in have]
    s = ["/* Generated by driver/gen_driver.py. Do not edit. */",
         f"/* {len(exports)} libcuda exports; {len(exports) - len(todo)} implemented, "
         f"{len(todo)} answer CUDA_ERROR_NOT_SUPPORTED. */",
         "/* No prototypes here: a stub ignores its arguments (on x86-64 and aarch64 a",
         " * caller's arguments are harmless to a function that takes none), and every",
         " * export returns CUresult. */",
         '#include "rgpu_drv_unsupported.h"', "",
         "#define RGPU_DRV_STUB(name) \\",
         "  __attribute__((visibility(\"default\"))) int rgpu_drv_##name(void); \\",
         "  int rgpu_drv_##name(void) { static int logged; "
         "return rgpu_drv_report_unsupported(#name, &logged); }", ""]
    s += [f"RGPU_DRV_STUB({e})" for e in todo]
    s += ["", "const char *const rgpu_drv_stubbed_names[] = {"]
    s += [f'  "{e}",' for e in todo]
    s += ["  0};", f"const int rgpu_drv_stubbed_count = {len(todo)};", ""]
    open(a.out, "w").write("\n".join(s))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tables")
    t.add_argument("--cuda-include", required=True)
    t.add_argument("--exports", required=True)
    t.add_argument("--annotations", required=True)
    t.add_argument("--cc", default="cc")
    t.add_argument("--out-dir", required=True)
    s = sub.add_parser("stubs")
    s.add_argument("--exports", required=True)
    s.add_argument("--annotations", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("objects", nargs="*")
    a = ap.parse_args()
    if a.cmd == "tables":
        write_tables(a)
    else:
        write_stubs(a)


if __name__ == "__main__":
    main()
