/* sg_ptx_round: float operations under a directed rounding mode.
 *
 * Built with -frounding-math so the compiler neither folds nor reorders the
 * arithmetic across fesetround(); the interpreter calls these only for the
 * .rz/.rm/.rp forms, keeping the hot round-to-nearest paths free of mode
 * switches. */
#include "sg_ptx_internal.h"

#include <fenv.h>
#include <math.h>

static int set_mode(int rnd) {
  int old = fegetround();
  switch (rnd) {
    case SG_RND_RZ: case SG_RND_RZI: fesetround(FE_TOWARDZERO); break;
    case SG_RND_RM: case SG_RND_RMI: fesetround(FE_DOWNWARD); break;
    case SG_RND_RP: case SG_RND_RPI: fesetround(FE_UPWARD); break;
    default: fesetround(FE_TONEAREST); break;
  }
  return old;
}

#define WRAP(T, NAME, PARAMS, EXPR)                                            \
  T NAME PARAMS {                                                              \
    int old_ = set_mode(rnd);                                                  \
    volatile T r_ = (EXPR);                                                    \
    fesetround(old_);                                                          \
    return r_;                                                                 \
  }

WRAP(float, sg_round_addf, (float a, float b, int rnd), a + b)
WRAP(float, sg_round_mulf, (float a, float b, int rnd), a * b)
WRAP(float, sg_round_fmaf, (float a, float b, float c, int rnd), fmaf(a, b, c))
WRAP(float, sg_round_divf, (float a, float b, int rnd), a / b)
WRAP(float, sg_round_sqrtf, (float a, int rnd), sqrtf(a))
WRAP(double, sg_round_add, (double a, double b, int rnd), a + b)
WRAP(double, sg_round_mul, (double a, double b, int rnd), a * b)
WRAP(double, sg_round_fma, (double a, double b, double c, int rnd), fma(a, b, c))
WRAP(double, sg_round_div, (double a, double b, int rnd), a / b)
WRAP(double, sg_round_sqrt, (double a, int rnd), sqrt(a))
WRAP(float, sg_round_d2f, (double a, int rnd), (float)a)
WRAP(float, sg_round_i2f, (int64_t a, int is_unsigned, int rnd), is_unsigned ? (float)(uint64_t)a : (float)a)
WRAP(double, sg_round_i2d, (int64_t a, int is_unsigned, int rnd), is_unsigned ? (double)(uint64_t)a : (double)a)
