/* buffers.c -- the pipeline's memory and hand-offs: large buffers as anonymous mappings, backed
 * by huge pages where the kernel has them and pre-faulted when mapped, recycled through a small
 * bounded cache (resident memory is the buffers in flight plus at most CACHE_BYTES kept for
 * reuse) and a bounded FIFO queue of pointers between the stages.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ck_internal.h"

/* Freed mappings kept for reuse, so the steady state of a run (same-sized chunks one after
 * another) costs no page faults or zeroing. Bounded in count and bytes; ck_buf_trim() empties
 * it when a run ends. Shared by concurrent runs (a daemon's jobs), hence the lock. */
#define CACHE_SLOTS 16
#define CACHE_BYTES ((size_t)96 << 20)

static struct {
    pthread_mutex_t mu;
    void *p[CACHE_SLOTS];
    size_t n[CACHE_SLOTS]; /* mapping size; 0 = empty slot */
    size_t bytes;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* A new mapping of at least HUGE_MIN bytes asks for transparent huge pages (THP "madvise" mode:
 * one fault and one zeroing per 2 MiB instead of 512), and every new mapping is populated writable
 * in one call: the kernel allocates its pages in a loop instead of the quantize kernels taking a
 * trap per 4 KiB page on their first store (on a paravirtualized guest each trap costs several
 * microseconds; BENCHMARKS.md). Both are hints: a kernel without them leaves the pages
 * to be faulted on first use, as before. */
#define HUGE_MIN ((size_t)2 << 20)

static void *map_fresh(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (n >= HUGE_MIN) (void)madvise(p, n, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
    (void)madvise(p, n, MADV_POPULATE_WRITE);
#endif
    return p;
}

static size_t page_round(size_t n)
{
    const size_t page = 4096;
    return n == 0 ? page : (n + page - 1) / page * page;
}

void *ck_buf_alloc(size_t n)
{
    n = page_round(n);
    pthread_mutex_lock(&cache.mu);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache.n[i] == n) {
            void *p = cache.p[i];
            cache.n[i] = 0;
            cache.bytes -= n;
            pthread_mutex_unlock(&cache.mu);
            return p;
        }
    pthread_mutex_unlock(&cache.mu);
    return map_fresh(n);
}

void ck_buf_free(void *p, size_t n)
{
    if (!p) return;
    n = page_round(n);
    pthread_mutex_lock(&cache.mu);
    for (int i = 0; i < CACHE_SLOTS && cache.bytes + n <= CACHE_BYTES; i++)
        if (cache.n[i] == 0) {
            cache.p[i] = p;
            cache.n[i] = n;
            cache.bytes += n;
            pthread_mutex_unlock(&cache.mu);
            return;
        }
    pthread_mutex_unlock(&cache.mu);
    munmap(p, n);
}

void ck_buf_trim(void)
{
    pthread_mutex_lock(&cache.mu);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache.n[i]) {
            munmap(cache.p[i], cache.n[i]);
            cache.n[i] = 0;
        }
    cache.bytes = 0;
    pthread_mutex_unlock(&cache.mu);
}

void *ck_map_range(int fd, uint64_t off, size_t len, void **base, size_t *base_len)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = off / page * page;
    size_t n = (size_t)(off - start) + (len ? len : 1);
    /* MAP_POPULATE: the page-cache pages are mapped now, in the reader thread, not faulted in
     * one by one by the compute stage */
    void *p = mmap(NULL, n, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)start);
    if (p == MAP_FAILED) return NULL;
    *base = p;
    *base_len = n;
    return (char *)p + (off - start);
}

void ck_unmap(void *base, size_t base_len)
{
    if (base) munmap(base, base_len);
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
