/* config_file.c -- the INI config file, read with inih: [section] headers and key = value lines
 * (';' or '#' starts a comment line; " ;" starts an inline comment). Unknown sections and keys,
 * a key outside any section, a key given twice (except source_root, which adds a directory),
 * an unknown key with the known one it probably means ("did you mean 'max_body' in [limits]?"),
 * an over-long line and a line inih cannot parse are errors reported as "FILE:LINE: ...".
 * Line numbers are counted by our own reader, which also sees section headers that hold no key.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_impl.h"

#define MAX_SETTINGS 64

typedef struct file_state {
    cfg_loader *L;
    FILE *f;
    const char *path;
    int lineno;
    int err_line;             /* line of the first error found here, 0 if none */
    int set_on[MAX_SETTINGS]; /* line where each setting was set, 0 if not */
} file_state;

static void fail_line(file_state *fs, const char *what, const char *detail)
{
    if (!fs->err_line) fs->err_line = fs->lineno;
    cfg_fail(fs->L, "%s:%d: %s%s", fs->path, fs->lineno, what, detail);
}

/* "[name]" on this line (after blanks; a UTF-8 BOM on line 1): an unknown name is an error. */
static void check_section(file_state *fs, const char *line)
{
    if (fs->lineno == 1 && strncmp(line, "\xEF\xBB\xBF", 3) == 0) line += 3;
    line += strspn(line, " \t");
    if (*line != '[') return;
    const char *end = strchr(line, ']');
    if (!end) return; /* inih reports it */
    char name[128];
    size_t n = (size_t)(end - line - 1);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, line + 1, n);
    name[n] = '\0';
    if (!cfg_known_section(name)) {
        char detail[200];
        snprintf(detail, sizeof detail, "[%s] (known: %s)", name, cfg_sections_text);
        fail_line(fs, "unknown section ", detail);
    }
}

/* inih's fgets-style reader: counts lines, rejects lines longer than inih's buffer (inih would
 * otherwise parse the rest as a line of its own). */
static char *read_line(char *str, int num, void *stream)
{
    file_state *fs = stream;
    if (!fgets(str, num, fs->f)) return NULL;
    fs->lineno++;
    if (!strchr(str, '\n')) {
        int c = getc(fs->f);
        if (c != EOF && c != '\n') {
            while (c != EOF && c != '\n') c = getc(fs->f);
            char detail[64];
            snprintf(detail, sizeof detail, "%d characters", num - 1);
            fail_line(fs, "line longer than ", detail);
            str[0] = '\0';
            return str;
        }
    }
    check_section(fs, str);
    return str;
}

/* The sections that have `key`, as "[a]" or "[a] or [b]" into buf; false when none has it. */
static bool other_sections(const char *key, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < cfg_n_settings && at < len; i++)
        if (cfg_settings[i].section && strcmp(cfg_settings[i].key, key) == 0)
            at += (size_t)snprintf(buf + at, len - at, "%s[%s]", at ? " or " : "",
                                   cfg_settings[i].section);
    return at > 0;
}

/* Edit distance of a and b ('-' and '_' alike, case ignored), anything above cap as cap + 1;
 * keys are short: longer ones are not compared. */
static size_t key_distance(const char *a, const char *b, size_t cap)
{
    enum { MAX = 48 };
    size_t n = strlen(a), m = strlen(b), row[MAX];
    if (n >= MAX || m >= MAX) return cap + 1;
    for (size_t j = 0; j <= m; j++) row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            char x = a[i - 1] == '-' ? '_' : (char)tolower((unsigned char)a[i - 1]);
            char y = b[j - 1] == '-' ? '_' : (char)tolower((unsigned char)b[j - 1]);
            size_t best = diag + (x != y), up = row[j];
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m] > cap ? cap + 1 : row[m];
}

/* The known key `key` is probably a misspelling of (at most 2 edits, 1 for short keys; '-' for
 * '_' and case free), "" when none is near. */
static const char *closest_key(const char *key)
{
    size_t cap = strlen(key) < 6 ? 1 : 2, best = cap + 1;
    const char *hit = "";
    for (size_t i = 0; i < cfg_n_settings; i++) {
        if (!cfg_settings[i].section) continue;
        size_t d = key_distance(key, cfg_settings[i].key, cap);
        if (d < best) {
            best = d;
            hit = cfg_settings[i].key;
        }
    }
    return hit;
}

static void unknown_key(file_state *fs, const char *section, const char *key)
{
    char detail[256], other[96];
    bool known = other_sections(key, other, sizeof other);
    const char *near = known ? "" : closest_key(key);
    char mean[160] = "";
    if (*near) {
        char where[96];
        other_sections(near, where, sizeof where);
        snprintf(mean, sizeof mean, " (did you mean '%s' in %s?)", near, where);
    }
    if (!*section)
        snprintf(detail, sizeof detail, "'%s' outside a section (it belongs in %s)", key,
                 known ? other : "[server]");
    else if (known)
        snprintf(detail, sizeof detail, "'%s' in [%s] (it belongs in %s)", key, section, other);
    else
        snprintf(detail, sizeof detail, "'%s' in [%s]%s", key, section, mean);
    fail_line(fs, *section ? "unknown key " : "key ", detail);
}

static int on_pair(void *user, const char *section, const char *key, const char *value)
{
    file_state *fs = user;
    if (fs->L->failed) return 1; /* only the first error is reported */
    const cfg_setting *s = cfg_find_key(section, key);
    if (!s) {
        if (cfg_known_section(section) || !*section) unknown_key(fs, section, key);
        return 0; /* an unknown section was reported by check_section */
    }
    size_t i = (size_t)(s - cfg_settings);
    char why[512];
    if (s->kind != CFG_ROOTS && fs->set_on[i]) {
        snprintf(why, sizeof why, ": set twice (first on line %d)", fs->set_on[i]);
        fail_line(fs, key, why);
        return 0;
    }
    fs->set_on[i] = fs->lineno;
    if (!cfg_apply(fs->L, s, value, why, sizeof why)) {
        char detail[sizeof why + 2];
        snprintf(detail, sizeof detail, ": %s", why);
        fail_line(fs, key, detail);
        return 0;
    }
    return 1;
}

static FILE *open_config(cfg_loader *L, const char *path, const char *origin)
{
    FILE *f = fopen(path, "r");
    int err = errno;
    if (!f && !origin && err == ENOENT) return NULL;
    struct stat st;
    if (f && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        f = NULL;
        err = EISDIR;
    }
    if (!f) {
        if (origin)
            cfg_fail(L, "%s: %s: %s", origin, path, strerror(err));
        else
            cfg_fail(L, "%s: %s", path, strerror(err));
    }
    return f;
}

bool cfg_load_file(cfg_loader *L, const char *path, const char *origin)
{
    _Static_assert(MAX_SETTINGS >= 40, "room for every setting");
    if (cfg_n_settings > MAX_SETTINGS) {
        cfg_fail(L, "internal: too many settings");
        return false;
    }
    FILE *f = open_config(L, path, origin);
    if (!f) return !L->failed;
    if (!L->cfg->config_path && !(L->cfg->config_path = strdup(path))) cfg_fail(L, "out of memory");
    file_state fs = {.L = L, .f = f, .path = path};
    L->layer = CFG_FILE;
    int rc = L->failed ? 0 : ini_parse_stream(read_line, &fs, on_pair, &fs);
    if (rc == 0 && ferror(f)) cfg_fail(L, "%s: %s", path, strerror(errno));
    fclose(f);
    /* inih's first error line: a line it could not parse, unless ours came first. */
    if (rc > 0 && (!fs.err_line || rc < fs.err_line))
        snprintf(L->msg, L->msglen, "%s:%d: cannot parse (expected [section] or key = value)", path,
                 rc);
    L->failed = L->failed || rc > 0;
    if (rc == -2) cfg_fail(L, "%s: out of memory", path);
    return !L->failed;
}
