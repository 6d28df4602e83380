/* IEEE half (binary16) and bfloat16 to and from float, by value, with
 * round-to-nearest-even: the cuBLAS facade sends 16-bit scalars as f64, and
 * the server's CPU gemm (softgpu) computes 16-bit matrices in double.
 * Header-only; no dependency on compiler support for _Float16. */
#ifndef RGPU_HALF_H
#define RGPU_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float rgpu_half_to_float(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = ldexpf((float)man, -24); /* zero and subnormals */
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = ldexpf((float)(1024 + man), exp - 25);
  return sign ? -v : v;
}

static inline uint16_t rgpu_float_to_half(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (isnan(f)) return sign | 0x7e00;
  float a = fabsf(f);
  /* 65520 is halfway between the largest half (65504) and 65536: to even,
   * that is to infinity. */
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 0x1p-14f) /* subnormal (or rounds up to the smallest normal: 0x400) */
    return sign | (uint16_t)nearbyintf(a * 0x1p24f);
  int e;
  float m = frexpf(a, &e);          /* a = m 2^e, m in [0.5, 1) */
  float q = nearbyintf(m * 2048.0f); /* 11 significant bits, to even */
  if (q >= 2048.0f) {
    q = 1024.0f;
    e++;
  }
  int biased = e - 1 + 15;
  if (biased >= 31) return sign | 0x7c00;
  return sign | (uint16_t)(biased << 10) | (uint16_t)((int)q - 1024);
}

static inline float rgpu_bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t rgpu_float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40); /* stays a (quiet) NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

#endif
