/* Texture and surface instructions: tex, tld4, txq, suld.b, sust.b on
 * texture/surface objects (unified texture mode).
 *
 * The object behind a handle is resolved through env->texobj once per
 * instruction and distinct handle (a warp almost always passes one handle
 * in every lane), so the per-lane work is the addressing and filtering
 * arithmetic below.  Sampling follows the CUDA programming guide's
 * "Texture Fetching" appendix:
 *   - normalized coordinates are scaled by the extent first;
 *   - POINT: texel floor(x);
 *   - LINEAR: xB = x - 0.5, i = floor(xB), alpha = frac(xB) held in 9-bit
 *     fixed point with 8 fractional bits (alpha = round(frac*256)/256, as
 *     the hardware's weights are), result (1-alpha) T[i] + alpha T[i+1]
 *     per dimension;
 *   - the address mode is applied to each texel index: CLAMP to the edge,
 *     BORDER gives the border colour, WRAP and MIRROR repeat the texture
 *     (only with normalized coordinates; otherwise they act as CLAMP);
 *   - 8/16-bit integer formats read as floats are normalized to [0,1]
 *     (unsigned) or [-1,1] (signed) unless the object reads as integer.
 * Linear-memory objects (tex1Dfetch) take an integer index, no filtering,
 * and read zeros out of range.
 *
 * Surfaces: x is in bytes, y/z/layer in elements; .trap faults out of
 * range, .clamp moves the access to the nearest position inside, .zero
 * reads zeros and drops stores. */
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sg_ptx_internal.h"

#define REG(x) (((x) & SG_KBIT) ? K + (size_t)((x) & ~SG_KBIT) * 32 : R + (size_t)(x) * 32)

static inline float f32_of(uint64_t v) { float f; uint32_t u = (uint32_t)v; memcpy(&f, &u, 4); return f; }
static inline uint64_t of_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ---------------------------------------------------------------- texels */

/* Channel c of the element at p as a float: normalized for 8/16-bit
 * integer formats unless the object reads as integer. */
static float chan_float(const sg_ptx_tex *t, const uint8_t *p, unsigned c) {
  switch (t->format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: { uint8_t v = p[c]; return t->read_as_int ? (float)v : v / 255.0f; }
    case CU_AD_FORMAT_SIGNED_INT8: {
      int8_t v; memcpy(&v, p + c, 1);
      return t->read_as_int ? (float)v : fmaxf(v / 127.0f, -1.0f);
    }
    case CU_AD_FORMAT_UNSIGNED_INT16: {
      uint16_t v; memcpy(&v, p + 2 * c, 2);
      return t->read_as_int ? (float)v : v / 65535.0f;
    }
    case CU_AD_FORMAT_SIGNED_INT16: {
      int16_t v; memcpy(&v, p + 2 * c, 2);
      return t->read_as_int ? (float)v : fmaxf(v / 32767.0f, -1.0f);
    }
    case CU_AD_FORMAT_UNSIGNED_INT32: { uint32_t v; memcpy(&v, p + 4 * c, 4); return (float)v; }
    case CU_AD_FORMAT_SIGNED_INT32: { int32_t v; memcpy(&v, p + 4 * c, 4); return (float)v; }
    case CU_AD_FORMAT_HALF: { uint16_t v; memcpy(&v, p + 2 * c, 2); return sg_half_to_float(v); }
    case CU_AD_FORMAT_FLOAT: { float v; memcpy(&v, p + 4 * c, 4); return v; }
    default: return 0.0f;
  }
}

/* Channel c as the 32-bit integer an .s32/.u32 tex returns: the stored
 * value sign- or zero-extended (float formats: their bits). */
static uint32_t chan_int(const sg_ptx_tex *t, const uint8_t *p, unsigned c) {
  switch (t->format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: return p[c];
    case CU_AD_FORMAT_SIGNED_INT8: { int8_t v; memcpy(&v, p + c, 1); return (uint32_t)(int32_t)v; }
    case CU_AD_FORMAT_UNSIGNED_INT16: { uint16_t v; memcpy(&v, p + 2 * c, 2); return v; }
    case CU_AD_FORMAT_SIGNED_INT16: { int16_t v; memcpy(&v, p + 2 * c, 2); return (uint32_t)(int32_t)v; }
    case CU_AD_FORMAT_HALF: { uint16_t v; memcpy(&v, p + 2 * c, 2); return v; }
    default: { uint32_t v; memcpy(&v, p + 4 * c, 4); return v; }
  }
}

/* The element at (x, y, z) of layer `layer` (indices already inside the
 * extent), or NULL if it would lie outside the object's memory (a
 * descriptor inconsistent with its memory: read as zeros, never out of
 * bounds). */
static inline const uint8_t *texel_ptr(const sg_ptx_tex *t, uint64_t x, uint64_t y, uint64_t z, uint64_t layer) {
  uint64_t off = (layer + z) * t->slice + y * t->pitch + x * t->elem_size;
  if (off > t->bytes || t->bytes - off < t->elem_size) return NULL;
  return t->data + off;
}

/* Missing channels read as (0, 0, 1) for y/z/w... as the hardware returns
 * them: 0 for green/blue, 1 for alpha. */
static void texel_f(const sg_ptx_tex *t, const uint8_t *p, float out[4]) {
  out[0] = out[1] = out[2] = 0.0f;
  out[3] = 1.0f;
  if (!p) { out[3] = 0.0f; return; }
  for (unsigned c = 0; c < t->channels && c < 4; c++) out[c] = chan_float(t, p, c);
}

static void texel_i(const sg_ptx_tex *t, const uint8_t *p, uint32_t out[4]) {
  out[0] = out[1] = out[2] = 0;
  out[3] = 1;
  if (!p) { out[3] = 0; return; }
  for (unsigned c = 0; c < t->channels && c < 4; c++) out[c] = chan_int(t, p, c);
}

/* ---------------------------------------------------------------- addressing */

/* Applies the address mode to texel index i of a dimension of n texels.
 * Returns 0, or 1 when the texel is the border colour. */
static inline int address(int64_t *i, uint64_t n, unsigned mode, int normalized) {
  int64_t v = *i, N = (int64_t)n;
  if (!normalized && (mode == CU_TR_ADDRESS_MODE_WRAP || mode == CU_TR_ADDRESS_MODE_MIRROR))
    mode = CU_TR_ADDRESS_MODE_CLAMP;
  switch (mode) {
    case CU_TR_ADDRESS_MODE_WRAP:
      v %= N;
      if (v < 0) v += N;
      break;
    case CU_TR_ADDRESS_MODE_MIRROR:
      v %= 2 * N;
      if (v < 0) v += 2 * N;
      if (v >= N) v = 2 * N - 1 - v;
      break;
    case CU_TR_ADDRESS_MODE_BORDER:
      if (v < 0 || v >= N) return 1;
      break;
    default: /* CLAMP */
      if (v < 0) v = 0;
      if (v >= N) v = N - 1;
      break;
  }
  *i = v;
  return 0;
}

/* A float coordinate in texel space, kept in a range where floor() fits
 * int64 comfortably (NaN reads texel 0). */
static inline double texel_space(float c, uint64_t n, int normalized) {
  double x = normalized ? (double)c * (double)n : (double)c;
  if (!(x == x)) return 0.0;
  if (x > 1e15) return 1e15;
  if (x < -1e15) return -1e15;
  return x;
}

/* The weight of the upper texel: frac rounded to 1/256, as the hardware
 * stores linear-filter weights in 9-bit fixed point (8 fractional bits). */
static inline float lin_weight(double frac) { return (float)(nearbyint(frac * 256.0) / 256.0); }

typedef struct {
  int ndim;            /* coordinates the instruction gives (1, 2, 3) */
  float c[3];          /* float coordinates */
  int32_t ci[3];       /* integer coordinates (type2 s32) */
  int int_coords;
  int64_t layer;
} tex_coords;

/* Fetches one texel by (possibly out-of-range) indices: address modes
 * applied, border colour where BORDER says so. */
static void fetch_f(const sg_ptx_tex *t, const int64_t idx[3], int ndim, int64_t layer, int normalized, float out[4]) {
  int64_t i[3] = {0, 0, 0};
  const uint64_t ext[3] = {t->width, t->height, t->depth};
  for (int d = 0; d < ndim; d++) {
    i[d] = idx[d];
    if (address(&i[d], ext[d] ? ext[d] : 1, t->addr_mode[d], normalized)) {
      memcpy(out, t->border, sizeof t->border);
      return;
    }
  }
  texel_f(t, texel_ptr(t, (uint64_t)i[0], (uint64_t)i[1], (uint64_t)i[2], (uint64_t)layer), out);
}

static void fetch_i(const sg_ptx_tex *t, const int64_t idx[3], int ndim, int64_t layer, int normalized, uint32_t out[4]) {
  int64_t i[3] = {0, 0, 0};
  const uint64_t ext[3] = {t->width, t->height, t->depth};
  for (int d = 0; d < ndim; d++) {
    i[d] = idx[d];
    if (address(&i[d], ext[d] ? ext[d] : 1, t->addr_mode[d], normalized)) {
      for (int c = 0; c < 4; c++) out[c] = (uint32_t)(int32_t)t->border[c];
      return;
    }
  }
  texel_i(t, texel_ptr(t, (uint64_t)i[0], (uint64_t)i[1], (uint64_t)i[2], (uint64_t)layer), out);
}

/* tex: one lane's sample.  want_int: .s32/.u32 destination. */
static void sample(const sg_ptx_tex *t, const tex_coords *tc, int want_int, uint64_t out[4]) {
  const uint64_t ext[3] = {t->width, t->height, t->depth};
  if (t->resource == SG_PTX_RES_LINEAR) {
    /* tex1Dfetch: an element index, zeros outside */
    int64_t x = tc->int_coords ? tc->ci[0] : (int64_t)floor(texel_space(tc->c[0], t->width, 0));
    const uint8_t *p = x >= 0 && (uint64_t)x < t->width ? texel_ptr(t, (uint64_t)x, 0, 0, 0) : NULL;
    if (want_int) {
      uint32_t v[4];
      texel_i(t, p, v);
      if (!p) v[3] = 0;
      for (int c = 0; c < 4; c++) out[c] = v[c];
    } else {
      float v[4];
      texel_f(t, p, v);
      for (int c = 0; c < 4; c++) out[c] = of_f32(v[c]);
    }
    return;
  }
  int64_t idx[3] = {0, 0, 0};
  if (tc->int_coords || t->filter != CU_TR_FILTER_MODE_LINEAR || want_int) {
    /* point sampling (integer coordinates address texels directly) */
    int normalized = !tc->int_coords && t->normalized_coords;
    for (int d = 0; d < tc->ndim; d++)
      idx[d] = tc->int_coords ? tc->ci[d] : (int64_t)floor(texel_space(tc->c[d], ext[d] ? ext[d] : 1, normalized));
    if (want_int) {
      uint32_t v[4];
      fetch_i(t, idx, tc->ndim, tc->layer, normalized, v);
      for (int c = 0; c < 4; c++) out[c] = v[c];
    } else {
      float v[4];
      fetch_f(t, idx, tc->ndim, tc->layer, normalized, v);
      for (int c = 0; c < 4; c++) out[c] = of_f32(v[c]);
    }
    return;
  }
  /* linear filtering over 2^ndim texels */
  float a[3] = {0, 0, 0};
  for (int d = 0; d < tc->ndim; d++) {
    double xb = texel_space(tc->c[d], ext[d] ? ext[d] : 1, t->normalized_coords) - 0.5;
    double fl = floor(xb);
    idx[d] = (int64_t)fl;
    a[d] = lin_weight(xb - fl);
  }
  float acc[4] = {0, 0, 0, 0};
  for (unsigned corner = 0; corner < (1u << tc->ndim); corner++) {
    int64_t ci[3];
    float wgt = 1.0f;
    for (int d = 0; d < tc->ndim; d++) {
      int up = (corner >> d) & 1;
      ci[d] = idx[d] + up;
      wgt *= up ? a[d] : 1.0f - a[d];
    }
    if (wgt == 0.0f) continue;
    float v[4];
    fetch_f(t, ci, tc->ndim, tc->layer, t->normalized_coords, v);
    for (int c = 0; c < 4; c++) acc[c] += wgt * v[c];
  }
  for (int c = 0; c < 4; c++) out[c] = of_f32(acc[c]);
}

/* tld4 (tex2Dgather): component `comp` of the four texels bilinear
 * filtering would use, in the order (i, j+1), (i+1, j+1), (i+1, j), (i, j). */
static void gather(const sg_ptx_tex *t, const tex_coords *tc, int comp, int want_int, uint64_t out[4]) {
  const uint64_t ext[2] = {t->width, t->height};
  int64_t base[2];
  for (int d = 0; d < 2; d++) base[d] = (int64_t)floor(texel_space(tc->c[d], ext[d] ? ext[d] : 1, t->normalized_coords) - 0.5);
  static const int order[4][2] = {{0, 1}, {1, 1}, {1, 0}, {0, 0}};
  for (int k = 0; k < 4; k++) {
    int64_t ci[3] = {base[0] + order[k][0], base[1] + order[k][1], 0};
    if (want_int) {
      uint32_t v[4];
      fetch_i(t, ci, 2, tc->layer, t->normalized_coords, v);
      out[k] = v[comp];
    } else {
      float v[4];
      fetch_f(t, ci, 2, tc->layer, t->normalized_coords, v);
      out[k] = of_f32(v[comp]);
    }
  }
}

/* PTX txq values of the address modes (wrap 0, mirror 1, clamp_to_edge 3,
 * clamp_to_border 4). */
static uint32_t txq_addr_mode(unsigned m) {
  switch (m) {
    case CU_TR_ADDRESS_MODE_WRAP: return 0;
    case CU_TR_ADDRESS_MODE_MIRROR: return 1;
    case CU_TR_ADDRESS_MODE_BORDER: return 4;
    default: return 3;
  }
}

static int geom_dims(int g) { return g == SG_TEXG_3D ? 3 : g == SG_TEXG_2D || g == SG_TEXG_A2D ? 2 : 1; }
static int geom_layered(int g) { return g == SG_TEXG_A1D || g == SG_TEXG_A2D; }

/* ---------------------------------------------------------------- surfaces */

/* One lane's surface access: the host address, or NULL for a dropped /
 * zero access (.zero out of range); -1 in *fault for .trap out of range. */
static uint8_t *surf_addr(const sg_ptx_tex *t, int geom, int mode, const int64_t coord[4], unsigned size, int *fault) {
  int ndim = geom_dims(geom);
  int64_t x = coord[0], y = ndim > 1 ? coord[1] : 0, z = ndim > 2 ? coord[2] : 0, layer = 0;
  if (geom_layered(geom)) {
    layer = coord[0];
    x = coord[1];
    y = ndim > 1 ? coord[2] : 0;
  }
  const int64_t rowbytes = (int64_t)(t->width * t->elem_size);
  const int64_t h = (int64_t)(t->height ? t->height : 1), d = (int64_t)(t->depth ? t->depth : 1);
  const int64_t nl = (int64_t)(t->layers ? t->layers : 1);
  int out = x < 0 || x > rowbytes - (int64_t)size || y < 0 || y >= h || z < 0 || z >= d || layer < 0 || layer >= nl;
  if (out) {
    if (mode == SG_SU_TRAP || rowbytes < (int64_t)size) {
      *fault = mode == SG_SU_TRAP || mode == SG_SU_CLAMP;
      return NULL;
    }
    if (mode == SG_SU_ZERO) return NULL;
    x = x < 0 ? 0 : x > rowbytes - (int64_t)size ? rowbytes - (int64_t)size : x;
    y = y < 0 ? 0 : y >= h ? h - 1 : y;
    z = z < 0 ? 0 : z >= d ? d - 1 : z;
    layer = layer < 0 ? 0 : layer >= nl ? nl - 1 : layer;
  }
  uint64_t off = (uint64_t)(layer + z) * t->slice + (uint64_t)y * t->pitch + (uint64_t)x;
  if (off > t->bytes || t->bytes - off < size) {
    *fault = 1;
    return NULL;
  }
  return t->data + off;
}

/* ---------------------------------------------------------------- dispatch */

int sg_tex_exec(const sg_insn *I, uint32_t m, const uint64_t *K, uint64_t *R, const sg_ptx_env *env,
                int *fault_lane, uint64_t *fault_addr, char *what, size_t whatlen) {
  const int surface = I->op == SG_OP_SULD || I->op == SG_OP_SUST || I->op == SG_OP_SUQ;
  const uint64_t *H = REG(I->base);
  sg_ptx_tex t;
  uint64_t cur = 0;
  int have = 0;
  const int geom = I->mod;
  const int ndim = geom_dims(geom), layered = geom_layered(geom);
  for (uint32_t lanes = m; lanes; lanes &= lanes - 1) {
    const int l = __builtin_ctz(lanes);
    uint64_t h = H[l];
    if (!have || h != cur) {
      if (!env || !env->texobj || env->texobj(env->ctx, h, &t) != 0 || t.is_surface != surface) {
        *fault_lane = l;
        *fault_addr = h;
        snprintf(what, whatlen, "invalid %s object 0x%llx", surface ? "surface" : "texture", (unsigned long long)h);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
      }
      cur = h;
      have = 1;
    }
    switch (I->op) {
      case SG_OP_TEX:
      case SG_OP_TLD4: {
        tex_coords tc;
        memset(&tc, 0, sizeof tc);
        tc.ndim = ndim;
        tc.int_coords = I->type2 == SG_T_S32;
        int first = 0;
        if (layered) {
          int64_t layer = (int32_t)REG(I->s[0])[l];
          int64_t nl = (int64_t)(t.layers ? t.layers : 1);
          tc.layer = layer < 0 ? 0 : layer >= nl ? nl - 1 : layer; /* layers clamp */
          first = 1;
        }
        for (int d = 0; d < ndim; d++) {
          uint64_t v = REG(I->s[first + d])[l];
          tc.c[d] = f32_of(v);
          tc.ci[d] = (int32_t)v;
        }
        uint64_t out[4];
        int want_int = I->type != SG_T_F32;
        if (I->op == SG_OP_TLD4) gather(&t, &tc, I->mod2, want_int, out);
        else sample(&t, &tc, want_int, out);
        for (int c = 0; c < 4; c++)
          if (I->d[c] != SG_NOREG) R[(size_t)I->d[c] * 32 + l] = out[c];
        break;
      }
      case SG_OP_TXQ:
      case SG_OP_SUQ: {
        uint64_t v = 0;
        switch (I->mod) {
          case SG_TXQ_WIDTH: v = t.width; break;
          case SG_TXQ_HEIGHT: v = t.height; break;
          case SG_TXQ_DEPTH: v = t.depth; break;
          case SG_TXQ_NORMALIZED_COORDS: v = t.normalized_coords ? 1 : 0; break;
          case SG_TXQ_FILTER_MODE: v = t.filter == CU_TR_FILTER_MODE_LINEAR; break;
          case SG_TXQ_ADDR_MODE_0: v = txq_addr_mode(t.addr_mode[0]); break;
          case SG_TXQ_ADDR_MODE_1: v = txq_addr_mode(t.addr_mode[1]); break;
          case SG_TXQ_ADDR_MODE_2: v = txq_addr_mode(t.addr_mode[2]); break;
          case SG_TXQ_ARRAY_SIZE: v = t.layered ? t.layers : 0; break;
          default: break;
        }
        R[(size_t)I->d[0] * 32 + l] = (uint32_t)v;
        break;
      }
      case SG_OP_SULD:
      case SG_OP_SUST: {
        int64_t coord[4] = {0, 0, 0, 0};
        int nc = ndim + layered;
        for (int k = 0; k < nc && k < 4; k++) coord[k] = (int32_t)REG(I->s[k])[l];
        const unsigned esz = I->type == SG_T_B8 ? 1 : I->type == SG_T_B16 ? 2 : I->type == SG_T_B32 ? 4 : 8;
        const unsigned size = esz * I->vec;
        int fault = 0;
        uint8_t *p = surf_addr(&t, geom, I->mod2, coord, size, &fault);
        if (fault) {
          *fault_lane = l;
          *fault_addr = (uint64_t)coord[0];
          snprintf(what, whatlen, "%s out of range of surface 0x%llx (coordinates %lld,%lld,%lld,%lld; %u bytes)",
                   I->op == SG_OP_SULD ? "suld" : "sust", (unsigned long long)h, (long long)coord[0],
                   (long long)coord[1], (long long)coord[2], (long long)coord[3], size);
          return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
        if (I->op == SG_OP_SULD) {
          for (int k = 0; k < I->vec; k++) {
            if (I->d[k] == SG_NOREG) continue;
            uint64_t v = 0;
            if (p) memcpy(&v, p + (size_t)k * esz, esz); /* little-endian: the low bytes */
            R[(size_t)I->d[k] * 32 + l] = v;
          }
        } else if (p) {
          for (int k = 0; k < I->vec; k++) {
            uint64_t v = REG(I->d[k])[l];
            memcpy(p + (size_t)k * esz, &v, esz);
          }
        }
        break;
      }
      default:
        break;
    }
  }
  return 0;
}
