/* datalock.c -- the data directory's lock: two quantd processes on one data directory would
 * each take the other's running jobs for interrupted ones and fail them, so `quantd` (serve and
 * migrate) holds an exclusive flock(2) on DATA/quantd.lock for its whole life. The kernel drops
 * the lock when the process ends, however it ends, so a stale lock file never blocks a start;
 * the file holds the holder's PID for the message of the one refused. `quantd token` does not
 * take it: tokens are managed while the server runs.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "datalock.h"

#define LOCK_NAME "quantd.lock"

/* The PID the holder wrote, or 0 when unreadable. */
static long holder_pid(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    return strtol(buf, NULL, 10);
}

qd_status qd_data_lock(const char *data_dir, int *fd, qd_err *err)
{
    *fd = -1;
    size_t len = strlen(data_dir) + sizeof "/" LOCK_NAME;
    char *path = malloc(len);
    if (!path) return qd_fail(err, QD_NOMEM, "out of memory");
    snprintf(path, len, "%s/%s", data_dir, LOCK_NAME);
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    qd_status st = QD_OK;
    if (f < 0) {
        st = qd_fail(err, QD_IO, "%s: %s", path, strerror(errno));
    } else if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        long pid = errno == EWOULDBLOCK ? holder_pid(f) : 0;
        st = errno == EWOULDBLOCK
                 ? qd_fail(err, QD_CONFLICT,
                           "data directory %s is in use by another quantd (pid %ld): two "
                           "processes on one data directory would fail each other's jobs",
                           data_dir, pid)
                 : qd_fail(err, QD_IO, "%s: cannot lock: %s", path, strerror(errno));
    } else {
        char pid[32];
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n)
            st = qd_fail(err, QD_IO, "%s: %s", path, strerror(errno));
    }
    if (st != QD_OK && f >= 0) close(f);
    if (st == QD_OK) *fd = f;
    free(path);
    return st;
}
