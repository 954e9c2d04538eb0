/*
 * aot runtime: the few types every generated model shares.
 *
 * Header-only on purpose: all functions are static inline, so any number of models (each with its
 * own copy of this file) link into one program without duplicate symbols. No malloc, no I/O,
 * no writable globals; usable freestanding (needs only <stddef.h> and <stdint.h>).
 */
#ifndef AOT_RUNTIME_H_INCLUDED
#define AOT_RUNTIME_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AOT_RUNTIME_VERSION 2

#if defined(__GNUC__) || defined(__clang__)
#define AOT_ALIGNED(n) __attribute__((aligned(n)))
#else
#define AOT_ALIGNED(n)
#endif

/* What every model entry point returns. */
typedef enum aot_status {
    AOT_OK = 0,
    AOT_ERROR_NULL_POINTER = 1,     /* an input, output or the arena pointer is NULL */
    AOT_ERROR_ARENA_ALIGNMENT = 2,  /* the arena is not aligned to <MODEL>_ARENA_ALIGN */
    AOT_ERROR_BAD_ARGUMENT = 3      /* an index or size passed to a helper is out of range */
} aot_status;

static inline const char *aot_status_string(aot_status status)
{
    switch (status) {
    case AOT_OK: return "ok";
    case AOT_ERROR_NULL_POINTER: return "null pointer for an input, output or the arena";
    case AOT_ERROR_ARENA_ALIGNMENT: return "arena is not aligned to the model's ARENA_ALIGN";
    case AOT_ERROR_BAD_ARGUMENT: return "argument out of range";
    }
    return "unknown status";
}

/* Element types, numbered as ONNX TensorProto.DataType numbers them. */
typedef enum aot_dtype {
    AOT_DTYPE_FLOAT32 = 1,
    AOT_DTYPE_UINT8 = 2,
    AOT_DTYPE_INT8 = 3,
    AOT_DTYPE_UINT16 = 4,
    AOT_DTYPE_INT16 = 5,
    AOT_DTYPE_INT32 = 6,
    AOT_DTYPE_INT64 = 7,
    AOT_DTYPE_BOOL = 9,
    AOT_DTYPE_FLOAT64 = 11,
    AOT_DTYPE_UINT32 = 12,
    AOT_DTYPE_UINT64 = 13
} aot_dtype;

static inline size_t aot_dtype_size(aot_dtype dtype)
{
    switch (dtype) {
    case AOT_DTYPE_UINT8: case AOT_DTYPE_INT8: case AOT_DTYPE_BOOL: return 1;
    case AOT_DTYPE_UINT16: case AOT_DTYPE_INT16: return 2;
    case AOT_DTYPE_FLOAT32: case AOT_DTYPE_INT32: case AOT_DTYPE_UINT32: return 4;
    case AOT_DTYPE_INT64: case AOT_DTYPE_FLOAT64: case AOT_DTYPE_UINT64: return 8;
    }
    return 0;
}

static inline const char *aot_dtype_name(aot_dtype dtype)
{
    switch (dtype) {
    case AOT_DTYPE_FLOAT32: return "float32";
    case AOT_DTYPE_UINT8: return "uint8";
    case AOT_DTYPE_INT8: return "int8";
    case AOT_DTYPE_UINT16: return "uint16";
    case AOT_DTYPE_INT16: return "int16";
    case AOT_DTYPE_INT32: return "int32";
    case AOT_DTYPE_INT64: return "int64";
    case AOT_DTYPE_BOOL: return "bool";
    case AOT_DTYPE_FLOAT64: return "float64";
    case AOT_DTYPE_UINT32: return "uint32";
    case AOT_DTYPE_UINT64: return "uint64";
    }
    return "unknown";
}

/* Describes one model input or output, for programs that handle models generically. */
typedef struct aot_tensor_info {
    const char *name;      /* the ONNX name, UTF-8 */
    aot_dtype dtype;
    int32_t rank;
    const int64_t *dims;   /* rank entries */
    size_t size;           /* elements */
    size_t bytes;
} aot_tensor_info;

typedef struct aot_model_info {
    const char *name;
    int32_t num_inputs;
    int32_t num_outputs;
    const aot_tensor_info *inputs;
    const aot_tensor_info *outputs;
    size_t arena_size;     /* bytes of scratch memory run() needs */
    size_t arena_align;    /* required alignment of that memory */
    size_t weights_size;   /* bytes of constant data */
} aot_model_info;

/* Bytes to allocate so that an aligned arena of `arena_size` fits after rounding the pointer up. */
static inline size_t aot_arena_padded_size(const aot_model_info *info)
{
    return info->arena_size + info->arena_align;
}

/* Rounds `memory` up to the model's arena alignment (use with aot_arena_padded_size bytes). */
static inline void *aot_arena_align(const aot_model_info *info, void *memory)
{
    uintptr_t p = (uintptr_t)memory;
    uintptr_t a = (uintptr_t)info->arena_align;
    return (void *)((p + a - 1u) & ~(a - 1u));
}

/*
 * Multi-threading, optional. A model's <name>_run_parallel splits its large loops into tasks and
 * hands them to an executor; the model code itself knows nothing of threads (it stays
 * freestanding). runtime/aot_threads.h provides a pthread pool executor on Linux; bare-metal
 * builds leave it out and pass NULL (serial), or implement this interface on their RTOS.
 *
 * parallel_for must call fn(context, first, last) over disjoint ranges that together cover
 * [0, count) exactly once, in any order and on any threads, and return when all calls have
 * returned. Every iteration computes the same outputs whichever thread runs it, so results are
 * bit-identical to a serial run.
 */
typedef void (*aot_task_fn)(void *context, int32_t first, int32_t last);

typedef struct aot_executor {
    void (*parallel_for)(const struct aot_executor *self, aot_task_fn fn, void *context, int32_t count);
    void *state;      /* the implementation's own data */
    int32_t threads;  /* threads parallel_for uses (1: it would run serially anyway) */
} aot_executor;

/* Whether a run has no threads to share its kernels with: the model's code then calls each
 * kernel's serial form (constant loop bounds) instead of its parallel segments. */
static inline int aot_runs_serially(const aot_executor *executor)
{
    return executor == NULL || executor->parallel_for == NULL || executor->threads <= 1;
}

/* Runs fn over [0, count): through the executor when it has several threads, else in one call. */
static inline void aot_parallel_for(const aot_executor *executor, aot_task_fn fn, void *context, int32_t count)
{
    if (!aot_runs_serially(executor) && count > 1) {
        executor->parallel_for(executor, fn, context, count);
    } else {
        fn(context, 0, count);
    }
}

#ifdef __cplusplus
}
#endif

#endif /* AOT_RUNTIME_H_INCLUDED */
