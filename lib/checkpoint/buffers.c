/* buffers.c -- the pipeline's memory and hand-offs: large buffers as anonymous mappings (freed
 * memory leaves the process at once, so resident memory tracks the buffers in flight) and a
 * bounded FIFO queue of pointers between the stages.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <sys/mman.h>

#include "ck_internal.h"

void *ck_buf_alloc(size_t n)
{
    if (n == 0) n = 1;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void ck_buf_free(void *p, size_t n)
{
    if (p) munmap(p, n ? n : 1);
}

bool ck_queue_init(ck_queue *q, size_t cap)
{
    q->items = calloc(cap, sizeof *q->items);
    if (!q->items) return false;
    q->cap = cap;
    q->head = q->len = 0;
    q->closed = false;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    return true;
}

void ck_queue_destroy(ck_queue *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free(q->items);
    q->items = NULL;
}

bool ck_queue_push(ck_queue *q, void *item)
{
    pthread_mutex_lock(&q->mu);
    while (q->len == q->cap && !q->closed) pthread_cond_wait(&q->not_full, &q->mu);
    bool ok = !q->closed;
    if (ok) {
        q->items[(q->head + q->len) % q->cap] = item;
        q->len++;
        pthread_cond_signal(&q->not_empty);
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

void *ck_queue_pop(ck_queue *q)
{
    pthread_mutex_lock(&q->mu);
    while (q->len == 0 && !q->closed) pthread_cond_wait(&q->not_empty, &q->mu);
    void *item = NULL;
    if (q->len > 0) {
        item = q->items[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->mu);
    return item;
}

void ck_queue_close(ck_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}
