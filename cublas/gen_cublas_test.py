#!/usr/bin/env python3
"""Unit test of cublas/gen_cublas.py: the prototype parser, the annotation
reader and its checks, the stub values, and (with the toolkit) the whole
tables + stubs run on the real headers and library.

usage: gen_cublas_test.py [--cuda-include DIR --exports LIB --annotations FILE --cc CC]"""
import argparse
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_cublas as g  # noqa: E402

TOOLKIT = None


def read(path):
    with open(path) as f:
        return f.read()


class Parse(unittest.TestCase):
    def test_prototypes_of_each_return_type(self):
        text = ("typedef int x; cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, "
                "cublasOperation_t transa, const float* alpha, float* C, int ldc); "
                "void cublasSscal(int n, float alpha, float* x, int incx); "
                "const char* cublasGetStatusName(cublasStatus_t status); "
                "size_t cublasGetCudartVersion(void); "
                "cuComplex cublasCdotu(int n, const cuComplex* x, int incx, const cuComplex* y, int incy); "
                "int notcublas(int a);")
        p = g.parse_protos(g.re.sub(r"\s+", " ", text), "test")
        self.assertEqual(set(p), {"cublasSgemm_v2", "cublasSscal", "cublasGetStatusName",
                                  "cublasGetCudartVersion", "cublasCdotu"})
        self.assertEqual(p["cublasSgemm_v2"][0], "cublasStatus_t")
        self.assertEqual([g.param_name(x) for x in p["cublasSgemm_v2"][1]],
                         ["handle", "transa", "alpha", "C", "ldc"])
        self.assertEqual(p["cublasGetStatusName"][0], "const char*")
        self.assertEqual(p["cublasGetCudartVersion"][1], [])
        self.assertEqual(g.param_type("const float* alpha"), "const float*")

    def test_conflicting_declarations_fail(self):
        text = "void cublasSscal(int n); void cublasSscal(int m, int k);"
        with self.assertRaises(SystemExit):
            g.parse_protos(text, "test")

    def test_stub_values(self):
        self.assertEqual(g.stub_value("cublasStatus_t"), "CUBLAS_STATUS_NOT_SUPPORTED")
        self.assertIsNone(g.stub_value("void"))
        self.assertEqual(g.stub_value("const char*"), '""')
        self.assertEqual(g.stub_value("cuComplex"), "(cuComplex){0}")
        self.assertEqual(g.stub_value("float"), "(float)0")


def annotations(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".annotations", delete=False)
    f.write(text)
    f.close()
    try:
        return g.read_annotations(f.name)
    finally:
        os.unlink(f.name)


PROTOS = {"cublasSgemm_v2": ("cublasStatus_t", ["cublasHandle_t handle", "int m",
                                                 "const float* alpha", "float* C"]),
          "cublasGetStatusName": ("const char*", ["cublasStatus_t status"])}
EXPORTS = [("cublasSgemm_v2", "libcublas.so.13"), ("cublasGetStatusName", "libcublas.so.13")]


class Annotations(unittest.TestCase):
    def test_reads_attributes_and_note(self):
        a = annotations("# c\ncublasSgemm_v2 impl gen scalar=alpha dev=C -- the note\n"
                        "cublasGetStatusName refused\n")
        s = a["cublasSgemm_v2"]
        self.assertEqual((s["status"], s["flags"], s["note"]), ("impl", {"gen"}, "the note"))
        self.assertEqual([x["name"] for x in s["scalar"]], ["alpha"])
        self.assertEqual([x["name"] for x in s["dev"]], ["C"])
        self.assertEqual(a["cublasGetStatusName"]["status"], "refused")
        g.check_annotations(a, EXPORTS, PROTOS)

    def test_families_continuations_and_expressions(self):
        a = annotations("default gen\n"
                        "cublas[SD]gemm_v2{,_64} impl gen cpu -- first\n"
                        "    check=m:m>=0 noop=m==0 -- second\n"
                        "    dev=C:rgpu_lib_span_mat(m,n,ldc)@Ctype cpuif=m<10\n")
        self.assertEqual(a[""]["default"], "gen")
        self.assertEqual(sorted(k for k in a if k),
                         ["cublasDgemm_v2", "cublasDgemm_v2_64", "cublasSgemm_v2",
                          "cublasSgemm_v2_64"])
        s = a["cublasDgemm_v2_64"]
        self.assertEqual(s["note"], "first second")
        self.assertEqual(s["check"], [{"name": "m", "cond": "m>=0"}])
        self.assertEqual((s["noop"], s["cpuif"]), ("m==0", "m<10"))
        self.assertEqual(s["dev"], [{"name": "C", "size": "rgpu_lib_span_mat(m,n,ldc)",
                                     "type": "Ctype"}])
        self.assertEqual(g.expand_names("cublasI[sd]amax{,_64}"),
                         ["cublasIsamax", "cublasIsamax_64", "cublasIdamax", "cublasIdamax_64"])

    def test_bad_lines_fail(self):
        for bad in ("cublasSgemm_v2 maybe\n",
                    "cublasSgemm_v2 impl fast\n",
                    "cublasSgemm_v2 impl where=alpha\n",
                    "cublasSgemm_v2 refused gen\n",
                    "cublasSgemm_v2 impl gen local\n",
                    "cublasSgemm_v2 impl cpu\n",
                    "cublasSgemm_v2 impl gen cpuif=m>0\n",
                    "cublasSgemm_v2 impl gen check=m\n",
                    "default everything\n",
                    "cublasSgemm_v2 impl\ncublasSgemm_v2 impl\n"):
            with self.subTest(bad=bad), self.assertRaises(SystemExit):
                annotations(bad)

    def test_checks_against_the_prototypes(self):
        for bad in ("cublasSgemm_v2 impl gen dev=D\n",     # no such parameter
                    "cublasSgemm_v2 impl gen dev=m\n",     # not a pointer
                    "cublasGetStatusName impl gen\n",      # gen needs a status
                    "cublasNoSuch impl\n"):                # not exported
            with self.subTest(bad=bad), self.assertRaises(SystemExit):
                g.check_annotations(annotations(bad), EXPORTS, PROTOS)


class Roles(unittest.TestCase):
    """gen_cublas_calls.roles: how each parameter of a generated call travels."""

    def setUp(self):
        import gen_cublas_calls
        self.c = gen_cublas_calls

    def test_names_decide_unless_annotated(self):
        plist = ["cublasHandle_t handle", "int n", "const float* alpha", "const float *const Aarray[]",
                 "float* result"]
        with self.assertRaises(self.c.Ineligible):  # scalars and results together
            self.c.roles("cublasX", plist, None)
        rl = self.c.roles("cublasX", plist[:4], None)
        self.assertEqual([(n, t, r) for n, t, r, _ in rl],
                         [("n", "int", "value"), ("alpha", "const float*", "scalar"),
                          ("Aarray", "const float *const *", "dev")])
        self.assertEqual(self.c.pointee("const float *const*"), "const float *")
        rot = self.c.roles("cublasSrot_v2", ["cublasHandle_t handle", "float* x", "const float* c",
                                             "const float* s"], None)
        self.assertEqual([r for _, _, r, _ in rot], ["dev", "scalar", "scalar"])

    def test_ineligible_calls(self):
        for plist in (["int n"],                                       # no handle first
                      ["cublasHandle_t handle", "float alpha"],         # float by value
                      ["cublasHandle_t handle", "const void* alpha"]):  # void scalar, no @TYPE
            with self.subTest(plist=plist), self.assertRaises(self.c.Ineligible):
                self.c.roles("cublasX", plist, None)
        self.assertEqual(self.c.fnv("cublasSdot_v2"), 0x0c9e432c)


class Toolkit(unittest.TestCase):
    """The generator on the real headers and library: every export gets a
    forwarder under NVIDIA's node, and the stubs compile."""

    def setUp(self):
        if not TOOLKIT:
            self.skipTest("no toolkit arguments")

    def test_tables_and_stubs(self):
        t = TOOLKIT
        with tempfile.TemporaryDirectory() as d:
            common = ["--cuda-include", t.cuda_include, "--exports", t.exports,
                      "--annotations", t.annotations, "--cc", t.cc]
            me = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen_cublas.py")
            subprocess.run([sys.executable, me, "tables"] + common + ["--out-dir", d], check=True)
            exports = g.exports_of(t.exports)
            # The real annotations name impl calls no object defines here:
            # the stubs step must refuse them.
            r = subprocess.run([sys.executable, me, "stubs"] + common
                               + ["--out", os.path.join(d, "stubs.c")], capture_output=True,
                               text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("annotated 'impl' but no object defines rgpu_cublas_", r.stderr)
            # Without impl lines every export is a stub, and they compile.
            none = os.path.join(d, "none.annotations")
            with open(none, "w") as f:
                f.write("cublasSgemm_v2 refused\n")
            plain = common[:4] + ["--annotations", none, "--cc", t.cc]
            subprocess.run([sys.executable, me, "stubs"] + plain
                           + ["--out", os.path.join(d, "stubs.c")], check=True)
            stubs = read(os.path.join(d, "stubs.c"))
            self.assertIn(f"rgpu_cublas_stubbed_count = {len(exports)};", stubs)
            exports = g.exports_of(t.exports)
            fwd = read(os.path.join(d, "rgpu_libcublas.c"))
            for e, _ in exports:
                self.assertIn(f" {e}(", fwd)
            mp = read(os.path.join(d, "libcublas.map"))
            listed = g.re.findall(r"^    (cublas\w+);$", mp, g.re.M)
            self.assertEqual(sorted(listed), sorted(e for e, _ in exports))
            self.assertIn("libcublas.so.13 {", mp)
            here = os.path.dirname(os.path.abspath(__file__))
            for src in ("rgpu_libcublas.c", "stubs.c"):
                r = subprocess.run([t.cc, "-fsyntax-only", "-I" + d, "-I" + here,
                                    "-I" + t.cuda_include, os.path.join(d, src)],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda-include")
    ap.add_argument("--exports")
    ap.add_argument("--annotations")
    ap.add_argument("--cc", default="cc")
    args, rest = ap.parse_known_args()
    if args.cuda_include and args.exports and args.annotations:
        TOOLKIT = args
    unittest.main(argv=[sys.argv[0]] + rest)
