/* What the cuBLASLt facade's sources share: the handle and descriptor
 * records and the entry hooks.  Everything here is compiled into rgpu's
 * libcudart.so.13 (which holds the session); libcublasLt.so.13 only
 * forwards to rgpu_cublaslt_<name>. */
#ifndef RGPU_CUBLASLT_INTERNAL_H
#define RGPU_CUBLASLT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_cublaslt_attrs.h"
#include "rgpu_cublaslt_protos.h"

#define RGPU_CUBLASLT __attribute__((visibility("default")))

/* A cublasLtHandle_t points to this record, named by the client: the
 * server keeps no per-handle state (each matmul carries what it needs), so
 * creating and destroying one costs no round trip.  cublasLt.h leaves
 * struct cublasLtContext opaque; rgpu gives it this body. */
#define RGPU_CUBLASLT_MAGIC 0x63624c54u /* "cbLT": tells a live handle from garbage */
struct cublasLtContext {
  uint32_t magic;
  int device;  /* the current device at cublasLtCreate */
  uint64_t id; /* client-chosen, for the server's logs */
};

/* The descriptors: cublasLt.h gives their handles a type (a pointer to a
 * semi-opaque block) but rgpu's records are its own, allocated by the
 * Create calls: a magic and one field per attribute (the generated
 * rgpu_cublaslt_*_values, mirroring every attribute with cuBLASLt's sizes
 * and defaults).  Nothing goes to the server until a matmul or heuristic
 * query carries the values. */
#define RGPU_CUBLASLT_DESC_MAGIC 0x4c744d44u   /* "LtMD" */
#define RGPU_CUBLASLT_LAYOUT_MAGIC 0x4c744c59u /* "LtLY" */
#define RGPU_CUBLASLT_PREF_MAGIC 0x4c745046u   /* "LtPF" */
typedef struct {
  uint32_t magic;
  rgpu_cublaslt_matmul_desc_values v;
} rgpu_cublaslt_desc_rec;
typedef struct {
  uint32_t magic;
  rgpu_cublaslt_layout_values v;
} rgpu_cublaslt_layout_rec;
typedef struct {
  uint32_t magic;
  rgpu_cublaslt_preference_values v;
} rgpu_cublaslt_pref_rec;

/* The live record behind a handle, or NULL (NULL, destroyed, or not one of
 * rgpu's). */
struct cublasLtContext *rgpu_cublaslt_handle(cublasLtHandle_t h);
/* The handle a matmul or heuristic query runs with, into *out: an rgpu
 * cuBLASLt handle, or a cuBLAS handle cast to cublasLtHandle_t (NVIDIA
 * documents that a cublasHandle_t may stand in for a cublasLtHandle_t; some
 * frameworks pass one), which then works on the current device.  0 when h
 * is neither. */
int rgpu_cublaslt_handle_use(cublasLtHandle_t h, struct cublasLtContext *out);
rgpu_cublaslt_desc_rec *rgpu_cublaslt_desc(cublasLtMatmulDesc_t d);
rgpu_cublaslt_layout_rec *rgpu_cublaslt_layout(cublasLtMatrixLayout_t l);
rgpu_cublaslt_pref_rec *rgpu_cublaslt_pref(cublasLtMatmulPreference_t p);

/* Logs once per *logged_once that name is not supported (the generated
 * stubs, and refusals of unsupported attribute values). */
void rgpu_cublaslt_report_unsupported(const char *name, int *logged_once);
/* The name of a cublasStatus_t value, or NULL (generated). */
const char *rgpu_cublaslt_status_name_of(int status);

#endif
