/* Tables gen_cublas.py writes from the toolkit's headers (rgpu_cublas_status.c,
 * the stubs file): pure data, unit-tested without a session. */
#ifndef RGPU_CUBLAS_TABLES_H
#define RGPU_CUBLAS_TABLES_H

#include <stddef.h>

typedef struct {
  int value;
  const char *name;
} rgpu_cublas_status_name;

extern const rgpu_cublas_status_name rgpu_cublas_status_names[];
extern const size_t rgpu_cublas_status_names_len;

/* The exports that answer CUBLAS_STATUS_NOT_SUPPORTED (NULL-terminated). */
extern const char *const rgpu_cublas_stubbed_names[];
extern const int rgpu_cublas_stubbed_count;

/* The name of a status, or NULL for a value the enum does not have. */
const char *rgpu_cublas_status_name_of(int status);

#endif
