/* The hook of every generated cuBLAS stub (gen_cublas.py stubs): logs name
 * once per process.  The stub then returns CUBLAS_STATUS_NOT_SUPPORTED (a
 * legacy call that returns a value or nothing: zero). */
#ifndef RGPU_CUBLAS_UNSUPPORTED_H
#define RGPU_CUBLAS_UNSUPPORTED_H

void rgpu_cublas_report_unsupported(const char *name, int *logged_once);

#endif
