/* req_limits.c -- the in-memory body budget (max_body_memory: every request body gathered in
 * memory takes its bytes from one counter and gives them back when the request ends, so many
 * slow large posts cannot hold more than the budget between them; past it a request gets 503
 * with Retry-After) and the free-space reserve of the data directory (min_free_disk: 507
 * before a body that would eat into it is taken).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdio.h>
#include <sys/statvfs.h>

#include "config.h"
#include "req_limits.h"

bool qd_budget_take(qd_req *r, uint64_t n)
{
    return n <= UINT64_MAX - r->budget && qd_budget_resize(r, r->budget + n);
}

bool qd_budget_resize(qd_req *r, uint64_t n)
{
    qd_app *app = r->app;
    uint64_t cap = (uint64_t)app->cfg->max_body_memory;
    uint64_t used = atomic_load(&app->body_bytes);
    do {
        uint64_t others = used - r->budget;
        if (n > cap || others > cap - n) return false;
    } while (!atomic_compare_exchange_weak(&app->body_bytes, &used, used - r->budget + n));
    r->budget = n;
    return true;
}

void qd_budget_release(qd_req *r)
{
    if (r->budget) atomic_fetch_sub(&r->app->body_bytes, r->budget);
    r->budget = 0;
}

uint64_t qd_budget_used(const qd_app *app)
{
    return atomic_load(&((qd_app *)app)->body_bytes);
}

enum MHD_Result qd_reply_budget(qd_req *r, uint64_t wanted)
{
    char cap[32];
    qd_config_size_text(r->app->cfg->max_body_memory, cap, sizeof cap);
    return qd_reply_ec_limit(r, QD_EC_BUSY, "max_body_memory", 2,
                             "the server holds as many request bodies in memory as it may "
                             "(max_body_memory = %s); this one needs %" PRIu64
                             " bytes: retry shortly",
                             cap, wanted);
}

/* Bytes the unprivileged may still write under dir. */
static bool free_bytes(const char *dir, uint64_t *avail)
{
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) return false;
    *avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    return true;
}

bool qd_disk_room(const qd_app *app, uint64_t incoming, char *why, size_t len)
{
    uint64_t avail, reserve = (uint64_t)app->cfg->min_free_disk;
    if (!free_bytes(app->cfg->data_dir, &avail)) return true; /* cannot tell: let writes say */
    if (avail >= reserve && avail - reserve >= incoming) return true;
    char want[32];
    qd_config_size_text((int64_t)reserve, want, sizeof want);
    snprintf(why, len,
             "the server's data directory has %" PRIu64 " MiB free; %s would leave less than "
             "min_free_disk (%s)",
             avail >> 20, incoming ? "this body" : "this job", want);
    return false;
}

bool qd_limit_disk(qd_req *r, uint64_t incoming)
{
    char why[256];
    if (qd_disk_room(r->app, incoming, why, sizeof why)) return true;
    qd_reply_ec_limit(r, QD_EC_INSUFFICIENT_STORAGE, "min_free_disk", 0, "%s", why);
    return false;
}
