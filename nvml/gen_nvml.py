#!/usr/bin/env python3
"""Generates rgpu's NVML facade from nvml/nvml.def (the format is described
at the top of that file).

usage: gen_nvml.py nvml.def OUTDIR

Writes OUTDIR/rgpu_nvml_types.h, rgpu_nvml_forward.c, rgpu_nvml_stubs.c and
rgpu_nvml_tables.c.  The forwarder (libnvidia-ml.so.1) holds no logic: each
export calls rgpu_nvml_<name> in libcudart.so.13, where the process's one
session lives, so every NVML call shares the CUDA calls' connection.
"""
import os
import re
import sys

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FUNC = re.compile(r"^(impl|stub)\s+(.+?)\s*\b([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$")


def fail(path, lineno, msg):
    sys.exit(f"{path}:{lineno}: {msg}")


def parse(path):
    spec = {"consts": [], "typedefs": [], "enums": [], "structs": [], "funcs": [], "order": []}
    block = None  # ("enum"|"struct", name, items, lineno)
    names = set()
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
            if not line.strip():
                continue
            words = line.split()
            if block:
                kind, name, items, _ = block
                if words == ["end"]:
                    if not items:
                        fail(path, lineno, f"{kind} {name} is empty")
                    spec["order"].append((kind, name, items))
                    block = None
                    continue
                if kind == "enum":
                    m = re.match(r'^\s*([A-Z_][A-Z0-9_]*)\s+(-?[0-9]+)(?:\s+"([^"]*)")?\s*$', line)
                    if not m:
                        fail(path, lineno, f"cannot parse enum value '{line.strip()}'")
                    items.append((m.group(1), int(m.group(2)), m.group(3)))
                else:
                    decl = line.strip()
                    if not re.match(r"^[A-Za-z_][A-Za-z0-9_ ]*[ *][A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])?;$", decl):
                        fail(path, lineno, f"cannot parse struct member '{decl}'")
                    items.append(decl)
                continue
            key = words[0]
            if key == "const":
                if len(words) < 3 or not IDENT.match(words[1]):
                    fail(path, lineno, "expected: const NAME VALUE")
                spec["order"].append(("const", words[1], " ".join(words[2:])))
            elif key == "typedef":
                if len(words) < 3 or not IDENT.match(words[-1]):
                    fail(path, lineno, "expected: typedef C-TYPE NAME")
                spec["order"].append(("typedef", words[-1], " ".join(words[1:-1])))
            elif key in ("enum", "struct"):
                if len(words) != 2 or not IDENT.match(words[1]):
                    fail(path, lineno, f"expected: {key} NAME")
                block = (key, words[1], [], lineno)
            elif key in ("impl", "stub"):
                m = FUNC.match(line.strip())
                if not m:
                    fail(path, lineno, f"cannot parse function '{line.strip()}'")
                kind, ret, name, params = m.group(1), m.group(2).strip(), m.group(3), m.group(4).strip()
                if name in names:
                    fail(path, lineno, f"{name} listed twice")
                names.add(name)
                if kind == "stub" and ret != "nvmlReturn_t":
                    fail(path, lineno, f"stub {name} must return nvmlReturn_t")
                plist = []
                if params != "void":
                    for p in params.split(","):
                        p = p.strip()
                        pm = re.match(r"^(.*?)([A-Za-z_][A-Za-z0-9_]*)$", p)
                        if not pm or not pm.group(1).strip():
                            fail(path, lineno, f"parameter '{p}' of {name} needs a type and a name")
                        plist.append((pm.group(1).strip(), pm.group(2)))
                spec["funcs"].append({"kind": kind, "ret": ret, "name": name, "params": plist})
            else:
                fail(path, lineno, f"unknown item '{key}'")
    if block:
        fail(path, block[3], f"{block[0]} {block[1]} has no 'end'")
    returns = [o for o in spec["order"] if o[0] == "enum" and o[1] == "nvmlReturn_t"]
    if not returns:
        sys.exit(f"{path}: enum nvmlReturn_t is required")
    for v in returns[0][2]:
        if v[2] is None:
            sys.exit(f"{path}: nvmlReturn_t value {v[0]} needs its text")
    spec["returns"] = returns[0][2]
    return spec


def param_decl(t, n):
    # "char *" + "name" -> "char *name"; "unsigned int" + "x" -> "unsigned int x"
    return f"{t}{n}" if t.endswith("*") else f"{t} {n}"


def sig(fn, prefix=""):
    params = ", ".join(param_decl(t, n) for t, n in fn["params"]) or "void"
    ret = fn["ret"]
    sep = "" if ret.endswith("*") else " "
    return f"{ret}{sep}{prefix}{fn['name']}({params})"


def write(path, lines):
    text = "\n".join(lines) + "\n"
    # Unchanged outputs keep their time stamps: nothing recompiles needlessly.
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    with open(path, "w") as f:
        f.write(text)


def gen_header(spec):
    h = ["/* Generated by nvml/gen_nvml.py from nvml/nvml.def. Do not edit. */",
         "#ifndef RGPU_NVML_TYPES_H", "#define RGPU_NVML_TYPES_H", "",
         "#include <stddef.h>", "", "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
         "/* rgpu_nvml_* live in libcudart.so.13 (node RGPU_PRIVATE_1). */",
         '#define RGPU_NVML_PRIVATE __attribute__((visibility("default")))', ""]
    for kind, name, body in spec["order"]:
        if kind == "const":
            h.append(f"#define {name} {body}")
        elif kind == "typedef":
            h.append(f"typedef {body}{'' if body.endswith('*') else ' '}{name};")
        elif kind == "enum":
            h.append("typedef enum {")
            h += [f"  {v[0]} = {v[1]}," for v in body]
            h += [f"}} {name};", ""]
        else:
            h.append("typedef struct {")
            h += [f"  {m}" for m in body]
            h += [f"}} {name};", ""]
    h += ["", "/* The implementations (nvml/rgpu_nvml_*.c and the generated stubs). */"]
    h += [f"RGPU_NVML_PRIVATE {sig(fn, 'rgpu_nvml_')};" for fn in spec["funcs"]]
    h += ["", "/* The exports of libnvidia-ml.so.1, declared for the forwarder only. */",
          "#ifdef RGPU_NVML_DECLARE_EXPORTS"]
    h += [f"{sig(fn)};" for fn in spec["funcs"]]
    h += ["#endif", "",
          "/* The export table (rgpu_nvml_tables.c): every function of nvml.def. */",
          "typedef struct {", "  const char *name;", "  int implemented; /* 0: a NOT_SUPPORTED stub */",
          "} rgpu_nvml_export;",
          "extern const rgpu_nvml_export rgpu_nvml_exports[];",
          "extern const size_t rgpu_nvml_export_count;",
          "/* nvmlErrorString's text for a code; NULL for a code nvml.def does not list. */",
          "const char *rgpu_nvml_return_text(int code);",
          "/* The code's name (\"NVML_ERROR_NOT_SUPPORTED\"); NULL if unknown. */",
          "const char *rgpu_nvml_return_name(int code);",
          "/* A stub was called: logs its name once per function (nvml/rgpu_nvml_state.c). */",
          "void rgpu_nvml_note_unsupported(const char *name, int *logged);",
          "", "#ifdef __cplusplus", "}", "#endif", "#endif"]
    return h


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gen_forward(spec):
    c = ["/* Generated by nvml/gen_nvml.py from nvml/nvml.def. Do not edit.",
         " *",
         " * libnvidia-ml.so.1: every export forwards to its implementation in",
         " * libcudart.so.13, which holds the process's session with rgpu-server. */",
         "#define RGPU_NVML_DECLARE_EXPORTS 1", '#include "rgpu_nvml_types.h"', "",
         '#define RGPU_NVML_EXPORT __attribute__((visibility("default")))', ""]
    for fn in spec["funcs"]:
        args = ", ".join(n for _, n in fn["params"])
        c += [f"RGPU_NVML_EXPORT {sig(fn)} {{", f"  return rgpu_nvml_{fn['name']}({args});", "}", ""]
    return c


def gen_stubs(spec):
    c = ["/* Generated by nvml/gen_nvml.py from nvml/nvml.def. Do not edit.",
         " *",
         " * The NVML functions rgpu does not serve: NVML_ERROR_NOT_SUPPORTED, and",
         " * the name in the log once, never a silent success. */",
         '#include "rgpu_nvml_types.h"', ""]
    for fn in spec["funcs"]:
        if fn["kind"] != "stub":
            continue
        c.append(f"RGPU_NVML_PRIVATE {sig(fn, 'rgpu_nvml_')} {{")
        c += [f"  (void){n};" for _, n in fn["params"]]
        c += ["  static int logged;", f"  rgpu_nvml_note_unsupported({c_string(fn['name'])}, &logged);",
              "  return NVML_ERROR_NOT_SUPPORTED;", "}", ""]
    return c


def gen_tables(spec):
    c = ["/* Generated by nvml/gen_nvml.py from nvml/nvml.def. Do not edit. */",
         '#include "rgpu_nvml_types.h"', "", "const rgpu_nvml_export rgpu_nvml_exports[] = {"]
    c += [f"    {{{c_string(fn['name'])}, {1 if fn['kind'] == 'impl' else 0}}}," for fn in spec["funcs"]]
    c += ["};", f"const size_t rgpu_nvml_export_count = {len(spec['funcs'])};", "",
          "const char *rgpu_nvml_return_text(int code) {", "  switch (code) {"]
    c += [f"    case {v[1]}: return {c_string(v[2])};" for v in spec["returns"]]
    c += ["    default: return NULL;", "  }", "}", "",
          "const char *rgpu_nvml_return_name(int code) {", "  switch (code) {"]
    c += [f"    case {v[1]}: return {c_string(v[0])};" for v in spec["returns"]]
    c += ["    default: return NULL;", "  }", "}"]
    return c


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gen_nvml.py nvml.def OUTDIR")
    spec = parse(sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "rgpu_nvml_types.h"), gen_header(spec))
    write(os.path.join(out, "rgpu_nvml_forward.c"), gen_forward(spec))
    write(os.path.join(out, "rgpu_nvml_stubs.c"), gen_stubs(spec))
    write(os.path.join(out, "rgpu_nvml_tables.c"), gen_tables(spec))


if __name__ == "__main__":
    main()
