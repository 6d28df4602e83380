"""What the generators of rgpu's forwarder facades share (cublasLt/gen_cublaslt.py
now; cublas/gen_cublas.py is to move onto it): a facade is a shared library
with NVIDIA's SONAME whose every export forwards to <impl_prefix><export> in
rgpu's libcudart.so.13 (which holds the session), plus a "not supported"
stub for every export no rgpu object defines.

Generalized by the library (its path), the exports' name prefix and the
implementation prefix.  Pure functions over text and file names; errors
raise FacadeError, which each generator turns into its own message."""
import re
import subprocess

import rgpu_gen_cdecl as cdecl


class FacadeError(Exception):
    pass


def exports_of(lib, prefix, min_count):
    """[(name, version node)] of the functions lib exports whose names start
    with prefix, sorted; read with `objdump -T` (the library is only read,
    never linked).  Fewer than min_count means the wrong library."""
    res = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True)
    if res.returncode != 0:
        raise FacadeError("objdump failed: " + res.stderr.strip())
    out = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        # addr flags... DF .text size version name
        if " DF " not in line or len(parts) < 6 or ".text" not in parts:
            continue
        name, node = parts[-1], parts[-2]
        if name.startswith(prefix):
            out[name] = node
    if len(out) < min_count:
        raise FacadeError(f"only {len(out)} {prefix}* exports in {lib}; is it NVIDIA's library?")
    return sorted(out.items())


def read_annotations(path, attr_keys=(), flags=()):
    """name -> {"status": impl|refused, "flags": set, <key>: [values], "note",
    "line"}.  A line: <export> impl|refused [flag...] [key=a,b...] [-- note];
    '#' starts a comment.  A refused export takes no attributes."""
    ann = {}
    for n, raw in enumerate(open(path), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        note = ""
        if " -- " in line:
            line, note = line.split(" -- ", 1)
        parts = line.split()
        if len(parts) < 2 or parts[1] not in ("impl", "refused"):
            raise FacadeError(f"{path}:{n}: expected '<export> impl|refused [attr...] [-- note]'")
        if parts[0] in ann:
            raise FacadeError(f"{path}:{n}: {parts[0]} annotated twice")
        a = {"status": parts[1], "flags": set(), "note": note.strip(), "line": n}
        for k in attr_keys:
            a[k] = []
        for attr in parts[2:]:
            if "=" in attr:
                k, v = attr.split("=", 1)
                if k not in attr_keys:
                    raise FacadeError(f"{path}:{n}: unknown attribute '{k}'")
                a[k] = [p for p in v.split(",") if p]
            elif attr in flags:
                a["flags"].add(attr)
            else:
                raise FacadeError(f"{path}:{n}: unknown attribute '{attr}'")
        if a["status"] == "refused" and (a["flags"] or any(a[k] for k in attr_keys)):
            raise FacadeError(f"{path}:{n}: a refused call takes no attributes")
        ann[parts[0]] = a
    return ann


def parse_protos(text, name_re, ret_re, what):
    """name -> (return type, [parameter declarations]) of the function
    declarations in preprocessed text whose name matches name_re and whose
    return type matches ret_re (definitions, e.g. static inline helpers, are
    skipped: they are not exports)."""
    protos = {}
    for stmt in re.split(r"[;{}]", text):
        m = re.fullmatch(r"\s*(?:extern\s+)?(" + ret_re + r")\s*(" + name_re + r")\s*\((.*)\)\s*",
                         stmt)
        if not m:
            continue
        ret = re.sub(r"\s+", " ", m.group(1)).replace(" *", "*").strip()
        name, params = m.group(2), m.group(3).strip()
        plist = [] if params in ("", "void") else cdecl.split_params(params)
        for p in plist:
            if cdecl.param_name(p) is None:
                raise FacadeError(f"cannot find the parameter name in '{p}' of {name}")
        if name in protos and protos[name] != (ret, plist):
            raise FacadeError(f"{name} is declared twice differently in {what}")
        protos[name] = (ret, plist)
    return protos


def proto_text(name, protos, prefix):
    """(return type, 'ret <prefix><name>(params)', 'arg, arg')."""
    ret, plist = protos[name]
    params = ", ".join(plist) if plist else "void"
    args = ", ".join(cdecl.param_name(p) for p in plist)
    return ret, f"{ret} {prefix}{name}({params})", args


def version_script(exports, head):
    """The version script: each export under NVIDIA's node name, so programs
    linked against the real library bind to the facade."""
    nodes = {}
    for e, node in exports:
        nodes.setdefault(node, []).append(e)
    m = list(head)
    for node, names in sorted(nodes.items()):
        m.append(node + " {\n  global:")
        m += [f"    {e};" for e in names]
        m.append("  local: *;\n};")
    m.append("")
    return "\n".join(m)


def forwarders(exports, protos, impl_prefix, head):
    """The facade library's source: one definition per export, calling
    <impl_prefix><export>.  The headers declare the exports (head includes
    them), so the compiler checks each definition against NVIDIA's
    prototype; an export no header declares forwards as int (void)."""
    f = list(head) + ["", "#define RGPU_EXPORT __attribute__((visibility(\"default\")))", ""]
    for e, _ in exports:
        if e in protos:
            ret, decl, args = proto_text(e, protos, "")
            call = f"{impl_prefix}{e}({args});"
            f.append(f"RGPU_EXPORT {decl} {{ {call if ret == 'void' else 'return ' + call} }}")
        else:
            f.append(f"RGPU_EXPORT int {e}(void);")
            f.append(f"RGPU_EXPORT int {e}(void) {{ return {impl_prefix}{e}(); }}")
    f.append("")
    return "\n".join(f)


def impl_protos(exports, protos, impl_prefix):
    """Prototype lines of <impl_prefix><export> for every export (int (void)
    for those no header declares)."""
    out = []
    for e, _ in exports:
        if e in protos:
            out.append(proto_text(e, protos, impl_prefix)[1] + ";")
        else:
            out.append(f"int {impl_prefix}{e}(void);")
    return out


def nm_defined(paths):
    """Names of the functions the object files define."""
    if not paths:
        return set()
    res = subprocess.run(["nm", "--defined-only"] + list(paths), capture_output=True, text=True)
    if res.returncode != 0:
        raise FacadeError("nm failed: " + res.stderr.strip())
    out = set()
    for line in res.stdout.splitlines():
        parts = line.split()
        # GCC's split-off fragments (name.cold, name.part.0, name.isra.0)
        # are pieces of a function, never functions of their own.
        if len(parts) == 3 and parts[1] in ("T", "t", "W") and "." not in parts[2]:
            out.add(parts[2])
    return out


def implemented(ann, exports, objects, impl_prefix, export_prefix):
    """The exports the objects define as <impl_prefix><export>, after
    checking them against the annotations: every 'impl' defined, no
    'refused' defined, nothing defined that the library does not export.
    Returns (defined set, [exports left to stub])."""
    names = [e for e, _ in exports]
    unknown = sorted(set(ann) - set(names))
    if unknown:
        raise FacadeError("annotated but not exported: " + " ".join(unknown))
    have = {s[len(impl_prefix):] for s in nm_defined(objects)
            if s.startswith(impl_prefix + export_prefix)}
    missing = sorted(e for e, v in ann.items() if v["status"] == "impl" and e not in have)
    if missing:
        raise FacadeError("annotated 'impl' but no object defines " + impl_prefix +
                          "<name>: " + " ".join(missing))
    refused = sorted(e for e, v in ann.items() if v["status"] == "refused" and e in have)
    if refused:
        raise FacadeError("annotated 'refused' but defined by an object: " + " ".join(refused))
    stray = sorted(have - set(names))
    if stray:
        raise FacadeError("defined by an object but not exported: " + " ".join(stray))
    return have, [e for e in names if e not in have]


def stubs(todo, protos, impl_prefix, stub_value, report_fn, fallback_value, head):
    """Definitions of <impl_prefix><export> for every export in todo: each
    logs its name once through report_fn(name, &logged) and returns
    stub_value(return type) (None: a void function), or fallback_value for
    an export no header declares (int (void))."""
    s = list(head) + ["", "#define RGPU_FACADE_STUB __attribute__((visibility(\"default\")))", ""]
    for e in todo:
        if e in protos:
            ret, decl, args = proto_text(e, protos, impl_prefix)
            used = "".join(f" (void){x};" for x in args.split(", ") if x)
            val = stub_value(ret)
            tail = f" return {val};" if val is not None else ""
            s.append(f"RGPU_FACADE_STUB {decl} {{{used} static int logged; "
                     f"{report_fn}(\"{e}\", &logged);{tail} }}")
        else:
            s.append(f"RGPU_FACADE_STUB int {impl_prefix}{e}(void) {{ static int logged; "
                     f"{report_fn}(\"{e}\", &logged); return {fallback_value}; }}")
    return s


def stubbed_table(todo, impl_prefix, export_attr):
    """The names of the stubbed exports and their count, exported (under
    RGPU_PRIVATE_1) for the facade's unit test: <impl_prefix>stubbed_names
    (NULL-terminated) and <impl_prefix>stubbed_count."""
    s = ["", "/* Exported (RGPU_PRIVATE_1) for the facade's unit test. */",
         f"{export_attr} const char *const {impl_prefix}stubbed_names[] = {{"]
    s += [f'  "{e}",' for e in todo]
    s += ["  0};", f"{export_attr} const int {impl_prefix}stubbed_count = {len(todo)};", ""]
    return s


def cli(write_tables, write_stubs):
    """The command line every facade generator takes:
      tables --cuda-include DIR --exports LIB --annotations FILE --cc CC --out-dir DIR
      stubs  --cuda-include DIR --exports LIB --annotations FILE --cc CC --out FILE OBJ..."""
    import argparse
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("tables", "stubs"):
        p = sub.add_parser(cmd)
        p.add_argument("--cuda-include", required=True)
        p.add_argument("--exports", required=True)
        p.add_argument("--annotations", required=True)
        p.add_argument("--cc", default="cc")
        if cmd == "tables":
            p.add_argument("--out-dir", required=True)
        else:
            p.add_argument("--out", required=True)
            p.add_argument("objects", nargs="*")
    a = ap.parse_args()
    (write_tables if a.cmd == "tables" else write_stubs)(a)


def write_forwarder_tables(out_dir, exports, protos, impl_prefix, head, short, header, library,
                           generator, untyped_note):
    """The three files of a forwarder facade, into out_dir:
      rgpu_<short>_protos.h   the library header and <impl_prefix><export>'s prototypes
      rgpu_lib<short>.c       the library: one forwarder per export
      <library's base>.map    its version script (NVIDIA's node names)
    header: the vendor header (<cudnn.h>); library: its SONAME (libcudnn.so.9);
    generator: the script's path, for the comments; untyped_note: what the
    exports no header declares are (they take no arguments and return int)."""
    import os
    untyped = [e for e, _ in exports if e not in protos]
    guard = f"RGPU_{short.upper()}_PROTOS_H"
    h = [head, f"#ifndef {guard}", f"#define {guard}", "", f"#include <{header}>", "",
         f"/* {len(exports)} exports; the {len(untyped)} {header} does not declare ({untyped_note})",
         " * take no arguments and return int here (they are stubs). */"]
    h += impl_protos(exports, protos, impl_prefix)
    h += ["", "#endif", ""]
    with open(os.path.join(out_dir, f"rgpu_{short}_protos.h"), "w") as f:
        f.write("\n".join(h))
    base = library.split(".so")[0]
    src = forwarders(exports, protos, impl_prefix, [
        head, f"/* {library}: each export of NVIDIA's {base} forwards to",
        f" * {impl_prefix}<name> in rgpu's libcudart.so.13, which holds the session. */",
        f'#include "rgpu_{short}_protos.h"'])
    with open(os.path.join(out_dir, f"rgpu_lib{short}.c"), "w") as f:
        f.write(src)
    vs = version_script(exports, [
        f"/* Generated by {generator}: NVIDIA's version nodes, so programs",
        f" * linked against the real {library} bind to this one. */"])
    with open(os.path.join(out_dir, f"{base}.map"), "w") as f:
        f.write(vs)


def status_value(not_supported, status_type):
    """stub_value for a library whose status type is status_type: its "not
    supported" code for statuses, nothing for void, "" for strings (never
    NULL: a caller may print it), zero for any other value."""
    def value(ret):
        if ret == status_type:
            return not_supported
        if ret == "void":
            return None
        if ret == "const char*":
            return '""'
        return f"({ret})0"
    return value


def status_names_source(head, includes, fn, codes, what):
    """A C function `const char *fn(int status)` naming each (name, value)
    of codes, NULL for others; what: the enum, for the comment."""
    r = [head] + includes + ["", f"/* {what}: the status names. */",
                             f"const char *{fn}(int status) {{", "  switch (status) {"]
    r += [f'    case {v}: return "{n}";' for n, v in codes]
    r += ["    default: return NULL;", "  }", "}", ""]
    return "\n".join(r)


def write_stub_file(out, exports, ann, protos, objects, impl_prefix, export_prefix, library,
                    not_supported, stub_value, report_fn, head, protos_header, values_note):
    """The stubs of every export no object defines (implemented(), stubs(),
    stubbed_table()) into out.  Raises FacadeError."""
    have, todo = implemented(ann, exports, objects, impl_prefix, export_prefix)
    s = stubs(todo, protos, impl_prefix, stub_value, report_fn, not_supported, [
        head,
        f"/* {len(exports)} {library} exports; {len(exports) - len(todo)} "
        f"implemented, {len(todo)} answer {not_supported} ({values_note}). */",
        f'#include "{protos_header}"',
        f"void {report_fn}(const char *name, int *logged_once);"])
    s += stubbed_table(todo, impl_prefix, "RGPU_FACADE_STUB")
    with open(out, "w") as f:
        f.write("\n".join(s))
