/* config_impl.h -- what config.c, config_file.c and config_value.c share (not for other files):
 * the table of settings, the loader that applies values from one source at a time, and the
 * parsers of single values.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_CONFIG_IMPL_H
#define QD_CONFIG_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef enum cfg_kind {
    CFG_INT,      /* int in [min, max] */
    CFG_SIZE,     /* int64_t bytes in [min, max], K/M/G/T suffixes */
    CFG_LISTEN,   /* listen_host + listen_port */
    CFG_PATH,     /* char *, non-empty, no control characters */
    CFG_ROOTS,    /* source_roots[]: existing directories, stored as realpath() */
    CFG_LEVEL,    /* qd_log_level */
    CFG_BOOL,     /* bool: true/false, yes/no, on/off, 1/0; a bare flag means true */
    CFG_DURATION, /* int64_t seconds in [min, max]; s, m, h, d suffixes */
    CFG_CHOICE    /* int: the index of the value in choices[] */
} cfg_kind;

/* One row per setting: where it can be set, how it is checked, and its --help text. */
typedef struct cfg_setting {
    const char *section; /* INI section, or NULL when the file cannot set it */
    const char *key;     /* INI key (also the name in messages about the file) */
    const char *env;     /* environment variable, or NULL */
    const char *flag;    /* "--workers" */
    const char *arg;     /* the value's name in --help */
    cfg_kind kind;
    int64_t min, max;     /* CFG_INT, CFG_SIZE */
    size_t off;           /* offsetof(qd_config, field) */
    const char *def;      /* default as text, applied like any value; NULL: none */
    const char *def_help; /* --help's default when def is NULL */
    const char *help;
    const char *const *choices; /* CFG_CHOICE: the accepted words, NULL-terminated */
} cfg_setting;

extern const cfg_setting cfg_settings[];
extern const size_t cfg_n_settings;

/* The sources, lowest precedence first. */
typedef enum cfg_layer { CFG_DEFAULT = 0, CFG_FILE, CFG_ENV, CFG_FLAG } cfg_layer;

typedef struct cfg_loader {
    qd_config *cfg;
    cfg_layer layer;       /* the source being applied */
    cfg_layer roots_layer; /* the source the current source_roots came from */
    char *msg;             /* the first error, "ORIGIN: reason" */
    size_t msglen;
    bool failed;
} cfg_loader;

/* Records the first error (later ones are ignored). */
void cfg_fail(cfg_loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets s from text for the current layer; on a bad value writes the reason (without the
 * origin) to why and returns false. A CFG_ROOTS value is one directory, added to the list
 * (a list from a lower layer is dropped first). */
bool cfg_apply(cfg_loader *L, const cfg_setting *s, const char *text, char *why, size_t whylen);
const cfg_setting *cfg_find_key(const char *section, const char *key);
/* The INI sections, for messages: "server, tls, ...". */
extern const char cfg_sections_text[];
bool cfg_known_section(const char *section);
/* Reads the INI file at path into L->cfg. origin names the source of the path in messages
 * ("--config", "QUANTD_CONFIG"); NULL means the default file, which may be missing. */
bool cfg_load_file(cfg_loader *L, const char *path, const char *origin);

/* Single values (config_value.c). Each writes the reason to why on failure. */
bool cfg_parse_int(const char *s, int64_t min, int64_t max, int64_t *out, char *why, size_t whylen);
bool cfg_parse_size(const char *s, int64_t min, int64_t max, int64_t *out, char *why,
                    size_t whylen);
/* The shortest exact form: "16G", "1536", "0". */
void cfg_format_size(int64_t v, char *buf, size_t len);
bool cfg_parse_bool(const char *s, bool *out, char *why, size_t whylen);
/* "90", "90s", "15m", "24h", "7d" (seconds, minutes, hours, days) within [min, max] seconds. */
bool cfg_parse_duration(const char *s, int64_t min, int64_t max, int64_t *out, char *why,
                        size_t whylen);
/* The shortest exact form: "7d", "90m", "45s", "0". */
void cfg_format_duration(int64_t seconds, char *buf, size_t len);
/* "HOST:PORT" or "[IPv6]:PORT"; *host is malloc'd (without brackets). */
bool cfg_parse_listen(const char *s, char **host, int *port, char *why, size_t whylen);
void cfg_format_listen(const char *host, int port, char *buf, size_t len);

#endif /* QD_CONFIG_IMPL_H */
