/* defer.c -- the waiter pool behind qd_req_defer: a FIFO of (fn, arg) items taken by a fixed
 * number of threads, a count of items begun and not ended, and a drain that refuses new items
 * and waits for that count to reach zero (the threads are joined when the pool is freed).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <stdlib.h>

#include "defer.h"

/* Waiter stacks: the work is a call that waits on a condition variable. */
#define WAITER_STACK ((size_t)256 << 10)

typedef struct item {
    void (*fn)(void *arg);
    void *arg;
    struct item *next;
} item;

struct qd_defer {
    pthread_mutex_t mu;
    pthread_cond_t work; /* an item was queued, or the threads should exit */
    pthread_cond_t idle; /* inflight reached 0 */
    item *head, *tail;
    size_t inflight; /* begun and not ended */
    bool stopping;   /* no new items */
    bool exit;       /* the threads leave once the queue is empty */
    pthread_t *threads;
    int n_threads;
};

static void *waiter(void *arg)
{
    qd_defer *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->head && !d->exit) pthread_cond_wait(&d->work, &d->mu);
        if (!d->head) break;
        item *it = d->head;
        d->head = it->next;
        if (!d->head) d->tail = NULL;
        pthread_mutex_unlock(&d->mu);
        it->fn(it->arg);
        free(it);
        pthread_mutex_lock(&d->mu);
        if (--d->inflight == 0) pthread_cond_broadcast(&d->idle);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Joins the first n threads after telling them to exit. */
static void join_threads(qd_defer *d, int n)
{
    pthread_mutex_lock(&d->mu);
    d->exit = true;
    pthread_cond_broadcast(&d->work);
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < n; i++) pthread_join(d->threads[i], NULL);
}

static void destroy(qd_defer *d)
{
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->work);
    pthread_cond_destroy(&d->idle);
    free(d->threads);
    free(d);
}

qd_status qd_defer_start(int threads, qd_defer **out, qd_err *err)
{
    qd_defer *d = calloc(1, sizeof *d);
    if (!d || !(d->threads = calloc((size_t)threads, sizeof *d->threads))) {
        free(d);
        return qd_fail(err, QD_NOMEM, "out of memory");
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->work, NULL);
    pthread_cond_init(&d->idle, NULL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, WAITER_STACK);
    int rc = 0;
    for (; d->n_threads < threads; d->n_threads++)
        if ((rc = pthread_create(&d->threads[d->n_threads], &attr, waiter, d)) != 0) break;
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        join_threads(d, d->n_threads);
        destroy(d);
        return qd_fail(err, QD_IO, "cannot start the request waiter threads");
    }
    *out = d;
    return QD_OK;
}

bool qd_defer_begin(qd_defer *d)
{
    pthread_mutex_lock(&d->mu);
    bool ok = !d->stopping;
    if (ok) d->inflight++;
    pthread_mutex_unlock(&d->mu);
    return ok;
}

void qd_defer_run(qd_defer *d, void (*fn)(void *arg), void *arg)
{
    item *it = malloc(sizeof *it);
    if (!it) { /* no memory for the queue: run it here rather than lose it */
        fn(arg);
        pthread_mutex_lock(&d->mu);
        if (--d->inflight == 0) pthread_cond_broadcast(&d->idle);
        pthread_mutex_unlock(&d->mu);
        return;
    }
    *it = (item){fn, arg, NULL};
    pthread_mutex_lock(&d->mu);
    if (d->tail)
        d->tail->next = it;
    else
        d->head = it;
    d->tail = it;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->mu);
}

void qd_defer_drain(qd_defer *d)
{
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    while (d->inflight > 0) pthread_cond_wait(&d->idle, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

void qd_defer_free(qd_defer *d)
{
    if (!d) return;
    qd_defer_drain(d);
    join_threads(d, d->n_threads);
    destroy(d);
}
