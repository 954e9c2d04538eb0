/*
 * aot thread pool: an aot_executor (aot_runtime.h) backed by POSIX threads, for Linux targets.
 *
 *     aot_thread_pool *pool = aot_thread_pool_create(4);   // the caller + 3 worker threads
 *     status = mynet_run_parallel(&in, &out, arena, aot_thread_pool_executor(pool));
 *     aot_thread_pool_destroy(pool);
 *
 * The workers live as long as the pool: create it once, run many times. Between jobs they spin
 * briefly (a model's kernels follow each other within microseconds), then sleep on a condition
 * variable. Several threads may run models on one pool; their jobs take turns.
 * Not part of bare-metal builds: the model code never calls it, only your program does.
 */
#ifndef AOT_THREADS_H_INCLUDED
#define AOT_THREADS_H_INCLUDED

#include <stdint.h>

#include "aot_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aot_thread_pool aot_thread_pool;

/* A pool running jobs on `threads` threads in all: the calling thread and threads - 1 workers.
 * threads <= 1 gives a pool without workers (its executor runs everything on the caller).
 * NULL if memory or threads cannot be had. */
aot_thread_pool *aot_thread_pool_create(int32_t threads);

/* The executor to pass to <name>_run_parallel; valid until the pool is destroyed. */
const aot_executor *aot_thread_pool_executor(aot_thread_pool *pool);

/* Stops and joins the workers, frees the pool. NULL is ignored. */
void aot_thread_pool_destroy(aot_thread_pool *pool);

#ifdef __cplusplus
}
#endif

#endif /* AOT_THREADS_H_INCLUDED */
