"""C declarations for the facade generators (driver/gen_driver.py,
cublas/gen_cublas.py): run a vendor header through the C preprocessor and
take its prototypes apart.  One copy, so that every facade reads the
headers the same way.  Pure functions; errors raise CdeclError, which each
generator turns into its own message."""
import re
import subprocess


class CdeclError(Exception):
    pass


def preprocess(cc, include, text, args=()):
    """text (C source, e.g. '#include <cuda.h>') preprocessed, whitespace
    folded to single spaces."""
    res = subprocess.run([cc, "-E", "-P", "-x", "c", *args, "-I" + include, "-"], input=text,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise CdeclError(res.stderr.strip())
    return re.sub(r"\s+", " ", res.stdout)


def split_params(s):
    """A parameter list split at its top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "(["
        depth -= ch in ")]"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


TYPE_WORDS = {"const", "volatile", "unsigned", "signed", "int", "char", "short", "long",
              "float", "double", "void", "struct", "enum", "union", "size_t", "restrict"}


def param_name(p):
    """The name in one parameter declaration, or None when it has none."""
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", p)  # function pointer
    if m:
        return m.group(1)
    p = re.sub(r"\[[^\]]*\]\s*$", "", p).strip()
    m = re.search(r"(\w+)$", p)
    words = re.findall(r"\w+", p)
    if not m or len(words) < 2 or m.group(1) in TYPE_WORDS:
        return None
    return m.group(1)
