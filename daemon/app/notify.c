/* notify.c -- sd_notify without libsystemd: a datagram on an AF_UNIX socket to $NOTIFY_SOCKET,
 * which holds a file system path ("/run/systemd/notify") or an abstract socket name ("@name",
 * sent with a leading NUL byte and without a terminating one). Other address kinds (vsock:) are
 * not supported and ignored, like an unset variable.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"

/* Fills addr from $NOTIFY_SOCKET; returns the address length, or 0 when there is none. */
static socklen_t notify_addr(struct sockaddr_un *addr)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || (path[0] != '/' && path[0] != '@')) return 0;
    size_t n = strlen(path);
    if (n < 2 || n > sizeof addr->sun_path) return 0; /* "@" alone, or too long */
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path, path, n);
    if (path[0] == '@') {
        addr->sun_path[0] = '\0';
        return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    }
    /* A path must leave room for its terminating NUL. */
    if (n == sizeof addr->sun_path) return 0;
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

bool qd_notify(const char *state)
{
    struct sockaddr_un addr;
    socklen_t alen = notify_addr(&addr);
    if (alen == 0 || !state) return false;
    int saved = errno;
    bool ok = false;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        size_t n = strlen(state);
        ssize_t w;
        do w = sendto(fd, state, n, MSG_NOSIGNAL, (struct sockaddr *)&addr, alen);
        while (w < 0 && errno == EINTR);
        ok = w == (ssize_t)n;
    }
    if (!ok) qd_log(QD_LOG_DEBUG, "sd_notify failed", "state", state, "err", strerror(errno), NULL);
    if (fd >= 0) close(fd);
    errno = saved;
    return ok;
}

bool qd_notifyf(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    return qd_notify(buf);
}
