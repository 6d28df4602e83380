#!/usr/bin/env python3
"""Unit test of cublasLt/gen_cublaslt.py and common/rgpu_gen_facade.py: the
attribute reader (types and defaults from enum comments), the prototype
parser, the annotation reader's errors, the stubs, and (with the toolkit)
the whole tables run on the real header and library.

usage: gen_cublaslt_test.py [--cuda-include DIR --exports LIB --annotations FILE --cc CC]"""
import argparse
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_cublaslt as g  # noqa: E402

TOOLKIT = None

HEADER = """
typedef enum {
  /** Data type.
   *
   * uint32_t
   */
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,
  /** Order.
   *
   * int32_t, default: CUBLASLT_ORDER_COL
   */
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
  /** Count.
   *
   * int32_t, default: 1
   */
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  /** Plane.
   *
   * int64_t, default: 0 - 0 means that layout is regular
   */
  CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET = 7,
} cublasLtMatrixLayoutAttribute_t;
typedef enum {
  /** Bias.
   *
   * Bias case: const void *, default: NULL
   * Bias gradient case: void *, default: NULL
   */
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  /** Mode.
   *
   * int32_t, default: 0 */
  CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31,
  /** Mask.
   *
   * uint64_t, default: uint64_t(-1) (allow everything)
   */
  CUBLASLT_MATMUL_DESC_X = 40,
} cublasLtMatmulDescAttributes_t;
"""


class Attributes(unittest.TestCase):
    def test_types_and_defaults(self):
        items = g.enum_items(HEADER, "cublasLtMatrixLayoutAttribute_t")
        self.assertEqual([i[0] for i in items], ["CUBLASLT_MATRIX_LAYOUT_TYPE",
                                                 "CUBLASLT_MATRIX_LAYOUT_ORDER",
                                                 "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT",
                                                 "CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET"])
        got = [g.attr_type_and_default(n, c) for n, _, c in items]
        self.assertEqual(got, [("uint32_t", "0"), ("int32_t", "CUBLASLT_ORDER_COL"),
                               ("int32_t", "1"), ("int64_t", "0")])
        items = g.enum_items(HEADER, "cublasLtMatmulDescAttributes_t")
        got = [g.attr_type_and_default(n, c) for n, _, c in items]
        # The first type line counts; a type line that ends the comment; defaults in words.
        self.assertEqual(got, [("const void *", "0"), ("int32_t", "0"), ("uint64_t", "UINT64_MAX")])

    def test_unreadable_default_stops(self):
        with self.assertRaises(SystemExit):
            g.attr_type_and_default("X", "/** int32_t, default: whatever the device says */")
        with self.assertRaises(SystemExit):
            g.attr_type_and_default("X", "/** no type here */")


class Facade(unittest.TestCase):
    def test_protos_and_stubs(self):
        text = ("cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle); "
                "size_t cublasLtGetVersion(void); const char* cublasLtGetStatusName(cublasStatus_t status); "
                "static inline cublasStatus_t cublasLtInl(int a) { return 0; } int other(int a);")
        p = g.facade.parse_protos(text, r"cublasLt\w+", g.RET_RE, "test")
        self.assertEqual(set(p), {"cublasLtCreate", "cublasLtGetVersion", "cublasLtGetStatusName"})
        s = "\n".join(g.facade.stubs(["cublasLtCreate", "cublasLtGetVersion", "cublasLtXYZ"], p,
                                     "rgpu_cublaslt_", g.stub_value, "report", "7", []))
        self.assertIn("rgpu_cublaslt_cublasLtCreate(cublasLtHandle_t* lightHandle) { (void)lightHandle; "
                      "static int logged; report(\"cublasLtCreate\", &logged); return "
                      "CUBLAS_STATUS_NOT_SUPPORTED; }", s)
        self.assertIn("return (size_t)0; }", s)
        self.assertIn("int rgpu_cublaslt_cublasLtXYZ(void) { static int logged; report(\"cublasLtXYZ\", "
                      "&logged); return 7; }", s)

    def test_annotation_errors(self):
        def ann(text):
            with tempfile.NamedTemporaryFile("w", suffix=".ann", delete=False) as f:
                f.write(text)
            try:
                return g.read_annotations(f.name)
            finally:
                os.unlink(f.name)
        a = ann("cublasLtMatmul impl async dev=A,B -- note\ncublasLtX refused\n")
        self.assertEqual(a["cublasLtMatmul"]["dev"], ["A", "B"])
        self.assertEqual(a["cublasLtMatmul"]["note"], "note")
        for bad in ("cublasLtX maybe\n", "cublasLtX impl fast\n", "cublasLtX refused local\n",
                    "cublasLtX impl\ncublasLtX impl\n", "cublasLtX impl local async\n"):
            with self.assertRaises(SystemExit, msg=bad):
                ann(bad)


class Toolkit(unittest.TestCase):
    def test_tables_on_the_toolkit(self):
        if not TOOLKIT:
            self.skipTest("no toolkit given")
        with tempfile.TemporaryDirectory() as d:
            a = argparse.Namespace(out_dir=d, **TOOLKIT)
            g.write_tables(a)
            h = open(os.path.join(d, "rgpu_cublaslt_attrs.h")).read()
            c = open(os.path.join(d, "rgpu_cublaslt_attrs.c")).read()
            self.assertIn("uint64_t rows; /* CUBLASLT_MATRIX_LAYOUT_ROWS */", h)
            self.assertIn("int8_t fast_accum; /* CUBLASLT_MATMUL_DESC_FAST_ACCUM */", h)
            self.assertIn(".bias_data_type = (int32_t)(-1),", c)
            self.assertIn(".min_alignment_a_bytes = (uint32_t)(256),", c)
            self.assertIn(".epilogue = (uint32_t)(CUBLASLT_EPILOGUE_DEFAULT),", c)
            m = open(os.path.join(d, "libcublasLt.map")).read()
            self.assertIn("libcublasLt.so.13 {", m)
            self.assertIn("    cublasLtMatmul;", m)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda-include")
    ap.add_argument("--exports")
    ap.add_argument("--annotations")
    ap.add_argument("--cc", default="cc")
    args, rest = ap.parse_known_args()
    if args.cuda_include:
        TOOLKIT = {"cuda_include": args.cuda_include, "exports": args.exports,
                   "annotations": args.annotations, "cc": args.cc}
    unittest.main(argv=[sys.argv[0]] + rest)
