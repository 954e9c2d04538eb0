/*
 * Embeds the compiled digits model in a C program: classifies every test image and prints the
 * accuracy. Build: see run.sh (links libdigits.a from the aot package, reads .npy test data with
 * the package's runtime/aot_npy.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "digits.h"
#include "runtime/aot_npy.h"

DIGITS_DECLARE_ARENA(arena);

int main(int argc, char **argv)
{
    aot_npy_array images, labels;
    char err[256];
    long correct = 0, count, i;
    if (argc != 3) {
        fprintf(stderr, "usage: %s test_x.npy test_y.npy\n", argv[0]);
        return 2;
    }
    if (aot_npy_read(argv[1], &images, err, sizeof err) != 0 || aot_npy_read(argv[2], &labels, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (images.dtype != AOT_DTYPE_FLOAT32 || images.rank != 2 || images.dims[1] != DIGITS_INPUT0_SIZE ||
        labels.dtype != AOT_DTYPE_INT64 || labels.rank != 1 || labels.dims[0] != images.dims[0]) {
        fprintf(stderr, "unexpected test data layout\n");
        return 1;
    }
    count = (long)images.dims[0];
    for (i = 0; i < count; ++i) {
        float probabilities[DIGITS_OUTPUT0_SIZE];
        const float *image = (const float *)images.data + i * DIGITS_INPUT0_SIZE;
        digits_inputs in = {image};
        digits_outputs out = {probabilities};
        int best = 0, k;
        aot_status status = digits_run(&in, &out, arena);
        if (status != AOT_OK) {
            fprintf(stderr, "digits_run: %s\n", aot_status_string(status));
            return 1;
        }
        for (k = 1; k < (int)DIGITS_OUTPUT0_SIZE; ++k) {
            if (probabilities[k] > probabilities[best]) {
                best = k;
            }
        }
        correct += (best == ((const int64_t *)labels.data)[i]);
    }
    printf("C: %ld/%ld correct, accuracy %.4f\n", correct, count, (double)correct / (double)count);
    aot_npy_free(&images);
    aot_npy_free(&labels);
    return 0;
}
