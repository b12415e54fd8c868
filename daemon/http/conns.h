/* conns.h -- the connection guard (conns.c): libmicrohttpd only closes connections that are
 * idle, so a client that trickles a byte now and then could hold a connection for ever. The
 * guard follows every connection through its phases and cuts (shutdown(2)) those too slow:
 *   new        accepted, no request yet: its line and headers within header_timeout;
 *   next       kept alive after a request: the next request's headers within idle_timeout +
 *              header_timeout of the previous one's end;
 *   body       headers in, a body coming: body_timeout of grace, then body_min_rate bytes/s on
 *              average since the headers;
 *   busy       the server's turn (the handler, a deferred wait, the reply): no deadline here
 *              (libmicrohttpd's idle timeout covers a client that stops reading).
 * It also refuses a connection beyond max_connections, or from an address that holds
 * max_connections_per_ip already (at accept: closed without an answer, since no request has
 * been read yet; logged and counted once per sweep).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_CONNS_H
#define QD_CONNS_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"
#include "metrics.h"
#include "store.h"

typedef struct qd_conns qd_conns;
typedef struct qd_conn qd_conn; /* one connection, the socket context libmicrohttpd keeps */

/* Starts the guard's reaper thread (a sweep every 250 ms). metrics may be NULL. */
qd_status qd_conns_start(const qd_config *cfg, qd_metrics *metrics, qd_conns **out, qd_err *err);
/* Stops the reaper; call after the server has stopped (every connection closed). */
void qd_conns_stop(qd_conns *g); /* NULL is a no-op */

/* What the guard counts now: open connections, and addresses holding at least one (an address
 * whose count falls to 0 leaves the table). Both are 0 once every connection has closed. */
void qd_conns_counts(qd_conns *g, unsigned *open, unsigned *addresses);

/* From now on every new connection is refused (the server is stopping). */
void qd_conns_refuse_all(qd_conns *g);
/* libmicrohttpd's accept policy (MHD_OPTION_APC, cls = the guard): MHD_NO refuses; MHD_YES has
 * counted the connection already (checked and counted under one lock), and the STARTED
 * notification that follows on the same thread takes that slot. */
enum MHD_Result qd_conns_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
/* MHD_OPTION_NOTIFY_CONNECTION (cls = the guard): a connection starts or closes. c may be NULL
 * (tests): a record without a socket. */
void qd_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);

/* The guard's record of a connection (NULL when the guard is not in use). */
qd_conn *qd_conn_of(struct MHD_Connection *c);
/* Phase changes, from the HTTP thread serving the connection. NULL is a no-op. */
void qd_conn_headers_in(qd_conn *c, bool body_follows); /* body, or busy */
void qd_conn_body_bytes(qd_conn *c, uint64_t n);        /* progress of the body */
void qd_conn_busy(qd_conn *c);                          /* the body is in, or a reply queued */
void qd_conn_request_done(qd_conn *c);                  /* next */

#endif /* QD_CONNS_H */
