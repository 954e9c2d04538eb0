/*
 * Minimal .npy reader and writer for the package's runner program (host or target with a libc).
 * Not part of the model library: models themselves do no I/O and no allocation.
 */
#ifndef AOT_NPY_H_INCLUDED
#define AOT_NPY_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "aot_runtime.h"

#define AOT_NPY_MAX_RANK 16

typedef struct aot_npy_array {
    aot_dtype dtype;
    int32_t rank;
    int64_t dims[AOT_NPY_MAX_RANK];
    size_t bytes;
    void *data; /* malloc'ed; free with aot_npy_free */
} aot_npy_array;

/* Returns 0 on success; on failure writes a message into err. */
int aot_npy_read(const char *path, aot_npy_array *out, char *err, size_t err_len);
int aot_npy_write(const char *path, aot_dtype dtype, int32_t rank, const int64_t *dims,
                  const void *data, size_t bytes, char *err, size_t err_len);
void aot_npy_free(aot_npy_array *array);

#endif /* AOT_NPY_H_INCLUDED */
