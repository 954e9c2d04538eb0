/*
 * aot thread pool (see aot_threads.h). C99 + POSIX threads.
 *
 * One job at a time: parallel_for publishes (fn, context, count) under the pool's lock and bumps
 * the job's generation number; then the caller and every worker take chunks of iterations from
 * a shared counter until none is left, and each worker counts itself done. Taking chunks (about
 * four per thread) rather than fixed shares balances uneven iterations, and a thread that the
 * OS preempts holds up only its current chunk. Every worker acknowledges every job, so none can
 * still be reading a job when the next one is written. Workers and the waiting caller first spin on the generation / the pending count
 * (GCC/Clang atomics; a model's kernels come microseconds apart, a condition variable wake-up
 * costs tens of microseconds), then block on a condition variable.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "aot_threads.h"

#include <pthread.h>
#include <stdlib.h>

/* Polls before blocking (about 100 us on current CPUs); -DAOT_THREADS_SPIN=0 never spins. */
#ifndef AOT_THREADS_SPIN
#define AOT_THREADS_SPIN 4000
#endif

#if defined(__GNUC__) || defined(__clang__)
#define AOT_HAVE_ATOMICS 1
static unsigned load_shared(const unsigned *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void store_shared(unsigned *p, unsigned v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static int32_t take_chunk(int32_t *next, int32_t chunk) { return __atomic_fetch_add(next, chunk, __ATOMIC_RELAXED); }
#if defined(__x86_64__) || defined(__i386__)
#define AOT_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
#define AOT_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define AOT_CPU_RELAX() ((void)0)
#endif
#else
/* Without atomics the shared counters are only touched under the lock, and nobody spins. */
#define AOT_HAVE_ATOMICS 0
static unsigned load_shared(const unsigned *p) { return *p; }
static void store_shared(unsigned *p, unsigned v) { *p = v; }
static pthread_mutex_t aot_chunk_lock = PTHREAD_MUTEX_INITIALIZER;
static int32_t take_chunk(int32_t *next, int32_t chunk)
{
    int32_t first;
    pthread_mutex_lock(&aot_chunk_lock);
    first = *next;
    *next += chunk;
    pthread_mutex_unlock(&aot_chunk_lock);
    return first;
}
#define AOT_CPU_RELAX() ((void)0)
#endif

typedef struct aot_worker {
    struct aot_thread_pool *pool;
    int32_t index;  /* 1 .. threads - 1: the part of each job it runs */
    pthread_t thread;
} aot_worker;

struct aot_thread_pool {
    aot_executor executor;
    pthread_mutex_t submit;  /* held by the caller for a whole job: jobs from several threads take turns */
    pthread_mutex_t lock;    /* guards everything below */
    pthread_cond_t wake;     /* a new job or stop, for the workers */
    pthread_cond_t done;     /* the last worker finished, for the caller */
    int32_t threads;
    int32_t started;         /* workers running */
    aot_worker *workers;
    aot_task_fn fn;          /* the current job */
    void *context;
    int32_t count;
    int32_t chunk;           /* iterations taken at a time */
    int32_t next;            /* the first iteration nobody has taken (atomic) */
    unsigned generation;     /* bumped for each job */
    unsigned pending;        /* workers that have not finished the current job */
    int stop;
};

/* Runs chunks of the job until none is left. */
static void run_chunks(aot_thread_pool *pool, aot_task_fn fn, void *context, int32_t count, int32_t chunk)
{
    for (;;) {
        int32_t first = take_chunk(&pool->next, chunk);
        if (first >= count) {
            return;
        }
        fn(context, first, count - first > chunk ? first + chunk : count);
    }
}

static void *worker_main(void *arg)
{
    aot_worker *self = (aot_worker *)arg;
    aot_thread_pool *pool = self->pool;
    unsigned seen = 0;
    for (;;) {
        aot_task_fn fn;
        void *context;
        int32_t count, chunk;
        unsigned left;
#if AOT_HAVE_ATOMICS
        long spin;
        for (spin = 0; spin < AOT_THREADS_SPIN && load_shared(&pool->generation) == seen; ++spin) {
            AOT_CPU_RELAX();
        }
#endif
        pthread_mutex_lock(&pool->lock);
        while (load_shared(&pool->generation) == seen && !pool->stop) {
            pthread_cond_wait(&pool->wake, &pool->lock);
        }
        if (pool->stop) {
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        seen = load_shared(&pool->generation);
        fn = pool->fn;
        context = pool->context;
        count = pool->count;
        chunk = pool->chunk;
        pthread_mutex_unlock(&pool->lock);
        run_chunks(pool, fn, context, count, chunk);
        pthread_mutex_lock(&pool->lock);
        left = load_shared(&pool->pending) - 1u;
        store_shared(&pool->pending, left);
        if (left == 0) {
            pthread_cond_signal(&pool->done);
        }
        pthread_mutex_unlock(&pool->lock);
    }
}

static void pool_parallel_for(const aot_executor *self, aot_task_fn fn, void *context, int32_t count)
{
    aot_thread_pool *pool = (aot_thread_pool *)self->state;
    int32_t threads = pool->started + 1;
    int32_t chunk = (int32_t)(count / (4 * (int64_t)threads));
    if (count <= 0) {
        return;
    }
    if (threads <= 1 || count == 1) {
        fn(context, 0, count);
        return;
    }
    pthread_mutex_lock(&pool->submit);
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->context = context;
    pool->count = count;
    pool->chunk = chunk > 1 ? chunk : 1;
    pool->next = 0;
    store_shared(&pool->pending, (unsigned)pool->started);
    store_shared(&pool->generation, load_shared(&pool->generation) + 1u);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    run_chunks(pool, fn, context, count, chunk > 1 ? chunk : 1);

#if AOT_HAVE_ATOMICS
    {
        long spin;
        for (spin = 0; spin < AOT_THREADS_SPIN && load_shared(&pool->pending) != 0; ++spin) {
            AOT_CPU_RELAX();
        }
    }
#endif
    pthread_mutex_lock(&pool->lock);
    while (load_shared(&pool->pending) != 0) {
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
    pool->threads = threads;
    pool->executor.parallel_for = pool_parallel_for;
    pool->executor.state = pool;
    pool->executor.threads = threads;
    for (i = 1; i < threads; ++i) {
        aot_worker *w = &pool->workers[i];
        w->pool = pool;
        w->index = i;
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
