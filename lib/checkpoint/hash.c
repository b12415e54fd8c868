/* hash.c -- the SHA-256 of an output file computed while it is written (nettle). The safetensors
 * writer's bytes land out of file order (pwrite at planned offsets, and the reference layout puts
 * the small scale tensors before the bulk of the codes), while SHA-256 takes bytes in order only.
 * So the writer reports each range it wrote; a hashing thread keeps the written ranges beyond
 * its frontier (merged, sorted) and, whenever the range at the frontier is complete, hashes it,
 * reading the just-written bytes back with pread (from the page cache: no copy is kept, so memory
 * stays one read buffer whatever the disorder). At commit the rest is hashed while the caller
 * fsyncs. Small files (index, config, copies) are hashed in one pass over the buffer they are
 * written from.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_internal.h"

#define HASH_READ (4u << 20) /* bytes read back per pread */

typedef struct range {
    uint64_t lo, hi;
} range;

struct ck_hasher {
    int fd;
    uint64_t size;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    range *r; /* written, not yet hashed: sorted, disjoint, not adjacent */
    size_t n, cap;
    bool oom;        /* a range could not be recorded: the rest is hashed at the end */
    uint64_t hashed; /* bytes [0, hashed) are in the digest */
    bool finishing;  /* the file is complete: hash up to its size */
    bool stop;       /* abandoned */
    int error;       /* errno of a failed read */
    struct sha256_ctx ctx;
    unsigned char *buf;
};

void ck_sha256_hex(struct sha256_ctx *ctx, char hex[65])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(ctx, sizeof d, d);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* ---- the written ranges (under mu) ----------------------------------------------------------- */

/* The first range whose hi >= lo (one it may touch or follow). */
static size_t first_touching(const ck_hasher *h, uint64_t lo)
{
    size_t a = 0, b = h->n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (h->r[m].hi < lo)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* Adds [lo, hi), merging it with the ranges it touches. */
static bool add_range(ck_hasher *h, uint64_t lo, uint64_t hi)
{
    size_t i = first_touching(h, lo), j = i;
    while (j < h->n && h->r[j].lo <= hi) { /* every range touching [lo, hi] */
        if (h->r[j].lo < lo) lo = h->r[j].lo;
        if (h->r[j].hi > hi) hi = h->r[j].hi;
        j++;
    }
    if (j > i) { /* replace r[i..j) by one */
        h->r[i] = (range){lo, hi};
        memmove(&h->r[i + 1], &h->r[j], (h->n - j) * sizeof *h->r);
        h->n -= j - i - 1;
        return true;
    }
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        range *r = realloc(h->r, cap * sizeof *r);
        if (!r) return false;
        h->r = r;
        h->cap = cap;
    }
    memmove(&h->r[i + 1], &h->r[i], (h->n - i) * sizeof *h->r);
    h->r[i] = (range){lo, hi};
    h->n++;
    return true;
}

/* Drops what lies below the frontier. */
static void trim(ck_hasher *h)
{
    size_t k = 0;
    while (k < h->n && h->r[k].hi <= h->hashed) k++;
    memmove(h->r, &h->r[k], (h->n - k) * sizeof *h->r);
    h->n -= k;
    if (h->n && h->r[0].lo < h->hashed) h->r[0].lo = h->hashed;
}

/* Where the thread may hash up to now (== hashed: nothing to do yet). */
static uint64_t ready_to(const ck_hasher *h)
{
    if (h->finishing) return h->size;
    return h->n && h->r[0].lo == h->hashed ? h->r[0].hi : h->hashed;
}

/* ---- the thread -------------------------------------------------------------------------------
 */

/* Hashes [from, to) of the file, read back; false with h->error on a read error. */
static bool hash_span(ck_hasher *h, uint64_t from, uint64_t to)
{
    while (from < to) {
        size_t want = to - from < HASH_READ ? (size_t)(to - from) : HASH_READ;
        ssize_t k = pread(h->fd, h->buf, want, (off_t)from);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            h->error = k < 0 ? errno : EIO;
            return false;
        }
        sha256_update(&h->ctx, (size_t)k, h->buf);
        from += (uint64_t)k;
    }
    return true;
}

static void *hash_main(void *arg)
{
    ck_hasher *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stop && !h->error && h->hashed < h->size) {
        uint64_t from = h->hashed, to = ready_to(h);
        if (to == from) {
            pthread_cond_wait(&h->cv, &h->mu);
            continue;
        }
        pthread_mutex_unlock(&h->mu);
        bool ok = hash_span(h, from, to);
        pthread_mutex_lock(&h->mu);
        if (ok) h->hashed = to;
        trim(h);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- the calls ---------------------------------------------------------------------------------
 */

ck_hasher *ck_hasher_start(int fd, uint64_t size)
{
    ck_hasher *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->fd = fd;
    h->size = size;
    sha256_init(&h->ctx);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (!(h->buf = malloc(HASH_READ)) || pthread_create(&h->thread, NULL, hash_main, h) != 0) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        free(h->buf);
        free(h);
        return NULL;
    }
    return h;
}

void ck_hasher_wrote(ck_hasher *h, uint64_t off, uint64_t n)
{
    if (!h || n == 0) return;
    pthread_mutex_lock(&h->mu);
    uint64_t lo = off < h->hashed ? h->hashed : off, hi = off + n;
    /* without memory for the range, its bytes wait for ck_hasher_finish (hashed from the file
     * all the same); the frontier stops there */
    if (hi > lo && !h->oom && !add_range(h, lo, hi)) h->oom = true;
    if (h->n && h->r[0].lo == h->hashed) pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Frees everything; the thread has been joined. */
static void hasher_release(ck_hasher *h)
{
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->r);
    free(h->buf);
    free(h);
}

void ck_hasher_complete(ck_hasher *h)
{
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->finishing = true;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

bool ck_hasher_finish(ck_hasher *h, char hex[65], int *error)
{
    ck_hasher_complete(h);
    pthread_join(h->thread, NULL);
    bool ok = !h->error && h->hashed == h->size;
    if (ok) ck_sha256_hex(&h->ctx, hex);
    *error = h->error ? h->error : EIO;
    hasher_release(h);
    return ok;
}

void ck_hasher_free(ck_hasher *h)
{
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    hasher_release(h);
}
