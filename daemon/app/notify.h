/* notify.h -- systemd's readiness protocol (sd_notify) without libsystemd: one datagram to the
 * AF_UNIX socket named by $NOTIFY_SOCKET (a path, or '@' for the abstract namespace).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_NOTIFY_H
#define QD_NOTIFY_H

#include <stdbool.h>

/* Sends state ("READY=1", "STOPPING=1", "RELOADING=1", "STATUS=text", several separated by
 * '\n') to the service manager. Does nothing and returns false when $NOTIFY_SOCKET is unset
 * (not started by systemd with Type=notify); a failure to send is logged at debug level and
 * also returns false. Thread-safe as long as nobody changes the environment meanwhile. */
bool qd_notify(const char *state);
/* qd_notify with a printf format, e.g. qd_notifyf("STATUS=%d jobs running", n); the text is cut
 * at 1024 bytes. */
bool qd_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* QD_NOTIFY_H */
