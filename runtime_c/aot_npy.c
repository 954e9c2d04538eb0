/* .npy (format 1.0/2.0/3.0, little-endian, C order) reading and writing for the runner. */
#include "aot_npy.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* numpy writes headers of a few hundred bytes (and reads at most 10000 by default): a longer
 * one is not an array we wrote or need, and is refused before it is allocated. */
#define AOT_NPY_MAX_HEADER 65536u

static const char *descr_for(aot_dtype dtype)
{
    switch (dtype) {
    case AOT_DTYPE_FLOAT32: return "<f4";
    case AOT_DTYPE_FLOAT64: return "<f8";
    case AOT_DTYPE_INT8: return "|i1";
    case AOT_DTYPE_UINT8: return "|u1";
    case AOT_DTYPE_INT16: return "<i2";
    case AOT_DTYPE_UINT16: return "<u2";
    case AOT_DTYPE_INT32: return "<i4";
    case AOT_DTYPE_UINT32: return "<u4";
    case AOT_DTYPE_INT64: return "<i8";
    case AOT_DTYPE_UINT64: return "<u8";
    case AOT_DTYPE_BOOL: return "|b1";
    }
    return NULL;
}

static int dtype_for(const char *descr, aot_dtype *out)
{
    static const aot_dtype all[] = {
        AOT_DTYPE_FLOAT32, AOT_DTYPE_FLOAT64, AOT_DTYPE_INT8, AOT_DTYPE_UINT8, AOT_DTYPE_INT16,
        AOT_DTYPE_UINT16, AOT_DTYPE_INT32, AOT_DTYPE_UINT32, AOT_DTYPE_INT64, AOT_DTYPE_UINT64,
        AOT_DTYPE_BOOL};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; ++i) {
        const char *d = descr_for(all[i]);
        /* '<' and '|' are interchangeable for one-byte types */
        if (strcmp(d, descr) == 0 || (d[0] == '|' && descr[0] == '<' && strcmp(d + 1, descr + 1) == 0)) {
            *out = all[i];
            return 0;
        }
    }
    return -1;
}

static void set_err(char *err, size_t len, const char *path, const char *what)
{
    if (err != NULL && len > 0) {
        snprintf(err, len, "%s: %s", path, what);
    }
}

void aot_npy_free(aot_npy_array *array)
{
    if (array != NULL) {
        free(array->data);
        array->data = NULL;
    }
}

/* Finds the quoted value after 'key': in the header dict. */
static const char *find_key(const char *header, const char *key)
{
    const char *p = strstr(header, key);
    if (p == NULL) {
        return NULL;
    }
    p += strlen(key);
    while (*p == ' ' || *p == ':' || *p == '\'' || *p == '"') {
        if (*p == ':') {
            ++p;
            while (*p == ' ') {
                ++p;
            }
            return p;
        }
        ++p;
    }
    return NULL;
}

/* Whether `bytes` more bytes follow the current position: a shape that promises more data than
 * the file holds is refused before its buffer is allocated. Where the size cannot be measured
 * (ftell's long too small), the read itself finds a short file. */
static int data_fits(FILE *f, size_t bytes)
{
    long here = ftell(f), end;
    if (here < 0 || fseek(f, 0, SEEK_END) != 0) {
        return 1;
    }
    end = ftell(f);
    if (fseek(f, here, SEEK_SET) != 0) {
        return 0;
    }
    return end < 0 || (uint64_t)(end - here) >= (uint64_t)bytes;
}

int aot_npy_read(const char *path, aot_npy_array *out, char *err, size_t err_len)
{
    unsigned char preamble[12];
    char *header = NULL;
    size_t header_len, elem, count = 1;
    const char *p;
    char descr[16];
    size_t i;
    FILE *f = fopen(path, "rb");
    memset(out, 0, sizeof *out);
    if (f == NULL) {
        set_err(err, err_len, path, "cannot open");
        return -1;
    }
    if (fread(preamble, 1, 10, f) != 10 || memcmp(preamble, "\x93NUMPY", 6) != 0) {
        set_err(err, err_len, path, "not a .npy file");
        fclose(f);
        return -1;
    }
    if (preamble[6] == 1) {
        header_len = (size_t)preamble[8] | ((size_t)preamble[9] << 8);
    } else {
        if (fread(preamble + 10, 1, 2, f) != 2) {
            set_err(err, err_len, path, "truncated header");
            fclose(f);
            return -1;
        }
        header_len = (size_t)preamble[8] | ((size_t)preamble[9] << 8) | ((size_t)preamble[10] << 16) |
                     ((size_t)preamble[11] << 24);
    }
    if (header_len > AOT_NPY_MAX_HEADER) {
        set_err(err, err_len, path, "header too long");
        fclose(f);
        return -1;
    }
    header = (char *)malloc(header_len + 1);
    if (header == NULL || fread(header, 1, header_len, f) != header_len) {
        set_err(err, err_len, path, "truncated header");
        free(header);
        fclose(f);
        return -1;
    }
    header[header_len] = '\0';
    p = find_key(header, "descr");
    if (p == NULL || (*p != '\'' && *p != '"')) {
        set_err(err, err_len, path, "header has no descr");
        goto fail;
    }
    ++p;
    for (i = 0; i + 1 < sizeof descr && p[i] != '\'' && p[i] != '"' && p[i] != '\0'; ++i) {
        descr[i] = p[i];
    }
    descr[i] = '\0';
    if (dtype_for(descr, &out->dtype) != 0) {
        set_err(err, err_len, path, "unsupported dtype (need little-endian numeric or bool)");
        goto fail;
    }
    p = find_key(header, "fortran_order");
    if (p == NULL || strncmp(p, "False", 5) != 0) {
        set_err(err, err_len, path, "only C-order arrays are supported");
        goto fail;
    }
    p = find_key(header, "shape");
    if (p == NULL || *p != '(') {
        set_err(err, err_len, path, "header has no shape");
        goto fail;
    }
    ++p;
    out->rank = 0;
    elem = aot_dtype_size(out->dtype);
    while (*p != ')') {
        char *end;
        long long d;
        while (*p == ' ' || *p == ',') {
            ++p;
        }
        if (*p == ')') {
            break;
        }
        if (*p < '0' || *p > '9') { /* also the header's end: a shape never closed */
            set_err(err, err_len, path, "bad shape");
            goto fail;
        }
        errno = 0;
        d = strtoll(p, &end, 10);
        if (end == p || errno == ERANGE || d < 0 || out->rank >= AOT_NPY_MAX_RANK) {
            set_err(err, err_len, path, "bad shape");
            goto fail;
        }
        /* the element count times the element size must fit a size_t: checked before multiplying */
        if (count > 0 && d > 0 && (uint64_t)d > (uint64_t)SIZE_MAX / elem / count) {
            set_err(err, err_len, path, "shape too large");
            goto fail;
        }
        out->dims[out->rank++] = (int64_t)d;
        count *= (size_t)d;
        p = end;
    }
    out->bytes = count * elem;
    if (!data_fits(f, out->bytes)) {
        set_err(err, err_len, path, "file shorter than its shape says");
        goto fail;
    }
    out->data = malloc(out->bytes > 0 ? out->bytes : 1);
    if (out->data == NULL) {
        set_err(err, err_len, path, "out of memory");
        goto fail;
    }
    if (fread(out->data, 1, out->bytes, f) != out->bytes) {
        set_err(err, err_len, path, "file shorter than its shape says");
        aot_npy_free(out);
        goto fail;
    }
    free(header);
    fclose(f);
    return 0;
fail:
    free(header);
    fclose(f);
    return -1;
}

int aot_npy_write(const char *path, aot_dtype dtype, int32_t rank, const int64_t *dims,
                  const void *data, size_t bytes, char *err, size_t err_len)
{
    char header[512];
    char shape[400];
    size_t used = 0, total;
    int32_t i;
    FILE *f;
    const char *descr = descr_for(dtype);
    if (descr == NULL) {
        set_err(err, err_len, path, "unsupported dtype");
        return -1;
    }
    shape[0] = '\0';
    for (i = 0; i < rank; ++i) {
        int n = snprintf(shape + used, sizeof shape - used, "%lld,%s", (long long)dims[i],
                         (i + 1 < rank) ? " " : "");
        if (n < 0 || (size_t)n >= sizeof shape - used) {
            set_err(err, err_len, path, "shape too long");
            return -1;
        }
        used += (size_t)n;
    }
    if (rank > 1) {
        shape[used - 1] = '\0'; /* drop the trailing comma numpy omits for rank > 1 */
    }
    {
        int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                         descr, shape);
        /* room is left for the padding to 64 bytes and the newline below */
        if (n < 0 || (size_t)n + 64 >= sizeof header) {
            set_err(err, err_len, path, "shape too long");
            return -1;
        }
        used = (size_t)n;
    }
    total = 10 + used + 1;
    while (total % 64 != 0) {
        header[used++] = ' ';
        ++total;
    }
    header[used++] = '\n';
    f = fopen(path, "wb");
    if (f == NULL) {
        set_err(err, err_len, path, "cannot create");
        return -1;
    }
    {
        unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
        preamble[8] = (unsigned char)(used & 0xff);
        preamble[9] = (unsigned char)(used >> 8);
        if (fwrite(preamble, 1, 10, f) != 10 || fwrite(header, 1, used, f) != used ||
            fwrite(data, 1, bytes, f) != bytes) {
            set_err(err, err_len, path, "write failed");
            fclose(f);
            return -1;
        }
    }
    if (fclose(f) != 0) {
        set_err(err, err_len, path, "write failed");
        return -1;
    }
    return 0;
}
