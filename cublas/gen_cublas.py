#!/usr/bin/env python3
"""Generates rgpu's cuBLAS facade (libcublas.so.13) from NVIDIA's own files.

usage:
  gen_cublas.py tables --cuda-include DIR --exports libcublas.so.13
                       --annotations FILE --cc CC --out-dir DIR
      writes rgpu_cublas_protos.h (prototype of every rgpu_cublas_<export>)
             rgpu_libcublas.c     (libcublas.so.13: every export forwards to
                                   rgpu_cublas_<export> in libcudart.so.13)
             libcublas.map        (the version script: NVIDIA's node names)
  gen_cublas.py stubs --cuda-include DIR --exports libcublas.so.13
                      --annotations FILE --cc CC --out FILE OBJ...
      writes the CUBLAS_STATUS_NOT_SUPPORTED stubs of every export the
      objects OBJ... do not define.

Sources of truth:
  * the exports and their version nodes: `objdump -T` on the toolkit's
    libcublas.so.13 (only read, never linked), so the facade neither misses
    a symbol a program imports nor binds under another version;
  * the prototypes: cublas.h (which includes cublas_api.h: the v2 API under
    its _v2 names, the _64 forms, and the legacy API) and cublasXt.h run
    through the C preprocessor, like driver/gen_driver.py does for cuda.h;
  * cublas/libcublas.annotations: what rgpu implements, what it refuses, and
    for implemented calls how their pointers travel (checked here against the
    prototypes, so an annotation cannot name a parameter that does not exist).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import rgpu_gen_cdecl as cdecl  # noqa: E402  (the shared C declaration reader)
import rgpu_gen_facade as facade  # noqa: E402  (what the forwarder facades share)

HEADERS = ("cublas.h", "cublasXt.h")


def die(msg):
    sys.exit("gen_cublas: " + msg)


def exports_of(lib):
    """[(name, version node)] of the library's exported functions, sorted."""
    try:
        return facade.exports_of(lib, "cublas", 300)
    except facade.FacadeError as e:
        die(str(e))


# Annotation lines (continuation lines start with white space):
#   <names> impl|refused [flag...] [attr...] [-- note]
#   default gen [-- note]     every eligible export named nowhere is `gen`
# <names>: an export, or a family: [SD] picks one letter, {a,b} one word
# ("cublas[SD]gemm_v2{,_64}" is four exports).
# Flags of an impl call:
#   local          hand-written, answered in the client: no message
#   gen            client stub and server dispatch generated (gen_cublas_calls.py):
#                  one LIB_CALL, without a reply unless a result is on the host
#   cpu            (gen) softgpu computes it: server/rgpu_cublas_cpu.c defines
#                  rgpu_cublas_cpu_<export>; without it softgpu answers
#                  CUBLAS_STATUS_NOT_SUPPORTED
# Attributes (each names a parameter P, checked against the prototype):
#   host=P,Q       (local) pointers into host memory
#   dev=P[:N][@T]  a device address; N: its extent in elements (a C
#                  expression over the parameters, with rgpu_lib_args.h's
#                  span helpers), checked by the server; @T: the element's
#                  cudaDataType when P is void *
#   scalar=P[@T]   read per the handle's pointer mode (host: sent by value)
#   result=P[@T]   written per the pointer mode (host: the call waits for it)
#   check=P:COND   the client refuses the call with CUBLAS_STATUS_INVALID_VALUE
#                  unless COND holds; P is the parameter reported (its name,
#                  or the number cuBLAS prints where that is not its position)
#   noop=COND      (no P) when COND holds, cuBLAS does nothing: the client
#                  answers success without a message
#   cpuif=COND     (cpu calls) softgpu computes only what COND accepts; the
#                  rest is CUBLAS_STATUS_NOT_SUPPORTED there
# Unnamed pointers of a gen call take their role from their name: alpha,
# beta (and c, s of the rot family) are scalars, result a result, the rest
# device addresses without an extent.
ATTR_KEYS = ("host", "dev", "scalar", "result", "check")
EXPR_KEYS = ("noop", "cpuif")
FLAGS = ("local", "gen", "cpu")


def expand_names(pattern):
    """A family pattern's exports: [SD] and {a,b} expanded, in order."""
    m = re.search(r"\[([A-Za-z]+)\]|\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    choices = list(m.group(1)) if m.group(1) else m.group(2).split(",")
    out = []
    for c in choices:
        out += expand_names(pattern[:m.start()] + c + pattern[m.end():])
    return out


def parse_spec(key, v, where):
    """dev=/scalar=/result= value -> [{"name", "size", "type"}]; check= ->
    [{"name", "cond"}]."""
    if key == "check":
        if ":" not in v:
            die(f"{where}: check= wants P:CONDITION")
        n, cond = v.split(":", 1)
        return [{"name": n, "cond": cond}]
    if key == "host" or (":" not in v and "@" not in v):
        return [{"name": n, "size": None, "type": None} for n in v.split(",") if n]
    m = re.fullmatch(r"(\w+)(?::([^@]+))?(?:@(.+))?", v)
    if not m:
        die(f"{where}: cannot read {key}={v}")
    return [{"name": m.group(1), "size": m.group(2), "type": m.group(3)}]


def logical_lines(path):
    """[(line number, text, note)]: comments removed, continuation lines
    joined to the text (a note after ' -- ' belongs to its physical line)."""
    out = []
    with open(path) as f:
        raw_lines = f.readlines()
    for n, raw in enumerate(raw_lines, 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        note = ""
        if " -- " in line:
            line, note = line.split(" -- ", 1)
        if raw[0] in " \t" and out:
            m, text, first_note = out[-1]
            out[-1] = (m, text + " " + line.strip(), " ".join(x for x in (first_note, note.strip()) if x))
        else:
            out.append((n, line.strip(), note.strip()))
    return out


def read_annotations(path):
    """name -> {"status": impl|refused, "flags": set, "host"/"dev"/"scalar"/
    "result"/"check": [spec], "note": str, "line": n}; the key "" holds
    {"default": "gen"} when the file says `default gen`."""
    ann = {"": {"default": None}}
    for n, line, note in logical_lines(path):
        where = f"{path}:{n}"
        parts = line.split()
        if parts[0] == "default":
            if parts[1:] != ["gen"]:
                die(f"{where}: expected 'default gen'")
            ann[""]["default"] = "gen"
            continue
        if len(parts) < 2 or parts[1] not in ("impl", "refused"):
            die(f"{where}: expected '<export> impl|refused [attr...] [-- note]'")
        a = {"status": parts[1], "flags": set(), "note": note.strip(), "line": n}
        for k in ATTR_KEYS:
            a[k] = []
        for k in EXPR_KEYS:
            a[k] = None
        for attr in parts[2:]:
            if "=" in attr:
                k, v = attr.split("=", 1)
                if k in EXPR_KEYS:
                    a[k] = v
                    continue
                if k not in ATTR_KEYS:
                    die(f"{where}: unknown attribute '{k}'")
                a[k] += parse_spec(k, v, where)
            elif attr in FLAGS:
                a["flags"].add(attr)
            else:
                die(f"{where}: unknown attribute '{attr}'")
        if a["status"] == "refused" and (a["flags"] or any(a[k] for k in ATTR_KEYS + EXPR_KEYS)):
            die(f"{where}: a refused call takes no attributes")
        if {"gen", "local"} <= a["flags"]:
            die(f"{where}: a call is either gen or local")
        if a["cpuif"] and "cpu" not in a["flags"]:
            die(f"{where}: cpuif applies to cpu calls only")
        if a["noop"] and "gen" not in a["flags"]:
            die(f"{where}: noop applies to gen calls only")
        if "cpu" in a["flags"] and "gen" not in a["flags"]:
            die(f"{where}: cpu applies to gen calls only")
        if a["host"] and "gen" in a["flags"]:
            die(f"{where}: host= is for local calls (a gen call names dev/scalar/result)")
        for name in expand_names(parts[0]):
            if name in ann:
                die(f"{where}: {name} annotated twice")
            ann[name] = dict(a, flags=set(a["flags"]))
    return ann


def annotated(ann):
    """The export annotations without the file's directives."""
    return {k: v for k, v in ann.items() if k}


def preprocess(cc, include, header):
    try:
        return cdecl.preprocess(cc, include, f"#include <{header}>\n")
    except cdecl.CdeclError as e:
        die(f"preprocessing {header} failed: " + str(e))


split_params, param_name, TYPE_WORDS = cdecl.split_params, cdecl.param_name, cdecl.TYPE_WORDS


def param_type(p):
    """The declaration without its name ('const float* alpha' -> 'const float*')."""
    name = param_name(p)
    return re.sub(r"\b" + name + r"\s*$", "", p).strip()


# Return types the headers use; the stub of each returns what NOT_SUPPORTED
# maps to for it (statuses: CUBLAS_STATUS_NOT_SUPPORTED; the legacy API's
# values and void: zero, the failure being logged).
RET_RE = (r"(cublasStatus_t|void|float|double|int|size_t|const char ?\*|cuComplex|"
          r"cuDoubleComplex|cublasHandle_t)")


def parse_protos(text, what):
    protos = {}
    for stmt in re.split(r"[;{}]", text):
        m = re.fullmatch(r"\s*(?:extern\s+)?" + RET_RE + r"\s*(cublas\w+)\s*\((.*)\)\s*", stmt)
        if not m:
            continue
        ret = re.sub(r"\s+", "", m.group(1)).replace("constchar", "const char")
        name, params = m.group(2), m.group(3).strip()
        plist = [] if params in ("", "void") else split_params(params)
        for p in plist:
            if param_name(p) is None:
                die(f"cannot find the parameter name in '{p}' of {name}")
        if name in protos and protos[name] != (ret, plist):
            die(f"{name} is declared twice differently in {what}")
        protos[name] = (ret, plist)
    return protos


def prototypes(cc, include):
    """(export name -> (return type, [parameter declarations]), legacy names).

    cublas.h (the legacy API, plus cublas_api.h) and cublasXt.h (which pulls
    in cublas_v2.h, whose macros rename legacy names to their _v2 forms)
    cannot share a translation unit; the legacy names are those cublas.h
    declares beyond cublas_api.h, and the generated header declares them
    itself after undefining cublas_v2.h's macros."""
    protos = {}
    for header in HEADERS:
        for name, proto in parse_protos(preprocess(cc, include, header), header).items():
            if name in protos and protos[name] != proto:
                die(f"{name} is declared differently by two headers")
            protos[name] = proto
    api = parse_protos(preprocess(cc, include, "cublas_api.h"), "cublas_api.h")
    legacy = set(parse_protos(preprocess(cc, include, "cublas.h"), "cublas.h")) - set(api)
    if len(protos) < 300 or len(legacy) < 50:
        die(f"only {len(protos)} prototypes ({len(legacy)} legacy) parsed from {HEADERS}")
    return protos, legacy


def status_codes(cc, include):
    """[(name, value)] of cublasStatus_t, in cublas_api.h's order."""
    text = preprocess(cc, include, "cublas_api.h")
    m = re.search(r"typedef enum \{([^}]*)\} cublasStatus_t;", text)
    if not m:
        die("no cublasStatus_t enum in cublas_api.h")
    out = []
    for item in m.group(1).split(","):
        mm = re.fullmatch(r"\s*(CUBLAS_STATUS_\w+)\s*=\s*(\d+)\s*", item)
        if mm:
            out.append((mm.group(1), int(mm.group(2))))
    if len(out) < 8:
        die(f"only {len(out)} cublasStatus_t codes parsed from cublas_api.h")
    return out


def check_annotations(ann, exports, protos):
    ann = annotated(ann)
    names = {e for e, _ in exports}
    unknown = sorted(set(ann) - names)
    if unknown:
        die("annotated but not exported by libcublas: " + " ".join(unknown))
    for e, a in sorted(ann.items()):
        if a["status"] != "impl":
            continue
        if e not in protos:
            die(f"{e} is annotated impl but no header declares it")
        ret, plist = protos[e]
        params = {param_name(p): p for p in plist}
        for k in ATTR_KEYS:
            for spec in a[k]:
                pn = spec["name"]
                if k == "check" and pn.isdigit():
                    continue  # the number cuBLAS prints, not a name
                if pn not in params:
                    die(f"{e}: annotation {k}={pn} names no parameter of {e}")
                if k != "check" and "*" not in params[pn] and "[" not in params[pn]:
                    die(f"{e}: annotation {k}={pn} names a parameter that is not a pointer")
        if "gen" in a["flags"] and ret != "cublasStatus_t":
            die(f"{e}: only a call returning cublasStatus_t can be generated")


proto_text = facade.proto_text


HEAD = "/* Generated by cublas/gen_cublas.py from the CUDA toolkit. Do not edit. */"


def includes(protos, legacy):
    """The headers' declarations: cublasXt.h (with cublas_v2.h and cublas_api.h),
    then the legacy API's names freed from cublas_v2.h's macros and declared
    as cublas.h declares them."""
    out = ["/* cublasXt.h includes cublas_v2.h and cublas_api.h (the v2 API under its",
           " * _v2 names); cublas.h's legacy API cannot join them (cublas_v2.h's macros",
           " * rename its names), so its prototypes follow here, taken from cublas.h. */",
           "#include <cublasXt.h>", ""]
    for e in sorted(legacy):
        out.append(f"#undef {e}")
    for e in sorted(legacy):
        out.append(proto_text(e, protos, "")[1] + ";")
    return out + [""]


def write_tables(a):
    exports = exports_of(a.exports)
    ann = read_annotations(a.annotations)
    protos, legacy = prototypes(a.cc, a.cuda_include)
    check_annotations(ann, exports, protos)
    os.makedirs(a.out_dir, exist_ok=True)
    untyped = [e for e, _ in exports if e not in protos]

    h = [HEAD, "#ifndef RGPU_CUBLAS_PROTOS_H", "#define RGPU_CUBLAS_PROTOS_H"] + includes(protos, legacy) + [
        "", f"/* {len(exports)} exports; {len(untyped)} no header declares take no arguments",
        " * and return int here (they are stubs). */"]
    for e, _ in exports:
        if e in protos:
            h.append(proto_text(e, protos, "rgpu_cublas_")[1] + ";")
        else:
            h.append(f"int rgpu_cublas_{e}(void);")
    h += ["", "#endif", ""]
    open(os.path.join(a.out_dir, "rgpu_cublas_protos.h"), "w").write("\n".join(h))

    f = facade.forwarders(exports, protos, "rgpu_cublas_", [
        HEAD,
        "/* libcublas.so.13: each export of NVIDIA's libcublas forwards to",
        " * rgpu_cublas_<name> in rgpu's libcudart.so.13, which holds the session.",
        " * The headers declare the exports, so the compiler checks each definition",
        " * against NVIDIA's prototype. */",
        '#include "rgpu_cublas_protos.h"'])
    open(os.path.join(a.out_dir, "rgpu_libcublas.c"), "w").write(f)

    codes = status_codes(a.cc, a.cuda_include)
    r = [HEAD, '#include "rgpu_cublas_tables.h"', "",
         "/* The cublasStatus_t enum of cublas_api.h: cublasGetStatusName's names. */",
         "const rgpu_cublas_status_name rgpu_cublas_status_names[] = {"]
    r += [f'  {{{v}, "{n}"}},' for n, v in codes]
    r += ["};", f"const size_t rgpu_cublas_status_names_len = {len(codes)};", ""]
    open(os.path.join(a.out_dir, "rgpu_cublas_status.c"), "w").write("\n".join(r))

    m = facade.version_script(exports, [
        "/* Generated by cublas/gen_cublas.py: NVIDIA's version nodes, so programs",
        " * linked against the real libcublas.so.13 bind to this one. */"])
    open(os.path.join(a.out_dir, "libcublas.map"), "w").write(m)


def stub_value(ret):
    if ret == "cublasStatus_t":
        return "CUBLAS_STATUS_NOT_SUPPORTED"
    if ret == "void":
        return None
    if ret == "const char*":
        return '""'  # never NULL: a caller may print it
    if ret in ("cuComplex", "cuDoubleComplex"):
        return f"({ret}){{0}}"
    return f"({ret})0"


def write_stubs(a):
    exports = exports_of(a.exports)
    ann = annotated(read_annotations(a.annotations))
    protos, _ = prototypes(a.cc, a.cuda_include)
    try:
        have, todo = facade.implemented(ann, exports, a.objects, "rgpu_cublas_", "cublas")
    except facade.FacadeError as e:
        die(str(e))
    names = [e for e, _ in exports]
    s = facade.stubs(todo, protos, "rgpu_cublas_", stub_value, "rgpu_cublas_report_unsupported",
                     "CUBLAS_STATUS_NOT_SUPPORTED", [
                         HEAD,
                         f"/* {len(names)} libcublas exports; {len(names) - len(todo)} implemented, "
                         f"{len(todo)} answer CUBLAS_STATUS_NOT_SUPPORTED (values and void: zero, "
                         "logged). */",
                         '#include "rgpu_cublas_protos.h"', '#include "rgpu_cublas_unsupported.h"'])
    s += facade.stubbed_table(todo, "rgpu_cublas_", "RGPU_FACADE_STUB")
    open(a.out, "w").write("\n".join(s))


if __name__ == "__main__":
    facade.cli(write_tables, write_stubs)
