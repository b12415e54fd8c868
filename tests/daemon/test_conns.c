/* test_conns.c -- the conns suite: the connection guard's accounting (daemon/http/conns.c) driven
 * directly, as libmicrohttpd's HTTP threads drive it (accept, then the STARTED notification on
 * the same thread; CLOSED later): concurrent accepts never hold more than max_connections or
 * max_connections_per_ip between them, a slot whose connection never started comes back, and
 * every count is 0 once everything has closed; the quantd_connections_open gauge follows the
 * count.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "conns.h"
#include "metrics.h"
#include "qdtest.h"

enum { THREADS = 4, HOLD = 8, ROUNDS = 20000 };

typedef struct hammer {
    qd_conns *g;
    struct sockaddr_in addr; /* the thread's client address */
    atomic_int *live;        /* connections accepted and not yet closed, over all threads */
    atomic_int *peak;        /* the most `live` has been */
    pthread_barrier_t *go;   /* the threads start together */
    unsigned seed;
} hammer;

static qd_config guard_config(int max_connections, int per_ip)
{
    qd_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_connections = max_connections;
    cfg.max_conns_per_ip = per_ip;
    cfg.header_timeout = 10;
    cfg.idle_timeout = 60;
    cfg.body_timeout = 20;
    cfg.body_min_rate = 1024;
    return cfg;
}

static struct sockaddr_in ipv4(const char *a)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    ck_assert_int_eq(inet_pton(AF_INET, a, &sa.sin_addr), 1);
    return sa;
}

static enum MHD_Result accept_from(qd_conns *g, const struct sockaddr_in *sa)
{
    return qd_conns_accept(g, (const struct sockaddr *)sa, sizeof *sa);
}

/* One HTTP thread: opens connections (up to HOLD of its own, more than either cap) and closes
 * them at random, counting in `live` between the accept's yes and the close, and recording the
 * peak. */
static void *hammer_main(void *arg)
{
    hammer *h = arg;
    void *ctx[HOLD];
    int n = 0;
    pthread_barrier_wait(h->go);
    for (int r = 0; r < ROUNDS; r++) {
        h->seed = h->seed * 1103515245u + 12345u;
        if (n < HOLD && (n == 0 || (h->seed >> 16) % 2)) {
            if (accept_from(h->g, &h->addr) != MHD_YES) continue;
            int now = atomic_fetch_add(h->live, 1) + 1;
            for (int p = atomic_load(h->peak);
                 now > p && !atomic_compare_exchange_weak(h->peak, &p, now);)
                ;
            ctx[n] = NULL;
            qd_conns_notify(h->g, NULL, &ctx[n], MHD_CONNECTION_NOTIFY_STARTED);
            n++;
        } else {
            int k = (int)((h->seed >> 8) % (unsigned)n);
            atomic_fetch_sub(h->live, 1);
            qd_conns_notify(h->g, NULL, &ctx[k], MHD_CONNECTION_NOTIFY_CLOSED);
            ctx[k] = ctx[--n];
        }
    }
    while (n > 0) {
        atomic_fetch_sub(h->live, 1);
        qd_conns_notify(h->g, NULL, &ctx[--n], MHD_CONNECTION_NOTIFY_CLOSED);
    }
    return NULL;
}

/* THREADS threads hammering a guard (each from its own address, or all from one); returns the
 * peak of connections held at once. Every count is 0 afterwards. */
static int hammer_guard(const qd_config *cfg, bool one_address)
{
    qd_conns *g;
    qd_err err;
    ck_assert_int_eq(qd_conns_start(cfg, NULL, &g, &err), QD_OK);
    atomic_int live = 0, peak = 0;
    hammer h[THREADS];
    pthread_t t[THREADS];
    pthread_barrier_t go;
    ck_assert_int_eq(pthread_barrier_init(&go, NULL, THREADS), 0);
    static const char *const addrs[THREADS] = {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"};
    for (int i = 0; i < THREADS; i++) {
        h[i] = (hammer){.g = g,
                        .addr = ipv4(one_address ? addrs[0] : addrs[i]),
                        .live = &live,
                        .peak = &peak,
                        .go = &go,
                        .seed = 7u + (unsigned)i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
    unsigned open, addresses;
    qd_conns_counts(g, &open, &addresses);
    ck_assert_uint_eq(open, 0);
    ck_assert_uint_eq(addresses, 0);
    qd_conns_stop(g);
    return atomic_load(&peak);
}

/* 4 threads wanting up to 8 connections each against max_connections 6: never more than 6 at
 * once, and 6 reached (one thread alone gets there). Before the check and the count were one
 * step, two threads could both see 5 and both be let in. */
START_TEST(conns_total_cap_holds_under_concurrent_accepts)
{
    qd_config cfg = guard_config(6, 0);
    int peak = hammer_guard(&cfg, false);
    ck_assert_msg(peak <= 6, "%d connections held at once, max_connections 6", peak);
    ck_assert_int_eq(peak, 6);
}
END_TEST

/* The same from one address against max_connections_per_ip 5 (max_connections 1000). */
START_TEST(conns_per_ip_cap_holds_under_concurrent_accepts)
{
    qd_config cfg = guard_config(1000, 5);
    int peak = hammer_guard(&cfg, true);
    ck_assert_msg(peak <= 5, "%d connections held at once, max_connections_per_ip 5", peak);
    ck_assert_int_eq(peak, 5);
}
END_TEST

static void *accept_once(void *arg)
{
    qd_conns *g = arg;
    struct sockaddr_in sa = ipv4("10.0.0.9");
    return (void *)(intptr_t)accept_from(g, &sa);
}

/* max_connections 1: an accepted connection counts at once (a second thread is refused before
 * the first has started); a connection accepted but never started gives its slot back at its
 * thread's next accept; closing the started one leaves no count. */
START_TEST(conns_accept_reserves_and_unstarted_slot_returns)
{
    qd_config cfg = guard_config(1, 0);
    qd_conns *g;
    qd_err err;
    ck_assert_int_eq(qd_conns_start(&cfg, NULL, &g, &err), QD_OK);
    struct sockaddr_in sa = ipv4("10.0.0.8");
    unsigned open, addresses;
    ck_assert_int_eq(accept_from(g, &sa), MHD_YES);
    qd_conns_counts(g, &open, &addresses);
    ck_assert_uint_eq(open, 1);
    ck_assert_uint_eq(addresses, 1);
    pthread_t t;
    void *res;
    ck_assert_int_eq(pthread_create(&t, NULL, accept_once, g), 0);
    pthread_join(t, &res);
    ck_assert_int_eq((int)(intptr_t)res, MHD_NO); /* the slot is taken before STARTED */
    /* libmicrohttpd never started that one: this thread's next accept gets the slot back */
    ck_assert_int_eq(accept_from(g, &sa), MHD_YES);
    qd_conns_counts(g, &open, &addresses);
    ck_assert_uint_eq(open, 1);
    void *ctx = NULL;
    qd_conns_notify(g, NULL, &ctx, MHD_CONNECTION_NOTIFY_STARTED);
    ck_assert_ptr_nonnull(ctx);
    qd_conns_counts(g, &open, &addresses);
    ck_assert_uint_eq(open, 1);
    ck_assert_uint_eq(addresses, 1);
    ck_assert_int_eq(pthread_create(&t, NULL, accept_once, g), 0);
    pthread_join(t, &res);
    ck_assert_int_eq((int)(intptr_t)res, MHD_NO);
    qd_conns_notify(g, NULL, &ctx, MHD_CONNECTION_NOTIFY_CLOSED);
    ck_assert_ptr_null(ctx);
    qd_conns_counts(g, &open, &addresses);
    ck_assert_uint_eq(open, 0);
    ck_assert_uint_eq(addresses, 0);
    ck_assert_int_eq(pthread_create(&t, NULL, accept_once, g), 0);
    pthread_join(t, &res);
    ck_assert_int_eq((int)(intptr_t)res, MHD_YES); /* that thread's slot is never started... */
    qd_conns_stop(g);                              /* ...and goes with the guard */
}
END_TEST

/* quantd_connections_open in the metrics the guard feeds (m), or -1. */
static long gauge_of(qd_metrics *m)
{
    int64_t jobs[QD_JOB_STATE_COUNT] = {0};
    char *text = qd_metrics_render(m, jobs);
    ck_assert_ptr_nonnull(text);
    const char *at = strstr(text, "\nquantd_connections_open ");
    long v = at ? atol(at + strlen("\nquantd_connections_open ")) : -1;
    free(text);
    return v;
}

/* The guard keeps the quantd_connections_open gauge: 0 with nothing open, 1 and 2 as
 * connections are accepted and started, back to 0 as they close. */
START_TEST(conns_gauge_follows_the_count)
{
    qd_config cfg = guard_config(10, 0);
    qd_metrics *m = qd_metrics_new(NULL, NULL, 0);
    ck_assert_ptr_nonnull(m);
    qd_conns *g;
    qd_err err;
    ck_assert_int_eq(qd_conns_start(&cfg, m, &g, &err), QD_OK);
    ck_assert_int_eq(gauge_of(m), 0);
    struct sockaddr_in sa = ipv4("10.0.0.7");
    void *ctx[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(accept_from(g, &sa), MHD_YES);
        qd_conns_notify(g, NULL, &ctx[i], MHD_CONNECTION_NOTIFY_STARTED);
        ck_assert_int_eq(gauge_of(m), i + 1);
    }
    for (int i = 0; i < 2; i++) qd_conns_notify(g, NULL, &ctx[i], MHD_CONNECTION_NOTIFY_CLOSED);
    ck_assert_int_eq(gauge_of(m), 0);
    qd_conns_stop(g);
    qd_metrics_free(m);
}
END_TEST

Suite *suite_conns(void)
{
    Suite *s = suite_create("conns");
    TCase *tc = tcase_create("guard");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, conns_total_cap_holds_under_concurrent_accepts);
    tcase_add_test(tc, conns_per_ip_cap_holds_under_concurrent_accepts);
    tcase_add_test(tc, conns_accept_reserves_and_unstarted_slot_returns);
    tcase_add_test(tc, conns_gauge_follows_the_count);
    suite_add_tcase(s, tc);
    return s;
}
