/* cuBLASLt's descriptors as client records: cublasLtMatmulDesc_t,
 * cublasLtMatrixLayout_t and cublasLtMatmulPreference_t.  Each mirrors
 * every attribute of its enum in cublasLt.h with the documented size and
 * default (the generated rgpu_cublaslt_attrs.c); Set stores the bytes, Get
 * answers them, neither costs a message.  The values travel with each
 * matmul or heuristic query (rgpu_cublaslt_matmul.c). */
#include <stdlib.h>
#include <string.h>

#include "rgpu_cublaslt_internal.h"
#include "rgpu_cudart.h"

rgpu_cublaslt_desc_rec *rgpu_cublaslt_desc(cublasLtMatmulDesc_t d) {
  rgpu_cublaslt_desc_rec *r = (rgpu_cublaslt_desc_rec *)(void *)d;
  return r && r->magic == RGPU_CUBLASLT_DESC_MAGIC ? r : NULL;
}

rgpu_cublaslt_layout_rec *rgpu_cublaslt_layout(cublasLtMatrixLayout_t l) {
  rgpu_cublaslt_layout_rec *r = (rgpu_cublaslt_layout_rec *)(void *)l;
  return r && r->magic == RGPU_CUBLASLT_LAYOUT_MAGIC ? r : NULL;
}

rgpu_cublaslt_pref_rec *rgpu_cublaslt_pref(cublasLtMatmulPreference_t p) {
  rgpu_cublaslt_pref_rec *r = (rgpu_cublaslt_pref_rec *)(void *)p;
  return r && r->magic == RGPU_CUBLASLT_PREF_MAGIC ? r : NULL;
}

/* Set: the attribute must exist and sizeInBytes be its size exactly
 * (cublasLt.h: "sizeInBytes doesn't match size of internal storage"). */
static cublasStatus_t attr_set(void *values, const rgpu_cublaslt_attr *table, size_t len, int id,
                               const void *buf, size_t size) {
  const rgpu_cublaslt_attr *a = rgpu_cublaslt_attr_find(table, len, id);
  if (!a || !buf || size != a->size) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy((char *)values + a->offset, buf, a->size);
  return CUBLAS_STATUS_SUCCESS;
}

/* Get, with cuBLASLt's size protocol: sizeInBytes 0 asks for the size
 * (into *sizeWritten, which must then be given); otherwise buf must hold
 * exactly the attribute, and *sizeWritten (optional) says what was
 * written. */
static cublasStatus_t attr_get(const void *values, const rgpu_cublaslt_attr *table, size_t len,
                               int id, void *buf, size_t size, size_t *written) {
  const rgpu_cublaslt_attr *a = rgpu_cublaslt_attr_find(table, len, id);
  if (!a) return CUBLAS_STATUS_INVALID_VALUE;
  if (size == 0) {
    if (!written) return CUBLAS_STATUS_INVALID_VALUE;
    *written = a->size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || size != a->size) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(buf, (const char *)values + a->offset, a->size);
  if (written) *written = a->size;
  return CUBLAS_STATUS_SUCCESS;
}

/* Records start zeroed and take the defaults by memcpy, so their padding
 * is zero too: the heuristic cache compares them byte by byte. */
#define REC_NEW(type, magic_value, defaults)                   \
  type *r = calloc(1, sizeof *r);                              \
  if (!r) return CUBLAS_STATUS_ALLOC_FAILED;                   \
  r->magic = (magic_value);                                    \
  memcpy(&r->v, &(defaults), sizeof r->v)

/* ---- cublasLtMatmulDesc_t ------------------------------------------------ */

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulDescCreate(
    cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType) {
  rgpu_rt_count_call();
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  REC_NEW(rgpu_cublaslt_desc_rec, RGPU_CUBLASLT_DESC_MAGIC, rgpu_cublaslt_matmul_desc_defaults);
  r->v.compute_type = (int32_t)computeType;
  r->v.scale_type = (int32_t)scaleType;
  *matmulDesc = (cublasLtMatmulDesc_t)(void *)r;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulDescDestroy(
    cublasLtMatmulDesc_t matmulDesc) {
  rgpu_rt_count_call();
  if (!matmulDesc) return CUBLAS_STATUS_SUCCESS;
  rgpu_cublaslt_desc_rec *r = rgpu_cublaslt_desc(matmulDesc);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  r->magic = 0;
  free(r);
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulDescSetAttribute(
    cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void *buf,
    size_t sizeInBytes) {
  rgpu_rt_count_call();
  rgpu_cublaslt_desc_rec *r = rgpu_cublaslt_desc(matmulDesc);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  return attr_set(&r->v, rgpu_cublaslt_matmul_desc_attrs, rgpu_cublaslt_matmul_desc_attrs_len,
                  (int)attr, buf, sizeInBytes);
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulDescGetAttribute(
    cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, void *buf,
    size_t sizeInBytes, size_t *sizeWritten) {
  rgpu_rt_count_call();
  rgpu_cublaslt_desc_rec *r = rgpu_cublaslt_desc(matmulDesc);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  return attr_get(&r->v, rgpu_cublaslt_matmul_desc_attrs, rgpu_cublaslt_matmul_desc_attrs_len,
                  (int)attr, buf, sizeInBytes, sizeWritten);
}

/* ---- cublasLtMatrixLayout_t ---------------------------------------------- */

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatrixLayoutCreate(
    cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows, uint64_t cols,
    int64_t ld) {
  rgpu_rt_count_call();
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  REC_NEW(rgpu_cublaslt_layout_rec, RGPU_CUBLASLT_LAYOUT_MAGIC, rgpu_cublaslt_layout_defaults);
  r->v.type = (uint32_t)type;
  r->v.rows = rows;
  r->v.cols = cols;
  r->v.ld = ld;
  *matLayout = (cublasLtMatrixLayout_t)(void *)r;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatrixLayoutDestroy(
    cublasLtMatrixLayout_t matLayout) {
  rgpu_rt_count_call();
  if (!matLayout) return CUBLAS_STATUS_SUCCESS;
  rgpu_cublaslt_layout_rec *r = rgpu_cublaslt_layout(matLayout);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  r->magic = 0;
  free(r);
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatrixLayoutSetAttribute(
    cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, const void *buf,
    size_t sizeInBytes) {
  rgpu_rt_count_call();
  rgpu_cublaslt_layout_rec *r = rgpu_cublaslt_layout(matLayout);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  return attr_set(&r->v, rgpu_cublaslt_layout_attrs, rgpu_cublaslt_layout_attrs_len, (int)attr,
                  buf, sizeInBytes);
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatrixLayoutGetAttribute(
    cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, void *buf,
    size_t sizeInBytes, size_t *sizeWritten) {
  rgpu_rt_count_call();
  rgpu_cublaslt_layout_rec *r = rgpu_cublaslt_layout(matLayout);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  return attr_get(&r->v, rgpu_cublaslt_layout_attrs, rgpu_cublaslt_layout_attrs_len, (int)attr,
                  buf, sizeInBytes, sizeWritten);
}

/* ---- cublasLtMatmulPreference_t ------------------------------------------ */

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulPreferenceCreate(
    cublasLtMatmulPreference_t *pref) {
  rgpu_rt_count_call();
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  REC_NEW(rgpu_cublaslt_pref_rec, RGPU_CUBLASLT_PREF_MAGIC, rgpu_cublaslt_preference_defaults);
  *pref = (cublasLtMatmulPreference_t)(void *)r;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulPreferenceDestroy(
    cublasLtMatmulPreference_t pref) {
  rgpu_rt_count_call();
  if (!pref) return CUBLAS_STATUS_SUCCESS;
  rgpu_cublaslt_pref_rec *r = rgpu_cublaslt_pref(pref);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  r->magic = 0;
  free(r);
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
    size_t sizeInBytes) {
  rgpu_rt_count_call();
  rgpu_cublaslt_pref_rec *r = rgpu_cublaslt_pref(pref);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  return attr_set(&r->v, rgpu_cublaslt_preference_attrs, rgpu_cublaslt_preference_attrs_len,
                  (int)attr, buf, sizeInBytes);
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulPreferenceGetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, void *buf,
    size_t sizeInBytes, size_t *sizeWritten) {
  rgpu_rt_count_call();
  rgpu_cublaslt_pref_rec *r = rgpu_cublaslt_pref(pref);
  if (!r) return CUBLAS_STATUS_INVALID_VALUE;
  return attr_get(&r->v, rgpu_cublaslt_preference_attrs, rgpu_cublaslt_preference_attrs_len,
                  (int)attr, buf, sizeInBytes, sizeWritten);
}
