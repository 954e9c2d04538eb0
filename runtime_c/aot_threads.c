/*
 * aot thread pool (see aot_threads.h). C99 + POSIX threads.
 *
 * The package's aot_threads.h maps the names aot_thread_pool* used here to the package's own
 * (<name>_thread_pool_create ...): the symbols this file defines carry the package's name, so the
 * pools of several packages link into one program. Everything else in it is static.
 *
 * One job at a time: parallel_for publishes (fn, context, count) under the pool's lock with a
 * new generation number and wakes the workers; then the caller and whichever workers are awake
 * take chunks of iterations (about four per thread) from a shared counter until none is left.
 * The caller returns once every iteration has completed -- it never waits for a worker that
 * took no chunk, so a worker the OS has not scheduled yet (a busy machine) costs nothing: the
 * caller runs its share. The counter holds the generation next to the next iteration and is
 * advanced by compare-and-swap, so a worker that wakes up late can never take a chunk of a
 * later job with the function of an earlier one.
 *
 * Workers and the waiting caller first spin for a while (a model's kernels come microseconds
 * apart; a condition variable wake-up costs tens of microseconds, and in a virtual machine a
 * blocked worker's idle vCPU may take milliseconds to come back), then block on a condition
 * variable. The spin is measured in time, not iterations: a pause instruction takes 25 ns on a
 * Zen 4 and about a nanosecond on a Cortex-A72.
 * The fast path needs lock-free 64-bit GCC/Clang atomics; elsewhere everything goes through the
 * lock (same results, slower hand-offs).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "aot_threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* Microseconds of polling before blocking; -DAOT_THREADS_SPIN_US=0 never spins. A
 * millisecond spans the serial kernels between parallel loops, so workers do not block there and
 * wait for their vCPU to be woken (benchmark: light ResNet-50 on 2 threads, runs after a pause). */
#ifndef AOT_THREADS_SPIN_US
#define AOT_THREADS_SPIN_US 1000
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__GCC_ATOMIC_LLONG_LOCK_FREE) && \
    __GCC_ATOMIC_LLONG_LOCK_FREE == 2 && defined(__GCC_ATOMIC_INT_LOCK_FREE) && __GCC_ATOMIC_INT_LOCK_FREE == 2
#define AOT_HAVE_ATOMICS 1
#if defined(__x86_64__) || defined(__i386__)
#define AOT_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
#define AOT_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define AOT_CPU_RELAX() ((void)0)
#endif
#else
#define AOT_HAVE_ATOMICS 0
#endif

typedef struct aot_worker {
    struct aot_thread_pool *pool;
    pthread_t thread;
} aot_worker;

struct aot_thread_pool {
    aot_executor executor;
    pthread_mutex_t submit;  /* held by the caller for a whole job: jobs from several threads take turns */
    pthread_mutex_t lock;    /* guards the job description and the condition variables */
    pthread_cond_t wake;     /* a new job or stop, for the workers */
    pthread_cond_t done;     /* the last chunk completed, for the caller */
    int32_t started;         /* workers running */
    aot_worker *workers;
    aot_task_fn fn;          /* the current job */
    void *context;
    int32_t count;
    int32_t chunk;           /* iterations taken at a time */
    uint32_t generation;     /* the current job's number (atomic) */
    uint64_t cursor;         /* generation << 32 | first iteration nobody has taken (atomic) */
    int32_t completed;       /* iterations of the current job that have finished (atomic) */
    int stop;
};

#if AOT_HAVE_ATOMICS
static uint32_t load_u32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void store_u32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static int32_t load_i32(const int32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void store_i32(int32_t *p, int32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static void store_u64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
#else
/* Without atomics these are only used under pool->lock. */
static uint32_t load_u32(const uint32_t *p) { return *p; }
static void store_u32(uint32_t *p, uint32_t v) { *p = v; }
static int32_t load_i32(const int32_t *p) { return *p; }
static void store_i32(int32_t *p, int32_t v) { *p = v; }
static void store_u64(uint64_t *p, uint64_t v) { *p = v; }
#endif

#if AOT_HAVE_ATOMICS
static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Whether a spin that started at `start` (ns) has used its time; the clock is read every 64th
 * poll only. */
static int spin_over(long polls, uint64_t start)
{
    static const uint64_t spin_ns = (uint64_t)AOT_THREADS_SPIN_US * 1000u;
    return (polls & 63) == 0 && now_ns() - start >= spin_ns;
}
#endif

/* The first iteration of a chunk of job `generation`, or -1 when that job has none left. */
static int32_t take_chunk(aot_thread_pool *pool, uint32_t generation, int32_t count, int32_t chunk)
{
#if AOT_HAVE_ATOMICS
    uint64_t seen = __atomic_load_n(&pool->cursor, __ATOMIC_ACQUIRE);
    for (;;) {
        int32_t first = (int32_t)(uint32_t)seen;
        if ((uint32_t)(seen >> 32) != generation || first >= count) {
            return -1;
        }
        /* first < count <= INT32_MAX and chunk <= count: the sum stays inside the low 32 bits. */
        if (__atomic_compare_exchange_n(&pool->cursor, &seen, seen + (uint64_t)chunk, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            return first;
        }
    }
#else
    int32_t first = -1;
    pthread_mutex_lock(&pool->lock);
    if ((uint32_t)(pool->cursor >> 32) == generation && (int32_t)(uint32_t)pool->cursor < count) {
        first = (int32_t)(uint32_t)pool->cursor;
        pool->cursor += (uint64_t)chunk;
    }
    pthread_mutex_unlock(&pool->lock);
    return first;
#endif
}

/* Counts `n` iterations done; whoever completes the job wakes the caller. */
static void finish_chunk(aot_thread_pool *pool, int32_t n, int32_t count)
{
#if AOT_HAVE_ATOMICS
    if (__atomic_add_fetch(&pool->completed, n, __ATOMIC_ACQ_REL) == count) {
        pthread_mutex_lock(&pool->lock);
        pthread_cond_signal(&pool->done);
        pthread_mutex_unlock(&pool->lock);
    }
#else
    pthread_mutex_lock(&pool->lock);
    pool->completed += n;
    if (pool->completed == count) {
        pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
#endif
}

/* Runs chunks of job `generation` until none is left. */
static void run_chunks(aot_thread_pool *pool, uint32_t generation, aot_task_fn fn, void *context, int32_t count,
                       int32_t chunk)
{
    for (;;) {
        int32_t first = take_chunk(pool, generation, count, chunk);
        int32_t last;
        if (first < 0) {
            return;
        }
        last = count - first > chunk ? first + chunk : count;
        fn(context, first, last);
        finish_chunk(pool, last - first, count);
    }
}

static void *worker_main(void *arg)
{
    aot_thread_pool *pool = ((aot_worker *)arg)->pool;
    uint32_t seen = 0;
    for (;;) {
        aot_task_fn fn;
        void *context;
        int32_t count, chunk;
#if AOT_HAVE_ATOMICS
        if (AOT_THREADS_SPIN_US > 0) {
            uint64_t start = now_ns();
            long polls;
            for (polls = 1; load_u32(&pool->generation) == seen && !spin_over(polls, start); ++polls) {
                AOT_CPU_RELAX();
            }
        }
#endif
        pthread_mutex_lock(&pool->lock);
        while (load_u32(&pool->generation) == seen && !pool->stop) {
            pthread_cond_wait(&pool->wake, &pool->lock);
        }
        if (pool->stop) {
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        seen = load_u32(&pool->generation);
        fn = pool->fn;
        context = pool->context;
        count = pool->count;
        chunk = pool->chunk;
        pthread_mutex_unlock(&pool->lock);
        run_chunks(pool, seen, fn, context, count, chunk);
    }
}

static void pool_parallel_for(const aot_executor *self, aot_task_fn fn, void *context, int32_t count)
{
    aot_thread_pool *pool = (aot_thread_pool *)self->state;
    int32_t threads = pool->started + 1;
    int32_t chunk = (int32_t)(count / (4 * (int64_t)threads));
    uint32_t generation;
    if (count <= 0) {
        return;
    }
    if (threads <= 1 || count == 1) {
        fn(context, 0, count);
        return;
    }
    chunk = chunk > 1 ? chunk : 1;
    pthread_mutex_lock(&pool->submit);
    pthread_mutex_lock(&pool->lock);
    generation = load_u32(&pool->generation) + 1u;
    pool->fn = fn;
    pool->context = context;
    pool->count = count;
    pool->chunk = chunk;
    store_i32(&pool->completed, 0);
    store_u64(&pool->cursor, (uint64_t)generation << 32);
    store_u32(&pool->generation, generation);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    run_chunks(pool, generation, fn, context, count, chunk);

#if AOT_HAVE_ATOMICS
    if (AOT_THREADS_SPIN_US > 0) {
        uint64_t start = now_ns();
        long polls;
        for (polls = 1; load_i32(&pool->completed) != count && !spin_over(polls, start); ++polls) {
            AOT_CPU_RELAX();
        }
    }
#endif
    pthread_mutex_lock(&pool->lock);
    while (load_i32(&pool->completed) != count) {
        pthread_cond_wait(&pool->done, &pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_unlock(&pool->submit);
}

aot_thread_pool *aot_thread_pool_create(int32_t threads)
{
    aot_thread_pool *pool;
    int32_t i;
    if (threads < 1) {
        threads = 1;
    }
    pool = (aot_thread_pool *)calloc(1, sizeof *pool);
    if (pool == NULL) {
        return NULL;
    }
    pool->workers = (aot_worker *)calloc((size_t)threads, sizeof *pool->workers);
    if (pool->workers == NULL) {
        free(pool);
        return NULL;
    }
    pthread_mutex_init(&pool->submit, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    pool->executor.parallel_for = pool_parallel_for;
    pool->executor.state = pool;
    pool->executor.threads = threads;
    for (i = 1; i < threads; ++i) {
        aot_worker *w = &pool->workers[i];
        w->pool = pool;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            aot_thread_pool_destroy(pool);
            return NULL;
        }
        pool->started = i;
    }
    return pool;
}

const aot_executor *aot_thread_pool_executor(aot_thread_pool *pool)
{
    return pool != NULL ? &pool->executor : NULL;
}

void aot_thread_pool_destroy(aot_thread_pool *pool)
{
    int32_t i;
    if (pool == NULL) {
        return;
    }
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    /* A new generation ends the spin of every worker, which then finds `stop` under the lock. */
    store_u32(&pool->generation, load_u32(&pool->generation) + 1u);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (i = 1; i <= pool->started; ++i) {
        pthread_join(pool->workers[i].thread, NULL);
    }
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->submit);
    free(pool->workers);
    free(pool);
}
