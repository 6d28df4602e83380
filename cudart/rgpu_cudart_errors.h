/* CUDA's own texts for cudaGetErrorName / cudaGetErrorString.
 *
 * The table is generated at build time by gen_error_strings.c, which asks
 * the toolkit's libcudart.so.13 for each code's name and text; nothing here
 * is typed by hand, so the texts match NVIDIA's release exactly. */
#ifndef RGPU_CUDART_ERRORS_H
#define RGPU_CUDART_ERRORS_H

#include <stddef.h>

typedef struct {
  int code;
  const char *name;
  const char *text;
} rgpu_cudart_error_entry;

extern const rgpu_cudart_error_entry rgpu_cudart_error_table[];
extern const size_t rgpu_cudart_error_table_len;
/* What the real runtime answers for a code it does not know. */
extern const char rgpu_cudart_error_unknown_name[];
extern const char rgpu_cudart_error_unknown_text[];

/* Lookup helpers (NULL-free: unknown codes give the unknown texts). */
const char *rgpu_cudart_error_name(int code);
const char *rgpu_cudart_error_text(int code);

#endif
