/* temps.c -- where outputs are born and published: temporaries named after their creator
 * (NAME.quant-tmp-PID-XXXXXX files, OUT.quant-partial-PID-XXXXXX directories) and locked for as
 * long as it lives, the check that a target is nothing, a regular file or (for a directory run)
 * an empty directory -- never a link, a FIFO, a device or a socket -- and the rename that
 * publishes; and the stale temporaries of runs that died, found and removed.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE /* renameat2, RENAME_NOREPLACE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck_internal.h"

#define TMP_TAG      ".quant-tmp-"
#define PARTIAL_TAG  ".quant-partial-"
#define CK_STALE_AGE (15 * 60) /* seconds without change before a live-looking pid is doubted */

/* Takes the temporary's lock, waiting for a scanner that holds it for a moment (a run that is
 * alive must hold it: quant_remove_stale_temps judges by it). Best effort: a filesystem without
 * locks, or a signal, leaves it unlocked. */
static void lock_temp(int fd)
{
    if (fd >= 0) (void)flock(fd, LOCK_EX);
}

/* ---- creating temporaries ----------------------------------------------------------------------
 */

/* "<base><tag><pid>-XXXXXX", malloc'd. */
static char *temp_name(const char *base, size_t len, const char *tag)
{
    size_t n = len + strlen(tag) + 24;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%.*s%s%ld-XXXXXX", (int)len, base, tag, (long)getpid());
    return s;
}

quant_ck_status ck_temp_file(const char *path, char **tmp, int *fd, quant_ck_error *err)
{
    *fd = -1;
    if (!(*tmp = temp_name(path, strlen(path), TMP_TAG)))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    *fd = mkostemp(*tmp, O_CLOEXEC);
    if (*fd < 0) {
        quant_ck_status st = quant_ck_fail(
            err, QUANT_CK_ERR_IO, "%s: cannot create a temporary file: %s", path, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return st;
    }
    lock_temp(*fd);
    return QUANT_CK_OK;
}

quant_ck_status ck_temp_dir(const char *out, char **tmp, int *lock_fd, quant_ck_error *err)
{
    *lock_fd = -1;
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') len--;
    if (!(*tmp = temp_name(out, len, PARTIAL_TAG)))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (!mkdtemp(*tmp) || chmod(*tmp, 0755) != 0) { /* mkdtemp's 0700; files are 0644 */
        quant_ck_status st = quant_ck_fail(err, QUANT_CK_ERR_IO,
                                           "%.*s: cannot create the temporary directory %s: %s",
                                           (int)len, out, *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return st;
    }
    *lock_fd = open(*tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    lock_temp(*lock_fd);
    return QUANT_CK_OK;
}

/* ---- what may be written over ------------------------------------------------------------------
 */

/* "a FIFO", "a character device", ... for a mode that is not a regular file. */
static const char *type_name(mode_t mode)
{
    static const struct {
        mode_t type;
        const char *name;
    } types[] = {
        {S_IFDIR, "a directory"},    {S_IFIFO, "a FIFO"},    {S_IFCHR, "a character device"},
        {S_IFBLK, "a block device"}, {S_IFSOCK, "a socket"}, {S_IFLNK, "a symbolic link"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if ((mode & S_IFMT) == types[i].type) return types[i].name;
    return "not a regular file";
}

static bool empty_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return false;
    bool empty = true;
    struct dirent *e;
    while (empty && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = false;
    closedir(d);
    return empty;
}

/* `path` without trailing slashes ("out/" names "out" itself: lstat must not go through a link
 * called "out"), malloc'd; NULL on allocation failure. */
static char *no_trailing_slash(const char *path)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    return strndup(path, len);
}

static quant_ck_status check_target(const char *path, ck_target kind, quant_ck_error *err)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return QUANT_CK_OK;
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", path, strerror(errno));
    }
    bool reg = S_ISREG(sb.st_mode), dir = S_ISDIR(sb.st_mode);
    if (S_ISLNK(sb.st_mode))
        return quant_ck_fail(err, QUANT_CK_ERR_ACCESS, "%s: %s", path, CK_OUTPUT_LINK_REFUSED);
    if ((reg && kind == CK_TARGET_FILE) || (dir && kind == CK_TARGET_EMPTY_DIR && empty_dir(path)))
        return QUANT_CK_OK;
    if (reg || (dir && kind != CK_TARGET_FILE))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: output already exists (remove it first)",
                             path);
    return quant_ck_fail(err, QUANT_CK_ERR_ACCESS,
                         "%s: not a regular file (%s); outputs are written as regular files (and "
                         "directories of them) only",
                         path, type_name(sb.st_mode));
}

/* rename(2) that never replaces anything (where the filesystem supports it), else rename(2). */
static int rename_new(const char *from, const char *to)
{
#ifdef RENAME_NOREPLACE
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
#endif
    return rename(from, to);
}

quant_ck_status ck_check_target(const char *path, ck_target kind, quant_ck_error *err)
{
    char *p = no_trailing_slash(path);
    quant_ck_status st =
        p ? check_target(p, kind, err) : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    free(p);
    return st;
}

static quant_ck_status publish(const char *tmp, const char *path, ck_target kind,
                               quant_ck_error *err)
{
    quant_ck_status st = check_target(path, kind, err);
    if (st != QUANT_CK_OK) return st;
    struct stat sb;
    bool exists = lstat(path, &sb) == 0;
    if (exists && S_ISDIR(sb.st_mode) && rmdir(path) != 0) /* the empty directory allowed above */
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: cannot replace: %s", path, strerror(errno));
    bool over_file = exists && S_ISREG(sb.st_mode);
    if ((over_file ? rename(tmp, path) : rename_new(tmp, path)) != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: cannot rename into place: %s", path,
                             strerror(errno));
    return QUANT_CK_OK;
}

quant_ck_status ck_publish(const char *tmp, const char *path, ck_target kind, quant_ck_error *err)
{
    char *p = no_trailing_slash(path);
    quant_ck_status st =
        p ? publish(tmp, p, kind, err) : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    free(p);
    return st;
}

quant_ck_status quant_check_output_file(const char *path, bool replace, quant_ck_error *err)
{
    if (!path) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_check_output_file: NULL path");
    return ck_check_target(path, replace ? CK_TARGET_FILE : CK_TARGET_NEW, err);
}

/* ---- stale temporaries -------------------------------------------------------------------------
 */

/* The creator's pid when `name` is one of ours ("...<tag><pid>-XXXXXX"), else 0. */
static long temp_pid(const char *name, const char *tag)
{
    const char *p = strstr(name, tag), *next;
    while (p && (next = strstr(p + 1, tag)) != NULL) p = next; /* the last one */
    if (!p || p == name) return 0;
    p += strlen(tag);
    long pid = 0;
    const char *digits = p;
    while (*p >= '0' && *p <= '9' && pid < 1L << 31) pid = pid * 10 + (*p++ - '0');
    if (p == digits || *p != '-' || pid <= 0 || pid >= 1L << 31) return 0;
    size_t n = strspn(p + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789");
    return n == 6 && p[7] == '\0' ? pid : 0;
}

typedef struct stale_scan {
    const char *dir;
    DIR *d; /* its listing: entries are looked at relative to it */
    quant_stale_fn fn;
    void *user;
} stale_scan;

static void tell(const stale_scan *sc, const char *path, bool is_dir, bool removed, const char *why)
{
    quant_stale_temp t = {.path = path, .is_dir = is_dir, .removed = removed, .kept_why = why};
    if (sc->fn) sc->fn(sc->user, &t);
}

/* Opens entry `name` when it is of the temporary's type (looked at with lstat first: a link, a
 * FIFO or a device is never opened), read-write for a file (an exclusive lock over NFS needs
 * it). */
static int open_candidate(const stale_scan *sc, const char *name, bool is_dir, struct stat *sb)
{
    int at = dirfd(sc->d);
    if (fstatat(at, name, sb, AT_SYMLINK_NOFOLLOW) != 0 ||
        !(is_dir ? S_ISDIR(sb->st_mode) : S_ISREG(sb->st_mode)))
        return -1;
    int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (is_dir ? O_DIRECTORY : 0);
    int fd = is_dir ? -1 : openat(at, name, flags | O_RDWR);
    if (fd < 0) fd = openat(at, name, flags | O_RDONLY);
    struct stat now;
    if (fd >= 0 && (fstat(fd, &now) != 0 || now.st_ino != sb->st_ino || now.st_dev != sb->st_dev)) {
        close(fd); /* replaced meanwhile */
        fd = -1;
    }
    return fd;
}

/* The latest change to the temporary: its own, or for a directory that of any entry (shards are
 * written inside it while its own time stands still). */
static time_t last_change(int fd, const struct stat *sb, bool is_dir)
{
    time_t t = sb->st_mtime;
    DIR *d = is_dir ? ck_opendir_fd(fd) : NULL;
    struct dirent *e;
    struct stat es;
    while (d && (e = readdir(d)) != NULL)
        if (fstatat(dirfd(d), e->d_name, &es, AT_SYMLINK_NOFOLLOW) == 0 && es.st_mtime > t)
            t = es.st_mtime;
    if (d) closedir(d);
    return t;
}

/* Why the temporary (ours by name and type, open as `fd`) cannot be proven stale, or NULL when
 * it is stale (its lock is then held through `fd`). `*silent`: a live run's, nothing to say. */
static const char *not_stale(int fd, const struct stat *sb, long pid, bool is_dir, bool *silent)
{
    *silent = false;
    if (sb->st_uid != geteuid()) return "it belongs to another user";
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        *silent = errno == EWOULDBLOCK;
        return *silent ? "in use" : "no file lock can be taken on it to tell whether it is in use";
    }
    bool creator_gone = kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    if (creator_gone || time(NULL) - last_change(fd, sb, is_dir) > CK_STALE_AGE) return NULL;
    return "its creator's process id is in use and it changed in the last 15 minutes";
}

/* Removes a stale temporary (a file, or a directory tree); 0, or -1 with errno set. */
static int remove_temp(const char *path, bool is_dir)
{
    if (!is_dir) return unlink(path);
    ck_remove_tree(path); /* the tree, then the directory itself */
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return 0;
    errno = ENOTEMPTY;
    return -1;
}

/* Entry `name` of the scanned directory: ours? stale? removed, with a word either way. */
static void scan_entry(const stale_scan *sc, const char *name)
{
    long pid_file = temp_pid(name, TMP_TAG), pid_dir = temp_pid(name, PARTIAL_TAG);
    bool is_dir = pid_dir != 0, silent = false;
    struct stat sb;
    int fd = pid_file || pid_dir ? open_candidate(sc, name, is_dir, &sb) : -1;
    if (fd < 0) return;
    size_t n = strlen(sc->dir) + strlen(name) + 2;
    char *path = malloc(n);
    const char *why = path ? not_stale(fd, &sb, is_dir ? pid_dir : pid_file, is_dir, &silent) : "";
    if (path) snprintf(path, n, "%s/%s", sc->dir, name);
    if (path && !why) { /* removed while we hold its lock: no one else is at it */
        char msg[160] = "";
        bool removed = remove_temp(path, is_dir) == 0;
        if (!removed && errno != ENOENT)
            snprintf(msg, sizeof msg, "cannot remove it: %s", strerror(errno));
        if (removed || msg[0]) tell(sc, path, is_dir, removed, removed ? NULL : msg);
    } else if (path && !silent) {
        tell(sc, path, is_dir, false, why);
    }
    close(fd);
    free(path);
}

quant_ck_status quant_remove_stale_temps(const char *dir, quant_stale_fn fn, void *user,
                                         quant_ck_error *err)
{
    if (!dir) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_remove_stale_temps: NULL dir");
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return QUANT_CK_OK;
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", dir, strerror(errno));
    }
    stale_scan sc = {.dir = dir, .d = d, .fn = fn, .user = user};
    struct dirent *e;
    while ((e = readdir(d)) != NULL) scan_entry(&sc, e->d_name);
    closedir(d);
    return QUANT_CK_OK;
}
