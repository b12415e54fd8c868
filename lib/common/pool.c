/* pool.c -- the library's small pthread pool: a fixed set of workers that split a range of
 * items through an atomic counter; the calling thread works too.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"

struct quant_pool {
    int threads;
    pthread_t *tids;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t start_cv;
    pthread_cond_t done_cv;
    uint64_t generation;
    int active;
    bool stop;
    quant_pool_fn fn;
    void *arg;
    int64_t nitems;
    atomic_llong next;
};

typedef struct worker_arg {
    quant_pool *pool;
    int id;
} worker_arg;

static void run_items(quant_pool *pool, int worker)
{
    for (;;) {
        long long item = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
        if (item >= pool->nitems) break;
        pool->fn(pool->arg, item, worker);
    }
}

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    quant_pool *pool = wa->pool;
    int id = wa->id;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->generation == seen)
            pthread_cond_wait(&pool->start_cv, &pool->mu);
        if (pool->stop) break;
        seen = pool->generation;
        pthread_mutex_unlock(&pool->mu);
        run_items(pool, id);
        pthread_mutex_lock(&pool->mu);
        if (--pool->active == 0) pthread_cond_signal(&pool->done_cv);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

quant_status quant_pool_new(int threads, quant_pool **out, quant_error *err)
{
    *out = NULL;
    if (threads < 1 || threads > QUANT_MAX_THREADS)
        return quant_fail(err, QUANT_ERR_ARG, "thread count %d is outside 1..%d", threads,
                          QUANT_MAX_THREADS);
    quant_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate the thread pool");
    pool->threads = threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->start_cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    atomic_init(&pool->next, 0);
    if (threads > 1) {
        pool->tids = calloc((size_t)threads - 1, sizeof *pool->tids);
        if (!pool->tids) {
            quant_pool_free(pool);
            return quant_fail(err, QUANT_ERR_NOMEM, "cannot allocate the thread pool");
        }
    }
    for (int i = 1; i < threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->pool = pool;
            wa->id = i;
        }
        if (!wa || pthread_create(&pool->tids[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            quant_pool_free(pool);
            return quant_fail(err, QUANT_ERR_THREAD, "cannot start worker thread %d of %d", i,
                              threads);
        }
        pool->started++;
    }
    *out = pool;
    return QUANT_OK;
}

void quant_pool_free(quant_pool *pool)
{
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = true;
    pthread_cond_broadcast(&pool->start_cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->started; i++) pthread_join(pool->tids[i], NULL);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->start_cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool->tids);
    free(pool);
}

int quant_pool_threads(const quant_pool *pool)
{
    return pool->threads;
}

void quant_pool_run(quant_pool *pool, int64_t nitems, quant_pool_fn fn, void *arg)
{
    if (nitems <= 0) return;
    if (pool->threads == 1 || nitems == 1) {
        for (int64_t i = 0; i < nitems; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->nitems = nitems;
    atomic_store(&pool->next, 0);
    pool->active = pool->threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->start_cv);
    pthread_mutex_unlock(&pool->mu);

    run_items(pool, 0);

    pthread_mutex_lock(&pool->mu);
    while (pool->active > 0) pthread_cond_wait(&pool->done_cv, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
