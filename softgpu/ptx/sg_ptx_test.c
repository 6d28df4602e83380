/* sg_ptx_test: hand-written PTX per instruction class, corner cases, parse
 * errors and faults. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>

#include "sg_ptx_testenv.h"
#include "sg_ptx_internal.h"

#define HDR                                                                    \
  ".version 8.0\n.target sm_75\n.address_size 64\n"
#define REGS                                                                   \
  ".reg .b32 %r<40>;\n.reg .b64 %rd<40>;\n.reg .f32 %f<40>;\n.reg .f64 %fd<20>;\n" \
  ".reg .pred %p<16>;\n.reg .b16 %h<16>;\n"

/* Wraps BODY in a kernel k(out, in) with %rd0 = out, %rd1 = in (generic =
 * global addresses), runs it with `threads` threads in one block and
 * returns the launch result.  out/in are 4 KiB buffers. */
typedef struct {
  testenv te;
  sg_ptx_module *m;
  uint64_t out, in;
  uint32_t *o32;
  uint64_t *o64;
  float *of;
  double *od;
  void *inh;
  sg_ptx_fault fault;
  char err[512];
} snip;

/* Parses body as the kernel k(out, in) (out in %rd0, in in %rd1) into
 * s->m and fills *p with s->out and s->in; returns 0 or the parse error. */
static int snip_parse(snip *s, const char *body, const sg_ptx_kernel **kernel, te_params *p) {
  static char text[65536];
  snprintf(text, sizeof text, "%s%s%s%s%s", HDR ".visible .entry k(.param .u64 out, .param .u64 in)\n{\n", REGS,
           "ld.param.u64 %rd0, [out];\nld.param.u64 %rd1, [in];\n", body, "\nret;\n}\n");
  int rc = sg_ptx_module_parse(text, strlen(text), &s->m, s->err, sizeof s->err);
  if (rc) return rc;
  const sg_ptx_kernel *k = sg_ptx_module_find_kernel(s->m, "k");
  te_params_init(p, k);
  te_param(p, k, 0, &s->out, 8);
  te_param(p, k, 1, &s->in, 8);
  *kernel = k;
  return 0;
}

static int snip_run_cfg(snip *s, const char *body, unsigned blocks, unsigned threads, size_t dyn) {
  const sg_ptx_kernel *k;
  te_params p;
  int rc = snip_parse(s, body, &k, &p);
  if (rc) return rc;
  return te_launch(&s->te, k, blocks, 1, 1, threads, 1, 1, dyn, &p, &s->fault);
}

static void snip_init(snip *s) {
  memset(s, 0, sizeof *s);
  te_init(&s->te, 1);
  s->out = te_alloc(&s->te, 4096);
  s->in = te_alloc(&s->te, 4096);
  s->o32 = te_host(&s->te, s->out);
  s->o64 = te_host(&s->te, s->out);
  s->of = te_host(&s->te, s->out);
  s->od = te_host(&s->te, s->out);
  s->inh = te_host(&s->te, s->in);
}

static void snip_done(snip *s) {
  sg_ptx_module_free(s->m);
  s->m = NULL;
  te_free(&s->te);
}

#define RUN_OK(s, body, threads)                                               \
  do {                                                                         \
    int rc_ = snip_run_cfg((s), (body), 1, (threads), 0);                      \
    if (rc_) fail_msg("rc %d: %s %s", rc_, (s)->err, (s)->fault.message);      \
  } while (0)

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ------------------------------------------------------------ integer */

static void test_int_arith(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.u32 %r1, 2147483647; add.s32 %r2, %r1, 1; st.u32 [%rd0], %r2;\n"
         "mov.u32 %r3, -7; mov.u32 %r4, 3; div.s32 %r5, %r3, %r4; st.u32 [%rd0+4], %r5;\n"
         "rem.s32 %r6, %r3, %r4; st.u32 [%rd0+8], %r6;\n"
         "mov.u32 %r7, -3; rem.s32 %r8, 7, %r7; st.u32 [%rd0+12], %r8;\n"
         "mov.u32 %r9, 0; div.u32 %r10, 5, %r9; st.u32 [%rd0+16], %r10;\n"
         "rem.u32 %r11, 5, %r9; st.u32 [%rd0+20], %r11;\n"
         "mov.u32 %r12, -2147483648; div.s32 %r13, %r12, -1; st.u32 [%rd0+24], %r13;\n"
         "mul.hi.s32 %r14, %r12, 3; st.u32 [%rd0+28], %r14;\n"
         "mul.hi.u32 %r15, -1, -1; st.u32 [%rd0+32], %r15;\n"
         "mul.wide.s32 %rd2, %r3, 1000000000; st.u64 [%rd0+40], %rd2;\n"
         "mul.wide.u32 %rd3, -1, 2; st.u64 [%rd0+48], %rd3;\n"
         "mov.u64 %rd4, -1; mul.hi.u64 %rd5, %rd4, %rd4; st.u64 [%rd0+56], %rd5;\n"
         "mad.lo.s32 %r16, %r3, %r4, 100; st.u32 [%rd0+64], %r16;\n"
         "mad.wide.s32 %rd6, %r3, %r4, %rd4; st.u64 [%rd0+72], %rd6;\n"
         "mad.hi.u32 %r17, -1, -1, 5; st.u32 [%rd0+80], %r17;\n"
         "min.s32 %r18, %r3, %r4; st.u32 [%rd0+84], %r18;\n"
         "min.u32 %r19, %r3, %r4; st.u32 [%rd0+88], %r19;\n"
         "max.s32 %r20, %r3, %r4; st.u32 [%rd0+92], %r20;\n"
         "neg.s32 %r21, %r3; st.u32 [%rd0+96], %r21;\n"
         "abs.s32 %r22, %r3; st.u32 [%rd0+100], %r22;\n"
         "add.sat.s32 %r23, %r1, 5; st.u32 [%rd0+104], %r23;\n"
         "sub.sat.s32 %r24, %r12, 5; st.u32 [%rd0+108], %r24;\n"
         "sub.s64 %rd7, 0, 5; st.u64 [%rd0+112], %rd7;\n"
         "mul.lo.s16 %h1, 300, 300; cvt.u32.u16 %r25, %h1; st.u32 [%rd0+120], %r25;\n"
         "div.s64 %rd8, -9, 2; st.u64 [%rd0+128], %rd8;\n",
         1);
  assert_int_equal(s.o32[0], 0x80000000u);
  assert_int_equal((int32_t)s.o32[1], -2);
  assert_int_equal((int32_t)s.o32[2], -1);
  assert_int_equal((int32_t)s.o32[3], 1);
  assert_int_equal(s.o32[4], 0xffffffffu);
  assert_int_equal(s.o32[5], 5);
  assert_int_equal(s.o32[6], 0x80000000u);
  assert_int_equal((int32_t)s.o32[7], -2); /* (-2^31*3)>>32 */
  assert_int_equal(s.o32[8], 0xfffffffeu);
  assert_int_equal((int64_t)s.o64[5], -7000000000ll);
  assert_int_equal(s.o64[6], 0x1fffffffeull);
  assert_int_equal(s.o64[7], 0xfffffffffffffffeull);
  assert_int_equal((int32_t)s.o32[16], 79);
  assert_int_equal((int64_t)s.o64[9], -22);
  assert_int_equal(s.o32[20], 0xfffffffeu + 5);
  assert_int_equal((int32_t)s.o32[21], -7);
  assert_int_equal(s.o32[22], 3);
  assert_int_equal((int32_t)s.o32[23], 3);
  assert_int_equal((int32_t)s.o32[24], 7);
  assert_int_equal((int32_t)s.o32[25], 7);
  assert_int_equal((int32_t)s.o32[26], 2147483647);
  assert_int_equal(s.o32[27], 0x80000000u);
  assert_int_equal((int64_t)s.o64[14], -5);
  assert_int_equal(s.o32[30], (300 * 300) & 0xffff);
  assert_int_equal((int64_t)s.o64[16], -4);
  snip_done(&s);
}

static void test_bit_ops(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.u32 %r1, 0xf0f0; and.b32 %r2, %r1, 0xff; st.u32 [%rd0], %r2;\n"
         "or.b32 %r3, %r1, 0x0f; st.u32 [%rd0+4], %r3;\n"
         "xor.b32 %r4, %r1, 0xffff; st.u32 [%rd0+8], %r4;\n"
         "not.b32 %r5, %r1; st.u32 [%rd0+12], %r5;\n"
         "cnot.b32 %r6, %r1; st.u32 [%rd0+16], %r6;\n"
         "shl.b32 %r7, %r1, 32; st.u32 [%rd0+20], %r7;\n"
         "shr.u32 %r8, %r1, 40; st.u32 [%rd0+24], %r8;\n"
         "mov.u32 %r9, -16; shr.s32 %r10, %r9, 40; st.u32 [%rd0+28], %r10;\n"
         "shr.s32 %r11, %r9, 2; st.u32 [%rd0+32], %r11;\n"
         "popc.b32 %r12, %r1; st.u32 [%rd0+36], %r12;\n"
         "mov.u32 %r13, 0; clz.b32 %r14, %r13; st.u32 [%rd0+40], %r14;\n"
         "clz.b32 %r15, %r1; st.u32 [%rd0+44], %r15;\n"
         "brev.b32 %r16, 1; st.u32 [%rd0+48], %r16;\n"
         "mov.u32 %r17, 0x12345678; bfe.u32 %r18, %r17, 4, 8; st.u32 [%rd0+52], %r18;\n"
         "mov.u32 %r19, 0x00000f00; bfe.s32 %r20, %r19, 8, 4; st.u32 [%rd0+56], %r20;\n"
         "bfi.b32 %r21, 0xab, %r17, 8, 8; st.u32 [%rd0+60], %r21;\n"
         "mov.u32 %r22, 0x44332211; mov.u32 %r23, 0x88776655;\n"
         "prmt.b32 %r24, %r22, %r23, 0x7531; st.u32 [%rd0+64], %r24;\n"
         "prmt.b32 %r25, %r22, %r23, 0x0008; st.u32 [%rd0+68], %r25;\n"
         "prmt.b32.b4e %r26, %r22, %r23, 1; st.u32 [%rd0+72], %r26;\n"
         "bfind.u32 %r27, %r1; st.u32 [%rd0+76], %r27;\n"
         "bfind.u32 %r28, 0; st.u32 [%rd0+80], %r28;\n"
         "bfind.shiftamt.u32 %r29, %r1; st.u32 [%rd0+84], %r29;\n"
         "mov.u64 %rd2, 1; shl.b64 %rd3, %rd2, 63; st.u64 [%rd0+88], %rd3;\n"
         "shl.b64 %rd4, %rd2, 64; st.u64 [%rd0+96], %rd4;\n"
         "popc.b64 %r30, %rd3; st.u32 [%rd0+104], %r30;\n"
         "clz.b64 %r31, %rd3; st.u32 [%rd0+108], %r31;\n"
         "bfe.u32 %r32, %r17, 28, 8; st.u32 [%rd0+112], %r32;\n"
         "bfind.s32 %r33, -1; st.u32 [%rd0+116], %r33;\n"
         "add.cc.u32 %r34, -1, 2; addc.u32 %r35, 5, 0; st.v2.u32 [%rd0+120], {%r34, %r35};\n"
         "sub.cc.u32 %r36, 1, 2; subc.u32 %r37, 5, 0; st.v2.u32 [%rd0+128], {%r36, %r37};\n"
         "lop3.b32 %r38, 0xf0f0, 0xff00, 0xcccc, 0xe8; st.u32 [%rd0+136], %r38;\n" /* majority */
         "cvt.rn.f16x2.f32 %r39, 0f40000000, 0f3F800000; st.u32 [%rd0+140], %r39;\n"
         "bmsk.clamp.b32 %r34, 4, 8; bmsk.clamp.b32 %r35, 28, 40; st.v2.u32 [%rd0+144], {%r34, %r35};\n"
         "bmsk.wrap.b32 %r36, 4, 33; szext.clamp.s32 %r37, 0xf0, 8; st.v2.u32 [%rd0+152], {%r36, %r37};\n"
         "szext.wrap.u32 %r38, 0x1ff, 4; st.u32 [%rd0+160], %r38;\n"
         "add.u16x2 %r34, 0xffff0001, 0x00020003; min.s16x2 %r35, 0xffff0005, 0x00010004; st.v2.u32 [%rd0+168], {%r34, %r35};\n",
         1);
  assert_int_equal(s.o32[0], 0xf0);
  assert_int_equal(s.o32[1], 0xf0ff);
  assert_int_equal(s.o32[2], 0x0f0f);
  assert_int_equal(s.o32[3], ~0xf0f0u);
  assert_int_equal(s.o32[4], 0);
  assert_int_equal(s.o32[5], 0);
  assert_int_equal(s.o32[6], 0);
  assert_int_equal(s.o32[7], 0xffffffffu);
  assert_int_equal(s.o32[8], (uint32_t)-4);
  assert_int_equal(s.o32[9], 8);
  assert_int_equal(s.o32[10], 32);
  assert_int_equal(s.o32[11], 16);
  assert_int_equal(s.o32[12], 0x80000000u);
  assert_int_equal(s.o32[13], 0x67);
  assert_int_equal(s.o32[14], 0xffffffffu);
  assert_int_equal(s.o32[15], 0x1234ab78);
  assert_int_equal(s.o32[16], 0x88664422u);
  assert_int_equal(s.o32[17], 0x11111100u); /* byte 0 sign-replicated */
  assert_int_equal(s.o32[18], 0x77881122u); /* b4e, c=1: bytes 6 7 0 1 */
  assert_int_equal(s.o32[19], 15);
  assert_int_equal(s.o32[20], 0xffffffffu);
  assert_int_equal(s.o32[21], 16);
  assert_int_equal(s.o64[11], 0x8000000000000000ull);
  assert_int_equal(s.o64[12], 0);
  assert_int_equal(s.o32[26], 1);
  assert_int_equal(s.o32[27], 0);
  assert_int_equal(s.o32[28], 1);
  assert_int_equal(s.o32[29], 0xffffffffu);
  assert_int_equal(s.o32[30], 1);
  assert_int_equal(s.o32[31], 6);
  assert_int_equal(s.o32[32], 0xffffffffu);
  assert_int_equal(s.o32[33], 4);
  assert_int_equal(s.o32[34], (0xf0f0 & 0xff00) | (0xf0f0 & 0xcccc) | (0xff00 & 0xcccc));
  assert_int_equal(s.o32[35], 0x40003c00u);
  assert_int_equal(s.o32[36], 0xff0);
  assert_int_equal(s.o32[37], 0xf0000000u);
  assert_int_equal(s.o32[38], 0x10);
  assert_int_equal(s.o32[39], 0xfffffff0u);
  assert_int_equal(s.o32[40], 0xf);
  assert_int_equal(s.o32[42], 0x00010004u);
  assert_int_equal(s.o32[43], 0xffff0004u);
  snip_done(&s);
}

/* ------------------------------------------------------------ float */

static void test_float_arith(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.f32 %f1, 0f3F800000; mov.f32 %f2, 0f40400000;\n" /* 1, 3 */
         "div.rn.f32 %f3, %f1, %f2; st.f32 [%rd0], %f3;\n"
         "div.rz.f32 %f4, %f1, %f2; st.f32 [%rd0+4], %f4;\n"
         "div.rp.f32 %f5, %f1, %f2; st.f32 [%rd0+8], %f5;\n"
         "mov.f32 %f6, 0f00000000; div.rn.f32 %f7, %f1, %f6; st.f32 [%rd0+12], %f7;\n"
         "mov.f32 %f8, 0f7FC00000; min.f32 %f9, %f8, %f2; st.f32 [%rd0+16], %f9;\n"
         "max.f32 %f10, %f2, %f8; st.f32 [%rd0+20], %f10;\n"
         "max.NaN.f32 %f11, %f2, %f8; st.f32 [%rd0+24], %f11;\n"
         "neg.f32 %f12, %f6; st.f32 [%rd0+28], %f12;\n"
         "mov.f32 %f13, 0fC0000000; abs.f32 %f14, %f13; st.f32 [%rd0+32], %f14;\n"
         "fma.rn.f32 %f15, %f2, %f2, %f1; st.f32 [%rd0+36], %f15;\n"
         "add.sat.f32 %f16, %f2, %f1; st.f32 [%rd0+40], %f16;\n"
         "sqrt.rn.f32 %f17, %f2; st.f32 [%rd0+44], %f17;\n"
         "rcp.rn.f32 %f18, %f2; st.f32 [%rd0+48], %f18;\n"
         "mov.f32 %f19, 0f00000001; add.ftz.f32 %f20, %f19, %f6; st.f32 [%rd0+52], %f20;\n"
         "add.f32 %f21, %f19, %f6; st.f32 [%rd0+56], %f21;\n"
         "mov.f64 %fd1, 0d3FF0000000000000; mov.f64 %fd2, 0d4008000000000000;\n"
         "div.rn.f64 %fd3, %fd1, %fd2; st.f64 [%rd0+64], %fd3;\n"
         "fma.rn.f64 %fd4, %fd2, %fd2, %fd1; st.f64 [%rd0+72], %fd4;\n"
         "sqrt.rn.f64 %fd5, %fd2; st.f64 [%rd0+80], %fd5;\n"
         "ex2.approx.f32 %f22, %f2; st.f32 [%rd0+88], %f22;\n"
         "lg2.approx.f32 %f23, %f2; st.f32 [%rd0+92], %f23;\n"
         "mul.rz.f32 %f24, %f3, %f2; st.f32 [%rd0+96], %f24;\n"
         "mul.rp.f32 %f32, %f3, %f2; st.f32 [%rd0+128], %f32;\n"
         "sub.f32 %f25, %f1, %f2; st.f32 [%rd0+100], %f25;\n"
         "min.f32 %f26, %f6, %f12; st.f32 [%rd0+104], %f26;\n"
         "copysign.f32 %f27, %f13, %f2; st.f32 [%rd0+108], %f27;\n"
         "rsqrt.approx.f32 %f28, %f2; st.f32 [%rd0+112], %f28;\n"
         "tanh.approx.f32 %f29, %f1; st.f32 [%rd0+116], %f29;\n"
         "sin.approx.f32 %f30, %f1; st.f32 [%rd0+120], %f30;\n"
         "cos.approx.f32 %f31, %f1; st.f32 [%rd0+124], %f31;\n",
         1);
  assert_true(s.of[0] == 1.0f / 3.0f);
  assert_int_equal(fbits(s.of[1]), fbits(1.0f / 3.0f) - 1); /* 1/3 rounds up under rn */
  assert_int_equal(fbits(s.of[2]), fbits(1.0f / 3.0f));
  assert_true(isinf(s.of[3]) && s.of[3] > 0);
  assert_true(s.of[4] == 3.0f);
  assert_true(s.of[5] == 3.0f);
  assert_true(isnan(s.of[6]));
  assert_true(s.of[7] == 0.0f && signbit(s.of[7]));
  assert_true(s.of[8] == 2.0f);
  assert_true(s.of[9] == 10.0f);
  assert_true(s.of[10] == 1.0f);
  assert_true(s.of[11] == sqrtf(3.0f));
  assert_true(s.of[12] == 1.0f / 3.0f);
  assert_true(s.of[13] == 0.0f);
  assert_true(s.of[14] > 0.0f);
  assert_true(s.od[8] == 1.0 / 3.0);
  assert_true(s.od[9] == 10.0);
  assert_true(s.od[10] == sqrt(3.0));
  assert_float_equal(s.of[22], 8.0f, 1e-5);
  assert_float_equal(s.of[23], log2f(3.0f), 1e-6);
  assert_true(s.of[24] == 1.0f); /* 1.00000003 truncated */
  assert_true(s.of[32] > 1.0f);
  assert_true(s.of[25] == -2.0f);
  assert_true(s.of[26] == 0.0f && signbit(s.of[26]));
  assert_true(s.of[27] == -3.0f);
  assert_float_equal(s.of[28], 1.0f / sqrtf(3.0f), 1e-6);
  assert_float_equal(s.of[29], tanhf(1.0f), 1e-5);
  assert_float_equal(s.of[30], sinf(1.0f), 1e-6);
  assert_float_equal(s.of[31], cosf(1.0f), 1e-6);
  snip_done(&s);
}

static void test_cvt(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.f32 %f1, 0f501502F9; cvt.rzi.s32.f32 %r1, %f1; st.u32 [%rd0], %r1;\n" /* 1e10 */
         "mov.f32 %f2, 0f7FC00000; cvt.rzi.s32.f32 %r2, %f2; st.u32 [%rd0+4], %r2;\n"
         "mov.f32 %f3, 0f40200000; cvt.rni.s32.f32 %r3, %f3; st.u32 [%rd0+8], %r3;\n" /* 2.5 */
         "mov.f32 %f4, 0fBFC00000; cvt.rmi.s32.f32 %r4, %f4; st.u32 [%rd0+12], %r4;\n" /* -1.5 */
         "cvt.rpi.s32.f32 %r5, %f4; st.u32 [%rd0+16], %r5;\n"
         "cvt.rzi.u32.f32 %r6, %f4; st.u32 [%rd0+20], %r6;\n"
         "mov.u32 %r7, 300; cvt.sat.u8.s32 %r8, %r7; st.u32 [%rd0+24], %r8;\n"
         "cvt.s8.s32 %r9, %r7; st.u32 [%rd0+28], %r9;\n"
         "mov.u32 %r10, -5; cvt.sat.u32.s32 %r11, %r10; st.u32 [%rd0+32], %r11;\n"
         "cvt.s64.s32 %rd2, %r10; st.u64 [%rd0+40], %rd2;\n"
         "cvt.u64.u32 %rd3, %r10; st.u64 [%rd0+48], %rd3;\n"
         "mov.f32 %f5, 0f3FC00000; cvt.rn.f16.f32 %h1, %f5; cvt.u32.u16 %r12, %h1; st.u32 [%rd0+56], %r12;\n"
         "cvt.f32.f16 %f6, %h1; st.f32 [%rd0+60], %f6;\n"
         "mov.f32 %f7, 0f477FF000; cvt.rn.f16.f32 %h2, %f7; cvt.u32.u16 %r13, %h2; st.u32 [%rd0+64], %r13;\n" /* 65520 -> inf */
         "cvt.rn.bf16.f32 %h3, %f5; cvt.u32.u16 %r14, %h3; st.u32 [%rd0+68], %r14;\n"
         "cvt.f32.bf16 %f8, %h3; st.f32 [%rd0+72], %f8;\n"
         "mov.f64 %fd1, 0d3FB999999999999A; cvt.rz.f32.f64 %f9, %fd1; st.f32 [%rd0+76], %f9;\n" /* 0.1 */
         "cvt.rn.f32.f64 %f10, %fd1; st.f32 [%rd0+80], %f10;\n"
         "cvt.sat.f32.f32 %f11, %f5; st.f32 [%rd0+84], %f11;\n"
         "mov.u64 %rd4, -1; cvt.rn.f32.u64 %f12, %rd4; st.f32 [%rd0+88], %f12;\n"
         "cvt.rn.f64.s32 %fd2, %r10; st.f64 [%rd0+96], %fd2;\n"
         "cvt.f64.f32 %fd3, %f5; st.f64 [%rd0+104], %fd3;\n"
         "cvt.rni.f32.f32 %f13, %f3; st.f32 [%rd0+112], %f13;\n"
         "cvt.rzi.s64.f64 %rd5, %fd2; st.u64 [%rd0+120], %rd5;\n"
         "mov.f32 %f14, 0fCF000000; cvt.rzi.s32.f32 %r15, %f14; st.u32 [%rd0+128], %r15;\n" /* -2^31 */
         "mov.f32 %f15, 0fD0000000; cvt.rzi.s32.f32 %r16, %f15; st.u32 [%rd0+132], %r16;\n" /* -2^33 */
         "cvt.u16.u32 %h4, %r7; cvt.s32.s16 %r17, %h4; st.u32 [%rd0+136], %r17;\n"
         "mov.u32 %r18, 0x1ffff; cvt.u16.u32 %h5, %r18; cvt.s32.s16 %r19, %h5; st.u32 [%rd0+140], %r19;\n"
         "cvt.rn.f16.f64 %h6, %fd1; cvt.f64.f16 %fd4, %h6; st.f64 [%rd0+144], %fd4;\n"
         "mov.f32 %f16, 0f3F801000; cvt.rz.f16.f32 %h7, %f16; cvt.rp.f16.f32 %h8, %f16; cvt.rn.f16.f32 %h9, %f16;\n" /* 1 + 2^-11 */
         "mov.b32 %r20, {%h7, %h8}; st.u32 [%rd0+152], %r20; cvt.u32.u16 %r21, %h9; st.u32 [%rd0+156], %r21;\n"
         "mov.f32 %f17, 0fC77FF000; cvt.rz.f16.f32 %h10, %f17; cvt.rm.f16.f32 %h11, %f17; mov.b32 %r22, {%h10, %h11}; st.u32 [%rd0+160], %r22;\n"
         "mov.f32 %f18, 0f3F808000; cvt.rz.bf16.f32 %h12, %f18; cvt.rp.bf16.f32 %h13, %f18; mov.b32 %r23, {%h12, %h13}; st.u32 [%rd0+164], %r23;\n",
         1);
  assert_int_equal(s.o32[0], 2147483647);
  assert_int_equal(s.o32[1], 0);
  assert_int_equal(s.o32[2], 2);
  assert_int_equal((int32_t)s.o32[3], -2);
  assert_int_equal((int32_t)s.o32[4], -1);
  assert_int_equal(s.o32[5], 0);
  assert_int_equal(s.o32[6], 255);
  assert_int_equal(s.o32[7] & 0xff, 44);
  assert_int_equal(s.o32[8], 0);
  assert_int_equal((int64_t)s.o64[5], -5);
  assert_int_equal(s.o64[6], 0xfffffffbull);
  assert_int_equal(s.o32[14], 0x3e00);
  assert_true(s.of[15] == 1.5f);
  assert_int_equal(s.o32[16], 0x7c00);
  assert_int_equal(s.o32[17], 0x3fc0);
  assert_true(s.of[18] == 1.5f);
  assert_true(s.of[19] < 0.1f && s.of[20] == 0.1f);
  assert_true(s.of[21] == 1.0f);
  assert_true(s.of[22] == 18446744073709551616.0f);
  assert_true(s.od[12] == -5.0);
  assert_true(s.od[13] == 1.5);
  assert_true(s.of[28] == 2.0f);
  assert_int_equal((int64_t)s.o64[15], -5);
  assert_int_equal(s.o32[32], 0x80000000u);
  assert_int_equal(s.o32[33], 0x80000000u);
  assert_int_equal(s.o32[34], 300);
  assert_int_equal((int32_t)s.o32[35], -1);
  assert_float_equal(s.od[18], 0.1, 1e-4);
  /* 0x3F801000 = 1 + 2^-11: exactly halfway between halves 0x3c00 and 0x3c01 */
  assert_int_equal(s.o32[38], 0x3c013c00u);
  assert_int_equal(s.o32[39], 0x3c00);
  assert_int_equal(s.o32[40], 0xfc00fbffu); /* -65520: rz -> -max, rm -> -inf */
  assert_int_equal(s.o32[41], 0x3f813f80u);
  snip_done(&s);
}

/* ------------------------------------------------------------ setp, selp, predicates */

static void test_setp(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.f32 %f1, 0f7FC00000; mov.f32 %f2, 0f3F800000;\n"
         "setp.lt.f32 %p1, %f1, %f2; selp.u32 %r1, 1, 0, %p1; st.u32 [%rd0], %r1;\n"
         "setp.ltu.f32 %p2, %f1, %f2; selp.u32 %r2, 1, 0, %p2; st.u32 [%rd0+4], %r2;\n"
         "setp.ne.f32 %p3, %f1, %f2; selp.u32 %r3, 1, 0, %p3; st.u32 [%rd0+8], %r3;\n"
         "setp.neu.f32 %p4, %f1, %f2; selp.u32 %r4, 1, 0, %p4; st.u32 [%rd0+12], %r4;\n"
         "setp.nan.f32 %p5, %f1, %f2; selp.u32 %r5, 1, 0, %p5; st.u32 [%rd0+16], %r5;\n"
         "setp.num.f32 %p6, %f2, %f2; selp.u32 %r6, 1, 0, %p6; st.u32 [%rd0+20], %r6;\n"
         "mov.u32 %r7, -1; setp.lt.s32 %p7, %r7, 0; selp.u32 %r8, 1, 0, %p7; st.u32 [%rd0+24], %r8;\n"
         "setp.lo.u32 %p8, %r7, 0; selp.u32 %r9, 1, 0, %p8; st.u32 [%rd0+28], %r9;\n"
         "setp.hi.u32 %p9, %r7, 0; selp.u32 %r10, 1, 0, %p9; st.u32 [%rd0+32], %r10;\n"
         "setp.lt.u32 %p9, %r7, 0; selp.u32 %r11, 1, 0, %p9; st.u32 [%rd0+36], %r11;\n"
         "setp.eq.s32.and %p10|%p11, %r7, -1, %p7; selp.u32 %r12, 1, 0, %p10; st.u32 [%rd0+40], %r12;\n"
         "selp.u32 %r13, 1, 0, %p11; st.u32 [%rd0+44], %r13;\n"
         "setp.gt.s32.or %p12, %r7, 5, !%p7; selp.u32 %r14, 1, 0, %p12; st.u32 [%rd0+48], %r14;\n"
         "not.pred %p13, %p12; @%p13 st.u32 [%rd0+52], 7;\n"
         "@!%p13 st.u32 [%rd0+56], 9;\n"
         "and.pred %p14, %p7, %p10; selp.u32 %r15, 1, 0, %p14; st.u32 [%rd0+60], %r15;\n"
         "or.pred %p15, %p1, %p12; selp.u32 %r16, 1, 0, %p15; st.u32 [%rd0+64], %r16;\n"
         "xor.pred %p15, %p7, %p10; selp.u32 %r17, 1, 0, %p15; st.u32 [%rd0+68], %r17;\n"
         "selp.f32 %f3, %f2, %f1, %p7; st.f32 [%rd0+72], %f3;\n"
         "set.lt.u32.s32 %r18, %r7, 0; st.u32 [%rd0+76], %r18;\n"
         "setp.ge.f64 %p1, 0d4000000000000000, 0d3FF0000000000000; selp.u32 %r19, 1, 0, %p1; st.u32 [%rd0+80], %r19;\n"
         "mov.u64 %rd2, -1; setp.gt.s64 %p2, %rd2, 0; selp.u32 %r20, 1, 0, %p2; st.u32 [%rd0+84], %r20;\n"
         "setp.gt.u64 %p2, %rd2, 0; selp.u32 %r21, 1, 0, %p2; st.u32 [%rd0+88], %r21;\n",
         1);
  static const uint32_t want[] = {0, 1, 0, 1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 7, 0, 1, 0, 0, 0x3f800000u, 0xffffffffu, 1, 0, 1};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    if (s.o32[i] != want[i]) fail_msg("word %zu: got 0x%x want 0x%x", i, s.o32[i], want[i]);
  }
  snip_done(&s);
}

/* ------------------------------------------------------------ control flow */

static void test_divergence(void **state) {
  snip s;
  snip_init(&s);
  /* each lane loops tid times (divergent trip counts), odd lanes take a
   * different path, and all reconverge for a warp vote afterwards */
  RUN_OK(&s,
         "mov.u32 %r1, %tid.x; mov.u32 %r2, 0; mov.u32 %r3, 0;\n"
         "LOOP: setp.ge.u32 %p1, %r3, %r1; @%p1 bra DONE;\n"
         "add.u32 %r2, %r2, %r3; add.u32 %r3, %r3, 1; bra LOOP;\n"
         "DONE: and.b32 %r4, %r1, 1; setp.eq.u32 %p2, %r4, 1; @%p2 bra ODD;\n"
         "add.u32 %r2, %r2, 1000; bra JOIN;\n"
         "ODD: add.u32 %r2, %r2, 2000;\n"
         "JOIN: activemask.b32 %r5;\n"
         "mul.wide.u32 %rd2, %r1, 8; add.s64 %rd3, %rd0, %rd2; st.v2.u32 [%rd3], {%r2, %r5};\n",
         32);
  for (unsigned t = 0; t < 32; t++) {
    unsigned sum = t * (t - 1) / 2 + (t ? 0 : 0);
    if (t == 0) sum = 0;
    assert_int_equal(s.o32[2 * t], sum + ((t & 1) ? 2000 : 1000));
    assert_int_equal(s.o32[2 * t + 1], 0xffffffffu);
  }
  snip_done(&s);
}

static void test_barrier_exit(void **state) {
  snip s;
  snip_init(&s);
  /* 96 threads; threads >= 80 exit early; the rest meet at a barrier in a
   * loop and read what their neighbour wrote in shared memory */
  const char *body =
      ".shared .align 4 .b32 sh[128];\n"
      "mov.u32 %r1, %tid.x; setp.ge.u32 %p1, %r1, 80; @%p1 exit;\n"
      "mov.u32 %r9, 0; mov.u32 %r2, 0;\n"
      "L: shl.b32 %r3, %r1, 2; mov.u32 %r4, sh; add.u32 %r5, %r4, %r3;\n"
      "add.u32 %r6, %r1, %r9; st.shared.u32 [%r5], %r6; bar.sync 0;\n"
      "add.u32 %r7, %r1, 1; rem.u32 %r7, %r7, 80; shl.b32 %r7, %r7, 2; add.u32 %r7, %r4, %r7;\n"
      "ld.shared.u32 %r8, [%r7]; add.u32 %r2, %r2, %r8; barrier.sync 0;\n"
      "add.u32 %r9, %r9, 1; setp.lt.u32 %p2, %r9, 3; @%p2 bra L;\n"
      "mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd0, %rd2; st.u32 [%rd3], %r2;\n";
  int rc = snip_run_cfg(&s, body, 1, 96, 0);
  if (rc) fail_msg("%d %s %s", rc, s.err, s.fault.message);
  for (unsigned t = 0; t < 80; t++) {
    unsigned nb = (t + 1) % 80;
    assert_int_equal(s.o32[t], 3 * nb + 0 + 1 + 2);
  }
  assert_int_equal(s.o32[80], 0);
  snip_done(&s);
}

static void test_call_ret(void **state) {
  const char *text = HDR
      ".func (.param .b32 ret) twice(.param .b32 x, .param .b32 y)\n{\n.reg .b32 %a<4>;\n"
      "ld.param.b32 %a1, [x]; ld.param.b32 %a2, [y]; shl.b32 %a1, %a1, 1; add.s32 %a3, %a1, %a2;\n"
      "setp.gt.s32 %p, %a3, 100;\n"
      "@%p bra BIG; st.param.b32 [ret], %a3; ret;\nBIG: st.param.b32 [ret], 100; ret;\n}\n"
      ".visible .entry k(.param .u64 out)\n{\n.reg .b32 %r<5>; .reg .b64 %rd<4>;\n"
      "ld.param.u64 %rd0, [out]; mov.u32 %r1, %tid.x;\n"
      "{ .param .b32 p0; st.param.b32 [p0], %r1; .param .b32 p1; st.param.b32 [p1], 7; .param .b32 rv;\n"
      "call.uni (rv), twice, (p0, p1); ld.param.b32 %r2, [rv]; }\n"
      "mul.wide.u32 %rd1, %r1, 4; add.s64 %rd2, %rd0, %rd1; st.global.u32 [%rd2], %r2; ret;\n}\n";
  /* %p is declared nowhere: must be a parse error naming it */
  sg_ptx_module *m = NULL;
  char err[256];
  assert_int_equal(sg_ptx_module_parse(text, strlen(text), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  assert_non_null(strstr(err, "%p"));
  /* now with the predicate declared */
  char fixed[4096];
  const char *at = strstr(text, ".reg .b32 %a<4>;");
  size_t pre = (size_t)(at - text) + strlen(".reg .b32 %a<4>;");
  snprintf(fixed, sizeof fixed, "%.*s .reg .pred %%p;%s", (int)pre, text, text + pre);
  assert_int_equal(sg_ptx_module_parse(fixed, strlen(fixed), &m, err, sizeof err), 0);
  testenv te;
  te_init(&te, 1);
  uint64_t out = te_alloc(&te, 64 * 4);
  const sg_ptx_kernel *k = sg_ptx_module_find_kernel(m, "k");
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &out, 8);
  sg_ptx_fault f;
  assert_int_equal(te_launch(&te, k, 1, 1, 1, 64, 1, 1, 0, &p, &f), 0);
  uint32_t *o = te_host(&te, out);
  for (int t = 0; t < 64; t++) assert_int_equal(o[t], 2 * t + 7 > 100 ? 100 : 2 * t + 7);
  te_free(&te);
  sg_ptx_module_free(m);
}

/* g(x) = 3x+1; f(x) = g(x) * 2 + x, keeping x live across the call; the
 * kernel calls f on odd lanes and g on even lanes (divergent lanes in
 * different functions at once), then both again, keeping values live. */
static void test_call_frames(void **state) {
  const char *text = HDR
      ".func (.param .b32 r) g(.param .b32 x)\n{\n.reg .b32 %a<4>;\n.local .align 4 .b8 dg[8];\n"
      "ld.param.b32 %a1, [x]; st.local.u32 [dg+4], %a1; mul.lo.s32 %a2, %a1, 3; add.s32 %a2, %a2, 1;\n"
      "ld.local.u32 %a3, [dg+4]; sub.s32 %a3, %a3, %a1; add.s32 %a2, %a2, %a3; st.param.b32 [r], %a2; ret;\n}\n"
      ".func (.param .b32 r) f(.param .b32 x)\n{\n.reg .b32 %b<5>;\n"
      "ld.param.b32 %b1, [x]; add.s32 %b2, %b1, 0;\n"
      "{ .param .b32 p0; st.param.b32 [p0], %b1; .param .b32 rv; call (rv), g, (p0); ld.param.b32 %b3, [rv]; }\n"
      "shl.b32 %b3, %b3, 1; add.s32 %b4, %b3, %b2; st.param.b32 [r], %b4; ret;\n}\n"
      ".visible .entry k(.param .u64 out)\n{\n.reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<2>;\n"
      "ld.param.u64 %rd0, [out]; mov.u32 %r1, %tid.x; and.b32 %r2, %r1, 1; setp.eq.u32 %p1, %r2, 1;\n"
      "@%p1 bra ODD;\n"
      "{ .param .b32 p0; st.param.b32 [p0], %r1; .param .b32 rv; call (rv), g, (p0); ld.param.b32 %r3, [rv]; }\n"
      "bra J;\n"
      "ODD: { .param .b32 p0; st.param.b32 [p0], %r1; .param .b32 rv; call (rv), f, (p0); ld.param.b32 %r3, [rv]; }\n"
      "J: { .param .b32 p0; st.param.b32 [p0], %r3; .param .b32 rv; call (rv), f, (p0); ld.param.b32 %r4, [rv]; }\n"
      "add.s32 %r5, %r4, %r1;\n"
      "mul.wide.u32 %rd1, %r1, 4; add.s64 %rd2, %rd0, %rd1; st.global.u32 [%rd2], %r5; ret;\n}\n";
  sg_ptx_module *m;
  char err[256];
  int rc = sg_ptx_module_parse(text, strlen(text), &m, err, sizeof err);
  if (rc) fail_msg("%s", err);
  testenv te;
  te_init(&te, 1);
  uint64_t out = te_alloc(&te, 64 * 4);
  const sg_ptx_kernel *k = sg_ptx_module_find_kernel(m, "k");
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &out, 8);
  sg_ptx_fault f;
  rc = te_launch(&te, k, 1, 1, 1, 64, 1, 1, 0, &p, &f);
  if (rc) fail_msg("%s", f.message);
  int32_t *o = te_host(&te, out);
  for (int t = 0; t < 64; t++) {
    int g1 = 3 * t + 1, first = (t & 1) ? (2 * g1 + t) : g1;
    int second = 2 * (3 * first + 1) + first;
    assert_int_equal(o[t], second + t);
  }
  te_free(&te);
  sg_ptx_module_free(m);
  (void)state;
}

/* ------------------------------------------------------------ memory */

static void test_memory_spaces(void **state) {
  snip s;
  snip_init(&s);
  uint32_t *in = s.inh;
  for (int i = 0; i < 16; i++) in[i] = 100 + i;
  RUN_OK(&s,
         ".local .align 16 .b8 dep[64];\n"
         ".shared .align 16 .b8 sm[64];\n"
         "ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1];\n"
         "mov.u64 %rd2, dep; st.local.v4.u32 [%rd2], {%r4, %r3, %r2, %r1};\n"
         "cvta.local.u64 %rd3, %rd2; ld.u32 %r5, [%rd3+4]; st.u32 [%rd0], %r5;\n"
         "mov.u64 %rd4, sm; cvta.shared.u64 %rd5, %rd4; st.v2.u32 [%rd5+8], {%r1, %r2};\n"
         "ld.shared.u32 %r6, [sm+12]; st.u32 [%rd0+4], %r6;\n"
         "cvta.to.shared.u64 %rd6, %rd5; ld.shared.u32 %r7, [%rd6+8]; st.u32 [%rd0+8], %r7;\n"
         "ld.global.nc.u8 %r8, [%rd1+5]; st.u32 [%rd0+12], %r8;\n"
         "ld.global.s8 %r9, [%rd1+3]; st.u32 [%rd0+16], %r9;\n" /* byte 0 of in[0] is 100, byte 3 is 0 */
         "mov.u32 %r10, 0xff80; st.global.u16 [%rd1+32], %r10; ld.global.s16 %r11, [%rd1+32]; st.u32 [%rd0+20], %r11;\n"
         "ldu.global.u32 %r12, [%rd1+8]; st.u32 [%rd0+24], %r12;\n"
         "cvta.to.global.u64 %rd7, %rd0; st.global.v2.f32 [%rd7+32], {%f1, %f1};\n"
         "ld.local.u32 %r13, [dep+12]; st.u32 [%rd0+28], %r13;\n",
         1);
  assert_int_equal(s.o32[0], 102);
  assert_int_equal(s.o32[1], 101);
  assert_int_equal(s.o32[2], 100);
  assert_int_equal(s.o32[3], 0);
  assert_int_equal(s.o32[4], 0);
  assert_int_equal((int32_t)s.o32[5], -128);
  assert_int_equal(s.o32[6], 102);
  assert_int_equal(s.o32[7], 100);
  snip_done(&s);
}

static void test_atomics(void **state) {
  snip s;
  snip_init(&s);
  /* 64 threads hammer shared and global words */
  RUN_OK(&s,
         ".shared .align 8 .b8 sa[64];\n"
         "mov.u32 %r1, %tid.x; mov.u64 %rd2, sa;\n"
         "setp.eq.u32 %p1, %r1, 0; @%p1 st.shared.u32 [sa+8], 1000; @%p1 st.shared.u32 [sa+12], 0; bar.sync 0;\n"
         "atom.shared.add.u32 %r2, [sa], 1;\n"
         "atom.shared.min.s32 %r3, [sa+8], %r1;\n"
         "atom.shared.max.u32 %r4, [sa+12], %r1;\n"
         "atom.shared.inc.u32 %r5, [sa+16], 9;\n"
         "atom.shared.dec.u32 %r6, [sa+20], 5;\n"
         "shl.b32 %r7, 1, %r1; atom.shared.or.b32 %r8, [sa+24], %r7;\n"
         "atom.shared.xor.b32 %r9, [sa+28], %r7;\n"
         "red.global.add.f32 [%rd0+64], 0f3F000000;\n"
         "atom.global.add.u64 %rd3, [%rd0+72], 3;\n"
         "atom.global.cas.b32 %r10, [%rd0+80], %r1, 1000;\n" /* succeeds for thread 0 only... then chain */
         "atom.global.exch.b32 %r11, [%rd0+84], %r1;\n"
         "red.global.and.b32 [%rd0+88], 0;\n"
         "atom.global.max.s32 %r12, [%rd0+92], %r1;\n"
         "atom.add.f64 %fd1, [%rd0+96], 0d3FF0000000000000;\n"
         "bar.sync 0;\n"
         "@%p1 ld.shared.v4.u32 {%r20, %r21, %r22, %r23}, [sa];\n"
         "@%p1 st.v4.u32 [%rd0], {%r20, %r21, %r22, %r23};\n"
         "@%p1 ld.shared.v4.u32 {%r20, %r21, %r22, %r23}, [sa+16];\n"
         "@%p1 st.v4.u32 [%rd0+16], {%r20, %r21, %r22, %r23};\n",
         64);
  assert_int_equal(s.o32[0], 64);
  assert_int_equal(s.o32[2], 0);
  assert_int_equal(s.o32[3], 63);
  assert_int_equal(s.o32[4], 64 % 10);
  /* dec from 0 with bound 5: 0->5->4->...; after 64 steps: cycle of 6 */
  {
    uint32_t v = 0;
    for (int i = 0; i < 64; i++) v = (v == 0 || v > 5) ? 5 : v - 1;
    assert_int_equal(s.o32[5], v);
  }
  assert_int_equal(s.o32[6], 0xffffffffu);
  assert_int_equal(s.o32[7], 0xffffffffu); /* shl by >= 32 gives 0 for threads 32..63 */
  assert_true(s.of[16] == 32.0f);
  assert_int_equal(s.o64[9], 192);
  assert_int_equal(s.o32[20], 1000);
  assert_true(s.o32[21] < 64);
  assert_int_equal(s.o32[22], 0);
  assert_int_equal(s.o32[23], 63);
  assert_true(s.od[12] == 64.0);
  snip_done(&s);
}

/* ------------------------------------------------------------ warp */

static void test_shfl_vote(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.u32 %r1, %laneid; mul.lo.u32 %r2, %r1, 10;\n"
         "shfl.sync.idx.b32 %r3|%p1, %r2, 5, 0x1f, -1;\n"
         "shfl.sync.up.b32 %r4|%p2, %r2, 3, 0, -1; selp.u32 %r5, 1, 0, %p2;\n"
         "shfl.sync.down.b32 %r6|%p3, %r2, 4, 0x1f, -1; selp.u32 %r7, 1, 0, %p3;\n"
         "shfl.sync.bfly.b32 %r8, %r2, 3, 0x1f, -1;\n"
         "shfl.sync.down.b32 %r9, %r2, 1, 0x181f, -1;\n" /* width 8 segments: c = ((32-8)<<8)|0x1f */
         "setp.lt.u32 %p4, %r1, 20; vote.sync.ballot.b32 %r10, %p4, -1;\n"
         "vote.sync.all.pred %p5, %p4, -1; selp.u32 %r11, 1, 0, %p5;\n"
         "vote.sync.any.pred %p6, %p4, -1; selp.u32 %r12, 1, 0, %p6;\n"
         "vote.sync.uni.pred %p7, %p4, -1; selp.u32 %r13, 1, 0, %p7;\n"
         "and.b32 %r14, %r1, 1; match.all.sync.b32 %r15|%p8, %r14, -1; selp.u32 %r16, 1, 0, %p8;\n"
         "match.any.sync.b32 %r17, %r14, -1;\n"
         "mov.u32 %r18, %lanemask_lt;\n"
         "redux.sync.add.u32 %r19, %r1, -1; redux.sync.max.s32 %r20, %r2, 0x0000ffff; redux.sync.or.b32 %r21, %r1, -1;\n"
         "st.v4.u32 [%rd0+2048], {%r19, %r20, %r21, %r1};\n"
         "mul.wide.u32 %rd2, %r1, 64; add.s64 %rd3, %rd0, %rd2;\n"
         "st.v4.u32 [%rd3], {%r3, %r4, %r5, %r6};\n"
         "st.v4.u32 [%rd3+16], {%r7, %r8, %r9, %r10};\n"
         "st.v4.u32 [%rd3+32], {%r11, %r12, %r13, %r15};\n"
         "st.v4.u32 [%rd3+48], {%r16, %r17, %r18, %r1};\n",
         32);
  for (unsigned l = 0; l < 32; l++) {
    const uint32_t *o = s.o32 + l * 16;
    assert_int_equal(o[0], 50);
    assert_int_equal(o[1], l >= 3 ? (l - 3) * 10 : l * 10);
    assert_int_equal(o[2], l >= 3);
    assert_int_equal(o[3], l + 4 < 32 ? (l + 4) * 10 : l * 10);
    assert_int_equal(o[4], l + 4 < 32);
    assert_int_equal(o[5], (l ^ 3) * 10);
    unsigned seg_end = (l | 7);
    assert_int_equal(o[6], l + 1 <= seg_end ? (l + 1) * 10 : l * 10);
    assert_int_equal(o[7], 0xfffffu);
    assert_int_equal(o[8], 0);
    assert_int_equal(o[9], 1);
    assert_int_equal(o[10], 0);
    assert_int_equal(o[11], 0);
    assert_int_equal(o[12], 0);
    assert_int_equal(o[13], (l & 1) ? 0xaaaaaaaau : 0x55555555u);
    assert_int_equal(o[14], (1u << l) - 1);
  }
  assert_int_equal(s.o32[512], 31 * 32 / 2);
  assert_int_equal(s.o32[513], 150); /* lanes 0..15: max of 10*lane */
  assert_int_equal(s.o32[514], 31);
  snip_done(&s);
}

static void test_bar_red(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.u32 %r1, %tid.x; and.b32 %r2, %r1, 3; setp.eq.u32 %p1, %r2, 0;\n"
         "bar.red.popc.u32 %r3, 0, %p1;\n"
         "bar.red.or.pred %p2, 0, %p1; selp.u32 %r4, 1, 0, %p2;\n"
         "bar.red.and.pred %p3, 0, %p1; selp.u32 %r5, 1, 0, %p3;\n"
         "mul.wide.u32 %rd2, %r1, 16; add.s64 %rd3, %rd0, %rd2; st.v4.u32 [%rd3], {%r3, %r4, %r5, %r1};\n",
         100);
  for (int t = 0; t < 100; t++) {
    assert_int_equal(s.o32[4 * t], 25);
    assert_int_equal(s.o32[4 * t + 1], 1);
    assert_int_equal(s.o32[4 * t + 2], 0);
  }
  snip_done(&s);
}

static void test_f16_ops(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.f32 %f1, 0f3FC00000; mov.f32 %f2, 0f40200000;\n" /* 1.5, 2.5 */
         "cvt.rn.f16.f32 %h1, %f1; cvt.rn.f16.f32 %h2, %f2;\n"
         "add.f16 %h3, %h1, %h2; mul.f16 %h4, %h1, %h2; fma.rn.f16 %h5, %h1, %h2, %h1; sub.f16 %h6, %h1, %h2;\n"
         "neg.f16 %h7, %h1; max.f16 %h8, %h1, %h2;\n"
         "mov.b32 %r1, {%h1, %h2}; add.f16x2 %r2, %r1, %r1; mul.f16x2 %r3, %r1, %r1;\n"
         "mov.b32 {%h9, %h10}, %r2;\n"
         "cvt.f32.f16 %f3, %h3; cvt.f32.f16 %f4, %h4; cvt.f32.f16 %f5, %h5; cvt.f32.f16 %f6, %h6;\n"
         "cvt.f32.f16 %f7, %h7; cvt.f32.f16 %f8, %h8; cvt.f32.f16 %f9, %h9; cvt.f32.f16 %f10, %h10;\n"
         "st.v4.f32 [%rd0], {%f3, %f4, %f5, %f6}; st.v4.f32 [%rd0+16], {%f7, %f8, %f9, %f10};\n"
         "st.u32 [%rd0+32], %r3;\n"
         "cvt.rn.bf16.f32 %h11, %f1; cvt.rn.bf16.f32 %h12, %f2; add.bf16 %h13, %h11, %h12;\n"
         "cvt.f32.bf16 %f11, %h13; st.f32 [%rd0+36], %f11;\n"
         "mov.b16 %h14, 0x3c00; cvt.f32.f16 %f12, %h14; st.f32 [%rd0+40], %f12;\n"
         "setp.lt.f16 %p1, %h1, %h2; selp.u32 %r4, 1, 0, %p1; st.u32 [%rd0+44], %r4;\n",
         1);
  assert_true(s.of[0] == 4.0f);
  assert_true(s.of[1] == 3.75f);
  assert_true(s.of[2] == 5.25f);
  assert_true(s.of[3] == -1.0f);
  assert_true(s.of[4] == -1.5f);
  assert_true(s.of[5] == 2.5f);
  assert_true(s.of[6] == 3.0f);
  assert_true(s.of[7] == 5.0f);
  /* 1.5^2 = 2.25 (0x4080), 2.5^2 = 6.25 (0x4640) */
  assert_int_equal(s.o32[8], 0x46404080u);
  assert_true(s.of[9] == 4.0f);
  assert_true(s.of[10] == 1.0f);
  assert_int_equal(s.o32[11], 1);
  snip_done(&s);
}

static void test_half_conversion_rounding(void **state) {
  /* ties to even at 1 + 2^-11 (exactly between 1 and the next half) */
  assert_int_equal(sg_double_to_half(1.0 + 1.0 / 2048.0), 0x3c00);
  assert_int_equal(sg_double_to_half(1.0 + 3.0 / 2048.0), 0x3c02);
  assert_int_equal(sg_double_to_half(65504.0), 0x7bff);
  assert_int_equal(sg_double_to_half(65519.0), 0x7bff);
  assert_int_equal(sg_double_to_half(-65520.0), 0xfc00);
  assert_int_equal(sg_double_to_half(5.960464477539063e-08), 0x0001);
  assert_int_equal(sg_double_to_half(2.98e-08), 0x0000);
  assert_int_equal(sg_double_to_half(6.097555160522461e-05), 0x03ff);
  assert_true(sg_half_to_float(0x0001) == 5.960464477539063e-08f);
  assert_int_equal(sg_double_to_half(-1.0 - 1.0 / 2048.0), 0xbc00);
  assert_int_equal(sg_double_to_half(1e-9), 0x0000);
  assert_int_equal(sg_double_to_half(-0.0), 0x8000);
  assert_true(isnan(sg_half_to_float(0x7e00)));
  (void)state;
}

/* ------------------------------------------------------------ printf */

static uint8_t fake_mem[4096];
static int fake_read(void *ctx, uint64_t addr, void *dst, size_t len) {
  (void)ctx;
  if (addr < 0x1000 || addr - 0x1000 + len > sizeof fake_mem) return -1;
  memcpy(dst, fake_mem + (addr - 0x1000), len);
  return 0;
}

static void test_printf_format(void **state) {
  memset(fake_mem, 0, sizeof fake_mem);
  const char *fmt = "[%*d] [%-5s] [%.*f] [%lld] [%hhd] %% [%p] [%c] [%#x] [%e] [%g] [%5.1f] [%q] [%u] [%s]";
  strcpy((char *)fake_mem, fmt);
  strcpy((char *)fake_mem + 1024, "ab");
  uint8_t *a = fake_mem + 2048;
  int32_t w = 6, v = -42, prec = 2, ch = 'Z', hx = 255;
  int64_t ll = -1234567890123ll;
  double pi = 3.14159, e = 12345.678, g = 0.0001, f = 2.25;
  uint64_t sp = 0x1000 + 1024, pp = 0xdeadbeef, nul = 0;
  size_t o = 0;
#define PUT(x) do { o = (o + sizeof(x) - 1) & ~(sizeof(x) - 1); memcpy(a + o, &(x), sizeof(x)); o += sizeof(x); } while (0)
  PUT(w); PUT(v); PUT(sp); PUT(prec); PUT(pi); PUT(ll); PUT(v); PUT(pp); PUT(ch); PUT(hx); PUT(e); PUT(g); PUT(f);
  PUT(hx); PUT(nul);
#undef PUT
  char out[512];
  int n = sg_ptx_format_printf(fake_read, NULL, 0x1000, 0x1000 + 2048, out, sizeof out);
  assert_true(n > 0);
  assert_string_equal(out, "[   -42] [ab   ] [3.14] [-1234567890123] [-42] % [0xdeadbeef] [Z] [0xff] [1.234568e+04] [0.0001] [  2.2] [%q] [255] [(null)]");
  /* a format outside device memory is an error, not a crash */
  assert_int_equal(sg_ptx_format_printf(fake_read, NULL, 0x99999, 0x1000, out, sizeof out), -1);
  /* arguments past the end of memory: error */
  strcpy((char *)fake_mem, "%d %d");
  assert_int_equal(sg_ptx_format_printf(fake_read, NULL, 0x1000, 0x1000 + sizeof fake_mem - 4, out, sizeof out), -1);
  /* output longer than the buffer is cut, NUL-terminated */
  strcpy((char *)fake_mem, "0123456789abcdef");
  n = sg_ptx_format_printf(fake_read, NULL, 0x1000, 0x1000, out, 8);
  assert_int_equal(n, 7);
  assert_string_equal(out, "0123456");
  (void)state;
}

/* ------------------------------------------------------------ errors */

/* The PTX ISA's predefined identifiers: WARP_SZ (device code's warpSize),
 * the cluster registers (every softgpu block is a cluster of one), the
 * timer halves; driver-defined ones are refused with their reason. */
static void test_predefined_identifiers(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.u32 %r1, WARP_SZ; add.u32 %r2, %r1, WARP_SZ;\n"
         "mov.u32 %r3, %clusterid.x; mov.u32 %r4, %nclusterid.x; mov.u32 %r5, %cluster_ctarank;\n"
         "mov.u32 %r6, %cluster_nctarank; mov.u32 %r7, %cluster_nctaid.x; mov.u32 %r8, %cluster_ctaid.y;\n"
         "mov.pred %p1, %is_explicit_cluster; selp.u32 %r9, 1, 0, %p1;\n"
         "mov.u32 %r10, %clock_hi; mov.u32 %r11, %globaltimer_hi; mov.u32 %r12, %nwarpid;\n"
         "mov.u32 %r13, %warpid; mov.u32 %r14, %nsmid; mov.u32 %r15, %total_smem_size;\n"
         "mov.u32 %r17, %envreg1; mov.u32 %r18, %envreg31; or.b32 %r14, %r14, %r17; or.b32 %r14, %r14, %r18;\n"
         "mov.u32 %r16, %tid.x; setp.eq.u32 %p2, %r16, 40; @!%p2 bra END;\n"
         "st.v4.u32 [%rd0], {%r1, %r2, %r3, %r4};\n"
         "st.v4.u32 [%rd0+16], {%r5, %r6, %r7, %r8};\n"
         "st.v4.u32 [%rd0+32], {%r9, %r11, %r12, %r13};\n"
         "st.u32 [%rd0+48], %r14;\n"
         "END:\n",
         64);
  assert_int_equal(s.o32[0], 32);
  assert_int_equal(s.o32[1], 64);
  assert_int_equal(s.o32[2], 0);
  assert_int_equal(s.o32[3], 1);
  assert_int_equal(s.o32[4], 0);
  assert_int_equal(s.o32[5], 1);
  assert_int_equal(s.o32[6], 1);
  assert_int_equal(s.o32[7], 0);
  assert_int_equal(s.o32[8], 0);
  assert_true(s.o32[9] > 0); /* wall-clock ns since 1970 exceed 2^32 */
  assert_int_equal(s.o32[10], 2);
  assert_int_equal(s.o32[11], 1);
  assert_int_equal(s.o32[12], 1);
  snip_done(&s);
  sg_ptx_module *m = NULL;
  char err[256];
  const char *envreg = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\nmov.u32 %r1, %envreg32;\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(envreg, strlen(envreg), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  assert_non_null(strstr(err, "%envreg32"));
  const char *pm = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\nmov.u32 %r1, %pm2;\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(pm, strlen(pm), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  assert_non_null(strstr(err, "performance"));
  const char *wmma = HDR ".visible .entry k(.param .u64 a)\n{\n.reg .b32 %r<9>;\n.reg .b64 %rd<2>;\nld.param.u64 %rd1, [a];\n"
      "wmma.load.a.sync.aligned.row.m16n16k16.global.s8 {%r1, %r2}, [%rd1], 16;\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(wmma, strlen(wmma), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  assert_non_null(strstr(err, "tensor-core instruction 'wmma.load.a.sync.aligned.row.m16n16k16.global.s8'"));
  /* m8n8k4 with f16 inputs and a D of another type than C: the ISA gives
   * the accumulator layout by .ctype only, so it is refused, by name */
  const char *mma = HDR ".visible .entry k()\n{\n.reg .b32 %r<9>;\n.reg .f32 %f<9>;\n"
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f16 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r1, %r2}, {%r3, %r4}, "
      "{%r5, %r6, %r7, %r8};\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(mma, strlen(mma), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  assert_non_null(strstr(err, "tensor-core instruction 'mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f16'"));
  /* f64 m8n8k4 exists only as .row.col */
  const char *mma64 = HDR ".visible .entry k()\n{\n.reg .f64 %fd<9>;\n"
      "mma.sync.aligned.m8n8k4.col.row.f64.f64.f64.f64 {%fd1, %fd2}, {%fd3}, {%fd4}, {%fd5, %fd6};\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(mma64, strlen(mma64), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  assert_non_null(strstr(err, "tensor-core instruction 'mma.sync.aligned.m8n8k4.col.row.f64"));
  const char *mov8 = HDR ".visible .entry k()\n{\n.reg .b32 %r<9>;\n.reg .b64 %rd<2>;\n"
      "mov.b64 %rd1, {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8};\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(mov8, strlen(mov8), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  const char *bogus = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\nmov.u32 %r1, %bogus;\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(bogus, strlen(bogus), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  assert_non_null(strstr(err, "unknown register '%bogus'"));
  (void)state;
}

/* nanosleep and clock reads are yield points: a warp spinning on a flag
 * that another warp of its block sets gives way at once instead of burning
 * a 65,536-instruction slice; a spin that never ends still meets the
 * launch's time limit. */
static int spin_launch(snip *s, const char *body, unsigned threads, sg_ptx_stats *st) {
  const sg_ptx_kernel *k;
  te_params p;
  int rc = snip_parse(s, body, &k, &p);
  if (rc) return rc;
  sg_ptx_launch_cfg cfg = {{1, 1, 1}, {threads, 1, 1}, 0, p.buf, p.size};
  return sg_ptx_launch_ex(k, &cfg, &s->te.env, &s->fault, st);
}

static void test_nanosleep_yields(void **state) {
  /* warp 0 spins (volatile load + nanosleep / a clock read) on a flag that
   * warp 1 sets after a 1000-iteration loop */
  static const char *spins[] = {
    "SPIN: ld.volatile.shared.u32 %r3, [flag]; setp.eq.u32 %p3, %r3, 0; @!%p3 bra GOT; nanosleep.u32 100; bra SPIN;\n",
    "SPIN: ld.volatile.shared.u32 %r3, [flag]; setp.eq.u32 %p3, %r3, 0; @!%p3 bra GOT; mov.u64 %rd5, %globaltimer; bra SPIN;\n",
  };
  for (int v = 0; v < 2; v++) {
    snip s;
    snip_init(&s);
    s.te.env.timeout_ms = 5000;
    char body[2048];
    snprintf(body, sizeof body,
             ".shared .align 4 .u32 flag;\n"
             "mov.u32 %%r1, %%tid.x; setp.lt.u32 %%p1, %%r1, 32; @%%p1 bra SPIN;\n"
             "mov.u32 %%r2, 0; W: add.u32 %%r2, %%r2, 1; setp.lt.u32 %%p2, %%r2, 1000; @%%p2 bra W;\n"
             "st.volatile.shared.u32 [flag], %%r2; bra DONE;\n"
             "%s"
             "GOT: mul.wide.u32 %%rd2, %%r1, 4; add.s64 %%rd3, %%rd0, %%rd2; st.u32 [%%rd3], %%r3;\n"
             "DONE: ret;\n", spins[v]);
    sg_ptx_stats st;
    int rc = spin_launch(&s, body, 64, &st);
    if (rc) fail_msg("%d %s %s", rc, s.err, s.fault.message);
    for (int t = 0; t < 32; t++) assert_int_equal(s.o32[t], 1000);
    /* warp 1 needs ~3000 warp instructions; a spin without yields would
     * add at least one whole slice (65,536) */
    if (st.warp_insns > 20000) fail_msg("variant %d: %llu warp instructions", v, (unsigned long long)st.warp_insns);
    snip_done(&s);
  }
  /* an endless nanosleep spin still stops at the time limit */
  snip s;
  snip_init(&s);
  s.te.env.timeout_ms = 200;
  sg_ptx_stats st;
  int rc = spin_launch(&s, "L: nanosleep.u32 1000; bra L;\n", 64, &st);
  assert_int_equal(rc, CUDA_ERROR_LAUNCH_TIMEOUT);
  snip_done(&s);
  (void)state;
}

/* Warp-synchronous instructions wait for the lanes of their member mask:
 * here lanes 0..15 branch to a block placed after the shuffle (as nvcc
 * places cold blocks) and come back, so min-PC scheduling reaches the
 * shuffle first with lanes 16..31 only.  They must wait, not read lanes
 * 0..15's stale registers.  Same for vote, match, redux and bar.warp.sync. */
static void test_warp_sync_converges(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         "mov.u32 %r1, %laneid; mov.u32 %r2, %r1; setp.lt.u32 %p1, %r1, 16;\n"
         "@%p1 bra COLD;\n"
         "MERGE: shfl.sync.bfly.b32 %r3, %r2, 16, 0x1f, -1;\n"
         "setp.ge.u32 %p2, %r2, 100; vote.sync.ballot.b32 %r4, %p2, -1;\n"
         "redux.sync.add.u32 %r5, %r2, -1;\n"
         "mul.wide.u32 %rd2, %r1, 16; add.s64 %rd3, %rd0, %rd2;\n"
         "st.v4.u32 [%rd3], {%r3, %r4, %r5, %r1};\n"
         "bra END;\n"
         "COLD: add.u32 %r2, %r2, 100; bra MERGE;\n"
         "END:\n",
         32);
  for (unsigned l = 0; l < 32; l++) {
    const uint32_t *o = s.o32 + l * 4;
    unsigned src = l ^ 16;
    assert_int_equal(o[0], src < 16 ? src + 100 : src);
    assert_int_equal(o[1], 0xffffu);
    assert_int_equal(o[2], 31 * 32 / 2 + 1600);
  }
  snip_done(&s);
  /* __syncwarp (bar.warp.sync) after a cold block: the store before it
   * reaches shared memory before any lane of the mask reads it */
  snip_init(&s);
  RUN_OK(&s,
         ".shared .align 4 .b8 buf[128];\n"
         "mov.u32 %r1, %laneid; setp.lt.u32 %p1, %r1, 16; mov.u32 %r2, %r1;\n"
         "@%p1 bra COLD;\n"
         "MERGE: shl.b32 %r5, %r1, 2; mov.u32 %r6, buf; add.u32 %r7, %r6, %r5; st.shared.u32 [%r7], %r2;\n"
         "bar.warp.sync -1;\n"
         "xor.b32 %r8, %r1, 16; shl.b32 %r9, %r8, 2; add.u32 %r10, %r6, %r9; ld.shared.u32 %r11, [%r10];\n"
         "mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd0, %rd2; st.u32 [%rd3], %r11;\n"
         "bra END;\n"
         "COLD: mul.lo.u32 %r2, %r2, 3; bra MERGE;\n"
         "END:\n",
         32);
  for (unsigned l = 0; l < 32; l++) {
    unsigned src = l ^ 16;
    assert_int_equal(s.o32[l], src < 16 ? src * 3 : src);
  }
  snip_done(&s);
  /* lanes that can never come (they wait at a block barrier) do not hang
   * the warp: the group goes on with the members that arrived */
  snip_init(&s);
  RUN_OK(&s,
         "mov.u32 %r1, %tid.x; setp.lt.u32 %p1, %r1, 16; @%p1 bra LOW;\n"
         "shfl.sync.idx.b32 %r3, %r1, 16, 0x1f, -1; bra OUT;\n"
         "LOW: bar.sync 0; mov.u32 %r3, 7;\n"
         "OUT: mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd0, %rd2; st.u32 [%rd3], %r3;\n",
         32);
  assert_int_equal(s.o32[0], 7);
  assert_int_equal(s.o32[20], 16);
  snip_done(&s);
  /* a full-mask shuffle in each arm of a branch: both arms go on, and the
   * lanes still reconverge where the arms meet */
  snip_init(&s);
  RUN_OK(&s,
         "mov.u32 %r1, %laneid; setp.lt.u32 %p1, %r1, 16; @%p1 bra THEN;\n"
         "shfl.sync.idx.b32 %r3, %r1, 20, 0x1f, -1; bra MERGE;\n"
         "THEN: shfl.sync.idx.b32 %r3, %r1, 3, 0x1f, -1;\n"
         "MERGE: activemask.b32 %r4;\n"
         "mul.wide.u32 %rd2, %r1, 8; add.s64 %rd3, %rd0, %rd2; st.v2.u32 [%rd3], {%r3, %r4};\n",
         32);
  for (unsigned l = 0; l < 32; l++) {
    assert_int_equal(s.o32[2 * l], l < 16 ? 3 : 20);
    assert_int_equal(s.o32[2 * l + 1], 0xffffffffu);
  }
  snip_done(&s);
  (void)state;
}

/* wmma: an identity A times B is B (row-major A from global, column-major
 * B, f32 accumulator stored row-major); a warp of 16 threads cannot run it. */
/* A shfl whose source lane does not execute it (inactive after a branch,
 * or beyond the last thread of a partial warp) reads 0, as on hardware,
 * not the lane's stale register: the samples' reduce7 adds such values in
 * its second stage (mask from __ballot_sync) and in blocks smaller than a
 * warp, and was off by the stale partial sums. */
static void test_shfl_inactive_source(void **state) {
  static const char *body =
      "mov.u32 %r1, %laneid; mad.lo.u32 %r2, %r1, 10, 1;\n"
      "shfl.sync.down.b32 %r3|%p1, %r2, 16, 0x1f, -1; selp.u32 %r4, 1, 0, %p1;\n"
      "mov.u32 %r5, 7777;\n"
      "setp.ge.u32 %p2, %r1, 8; @%p2 bra OUT;\n"
      "shfl.sync.down.b32 %r5, %r2, 4, 0x1f, 0xff;\n"
      "OUT: mul.wide.u32 %rd2, %r1, 16; add.s64 %rd3, %rd0, %rd2;\n"
      "st.v4.u32 [%rd3], {%r3, %r4, %r5, %r2};\n";
  for (unsigned threads = 32; threads >= 20; threads -= 12) {
    snip s;
    snip_init(&s);
    RUN_OK(&s, body, threads);
    for (unsigned l = 0; l < threads; l++) {
      const uint32_t *o = s.o32 + l * 4;
      /* in range (pval true) whether or not the source lane exists */
      assert_int_equal(o[1], l + 16 < 32);
      assert_int_equal(o[0], l + 16 < threads ? (l + 16) * 10 + 1 : l + 16 < 32 ? 0 : l * 10 + 1);
      assert_int_equal(o[2], l >= 8 ? 7777 : l + 4 < 8 ? (l + 4) * 10 + 1 : 0);
    }
    snip_done(&s);
  }
  (void)state;
}

/* mma.sync fragments as the PTX ISA's "Matrix Fragments for mma.mMnNkK"
 * sections define them, transcribed separately from sg_ptx_mma.c: each
 * lane's registers are packed on the host from whole matrices, the kernel
 * runs one mma per warp and every lane's D registers are checked. */
enum { MT_F16, MT_BF16, MT_TF32, MT_S8, MT_F32, MT_S32 };
typedef struct {
  const char *ptx;  /* shape.row.col.dtype.atype.btype.ctype */
  unsigned m, n, k;
  int at, ct, dt;
} mma_case;

static unsigned mt_bits(int t) { return t == MT_F16 || t == MT_BF16 ? 16 : t == MT_S8 ? 8 : 32; }

/* (row, col) of element i of lane's A (which 0), B (1) or C/D (2). */
static void isa_coord(const mma_case *c, int which, unsigned lane, unsigned i, unsigned *r, unsigned *col) {
  unsigned g = lane / 4, t = lane % 4;
  if (which == 2) { *r = i < 2 ? g : g + 8; *col = t * 2 + (i & 1); return; }
  if (c->k == 16 && c->at == MT_S8) {
    if (which == 0) { *r = i < 4 ? g : g + 8; *col = t * 4 + (i & 3); }
    else { *r = t * 4 + i; *col = g; }
  } else if (c->k == 16) {
    if (which == 0) { *r = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8; *col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
    else { *r = t * 2 + (i & 1) + (i >= 2 ? 8 : 0); *col = g; }
  } else if (c->k == 8 && c->at == MT_TF32) {
    if (which == 0) { *r = (i == 0 || i == 2) ? g : g + 8; *col = i < 2 ? t : t + 4; }
    else { *r = i == 0 ? t : t + 4; *col = g; }
  } else if (c->k == 8) {
    if (which == 0) { *r = i < 2 ? g : g + 8; *col = t * 2 + (i & 1); }
    else { *r = t * 2 + i; *col = g; }
  } else { /* m16n8k4 tf32 */
    if (which == 0) { *r = i == 0 ? g : g + 8; *col = t; }
    else { *r = t; *col = g; }
  }
}

static uint32_t mt_encode(int t, float v) {
  switch (t) {
    case MT_F16: return sg_double_to_half(v);
    case MT_BF16: return fbits(v) >> 16; /* the test values are exact in bf16 */
    case MT_S8: return (uint32_t)(int32_t)v & 0xff;
    case MT_S32: return (uint32_t)(int32_t)v;
    default: return fbits(v);
  }
}

static void run_mma_case(const mma_case *c) {
  float A[16][16], B[16][8], C[16][8];
  for (unsigned r = 0; r < c->m; r++)
    for (unsigned k = 0; k < c->k; k++) A[r][k] = (float)((int)((r * 7 + k * 3) % 9) - 4);
  for (unsigned k = 0; k < c->k; k++)
    for (unsigned n = 0; n < c->n; n++) B[k][n] = (float)((int)((k * 5 + n * 11) % 7) - 3);
  for (unsigned r = 0; r < c->m; r++)
    for (unsigned n = 0; n < c->n; n++) C[r][n] = (float)(r * 8 + n) - 50;
  int bt = c->at;
  unsigned na = c->m * c->k / 32, nb = c->k * c->n / 32, nc = c->m * c->n / 32;
  unsigned ra = na * mt_bits(c->at) / 32, rb = nb * mt_bits(bt) / 32, rc = nc * mt_bits(c->ct) / 32, rd = nc * mt_bits(c->dt) / 32;
  snip s;
  snip_init(&s);
  uint32_t *in = s.inh;
  /* lane l's words: A in 0..3, B in 4..5, C in 6..9 (16 words per lane) */
  for (unsigned l = 0; l < 32; l++) {
    uint32_t *w = in + l * 16;
    memset(w, 0, 64);
    unsigned r, col;
    for (unsigned i = 0; i < na; i++) {
      isa_coord(c, 0, l, i, &r, &col);
      unsigned per = 32 / mt_bits(c->at);
      w[i / per] |= mt_encode(c->at, A[r][col]) << (mt_bits(c->at) * (i % per));
    }
    for (unsigned i = 0; i < nb; i++) {
      isa_coord(c, 1, l, i, &r, &col);
      unsigned per = 32 / mt_bits(bt);
      w[4 + i / per] |= mt_encode(bt, B[r][col]) << (mt_bits(bt) * (i % per));
    }
    for (unsigned i = 0; i < nc; i++) {
      isa_coord(c, 2, l, i, &r, &col);
      unsigned per = 32 / mt_bits(c->ct);
      w[6 + i / per] |= mt_encode(c->ct, C[r][col]) << (mt_bits(c->ct) * (i % per));
    }
  }
  char regs[4][96];
  const unsigned nr[4] = {rd, ra, rb, rc}, first[4] = {11, 1, 5, 7};
  for (int o = 0; o < 4; o++) {
    size_t at = 0;
    at += (size_t)snprintf(regs[o] + at, sizeof regs[o] - at, "{");
    for (unsigned i = 0; i < nr[o]; i++) at += (size_t)snprintf(regs[o] + at, sizeof regs[o] - at, "%s%%r%u", i ? ", " : "", first[o] + i);
    snprintf(regs[o] + at, sizeof regs[o] - at, "}");
  }
  char body[1024];
  snprintf(body, sizeof body,
           "mov.u32 %%r30, %%laneid; mul.wide.u32 %%rd2, %%r30, 64; add.s64 %%rd3, %%rd1, %%rd2;\n"
           "ld.global.v4.u32 {%%r1, %%r2, %%r3, %%r4}, [%%rd3]; ld.global.v2.u32 {%%r5, %%r6}, [%%rd3+16];\n"
           "ld.global.v2.u32 {%%r7, %%r8}, [%%rd3+24]; ld.global.v2.u32 {%%r9, %%r10}, [%%rd3+32];\n"
           "mov.u32 %%r11, 0; mov.u32 %%r12, 0; mov.u32 %%r13, 0; mov.u32 %%r14, 0;\n"
           "mma.sync.aligned.%s %s, %s, %s, %s;\n"
           "mul.wide.u32 %%rd4, %%r30, 16; add.s64 %%rd5, %%rd0, %%rd4;\n"
           "st.global.v4.u32 [%%rd5], {%%r11, %%r12, %%r13, %%r14};\n",
           c->ptx, regs[0], regs[1], regs[2], regs[3]);
  RUN_OK(&s, body, 32);
  for (unsigned l = 0; l < 32; l++)
    for (unsigned i = 0; i < nc; i++) {
      unsigned r, col;
      isa_coord(c, 2, l, i, &r, &col);
      double want = C[r][col];
      for (unsigned k = 0; k < c->k; k++) want += (double)A[r][k] * B[k][col];
      unsigned per = 32 / mt_bits(c->dt);
      uint32_t got = s.o32[l * 4 + i / per] >> (mt_bits(c->dt) * (i % per));
      if (mt_bits(c->dt) == 16) got &= 0xffff;
      if (got != mt_encode(c->dt, (float)want)) fail_msg("%s: lane %u element %u (row %u col %u): got 0x%x want %g", c->ptx, l, i, r, col, got, want);
    }
  snip_done(&s);
}

static void test_mma_sync(void **state) {
  static const mma_case cases[] = {
      {"m16n8k16.row.col.f32.f16.f16.f32", 16, 8, 16, MT_F16, MT_F32, MT_F32},
      {"m16n8k16.row.col.f16.f16.f16.f16", 16, 8, 16, MT_F16, MT_F16, MT_F16},
      {"m16n8k16.row.col.f32.f16.f16.f16", 16, 8, 16, MT_F16, MT_F16, MT_F32},
      {"m16n8k16.row.col.f32.bf16.bf16.f32", 16, 8, 16, MT_BF16, MT_F32, MT_F32},
      {"m16n8k8.row.col.f32.f16.f16.f32", 16, 8, 8, MT_F16, MT_F32, MT_F32},
      {"m16n8k8.row.col.f32.bf16.bf16.f32", 16, 8, 8, MT_BF16, MT_F32, MT_F32},
      {"m16n8k8.row.col.f32.tf32.tf32.f32", 16, 8, 8, MT_TF32, MT_F32, MT_F32},
      {"m16n8k4.row.col.f32.tf32.tf32.f32", 16, 8, 4, MT_TF32, MT_F32, MT_F32},
      {"m16n8k16.row.col.s32.s8.s8.s32", 16, 8, 16, MT_S8, MT_S32, MT_S32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_mma_case(&cases[i]);

  /* tf32 inputs: the low 13 mantissa bits of the f32 register are ignored
   * (1 + 2^-11 + 2^-12 counts as 1); a lane missing faults */
  snip s;
  snip_init(&s);
  static const char *tf32 =
      "mov.b32 %r1, 0x3f800c00; mov.b32 %r2, 0x40000000;\n"
      "mov.f32 %f1, 0f00000000;\n"
      "mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%f2, %f3, %f4, %f5}, {%r1, %r1}, {%r2}, {%f1, %f1, %f1, %f1};\n"
      "mov.u32 %r30, %laneid; mul.wide.u32 %rd4, %r30, 16; add.s64 %rd5, %rd0, %rd4;\n"
      "st.global.v4.f32 [%rd5], {%f2, %f3, %f4, %f5};\n";
  RUN_OK(&s, tf32, 32);
  for (unsigned i = 0; i < 128; i++) assert_true(s.of[i] == 8.0f); /* 4 * (1 * 2) */
  snip_done(&s);
  snip_init(&s);
  assert_int_equal(snip_run_cfg(&s, tf32, 1, 24, 0), CUDA_ERROR_ILLEGAL_INSTRUCTION);
  assert_non_null(strstr(s.fault.message, "mma.sync needs all 32 lanes"));
  snip_done(&s);
  (void)state;
}

/* mma.m8n8k4 with .f64: the ISA's "Matrix Fragments for mma.m8n8k4 with
 * .f64 floating point type", transcribed here on its own: lane l holds
 * A[l >> 2][l % 4], B[l % 4][l >> 2] and C/D[l >> 2][2 * (l % 4) + i].
 * The values are multiples of 1/4 whose sums are exact in f64, so any
 * order of the four products gives the same D. */
static void test_mma_m8n8k4_f64(void **state) {
  double A[8][4], B[4][8], C[8][8];
  for (unsigned r = 0; r < 8; r++)
    for (unsigned k = 0; k < 4; k++) A[r][k] = (double)((int)((r * 5 + k * 3) % 11) - 5) * 0.25;
  for (unsigned k = 0; k < 4; k++)
    for (unsigned n = 0; n < 8; n++) B[k][n] = (double)((int)((k * 7 + n * 2) % 9) - 4) * 1.5;
  for (unsigned r = 0; r < 8; r++)
    for (unsigned n = 0; n < 8; n++) C[r][n] = (double)(r * 8 + n) * 0.125 - 3;
  snip s;
  snip_init(&s);
  double *in = s.inh;
  /* lane l's four doubles: a, b, c0, c1 */
  for (unsigned l = 0; l < 32; l++) {
    unsigned groupID = l >> 2, tig = l % 4;
    in[l * 4 + 0] = A[groupID][tig];
    in[l * 4 + 1] = B[tig][groupID];
    in[l * 4 + 2] = C[groupID][tig * 2 + 0];
    in[l * 4 + 3] = C[groupID][tig * 2 + 1];
  }
  /* d names c's registers: D is computed whole before it is written */
  RUN_OK(&s,
         "mov.u32 %r30, %laneid; mul.wide.u32 %rd2, %r30, 32; add.s64 %rd3, %rd1, %rd2;\n"
         "ld.global.v2.f64 {%fd1, %fd2}, [%rd3]; ld.global.v2.f64 {%fd3, %fd4}, [%rd3+16];\n"
         "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd3, %fd4}, {%fd1}, {%fd2}, {%fd3, %fd4};\n"
         "mul.wide.u32 %rd4, %r30, 16; add.s64 %rd5, %rd0, %rd4;\n"
         "st.global.v2.f64 [%rd5], {%fd3, %fd4};\n",
         32);
  for (unsigned l = 0; l < 32; l++)
    for (unsigned i = 0; i < 2; i++) {
      unsigned row = l >> 2, col = (l % 4) * 2 + (i & 1);
      double want = C[row][col];
      for (unsigned k = 0; k < 4; k++) want += A[row][k] * B[k][col];
      if (s.od[l * 2 + i] != want) fail_msg("f64 m8n8k4: lane %u d%u (row %u col %u): got %g want %g", l, i, row, col, s.od[l * 2 + i], want);
    }
  snip_done(&s);
  (void)state;
}

/* mma.m8n8k4 with .f16 inputs: four products per warp, product q by lanes
 * 4q..4q+3 (the low group) and 16+4q..16+4q+3 (the high group), with the
 * row/column formulas of the ISA's "Matrix Fragments for mma.m8n8k4 with
 * .f16 floating point type" transcribed here on their own; every layout
 * pair and both accumulator types, each quad pair with its own tiles. */
static void m8n8k4_isa_coord(int which, int col_major, int f32, unsigned laneid, unsigned i, unsigned *row, unsigned *col) {
  unsigned high = laneid >= 16;
  if (which == 0 && !col_major) { *row = high ? (laneid % 4) + 4 : laneid % 4; *col = i; }
  else if (which == 0) { *row = high ? (i % 4) + 4 : i % 4; *col = laneid % 4; }
  else if (which == 1 && !col_major) { *row = laneid % 4; *col = high ? i + 4 : i; }
  else if (which == 1) { *row = i; *col = high ? (laneid % 4) + 4 : laneid % 4; }
  else if (!f32) { *row = high ? (laneid % 4) + 4 : laneid % 4; *col = i; }
  else {
    unsigned X = (laneid & 1) + (i & 2);
    *row = high ? X + 4 : X;
    *col = (i & 4) + (laneid & 2) + (i & 1);
  }
}

static void run_m8n8k4_f16(int a_col, int b_col, int f32) {
  float A[4][8][4], B[4][4][8], C[4][8][8];
  for (unsigned q = 0; q < 4; q++) {
    for (unsigned r = 0; r < 8; r++)
      for (unsigned k = 0; k < 4; k++) A[q][r][k] = (float)((int)((r * 3 + k * 5 + q * 7) % 9) - 4);
    for (unsigned k = 0; k < 4; k++)
      for (unsigned n = 0; n < 8; n++) B[q][k][n] = (float)((int)((k * 11 + n * 3 + q) % 7) - 3);
    for (unsigned r = 0; r < 8; r++)
      for (unsigned n = 0; n < 8; n++) C[q][r][n] = (float)(r * 8 + n) - 30 + (float)q * 100;
  }
  snip s;
  snip_init(&s);
  uint32_t *in = s.inh;
  /* lane l's words: A in 0..1, B in 2..3, C in 4..11 (16 words per lane) */
  for (unsigned l = 0; l < 32; l++) {
    uint32_t *w = in + l * 16;
    memset(w, 0, 64);
    unsigned q = (l % 16) / 4, r, c;
    for (unsigned i = 0; i < 4; i++) {
      m8n8k4_isa_coord(0, a_col, 0, l, i, &r, &c);
      w[i / 2] |= (uint32_t)sg_double_to_half(A[q][r][c]) << (16 * (i % 2));
      m8n8k4_isa_coord(1, b_col, 0, l, i, &r, &c);
      w[2 + i / 2] |= (uint32_t)sg_double_to_half(B[q][r][c]) << (16 * (i % 2));
    }
    for (unsigned i = 0; i < 8; i++) {
      m8n8k4_isa_coord(2, 0, f32, l, i, &r, &c);
      if (f32) w[4 + i] = fbits(C[q][r][c]);
      else w[4 + i / 2] |= (uint32_t)sg_double_to_half(C[q][r][c]) << (16 * (i % 2));
    }
  }
  char body[1536];
  const char *cd = f32 ? "{%r5, %r6, %r7, %r8, %r9, %r10, %r11, %r12}" : "{%r5, %r6, %r7, %r8}";
  const char *dd = f32 ? "{%r13, %r14, %r15, %r16, %r17, %r18, %r19, %r20}" : "{%r13, %r14, %r15, %r16}";
  const char *ty = f32 ? "f32.f16.f16.f32" : "f16.f16.f16.f16";
  snprintf(body, sizeof body,
           "mov.u32 %%r30, %%laneid; mul.wide.u32 %%rd2, %%r30, 64; add.s64 %%rd3, %%rd1, %%rd2;\n"
           "ld.global.v4.u32 {%%r1, %%r2, %%r3, %%r4}, [%%rd3]; ld.global.v4.u32 {%%r5, %%r6, %%r7, %%r8}, [%%rd3+16];\n"
           "ld.global.v4.u32 {%%r9, %%r10, %%r11, %%r12}, [%%rd3+32];\n"
           "mov.u32 %%r17, 0; mov.u32 %%r18, 0; mov.u32 %%r19, 0; mov.u32 %%r20, 0;\n"
           "mma.sync.aligned.m8n8k4.%s.%s.%s %s, {%%r1, %%r2}, {%%r3, %%r4}, %s;\n"
           "mul.wide.u32 %%rd4, %%r30, 32; add.s64 %%rd5, %%rd0, %%rd4;\n"
           "st.global.v4.u32 [%%rd5], {%%r13, %%r14, %%r15, %%r16}; st.global.v4.u32 [%%rd5+16], {%%r17, %%r18, %%r19, %%r20};\n",
           a_col ? "col" : "row", b_col ? "col" : "row", ty, dd, cd);
  RUN_OK(&s, body, 32);
  for (unsigned l = 0; l < 32; l++)
    for (unsigned i = 0; i < 8; i++) {
      unsigned q = (l % 16) / 4, r, c;
      m8n8k4_isa_coord(2, 0, f32, l, i, &r, &c);
      double want = C[q][r][c];
      for (unsigned k = 0; k < 4; k++) want += (double)A[q][r][k] * B[q][k][c];
      uint32_t got = f32 ? s.o32[l * 8 + i] : (s.o32[l * 8 + i / 2] >> (16 * (i % 2))) & 0xffff;
      uint32_t exp = f32 ? fbits((float)want) : sg_double_to_half(want);
      if (got != exp)
        fail_msg("m8n8k4.%s.%s.%s: lane %u d%u (product %u row %u col %u): got 0x%x want %g", a_col ? "col" : "row",
                 b_col ? "col" : "row", ty, l, i, q, r, c, got, want);
    }
  /* f16 D: the upper 16 bytes of each lane were not written */
  if (!f32)
    for (unsigned l = 0; l < 32; l++) assert_int_equal(s.o32[l * 8 + 4], 0);
  snip_done(&s);
}

static void test_mma_m8n8k4_f16(void **state) {
  for (int a_col = 0; a_col < 2; a_col++)
    for (int b_col = 0; b_col < 2; b_col++)
      for (int f32 = 0; f32 < 2; f32++) run_m8n8k4_f16(a_col, b_col, f32);
  (void)state;
}

/* ldmatrix: lane 8q + r names row r of matrix q; lane l receives elements
 * (l/4, 2(l%4)) and (l/4, 2(l%4)+1) of each matrix, or of its transpose. */
static void test_ldmatrix(void **state) {
  static const char *fmt =
      ".shared .align 16 .b16 sm[256];\n"
      "mov.u32 %%r30, %%laneid; mul.wide.u32 %%rd2, %%r30, 2; add.s64 %%rd3, %%rd1, %%rd2;\n"
      "mov.u32 %%r31, sm; mov.u32 %%r29, %%r30;\n"
      "CP: mul.wide.u32 %%rd2, %%r29, 2; add.s64 %%rd3, %%rd1, %%rd2; ld.global.u16 %%h1, [%%rd3];\n"
      "shl.b32 %%r28, %%r29, 1; add.u32 %%r27, %%r31, %%r28; st.shared.u16 [%%r27], %%h1;\n"
      "add.u32 %%r29, %%r29, 32; setp.lt.u32 %%p1, %%r29, 256; @%%p1 bra CP;\n"
      "bar.warp.sync -1;\n"
      /* row address of lane l: matrix l/8, row l%%8 (16 bytes each) */
      "shl.b32 %%r26, %%r30, 4; add.u32 %%r25, %%r31, %%r26;\n"
      "ldmatrix.sync.aligned.m8n8.x4%s.shared.b16 {%%r1, %%r2, %%r3, %%r4}, [%%r25];\n"
      "ldmatrix.sync.aligned.m8n8.x2%s.shared.b16 {%%r5, %%r6}, [%%r25];\n"
      "ldmatrix.sync.aligned.x1.m8n8%s.shared.b16 {%%r7}, [%%r25];\n"
      "mul.wide.u32 %%rd4, %%r30, 32; add.s64 %%rd5, %%rd0, %%rd4;\n"
      "st.global.v4.u32 [%%rd5], {%%r1, %%r2, %%r3, %%r4}; st.global.v4.u32 [%%rd5+16], {%%r5, %%r6, %%r7, %%r7};\n";
  for (int trans = 0; trans < 2; trans++) {
    snip s;
    snip_init(&s);
    uint16_t *in = s.inh;
    for (unsigned e = 0; e < 256; e++) in[e] = (uint16_t)(e * 3 + 1); /* matrix e/64, row (e/8)%8, col e%8 */
    char body[2048];
    const char *t = trans ? ".trans" : "";
    snprintf(body, sizeof body, fmt, t, t, t);
    RUN_OK(&s, body, 32);
    for (unsigned l = 0; l < 32; l++) {
      const uint32_t *o = s.o32 + l * 8;
      unsigned r = l / 4, c = 2 * (l % 4);
      const unsigned nq[7] = {0, 1, 2, 3, 0, 1, 0};
      for (unsigned k = 0; k < 7; k++) {
        unsigned q = nq[k];
        unsigned e0 = trans ? q * 64 + c * 8 + r : q * 64 + r * 8 + c;
        unsigned e1 = trans ? q * 64 + (c + 1) * 8 + r : e0 + 1;
        uint32_t want = (uint32_t)in[e0] | ((uint32_t)in[e1] << 16);
        if (o[k] != want) fail_msg("ldmatrix%s: lane %u register %u: got 0x%x want 0x%x", t, l, k, o[k], want);
      }
    }
    snip_done(&s);
  }
  (void)state;
}

/* cp.async: 4/8/16-byte copies global -> shared, src-size zero fill,
 * ignore-src, groups; then the shared buffer is copied out. */
static void test_cp_async(void **state) {
  static const char *body =
      ".shared .align 16 .b8 buf[1024];\n"
      "mov.u32 %r1, %tid.x; mov.u32 %r2, buf;\n"
      "shl.b32 %r3, %r1, 4; add.u32 %r4, %r2, %r3;\n"           /* dst = buf + 16*tid */
      "cvt.u64.u32 %rd2, %r3; add.s64 %rd3, %rd1, %rd2;\n"       /* src = in + 16*tid */
      "cvta.to.global.u64 %rd3, %rd3;\n"
      "and.b32 %r5, %r1, 3;\n"
      "setp.eq.u32 %p1, %r5, 0; @%p1 cp.async.cg.shared.global.L2::128B [%r4], [%rd3], 16;\n"
      "setp.eq.u32 %p2, %r5, 1; @%p2 cp.async.ca.shared.global [%r4+8], [%rd3+8], 8;\n"
      "setp.eq.u32 %p3, %r5, 2; mov.u32 %r6, 3;\n"
      "@%p3 cp.async.ca.shared.global [%r4+4], [%rd3+4], 4, %r6;\n" /* 3 bytes + 1 zero */
      "setp.eq.u32 %p4, %r5, 3; setp.lt.u32 %p5, %r1, 32;\n"
      "@%p4 cp.async.cg.shared.global [%r4], [%rd3], 16, %p5;\n"    /* ignore-src: 16 zeros below tid 32 */
      "cp.async.commit_group; cp.async.wait_group 0; cp.async.wait_all;\n"
      "bar.sync 0;\n"
      "ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r4];\n"
      "add.s64 %rd4, %rd0, %rd2; st.global.v4.u32 [%rd4], {%r10, %r11, %r12, %r13};\n";
  snip s;
  snip_init(&s);
  uint8_t *in = s.inh;
  for (unsigned i = 0; i < 1024; i++) in[i] = (uint8_t)(i * 7 + 1);
  RUN_OK(&s, body, 64);
  const uint8_t *o = (const uint8_t *)s.o32;
  for (unsigned t = 0; t < 64; t++)
    for (unsigned b = 0; b < 16; b++) {
      unsigned i = t * 16 + b;
      uint8_t want;
      switch (t & 3) {
        case 0: want = in[i]; break;
        case 1: want = b >= 8 ? in[i] : 0; break;
        case 2: want = b >= 4 && b < 7 ? in[i] : 0; break;
        default: want = t < 32 ? 0 : in[i]; break;
      }
      if (o[i] != want) fail_msg("thread %u byte %u: got %u want %u", t, b, o[i], want);
    }
  snip_done(&s);
  /* a misaligned source faults */
  snip_init(&s);
  int rc = snip_run_cfg(&s, ".shared .align 16 .b8 buf[64];\nmov.u32 %r2, buf;\n"
                            "cp.async.cg.shared.global [%r2], [%rd1+4], 16;\n", 1, 1, 0);
  assert_int_equal(rc, CUDA_ERROR_MISALIGNED_ADDRESS);
  snip_done(&s);
  (void)state;
}

/* wmma m32n8k16 and m8n32k16: D = A * B + C with A row-major, B
 * column-major (m32n8k16) or row-major (m8n32k16), C loaded column-major
 * as f16, D stored row-major as f32. */
static void test_wmma_shapes(void **state) {
  static const struct { const char *shape; unsigned m, n; int bcol; } shapes[] = {
      {"m32n8k16", 32, 8, 1}, {"m8n32k16", 8, 32, 0}};
  for (int sh = 0; sh < 2; sh++) {
    unsigned M = shapes[sh].m, N = shapes[sh].n, K = 16;
    snip s;
    snip_init(&s);
    uint16_t *in = s.inh;
    /* A at in[0], B at in[512], C at in[1024] (halves) */
    for (unsigned i = 0; i < M; i++)
      for (unsigned k = 0; k < K; k++) in[i * K + k] = sg_double_to_half((double)((int)((i + 2 * k) % 5) - 2));
    for (unsigned k = 0; k < K; k++)
      for (unsigned j = 0; j < N; j++)
        in[512 + (shapes[sh].bcol ? j * K + k : k * N + j)] = sg_double_to_half((double)((int)((k * 3 + j) % 7) - 3));
    for (unsigned i = 0; i < M; i++)
      for (unsigned j = 0; j < N; j++) in[1024 + j * M + i] = sg_double_to_half((double)(i * N + j % 5));
    char body[2048];
    snprintf(body, sizeof body,
             "wmma.load.a.sync.aligned.row.%s.global.f16 {%%r1, %%r2, %%r3, %%r4, %%r5, %%r6, %%r7, %%r8}, [%%rd1], 16;\n"
             "add.s64 %%rd7, %%rd1, 1024;\n"
             "wmma.load.b.sync.aligned.%s.%s.global.f16 {%%r9, %%r10, %%r11, %%r12, %%r13, %%r14, %%r15, %%r16}, [%%rd7], %u;\n"
             "add.s64 %%rd8, %%rd1, 2048;\n"
             "wmma.load.c.sync.aligned.col.%s.global.f16 {%%r17, %%r18, %%r19, %%r20}, [%%rd8], %u;\n"
             "wmma.mma.sync.aligned.row.%s.%s.f32.f16 {%%f11, %%f12, %%f13, %%f14, %%f15, %%f16, %%f17, %%f18}, "
             "{%%r1, %%r2, %%r3, %%r4, %%r5, %%r6, %%r7, %%r8}, {%%r9, %%r10, %%r11, %%r12, %%r13, %%r14, %%r15, %%r16}, "
             "{%%r17, %%r18, %%r19, %%r20};\n"
             "wmma.store.d.sync.aligned.row.%s.global.f32 [%%rd0], {%%f11, %%f12, %%f13, %%f14, %%f15, %%f16, %%f17, %%f18}, %u;\n",
             shapes[sh].shape, shapes[sh].bcol ? "col" : "row", shapes[sh].shape, shapes[sh].bcol ? K : N, shapes[sh].shape, M,
             shapes[sh].bcol ? "col" : "row", shapes[sh].shape, shapes[sh].shape, N);
    RUN_OK(&s, body, 32);
    for (unsigned i = 0; i < M; i++)
      for (unsigned j = 0; j < N; j++) {
        float want = (float)(i * N + j % 5);
        for (unsigned k = 0; k < K; k++) want += (float)((int)((i + 2 * k) % 5) - 2) * (float)((int)((k * 3 + j) % 7) - 3);
        if (s.of[i * N + j] != want) fail_msg("%s D[%u][%u]: got %g want %g", shapes[sh].shape, i, j, s.of[i * N + j], want);
      }
    snip_done(&s);
  }
  (void)state;
}

/* %reserved_smem_offset_*: a 1 KiB region after the block's shared
 * memory, zeroed per block, where sm_80 cooperative groups keep multi-warp
 * tile state (offset_1 must leave at least 288 bytes). */
static void test_reserved_smem(void **state) {
  snip s;
  snip_init(&s);
  RUN_OK(&s,
         ".shared .align 4 .b32 mine[8];\n"
         "mov.u32 %r1, %reserved_smem_offset_begin; mov.u32 %r2, %reserved_smem_offset_end;\n"
         "mov.u32 %r3, %reserved_smem_offset_cap; mov.u32 %r4, %reserved_smem_offset_0;\n"
         "mov.u32 %r5, %reserved_smem_offset_1; mov.u32 %r6, %total_smem_size;\n"
         "mov.u32 %r7, %tid.x; shl.b32 %r8, %r7, 2; add.u32 %r9, %r5, %r8;\n"
         "ld.shared.u32 %r10, [%r9]; add.u32 %r10, %r10, %r7; st.shared.u32 [%r9], %r10;\n"
         "add.u32 %r11, %r9, 284; st.shared.u32 [%r11], %r7;\n" /* the last word of the 288 bytes of lane 0 */
         "cvt.u64.u32 %rd2, %r5; cvta.shared.u64 %rd3, %rd2; ld.u32 %r12, [%rd3+4];\n"
         "mov.u32 %r13, mine; st.shared.u32 [%r13], 9;\n"
         "bar.sync 0;\n"
         "setp.ne.u32 %p1, %r7, 0; @%p1 bra DONE;\n"
         "st.v4.u32 [%rd0], {%r1, %r2, %r3, %r4}; st.v4.u32 [%rd0+16], {%r5, %r6, %r10, %r12};\n"
         "DONE:\n",
         2);
  uint32_t begin = s.o32[0];
  assert_true(begin >= 32 && begin % 16 == 0); /* after the kernel's own 32 bytes */
  assert_int_equal(s.o32[1], begin + 1024);
  assert_int_equal(s.o32[2], 1024);
  assert_int_equal(s.o32[3], begin);
  assert_true(s.o32[4] >= begin && s.o32[4] + 288 <= begin + 1024);
  assert_int_equal(s.o32[5], 32); /* the block's own shared memory */
  assert_int_equal(s.o32[6], 0);  /* zeroed: 0 + tid 0 */
  assert_int_equal(s.o32[7], 1);  /* thread 1's word, through a generic address */
  snip_done(&s);
  (void)state;
}

/* stmatrix (the inverse of ldmatrix) and movmatrix (transpose across the
 * warp): lane l's register q holds (q, l) pairs; matrix q's row r lands at
 * the address lane 8q + r gives. */
static void test_stmatrix_movmatrix(void **state) {
  static const char *fmt =
      ".shared .align 16 .b16 sm[256];\n"
      "mov.u32 %%r30, %%laneid; mov.u32 %%r31, sm;\n"
      "shl.b32 %%r1, %%r30, 8; or.b32 %%r2, %%r1, 0x10000;\n"   /* value: q<<12 | lane<<8 | half<<... */
      "mul.lo.u32 %%r3, %%r30, 0x00010001; or.b32 %%r4, %%r3, 0x10000000;\n"
      "or.b32 %%r5, %%r3, 0x20002000; or.b32 %%r6, %%r3, 0x30003000; or.b32 %%r7, %%r3, 0x00800000;\n"
      "shl.b32 %%r26, %%r30, 4; add.u32 %%r25, %%r31, %%r26;\n"
      "stmatrix.sync.aligned.m8n8.x4%s.shared.b16 [%%r25], {%%r7, %%r4, %%r5, %%r6};\n"
      "bar.warp.sync -1;\n"
      "mul.wide.u32 %%rd2, %%r30, 16; add.s64 %%rd3, %%rd0, %%rd2; ld.shared.v4.u32 {%%r10, %%r11, %%r12, %%r13}, [%%r25];\n"
      "st.global.v4.u32 [%%rd3], {%%r10, %%r11, %%r12, %%r13};\n"
      "movmatrix.sync.aligned.m8n8.trans.b16 %%r14, %%r7;\n"
      "mul.wide.u32 %%rd4, %%r30, 4; add.s64 %%rd5, %%rd0, %%rd4; st.global.u32 [%%rd5+1024], %%r14;\n";
  for (int trans = 0; trans < 2; trans++) {
    snip s;
    snip_init(&s);
    char body[2048];
    snprintf(body, sizeof body, fmt, trans ? ".trans" : "");
    RUN_OK(&s, body, 32);
    /* register q of lane l: low half = l | tag_q, high half = l | tag_q | 0x80 for q 0 */
    const uint16_t lo_tag[4] = {0x0000, 0x0000, 0x2000, 0x3000}, hi_tag[4] = {0x0080, 0x1000, 0x2000, 0x3000};
    uint16_t m[4][8][8];
    for (unsigned q = 0; q < 4; q++)
      for (unsigned l = 0; l < 32; l++) {
        unsigned r = l / 4, c = 2 * (l % 4);
        uint16_t lo = (uint16_t)(l | lo_tag[q]), hi = (uint16_t)(l | hi_tag[q]);
        if (trans) { m[q][c][r] = lo; m[q][c + 1][r] = hi; }
        else { m[q][r][c] = lo; m[q][r][c + 1] = hi; }
      }
    const uint16_t *o = (const uint16_t *)s.o32;
    for (unsigned l = 0; l < 32; l++)
      for (unsigned e = 0; e < 8; e++) {
        unsigned q = l / 8, r = l % 8;
        if (o[l * 8 + e] != m[q][r][e]) fail_msg("stmatrix%s row %u of matrix %u, element %u: got 0x%x want 0x%x", trans ? ".trans" : "", r, q, e, o[l * 8 + e], m[q][r][e]);
      }
    /* movmatrix of register 0 (matrix M[r][c] as held without .trans) */
    for (unsigned l = 0; l < 32; l++) {
      unsigned r = l / 4, c = 2 * (l % 4);
      /* lane l gets M^T[r][c], M^T[r][c+1] = M[c][r], M[c+1][r]; M[i][j] is
       * held by lane 4i + j/2, half j%2 */
      uint16_t want_lo = (uint16_t)((4 * c + r / 2) | ((r & 1) ? hi_tag[0] : lo_tag[0]));
      uint16_t want_hi = (uint16_t)((4 * (c + 1) + r / 2) | ((r & 1) ? hi_tag[0] : lo_tag[0]));
      uint32_t want = want_lo | ((uint32_t)want_hi << 16);
      assert_int_equal(s.o32[256 + l], want);
    }
    snip_done(&s);
  }
  (void)state;
}

static void test_wmma(void **state) {
  static const char *body =
      "mov.u32 %r30, %tid.x; setp.ne.u32 %p1, %r30, 0; @%p1 bra FILL;\n"
      "mov.u32 %r31, 0;\n"
      "ID: mul.lo.u32 %r32, %r31, 17; mul.wide.u32 %rd5, %r32, 2; add.s64 %rd6, %rd1, %rd5;\n"
      "mov.b16 %h1, 0x3c00; st.global.b16 [%rd6], %h1;\n" /* A = identity (in[0..511]) */
      "add.u32 %r31, %r31, 1; setp.lt.u32 %p2, %r31, 16; @%p2 bra ID;\n"
      "FILL: mov.u32 %r31, %r30;\n"
      "BL: cvt.rn.f16.u32 %h2, %r31; mul.wide.u32 %rd5, %r31, 2; add.s64 %rd6, %rd1, %rd5;\n"
      "st.global.b16 [%rd6+512], %h2;\n" /* B (column-major) element n*16+k = n*16+k */
      "add.u32 %r31, %r31, 32; setp.lt.u32 %p2, %r31, 256; @%p2 bra BL;\n"
      "bar.sync 0;\n"
      "wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd1], 16;\n"
      "add.s64 %rd7, %rd1, 512;\n"
      "wmma.load.b.sync.aligned.col.m16n16k16.global.f16 {%r9, %r10, %r11, %r12, %r13, %r14, %r15, %r16}, [%rd7], 16;\n"
      "mov.f32 %f1, 0f00000000; mov.f32 %f2, 0f00000000; mov.f32 %f3, 0f00000000; mov.f32 %f4, 0f00000000;\n"
      "mov.f32 %f5, 0f00000000; mov.f32 %f6, 0f00000000; mov.f32 %f7, 0f00000000; mov.f32 %f8, 0f00000000;\n"
      "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {%f11, %f12, %f13, %f14, %f15, %f16, %f17, %f18}, "
      "{%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, {%r9, %r10, %r11, %r12, %r13, %r14, %r15, %r16}, "
      "{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8};\n"
      "wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd0], {%f11, %f12, %f13, %f14, %f15, %f16, %f17, %f18}, 16;\n";
  snip s;
  snip_init(&s);
  memset(s.inh, 0, 4096);
  RUN_OK(&s, body, 32);
  /* D = I * B: D(k, n) = B(k, n) = n*16+k (B stored column-major) */
  for (unsigned k = 0; k < 16; k++)
    for (unsigned n = 0; n < 16; n++) assert_true(s.of[k * 16 + n] == (float)(n * 16 + k));
  snip_done(&s);
  snip_init(&s);
  int rc = snip_run_cfg(&s, body, 1, 16, 0);
  assert_int_equal(rc, CUDA_ERROR_ILLEGAL_INSTRUCTION);
  assert_non_null(strstr(s.fault.message, "all 32 lanes"));
  snip_done(&s);
  (void)state;
}

static void test_parse_errors(void **state) {
  sg_ptx_module *m = NULL;
  char err[256];
  const char *bad_insn = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\n\nfrobnicate.b32 %r1, %r0;\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(bad_insn, strlen(bad_insn), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  assert_null(m);
  assert_non_null(strstr(err, "line 8"));
  assert_non_null(strstr(err, "frobnicate.b32"));
  const char *bad_mod = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\nmul24.lo.u32 %r1, %r0, 1;\n}\n";
  assert_int_equal(sg_ptx_module_parse(bad_mod, strlen(bad_mod), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  assert_non_null(strstr(err, "mul24.lo.u32"));
  const char *bad_label = HDR ".visible .entry k()\n{\nbra NOWHERE;\n}\n";
  assert_int_equal(sg_ptx_module_parse(bad_label, strlen(bad_label), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  assert_non_null(strstr(err, "NOWHERE"));
  const char *unterminated = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\nmov.u32 %r1, 1;\n";
  assert_int_equal(sg_ptx_module_parse(unterminated, strlen(unterminated), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  const char *recursion = HDR ".func f()\n{\ncall f;\nret;\n}\n.visible .entry k()\n{\ncall f;\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(recursion, strlen(recursion), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  assert_non_null(strstr(err, "recursive"));
  const char *extcall = HDR ".extern .func g();\n.visible .entry k()\n{\ncall g;\nret;\n}\n";
  assert_int_equal(sg_ptx_module_parse(extcall, strlen(extcall), &m, err, sizeof err), CUDA_ERROR_NOT_SUPPORTED);
  assert_non_null(strstr(err, "'g'"));
  const char *pred_as_value = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\n.reg .pred %p<200>;\nadd.u32 %r1, %p199, 1;\n}\n";
  assert_int_equal(sg_ptx_module_parse(pred_as_value, strlen(pred_as_value), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  assert_non_null(strstr(err, "%p199"));
  const char *pred_as_dst = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\n.reg .pred %p<200>;\nmov.u32 %p150, 1;\n}\n";
  assert_int_equal(sg_ptx_module_parse(pred_as_dst, strlen(pred_as_dst), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  const char *pred_in_vec = HDR ".visible .entry k(.param .u64 o)\n{\n.reg .b32 %r<2>;\n.reg .pred %p<2>;\n.reg .b64 %rd<2>;\n"
      "ld.param.u64 %rd1, [o];\nst.global.v2.u32 [%rd1], {%r1, %p1};\n}\n";
  assert_int_equal(sg_ptx_module_parse(pred_in_vec, strlen(pred_in_vec), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  const char *wrong_ops = HDR ".visible .entry k()\n{\n.reg .b32 %r<2>;\nadd.u32 %r1, %r0;\n}\n";
  assert_int_equal(sg_ptx_module_parse(wrong_ops, strlen(wrong_ops), &m, err, sizeof err), CUDA_ERROR_INVALID_PTX);
  /* random bytes and truncations of a valid module never crash */
  char junk[512];
  unsigned seed = 12345;
  for (int it = 0; it < 200; it++) {
    for (size_t i = 0; i < sizeof junk; i++) { seed = seed * 1103515245u + 12345u; junk[i] = (char)(" .%{}[];,@!$abcdefrs0123456789_\n<>+-|"[(seed >> 16) % 38]); }
    if (sg_ptx_module_parse(junk, sizeof junk, &m, err, sizeof err) == 0) sg_ptx_module_free(m);
  }
  const char *good = HDR ".visible .entry k(.param .u64 o)\n{\n.reg .b64 %rd<2>;\nld.param.u64 %rd1, [o];\nst.global.u32 [%rd1], 5;\nret;\n}\n";
  size_t gl = strlen(good);
  for (size_t cut = 0; cut < gl; cut++) {
    if (sg_ptx_module_parse(good, cut, &m, err, sizeof err) == 0) sg_ptx_module_free(m);
  }
  assert_int_equal(sg_ptx_module_parse(good, gl, &m, err, sizeof err), 0);
  assert_int_equal(sg_ptx_module_kernel_count(m), 1);
  sg_ptx_module_free(m);
  (void)state;
}

static void test_faults_and_config(void **state) {
  snip s;
  snip_init(&s);
  int rc = snip_run_cfg(&s, "ld.global.u32 %r1, [%rd1+2];\n", 1, 1, 0);
  assert_int_equal(rc, CUDA_ERROR_MISALIGNED_ADDRESS);
  assert_non_null(strstr(s.fault.message, "misaligned"));
  sg_ptx_module_free(s.m);
  s.m = NULL;
  rc = snip_run_cfg(&s, "mov.u32 %r1, %tid.x; setp.eq.u32 %p1, %r1, 37; @%p1 ld.global.u32 %r2, [%rd1+4096];\n", 2, 64, 0);
  assert_int_equal(rc, CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(s.fault.thread[0], 37);
  assert_int_equal(s.fault.address, s.in + 4096);
  assert_non_null(strstr(s.fault.message, "4-byte ld.global"));
  assert_non_null(strstr(s.fault.message, "thread (37,0,0)"));
  sg_ptx_module_free(s.m);
  s.m = NULL;
  rc = snip_run_cfg(&s, ".shared .b32 x[4];\nld.shared.u32 %r1, [x+16];\n", 1, 1, 0);
  assert_int_equal(rc, CUDA_ERROR_ILLEGAL_ADDRESS);
  sg_ptx_module_free(s.m);
  s.m = NULL;
  rc = snip_run_cfg(&s, "mov.u64 %rd5, 0; st.u32 [%rd5], 1;\n", 1, 1, 0);
  assert_int_equal(rc, CUDA_ERROR_ILLEGAL_ADDRESS);
  sg_ptx_module_free(s.m);
  s.m = NULL;
  rc = snip_run_cfg(&s, "trap;\n", 1, 1, 0);
  assert_int_equal(rc, CUDA_ERROR_LAUNCH_FAILED);
  sg_ptx_module_free(s.m);
  s.m = NULL;
  /* a kernel that never ends stops at the time limit */
  s.te.env.timeout_ms = 200;
  rc = snip_run_cfg(&s, "L: add.u32 %r1, %r1, 1; bra L;\n", 4, 64, 0);
  assert_int_equal(rc, CUDA_ERROR_LAUNCH_TIMEOUT);
  assert_non_null(strstr(s.fault.message, "200 ms"));
  s.te.env.timeout_ms = 0;
  sg_ptx_module_free(s.m);
  s.m = NULL;
  /* configuration errors */
  rc = snip_run_cfg(&s, "", 1, 2048, 0);
  assert_int_equal(rc, CUDA_ERROR_INVALID_VALUE);
  const sg_ptx_kernel *k = sg_ptx_module_find_kernel(s.m, "k");
  sg_ptx_launch_cfg cfg = {{1, 1, 1}, {32, 1, 1}, 0, NULL, 0};
  sg_ptx_fault f;
  assert_int_equal(sg_ptx_launch(k, &cfg, &s.te.env, &f), CUDA_ERROR_INVALID_VALUE); /* params missing */
  cfg.grid[1] = 0;
  assert_int_equal(sg_ptx_launch(k, &cfg, &s.te.env, &f), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(sg_ptx_launch(NULL, &cfg, &s.te.env, &f), CUDA_ERROR_INVALID_VALUE);
  snip_done(&s);
  (void)state;
}

/* Two kernels with private 4 KiB arrays and a helper with its own shared
 * word: the private arrays overlap, the helper's word does not. */
static void test_shared_layout(void **state) {
  const char *text = HDR
      ".shared .align 4 .b8 sa[4096];\n.shared .align 4 .b8 sb[4096];\n.shared .align 4 .u32 sc;\n"
      ".func (.param .b32 r) bump(.param .b32 x)\n{\n.reg .b32 %a<3>;\n"
      "ld.param.b32 %a1, [x]; atom.shared.add.u32 %a2, [sc], %a1; st.param.b32 [r], %a2; ret;\n}\n"
      ".visible .entry k1(.param .u64 o)\n{\n.reg .b32 %r<8>; .reg .b64 %rd<4>;\n"
      "ld.param.u64 %rd0, [o]; mov.u32 %r1, %tid.x; shl.b32 %r2, %r1, 2; mov.u32 %r3, sa; add.u32 %r4, %r3, %r2;\n"
      "st.shared.u32 [%r4], %r1; bar.sync 0;\n"
      "{ .param .b32 p0; st.param.b32 [p0], 1; .param .b32 rv; call (rv), bump, (p0); ld.param.b32 %r5, [rv]; }\n"
      "bar.sync 0; ld.shared.u32 %r6, [sc]; ld.shared.u32 %r7, [sa+8];\n"
      "mul.wide.u32 %rd1, %r1, 8; add.s64 %rd2, %rd0, %rd1; st.global.v2.u32 [%rd2], {%r6, %r7}; ret;\n}\n"
      ".visible .entry k2(.param .u64 o)\n{\n.reg .b32 %r<8>; .reg .b64 %rd<4>;\n"
      "ld.param.u64 %rd0, [o]; mov.u32 %r1, %tid.x; shl.b32 %r2, %r1, 2; mov.u32 %r3, sb; add.u32 %r4, %r3, %r2;\n"
      "add.u32 %r5, %r1, 1000; st.shared.u32 [%r4], %r5; bar.sync 0;\n"
      "{ .param .b32 p0; st.param.b32 [p0], 2; .param .b32 rv; call (rv), bump, (p0); ld.param.b32 %r5, [rv]; }\n"
      "bar.sync 0; ld.shared.u32 %r6, [sc]; ld.shared.u32 %r7, [sb+8];\n"
      "mul.wide.u32 %rd1, %r1, 8; add.s64 %rd2, %rd0, %rd1; st.global.v2.u32 [%rd2], {%r6, %r7}; ret;\n}\n";
  sg_ptx_module *m;
  char err[256];
  int rc = sg_ptx_module_parse(text, strlen(text), &m, err, sizeof err);
  if (rc) fail_msg("%s", err);
  const sg_ptx_kernel *k1 = sg_ptx_module_find_kernel(m, "k1"), *k2 = sg_ptx_module_find_kernel(m, "k2");
  assert_int_equal(sg_ptx_kernel_static_shared(k1), 4100);
  assert_int_equal(sg_ptx_kernel_static_shared(k2), 4100);
  testenv te;
  te_init(&te, 2);
  uint64_t out = te_alloc(&te, 64 * 8);
  uint32_t *o = te_host(&te, out);
  for (int kk = 0; kk < 2; kk++) {
    const sg_ptx_kernel *k = kk ? k2 : k1;
    te_params p;
    te_params_init(&p, k);
    te_param(&p, k, 0, &out, 8);
    sg_ptx_fault f;
    rc = te_launch(&te, k, 3, 1, 1, 64, 1, 1, 0, &p, &f);
    if (rc) fail_msg("%s", f.message);
    for (int t = 0; t < 64; t++) {
      assert_int_equal(o[2 * t], kk ? 128 : 64);
      assert_int_equal(o[2 * t + 1], kk ? 1002 : 2);
    }
  }
  te_free(&te);
  sg_ptx_module_free(m);
  (void)state;
}

/* Warp 0 spins on a shared flag that warp 1 sets after a long loop: only
 * terminates if warps are time-sliced as on a GPU. */
static void test_warp_spin(void **state) {
  snip s;
  snip_init(&s);
  s.te.env.timeout_ms = 5000;
  int rc = snip_run_cfg(&s,
      ".shared .align 4 .u32 flag;\n"
      "mov.u32 %r1, %tid.x; setp.lt.u32 %p1, %r1, 32; @%p1 bra SPIN;\n"
      "mov.u32 %r2, 0; W: add.u32 %r2, %r2, 1; setp.lt.u32 %p2, %r2, 100000; @%p2 bra W;\n"
      "st.volatile.shared.u32 [flag], %r2; bra DONE;\n"
      "SPIN: ld.volatile.shared.u32 %r3, [flag]; setp.eq.u32 %p3, %r3, 0; @%p3 bra SPIN;\n"
      "mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd0, %rd2; st.u32 [%rd3], %r3;\n"
      "DONE: ret;\n", 1, 64, 0);
  if (rc) fail_msg("%d %s", rc, s.fault.message);
  for (int t = 0; t < 32; t++) assert_int_equal(s.o32[t], 100000);
  snip_done(&s);
  (void)state;
}

/* Launches from several host threads at once (streams of different
 * sessions) must each complete correctly. */
typedef struct {
  const sg_ptx_kernel *k;
  int id;
  int ok;
} conc_arg;

static void *conc_main(void *p) {
  conc_arg *a = p;
  testenv te;
  te_init(&te, 2);
  uint64_t out = te_alloc(&te, 256 * 4);
  a->ok = 1;
  for (int it = 0; it < 20 && a->ok; it++) {
    uint32_t base = (uint32_t)(a->id * 1000 + it);
    te_params pp;
    te_params_init(&pp, a->k);
    te_param(&pp, a->k, 0, &out, 8);
    te_param(&pp, a->k, 1, &base, 4);
    sg_ptx_fault f;
    if (te_launch(&te, a->k, 4, 1, 1, 64, 1, 1, 0, &pp, &f)) { a->ok = 0; break; }
    uint32_t *o = te_host(&te, out);
    for (uint32_t i = 0; i < 256; i++) if (o[i] != base + i) { a->ok = 0; break; }
  }
  te_free(&te);
  return NULL;
}

static void test_concurrent_launches(void **state) {
  const char *text = HDR ".visible .entry k(.param .u64 o, .param .u32 b)\n{\n.reg .b32 %r<6>; .reg .b64 %rd<4>;\n"
      "ld.param.u64 %rd0, [o]; ld.param.u32 %r0, [b]; mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;\n"
      "mad.lo.s32 %r4, %r1, %r2, %r3; add.s32 %r5, %r4, %r0; mul.wide.u32 %rd1, %r4, 4; add.s64 %rd2, %rd0, %rd1;\n"
      "st.global.u32 [%rd2], %r5; ret;\n}\n";
  sg_ptx_module *m;
  char err[256];
  assert_int_equal(sg_ptx_module_parse(text, strlen(text), &m, err, sizeof err), 0);
  pthread_t th[3];
  conc_arg args[3];
  for (int i = 0; i < 3; i++) {
    args[i] = (conc_arg){sg_ptx_module_find_kernel(m, "k"), i, 0};
    pthread_create(&th[i], NULL, conc_main, &args[i]);
  }
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) assert_true(args[i].ok);
  sg_ptx_module_free(m);
  (void)state;
}

static void test_module_info(void **state) {
  const char *text = HDR
      ".global .align 8 .b8 tab[12] = {1, 2, 3};\n.const .align 4 .f32 cf[2] = {0f3F800000, 0f40000000};\n"
      ".global .u32 cnt;\n.shared .align 4 .b8 s1[100];\n.extern .shared .align 16 .b8 dyn[];\n"
      ".visible .entry k(.param .u8 a, .param .u64 b, .param .align 4 .b8 c[12], .param .f64 d) .maxntid 128, 1, 1\n"
      "{\n.local .align 8 .b8 dep[40];\nret;\n}\n";
  sg_ptx_module *m;
  char err[256];
  assert_int_equal(sg_ptx_module_parse(text, strlen(text), &m, err, sizeof err), 0);
  const sg_ptx_kernel *k = sg_ptx_module_kernel(m, 0);
  assert_string_equal(sg_ptx_kernel_name(k), "k");
  assert_int_equal(sg_ptx_kernel_param_count(k), 4);
  size_t off, sz;
  assert_int_equal(sg_ptx_kernel_param_info(k, 0, &off, &sz), 0); assert_int_equal(off, 0); assert_int_equal(sz, 1);
  sg_ptx_kernel_param_info(k, 1, &off, &sz); assert_int_equal(off, 8); assert_int_equal(sz, 8);
  sg_ptx_kernel_param_info(k, 2, &off, &sz); assert_int_equal(off, 16); assert_int_equal(sz, 12);
  sg_ptx_kernel_param_info(k, 3, &off, &sz); assert_int_equal(off, 32); assert_int_equal(sz, 8);
  assert_int_equal(sg_ptx_kernel_param_info(k, 4, &off, &sz), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(sg_ptx_kernel_param_bytes(k), 40);
  assert_int_equal(sg_ptx_kernel_static_shared(k), 0); /* declares s1 but never names it */
  assert_int_equal(sg_ptx_kernel_local_bytes(k), 40);
  assert_int_equal(sg_ptx_kernel_max_threads(k), 128);
  assert_int_equal(sg_ptx_module_global_count(m), 3);
  sg_ptx_global_info g;
  sg_ptx_module_global(m, 0, &g);
  assert_string_equal(g.name, "tab");
  assert_int_equal(g.size, 12);
  assert_int_equal(g.align, 8);
  assert_int_equal(g.space, SG_PTX_SPACE_GLOBAL);
  assert_memory_equal(g.init, "\1\2\3\0\0\0\0\0\0\0\0\0", 12);
  sg_ptx_module_global(m, 1, &g);
  assert_int_equal(g.space, SG_PTX_SPACE_CONST);
  assert_int_equal(((const uint32_t *)g.init)[1], 0x40000000u);
  sg_ptx_module_global(m, 2, &g);
  assert_null(g.init);
  assert_int_equal(g.size, 4);
  sg_ptx_module_free(m);
  (void)state;
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_int_arith),
    cmocka_unit_test(test_bit_ops),
    cmocka_unit_test(test_float_arith),
    cmocka_unit_test(test_cvt),
    cmocka_unit_test(test_setp),
    cmocka_unit_test(test_divergence),
    cmocka_unit_test(test_barrier_exit),
    cmocka_unit_test(test_call_ret),
    cmocka_unit_test(test_call_frames),
    cmocka_unit_test(test_memory_spaces),
    cmocka_unit_test(test_atomics),
    cmocka_unit_test(test_shfl_vote),
    cmocka_unit_test(test_shfl_inactive_source),
    cmocka_unit_test(test_bar_red),
    cmocka_unit_test(test_f16_ops),
    cmocka_unit_test(test_half_conversion_rounding),
    cmocka_unit_test(test_printf_format),
    cmocka_unit_test(test_parse_errors),
    cmocka_unit_test(test_faults_and_config),
    cmocka_unit_test(test_module_info),
    cmocka_unit_test(test_concurrent_launches),
    cmocka_unit_test(test_shared_layout),
    cmocka_unit_test(test_warp_spin),
    cmocka_unit_test(test_predefined_identifiers),
    cmocka_unit_test(test_nanosleep_yields),
    cmocka_unit_test(test_warp_sync_converges),
    cmocka_unit_test(test_wmma),
    cmocka_unit_test(test_wmma_shapes),
    cmocka_unit_test(test_mma_sync),
    cmocka_unit_test(test_mma_m8n8k4_f64),
    cmocka_unit_test(test_mma_m8n8k4_f16),
    cmocka_unit_test(test_ldmatrix),
    cmocka_unit_test(test_stmatrix_movmatrix),
    cmocka_unit_test(test_cp_async),
    cmocka_unit_test(test_reserved_smem),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
