/* inputs.c -- the files of checkpoint jobs while they arrive (inputs.h): a list of entries under
 * the registry's mutex; each entry has its own mutex and condvar (CLOCK_REALTIME, as the deadline
 * is wall-clock ms from the job's creation) and an atomic reference count (the registry holds
 * one while the job is registered; a PUT and a run hold one each).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inputs.h"
#include "quant_pipeline.h"

typedef struct input_file {
    char *name;
    uint64_t bytes; /* on disk so far */
    bool started;
    bool whole;    /* every byte in, size set: readable whole (waits end) */
    bool complete; /* whole and synced: it counts as received */
} input_file;

struct qd_job_inputs {
    int64_t id;
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t deadline_ms;
    size_t n, n_complete;
    input_file *files;
    bool failed;
    char why[256];
    qd_job_inputs *next; /* in the registry */
};

struct qd_inputs {
    pthread_mutex_t mu;
    qd_job_inputs *head;
};

static void entry_free(qd_job_inputs *ji)
{
    for (size_t i = 0; i < ji->n; i++) free(ji->files[i].name);
    free(ji->files);
    pthread_mutex_destroy(&ji->mu);
    pthread_cond_destroy(&ji->cv);
    free(ji);
}

void qd_inputs_release(qd_job_inputs *ji)
{
    if (ji && atomic_fetch_sub(&ji->refs, 1) == 1) entry_free(ji);
}

qd_status qd_inputs_new(qd_inputs **out, qd_err *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return qd_fail(err, QD_NOMEM, "out of memory");
    pthread_mutex_init(&(*out)->mu, NULL);
    return QD_OK;
}

void qd_inputs_free(qd_inputs *in)
{
    if (!in) return;
    for (qd_job_inputs *ji = in->head, *next; ji; ji = next) {
        next = ji->next;
        qd_inputs_release(ji);
    }
    pthread_mutex_destroy(&in->mu);
    free(in);
}

static qd_job_inputs *entry_new(int64_t id, const char *const *names, size_t n, int64_t deadline)
{
    qd_job_inputs *ji = calloc(1, sizeof *ji);
    if (!ji) return NULL;
    ji->files = calloc(n ? n : 1, sizeof *ji->files);
    if (!ji->files) {
        free(ji);
        return NULL;
    }
    ji->id = id;
    ji->deadline_ms = deadline;
    pthread_mutex_init(&ji->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_REALTIME);
    pthread_cond_init(&ji->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&ji->refs, 1);
    for (size_t i = 0; i < n; i++, ji->n++)
        if (!(ji->files[i].name = strdup(names[i]))) {
            entry_free(ji);
            return NULL;
        }
    return ji;
}

qd_status qd_inputs_add(qd_inputs *in, int64_t id, const char *const *names, size_t n,
                        int64_t deadline_ms, qd_err *err)
{
    qd_job_inputs *ji = entry_new(id, names, n, deadline_ms);
    if (!ji) return qd_fail(err, QD_NOMEM, "out of memory");
    pthread_mutex_lock(&in->mu);
    ji->next = in->head;
    in->head = ji;
    pthread_mutex_unlock(&in->mu);
    return QD_OK;
}

qd_job_inputs *qd_inputs_get(qd_inputs *in, int64_t id)
{
    pthread_mutex_lock(&in->mu);
    qd_job_inputs *ji = in->head;
    while (ji && ji->id != id) ji = ji->next;
    if (ji) atomic_fetch_add(&ji->refs, 1);
    pthread_mutex_unlock(&in->mu);
    return ji;
}

void qd_inputs_remove(qd_inputs *in, int64_t id)
{
    pthread_mutex_lock(&in->mu);
    qd_job_inputs **p = &in->head;
    while (*p && (*p)->id != id) p = &(*p)->next;
    qd_job_inputs *ji = *p;
    if (ji) *p = ji->next;
    pthread_mutex_unlock(&in->mu);
    qd_inputs_release(ji);
}

static ssize_t find(const qd_job_inputs *ji, const char *name)
{
    for (size_t i = 0; i < ji->n; i++)
        if (strcmp(ji->files[i].name, name) == 0) return (ssize_t)i;
    return -1;
}

qd_status qd_inputs_begin(qd_job_inputs *ji, const char *name, size_t *idx, qd_err *err)
{
    pthread_mutex_lock(&ji->mu);
    ssize_t i = find(ji, name);
    qd_status st = QD_OK;
    if (i < 0)
        st = qd_fail(err, QD_NOT_FOUND, "job %lld did not list a file named '%s'",
                     (long long)ji->id, name);
    else if (ji->failed)
        st = qd_fail(err, QD_CONFLICT, "job %lld is not receiving files any more (%s)",
                     (long long)ji->id, ji->why);
    else if (ji->files[i].started)
        st = qd_fail(err, QD_CONFLICT, "'%s' of job %lld was %s already", name, (long long)ji->id,
                     ji->files[i].complete ? "received" : "being received");
    else {
        ji->files[i].started = true;
        *idx = (size_t)i;
    }
    pthread_mutex_unlock(&ji->mu);
    return st;
}

void qd_inputs_progress(qd_job_inputs *ji, size_t idx, uint64_t bytes)
{
    pthread_mutex_lock(&ji->mu);
    ji->files[idx].bytes = bytes;
    pthread_cond_broadcast(&ji->cv);
    pthread_mutex_unlock(&ji->mu);
}

void qd_inputs_whole(qd_job_inputs *ji, size_t idx)
{
    pthread_mutex_lock(&ji->mu);
    ji->files[idx].whole = true;
    pthread_cond_broadcast(&ji->cv);
    pthread_mutex_unlock(&ji->mu);
}

bool qd_inputs_complete(qd_job_inputs *ji, size_t idx)
{
    pthread_mutex_lock(&ji->mu);
    if (!ji->files[idx].complete) {
        ji->files[idx].whole = ji->files[idx].complete = true;
        ji->n_complete++;
    }
    bool all = ji->n_complete == ji->n && !ji->failed;
    pthread_cond_broadcast(&ji->cv);
    pthread_mutex_unlock(&ji->mu);
    return all;
}

bool qd_inputs_fail(qd_job_inputs *ji, const char *why)
{
    pthread_mutex_lock(&ji->mu);
    bool first = !ji->failed;
    if (first) {
        ji->failed = true;
        snprintf(ji->why, sizeof ji->why, "%s", why);
    }
    pthread_cond_broadcast(&ji->cv);
    pthread_mutex_unlock(&ji->mu);
    return first;
}

bool qd_inputs_failed(qd_job_inputs *ji, char *why, size_t len)
{
    pthread_mutex_lock(&ji->mu);
    bool failed = ji->failed;
    if (failed && why) snprintf(why, len, "%s", ji->why);
    pthread_mutex_unlock(&ji->mu);
    return failed;
}

static size_t missing_locked(const qd_job_inputs *ji, char *buf, size_t len)
{
    size_t n = 0, used = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < ji->n; i++) {
        if (ji->files[i].complete) continue;
        n++;
        if (used + strlen(ji->files[i].name) + 8 >= len) {
            if (used + 4 < len) used += (size_t)snprintf(buf + used, len - used, "...");
            used = len; /* nothing more fits */
            continue;
        }
        used +=
            (size_t)snprintf(buf + used, len - used, "%s%s", n > 1 ? ", " : "", ji->files[i].name);
    }
    return n;
}

size_t qd_inputs_missing(qd_job_inputs *ji, char *buf, size_t len)
{
    pthread_mutex_lock(&ji->mu);
    size_t n = missing_locked(ji, buf, len);
    pthread_mutex_unlock(&ji->mu);
    return n;
}

qd_status qd_inputs_expired(qd_inputs *in, int64_t now_ms, int64_t **ids, size_t *n, qd_err *err)
{
    *ids = NULL;
    *n = 0;
    size_t cap = 0;
    qd_status st = QD_OK;
    pthread_mutex_lock(&in->mu);
    for (qd_job_inputs *ji = in->head; ji && st == QD_OK; ji = ji->next) {
        pthread_mutex_lock(&ji->mu);
        bool late = ji->deadline_ms <= now_ms && ji->n_complete < ji->n && !ji->failed;
        pthread_mutex_unlock(&ji->mu);
        if (!late) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            int64_t *p = realloc(*ids, cap * sizeof *p);
            if (!p) {
                st = qd_fail(err, QD_NOMEM, "out of memory");
                break;
            }
            *ids = p;
        }
        (*ids)[(*n)++] = ji->id;
    }
    pthread_mutex_unlock(&in->mu);
    return st;
}

bool qd_inputs_wait(void *user, const char *name, uint64_t end, char *why, size_t why_len)
{
    qd_job_inputs *ji = user;
    pthread_mutex_lock(&ji->mu);
    ssize_t i = find(ji, name);
    bool ok = false;
    struct timespec until = {.tv_sec = ji->deadline_ms / 1000,
                             .tv_nsec = (long)(ji->deadline_ms % 1000) * 1000000L};
    for (;;) {
        if (i < 0) {
            snprintf(why, why_len, "not a file the job listed");
            break;
        }
        const input_file *f = &ji->files[i];
        if (f->whole || (end != QUANT_INPUT_WHOLE && f->bytes >= end)) {
            ok = true;
            break;
        }
        if (ji->failed) {
            snprintf(why, why_len, "%s", ji->why);
            break;
        }
        if (pthread_cond_timedwait(&ji->cv, &ji->mu, &until) != 0 && !f->whole && !ji->failed &&
            (end == QUANT_INPUT_WHOLE || f->bytes < end)) {
            snprintf(why, why_len, "not received within input_timeout");
            break;
        }
    }
    pthread_mutex_unlock(&ji->mu);
    return ok;
}
