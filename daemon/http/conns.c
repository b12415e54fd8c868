/* conns.c -- the connection guard (see conns.h): one record per connection in a list, the
 * per-address counts in a small hash table, and a reaper thread that shuts down the sockets of
 * connections past their phase's deadline, and of idle ones whose client has shut its side.
 * An accept reserves the connection's slot (the total and its address's count) in the same
 * critical section that checks the caps, so concurrent accepts cannot pass a cap together.
 * Everything is under one mutex, held only briefly: phase changes are a few per request, body
 * progress is a relaxed atomic. libmicrohttpd calls the CLOSED notification before it closes the
 * socket, and the record leaves the list under the mutex there, so a socket the reaper shuts
 * down (or peeks at) is always still the connection's own.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conns.h"
#include "log.h"

#define SWEEP_NS  250000000L
#define N_BUCKETS 1024

typedef enum phase { P_NEW, P_NEXT, P_BODY, P_BUSY } phase;

/* A client address: IPv4 (also IPv4-mapped IPv6) as 4 bytes, IPv6 as 16. */
typedef struct ip_key {
    uint8_t len;
    uint8_t b[16];
} ip_key;

typedef struct ip_count {
    ip_key key;
    unsigned n;
    struct ip_count *next;
} ip_count;

struct qd_conn {
    qd_conn *prev, *next;
    int fd;
    ip_key ip;
    phase ph;
    double since;           /* monotonic seconds: when the phase began */
    _Atomic uint64_t bytes; /* body bytes received in P_BODY */
    bool cut;               /* shut down by the reaper */
    double eof_since;       /* `since` of the phase in which the peer's end was seen, or -1 */
};

struct qd_conns {
    const qd_config *cfg;
    qd_metrics *metrics;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC; the reaper's sleep */
    pthread_t reaper;
    bool stopping;
    atomic_bool refuse_all; /* the server is stopping: no new connection */
    qd_conn *head;
    ip_count *buckets[N_BUCKETS];
    unsigned addresses;   /* entries in buckets */
    unsigned open;        /* connections now */
    unsigned refused_ip;  /* refusals since the last sweep (one log line each): per address */
    unsigned refused_all; /* ... and for max_connections */
    unsigned id;          /* this guard's number, from 1: what a thread's reservation names */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- addresses --------------------------------------------------------------------------------
 */

static bool key_of(const struct sockaddr *sa, ip_key *k)
{
    memset(k, 0, sizeof *k);
    if (sa && sa->sa_family == AF_INET) {
        k->len = 4;
        memcpy(k->b, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        bool mapped = IN6_IS_ADDR_V4MAPPED(a);
        k->len = mapped ? 4 : 16;
        memcpy(k->b, mapped ? a->s6_addr + 12 : a->s6_addr, k->len);
        return true;
    }
    return false;
}

static ip_count **slot(qd_conns *g, const ip_key *k)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < k->len; i++) h = (h ^ k->b[i]) * 16777619u;
    ip_count **p = &g->buckets[h % N_BUCKETS];
    while (*p && ((*p)->key.len != k->len || memcmp((*p)->key.b, k->b, k->len) != 0))
        p = &(*p)->next;
    return p;
}

static unsigned count_of(qd_conns *g, const ip_key *k)
{
    ip_count *e = *slot(g, k);
    return e ? e->n : 0;
}

/* +1 or -1 for k; an entry that falls to 0 is freed. */
static void count_add(qd_conns *g, const ip_key *k, int delta)
{
    ip_count **p = slot(g, k);
    if (!*p && delta > 0 && (*p = calloc(1, sizeof **p))) {
        (*p)->key = *k;
        g->addresses++;
    }
    if (!*p) return;
    (*p)->n = (unsigned)((int)(*p)->n + delta);
    if ((*p)->n == 0) {
        ip_count *dead = *p;
        *p = dead->next;
        free(dead);
        g->addresses--;
    }
}

void qd_conns_counts(qd_conns *g, unsigned *open, unsigned *addresses)
{
    pthread_mutex_lock(&g->mu);
    *open = g->open;
    *addresses = g->addresses;
    pthread_mutex_unlock(&g->mu);
}

void qd_conns_refuse_all(qd_conns *g)
{
    if (g) atomic_store(&g->refuse_all, true);
}

/* ---- libmicrohttpd's callbacks ----------------------------------------------------------------
 */

/* The slot an accept on this thread reserved (counted in `open` and its address's count) for the
 * connection libmicrohttpd then starts on the same thread (accept and the STARTED notification
 * run back to back in the thread that accepted). A connection libmicrohttpd fails to set up
 * after the accept never starts: its slot is given back at this thread's next accept. */
typedef struct reservation {
    unsigned guard; /* the guard's id (0: none), not its address, which a later guard may reuse */
    ip_key ip;
} reservation;
static _Thread_local reservation held;
static atomic_uint guard_ids;

/* The connection count moves by delta (+1, -1), and the metrics' gauge with it. Under g->mu. */
static void open_add(qd_conns *g, int delta)
{
    g->open = (unsigned)((int)g->open + delta);
    if (g->metrics) qd_metrics_connections_open(g->metrics, g->open);
}

/* Gives back one slot: the connection count and its address's count. Under g->mu. */
static void slot_release(qd_conns *g, const ip_key *ip)
{
    if (ip->len) count_add(g, ip, -1);
    open_add(g, -1);
}

/* Whether this thread holds a reservation for g; if so, its address into ip and the reservation
 * cleared. Under g->mu. */
static bool reservation_take(qd_conns *g, ip_key *ip)
{
    if (held.guard != g->id) return false;
    *ip = held.ip;
    held.guard = 0;
    return true;
}

/* The check and the count in one critical section, so that concurrent accepts on several HTTP
 * threads can never together go past max_connections or max_connections_per_ip. */
enum MHD_Result qd_conns_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    qd_conns *g = cls;
    if (atomic_load(&g->refuse_all)) return MHD_NO;
    unsigned cap = (unsigned)g->cfg->max_conns_per_ip;
    ip_key k, stale;
    if (!key_of(addr, &k)) k.len = 0;
    pthread_mutex_lock(&g->mu);
    if (reservation_take(g, &stale)) slot_release(g, &stale); /* its connection never started */
    bool all_ok = g->open < (unsigned)g->cfg->max_connections;
    bool ip_ok = cap == 0 || !k.len || count_of(g, &k) < cap;
    g->refused_all += !all_ok;
    g->refused_ip += all_ok && !ip_ok;
    if (all_ok && ip_ok) {
        open_add(g, +1);
        if (k.len) count_add(g, &k, +1);
        held = (reservation){.guard = g->id, .ip = k};
    }
    pthread_mutex_unlock(&g->mu);
    return all_ok && ip_ok ? MHD_YES : MHD_NO;
}

/* A connection starts: it takes the slot its accept reserved (or, for one that did not come
 * through qd_conns_accept, a slot now). mc NULL (the guard's tests) gives a record without a
 * socket, which the reaper never cuts. */
static void conn_started(qd_conns *g, struct MHD_Connection *mc, void **ctx)
{
    qd_conn *c = calloc(1, sizeof *c);
    const union MHD_ConnectionInfo *fd =
        mc ? MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    const union MHD_ConnectionInfo *ad =
        mc ? MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS) : NULL;
    ip_key ip;
    pthread_mutex_lock(&g->mu);
    if (!reservation_take(g, &ip)) {
        if (!ad || !key_of(ad->client_addr, &ip)) ip.len = 0;
        if (ip.len) count_add(g, &ip, +1);
        open_add(g, +1);
    }
    if (!c) { /* not guarded: only the idle timeout applies to it, and it holds no slot */
        slot_release(g, &ip);
        pthread_mutex_unlock(&g->mu);
        return;
    }
    c->fd = fd ? fd->connect_fd : -1;
    c->ip = ip;
    c->ph = P_NEW;
    c->since = now_s();
    c->eof_since = -1;
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    pthread_mutex_unlock(&g->mu);
    *ctx = c;
}

static void conn_closed(qd_conns *g, void **ctx)
{
    qd_conn *c = *ctx;
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    slot_release(g, &c->ip);
    pthread_mutex_unlock(&g->mu);
    free(c);
    *ctx = NULL;
}

void qd_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        conn_started(cls, c, socket_context);
    else if (code == MHD_CONNECTION_NOTIFY_CLOSED)
        conn_closed(cls, socket_context);
}

/* ---- phases ----------------------------------------------------------------------------------
 */

/* The guard itself: the record is only reachable while its connection lives, and its
 * connection's thread is the only one changing its phase; the reaper reads under the mutex. */
static qd_conns *the_guard;

qd_conn *qd_conn_of(struct MHD_Connection *mc)
{
    if (!the_guard) return NULL;
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

static void set_phase(qd_conn *c, phase ph)
{
    if (!c || !the_guard) return;
    pthread_mutex_lock(&the_guard->mu);
    c->ph = ph;
    c->since = now_s();
    atomic_store_explicit(&c->bytes, 0, memory_order_relaxed);
    pthread_mutex_unlock(&the_guard->mu);
}

void qd_conn_headers_in(qd_conn *c, bool body_follows)
{
    set_phase(c, body_follows ? P_BODY : P_BUSY);
}

void qd_conn_body_bytes(qd_conn *c, uint64_t n)
{
    if (c) atomic_fetch_add_explicit(&c->bytes, n, memory_order_relaxed);
}

void qd_conn_busy(qd_conn *c)
{
    if (c && c->ph != P_BUSY) set_phase(c, P_BUSY);
}

void qd_conn_request_done(qd_conn *c)
{
    set_phase(c, P_NEXT);
}

/* ---- the reaper -------------------------------------------------------------------------------
 */

typedef enum cut_reason { CUT_HEADERS, CUT_BODY, CUT_COUNT } cut_reason;

/* Whether c is past its deadline at time t, and why. */
static bool overdue(const qd_config *cfg, const qd_conn *c, double t, cut_reason *why)
{
    double age = t - c->since;
    switch (c->ph) {
    case P_NEW:
        *why = CUT_HEADERS;
        return age > cfg->header_timeout;
    case P_NEXT:
        *why = CUT_HEADERS;
        return age > cfg->idle_timeout + cfg->header_timeout;
    case P_BODY: {
        double got = (double)atomic_load_explicit(&c->bytes, memory_order_relaxed);
        *why = CUT_BODY;
        return age > cfg->body_timeout + got / (double)cfg->body_min_rate;
    }
    case P_BUSY:
        break;
    }
    return false;
}

/* Whether the peer has shut its sending side and libmicrohttpd has read everything it sent:
 * nothing more can arrive on fd. */
static bool peer_done(int fd)
{
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* A connection waiting for a request (P_NEW, P_NEXT) whose peer has shut its side can never
 * send one, but libmicrohttpd 0.9.75 keeps it until header_timeout (or idle_timeout): it is
 * closed once its end has been seen on two sweeps in the same phase (a request read whole but
 * not yet handed to its handler changes the phase within microseconds, never 250 ms). */
static bool finished_peer(qd_conn *c)
{
    if ((c->ph != P_NEW && c->ph != P_NEXT) || !peer_done(c->fd)) return false;
    if (c->eof_since == c->since) return true;
    c->eof_since = c->since;
    return false;
}

static void sweep(qd_conns *g)
{
    unsigned cut[CUT_COUNT] = {0}, refused[2];
    double t = now_s();
    pthread_mutex_lock(&g->mu);
    for (qd_conn *c = g->head; c; c = c->next) {
        cut_reason why;
        if (c->cut || c->fd < 0) continue;
        if (finished_peer(c)) { /* not a limit: the client is done */
            shutdown(c->fd, SHUT_RDWR);
            c->cut = true;
            continue;
        }
        if (!overdue(g->cfg, c, t, &why)) continue;
        shutdown(c->fd, SHUT_RDWR); /* libmicrohttpd sees the end and closes it */
        c->cut = true;
        cut[why]++;
    }
    refused[0] = g->refused_ip;
    refused[1] = g->refused_all;
    g->refused_ip = g->refused_all = 0;
    pthread_mutex_unlock(&g->mu);
    static const char *const limit[CUT_COUNT] = {"header_timeout", "body_min_rate"};
    for (int k = 0; k < CUT_COUNT; k++) {
        if (!cut[k]) continue;
        char n[16];
        snprintf(n, sizeof n, "%u", cut[k]);
        qd_log(QD_LOG_WARN, "slow connections closed", "count", n, "limit", limit[k], NULL);
        if (g->metrics) qd_metrics_limit(g->metrics, limit[k], cut[k]);
    }
    static const char *const refusal[2] = {"max_connections_per_ip", "max_connections"};
    for (int k = 0; k < 2; k++) {
        if (!refused[k]) continue;
        char n[16];
        snprintf(n, sizeof n, "%u", refused[k]);
        qd_log(QD_LOG_WARN, "connections refused", "count", n, "limit", refusal[k], NULL);
        if (g->metrics) qd_metrics_limit(g->metrics, refusal[k], refused[k]);
    }
}

static void *reaper_main(void *arg)
{
    qd_conns *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += SWEEP_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &until);
        if (g->stopping) break;
        pthread_mutex_unlock(&g->mu);
        sweep(g);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

qd_status qd_conns_start(const qd_config *cfg, qd_metrics *metrics, qd_conns **out, qd_err *err)
{
    *out = NULL;
    qd_conns *g = calloc(1, sizeof *g);
    if (!g) return qd_fail(err, QD_NOMEM, "out of memory");
    g->cfg = cfg;
    g->metrics = metrics;
    g->id = atomic_fetch_add(&guard_ids, 1) + 1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    bool ok = pthread_mutex_init(&g->mu, NULL) == 0 && pthread_cond_init(&g->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok || pthread_create(&g->reaper, NULL, reaper_main, g) != 0) {
        free(g);
        return qd_fail(err, QD_NOMEM, "cannot start the connection guard");
    }
    the_guard = g;
    *out = g;
    return QD_OK;
}

void qd_conns_stop(qd_conns *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stopping = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->reaper, NULL);
    the_guard = NULL;
    for (int i = 0; i < N_BUCKETS; i++)
        while (g->buckets[i]) {
            ip_count *e = g->buckets[i];
            g->buckets[i] = e->next;
            free(e);
        }
    while (g->head) { /* none once the server has stopped; whatever is left is freed */
        qd_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}
