/* cmd_token.c -- `quantd token create|list|revoke`: access tokens managed on the server's own
 * database (the same calls as /v1/tokens), so the first operator token can be made before anyone
 * can reach the API. The settings' options (--config, --data-dir, --db, ...) say which database;
 * the command's own options are taken out of argv before the settings are loaded. The data
 * directory must exist, and the database used is named on stderr.
 * Exit status: 0 done, 1 failed (the name is taken, no such token, the database), 2 usage.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _DEFAULT_SOURCE /* explicit_bzero, realpath */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd_token.h"
#include "config.h"
#include "fsutil.h"
#include "handlers.h"
#include "timefmt.h"
#include "tokens.h"

static const char usage_text[] =
    "usage: quantd token create --role ROLE --name NAME [--expires DAYS] [SETTING]...\n"
    "       quantd token list [--json] [SETTING]...\n"
    "       quantd token revoke NAME [SETTING]...\n"
    "\n"
    "Manages the access tokens of the quantd whose database the settings name (--config,\n"
    "--data-dir, --db; see quantd --help), also while it runs: a new token works at once, a\n"
    "revoked one stops at once. The data directory must exist (the default, ./var, is\n"
    "relative to the current directory; under systemd it is /var/lib/quantd); the database\n"
    "used is named on stderr.\n"
    "\n"
    "  create   prints the new token on stdout, the only time it is shown (only its\n"
    "           SHA-256 is kept). ROLE: trainer (posts and reads statistics), reader\n"
    "           (reads jobs, reports and outputs) or operator (everything). NAME: 1-64 of\n"
    "           A-Z a-z 0-9 . _ - (it is what the request log shows). DAYS: 1..36500;\n"
    "           without it the token never expires.\n"
    "  list     names, roles, creation and expiry times (--json: as GET /v1/tokens)\n"
    "  revoke   deletes the token NAME\n";

typedef enum action { A_NONE, A_CREATE, A_LIST, A_REVOKE } action;

typedef struct token_args {
    action act;
    const char *role, *name, *expires;
    bool json, help;
    char **settings; /* argv[0] and the settings' options, for qd_config_load */
    int n_settings;
} token_args;

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "quantd token: %s (see 'quantd token --help')\n", msg);
    return 2;
}

/* The value of option `opt` at argv[*i] ("--opt V" or "--opt=V"), or NULL if argv[*i] is not
 * that option. *missing is set when the value is absent. */
static const char *option(int argc, char **argv, int *i, const char *opt, bool *missing)
{
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != '\0') return NULL;
    if (*i + 1 < argc) return argv[++*i];
    *missing = true;
    return NULL;
}

static action parse_action(const char *word)
{
    static const struct {
        const char *name;
        action act;
    } actions[] = {{"create", A_CREATE}, {"list", A_LIST}, {"revoke", A_REVOKE}};
    for (size_t k = 0; k < sizeof actions / sizeof actions[0]; k++)
        if (strcmp(word, actions[k].name) == 0) return actions[k].act;
    return A_NONE;
}

/* One argument at argv[*i]: the command's own option, a positional word, or a setting. */
static int scan_one(token_args *a, int argc, char **argv, int *i, bool *seen_token)
{
    const char *arg = argv[*i];
    bool missing = false;
    const char *v;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return a->help = true, 0;
    if (strcmp(arg, "--json") == 0) return a->json = true, 0;
    if ((v = option(argc, argv, i, "--role", &missing))) return a->role = v, 0;
    if (!missing && (v = option(argc, argv, i, "--name", &missing))) return a->name = v, 0;
    if (!missing && (v = option(argc, argv, i, "--expires", &missing))) return a->expires = v, 0;
    if (missing) return usage("%s needs a value", arg);
    if (arg[0] == '-') {
        int arity = qd_config_flag_arity(arg);
        if (arity < 0) return usage("unknown option '%s'", arg);
        a->settings[a->n_settings++] = argv[*i];
        if (arity == 1 && *i + 1 < argc) a->settings[a->n_settings++] = argv[++*i];
        return 0;
    }
    if (!*seen_token && strcmp(arg, "token") == 0) return *seen_token = true, 0;
    if (a->act == A_NONE) {
        a->act = parse_action(arg);
        return a->act == A_NONE ? usage("unknown action '%s'", arg) : 0;
    }
    if (a->act == A_REVOKE && !a->name) return a->name = arg, 0;
    return usage("unexpected argument '%s'", arg);
}

static int scan(token_args *a, int argc, char **argv)
{
    a->settings = calloc((size_t)argc + 1, sizeof *a->settings);
    if (!a->settings) return usage("%s", "out of memory");
    a->settings[a->n_settings++] = argv[0];
    bool seen_token = false;
    for (int i = 1; i < argc; i++) {
        int rc = scan_one(a, argc, argv, &i, &seen_token);
        if (rc) return rc;
    }
    if (a->help) return 0;
    if (a->act == A_NONE) return usage("%s", "create, list or revoke?");
    if (a->act == A_CREATE && (!a->role || !a->name))
        return usage("%s", "create needs --role and --name");
    if (a->act == A_REVOKE && !a->name) return usage("%s", "revoke needs the token's NAME");
    if (a->act != A_CREATE && (a->role || a->expires))
        return usage("%s", "--role and --expires go with create");
    return 0;
}

static int create(qd_tokens *t, const token_args *a)
{
    qd_role role;
    if (!qd_role_parse(a->role, &role))
        return usage("--role must be trainer, reader or operator, not '%s'", a->role);
    int64_t days = 0;
    if (a->expires) {
        char *end;
        days = strtoll(a->expires, &end, 10);
        if (*end || end == a->expires || days < 1 || days > QD_TOKEN_MAX_DAYS)
            return usage("--expires takes 1..36500 days, not '%s'", a->expires);
    }
    char token[QD_TOKEN_LEN + 1];
    qd_token_info info;
    qd_err err;
    if (qd_tokens_create(t, a->name, role, days, token, &info, &err) != QD_OK) {
        fprintf(stderr, "quantd token: %s\n", err.message);
        return 1;
    }
    printf("%s\n", token);
    explicit_bzero(token, sizeof token);
    char when[QD_TIME_LEN];
    fprintf(stderr, "quantd token: created '%s' (%s, %s%s); it is not shown again\n", info.name,
            qd_role_name(info.role), info.expires_ms ? "expires " : "never expires",
            info.expires_ms ? qd_iso8601(info.expires_ms, when) : "");
    return fflush(stdout) == 0 ? 0 : 1;
}

static int list(qd_tokens *t, bool json)
{
    qd_token_info *all = NULL;
    size_t n = 0;
    qd_err err;
    if (qd_tokens_list(t, &all, &n, &err) != QD_OK) {
        fprintf(stderr, "quantd token: %s\n", err.message);
        return 1;
    }
    int64_t now = qd_now_ms();
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(arr, qd_token_json(&all[i], now));
        json_t *doc = json_pack("{s:o}", "tokens", arr);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(doc);
    } else {
        printf("%-24s %-9s %-25s %s\n", "NAME", "ROLE", "CREATED", "EXPIRES");
        for (size_t i = 0; i < n; i++) {
            char c[QD_TIME_LEN], e[QD_TIME_LEN];
            bool expired = all[i].expires_ms && now >= all[i].expires_ms;
            printf("%-24s %-9s %-25s %s%s\n", all[i].name, qd_role_name(all[i].role),
                   qd_iso8601(all[i].created_ms, c),
                   all[i].expires_ms ? qd_iso8601(all[i].expires_ms, e) : "never",
                   expired ? " (expired)" : "");
        }
    }
    free(all);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int revoke_token(qd_tokens *t, const char *name)
{
    qd_err err;
    if (qd_tokens_revoke(t, name, &err) != QD_OK) {
        fprintf(stderr, "quantd token: %s\n", err.message);
        return 1;
    }
    fprintf(stderr, "quantd token: revoked '%s'\n", name);
    return 0;
}

/* `path` made absolute through its directory (which exists) into buf; `path` when it cannot. */
static const char *absolute(const char *path, char *buf, size_t len)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    int n = slash ? (int)(slash - path) : 0;
    snprintf(dir, sizeof dir, "%.*s", n, slash ? path : ".");
    if (slash && n == 0) snprintf(dir, sizeof dir, "/");
    char real[4096];
    if (!realpath(dir, real)) return path;
    snprintf(buf, len, "%s%s%s", real, strcmp(real, "/") ? "/" : "", slash ? slash + 1 : path);
    return buf;
}

/* The data directory must exist (a mistyped or relative --data-dir would otherwise make a new
 * database no server reads); the database used is named on stderr, absolute, and whether it is
 * new. False with the message printed. */
static bool which_database(const qd_config *cfg)
{
    struct stat sb;
    char cwd[4096], db[8192];
    if (stat(cfg->data_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        bool rel = cfg->data_dir[0] != '/' && getcwd(cwd, sizeof cwd);
        fprintf(stderr,
                "quantd token: the data directory %s%s%s%s does not exist: give the server's, "
                "with --data-dir DIR or --config FILE (its [storage] data_dir); quantd creates it "
                "when it first starts, and under systemd it is /var/lib/quantd\n",
                cfg->data_dir, rel ? " (in " : "", rel ? cwd : "", rel ? ")" : "");
        return false;
    }
    bool exists = stat(cfg->db_path, &sb) == 0;
    fprintf(stderr, "quantd token: database %s%s\n", absolute(cfg->db_path, db, sizeof db),
            exists ? "" : " (new: no server has used it yet)");
    return true;
}

/* The settings, the database (migrated), then the action. */
static int run(const token_args *a)
{
    qd_config cfg;
    qd_command cmd;
    bool exit_now;
    char msg[512];
    if (!qd_config_load(&cfg, a->n_settings, a->settings, &cmd, &exit_now, stdout, msg,
                        sizeof msg)) {
        fprintf(stderr, "quantd token: %s\n", msg);
        return 2;
    }
    qd_store *store = NULL;
    qd_tokens *t = NULL;
    qd_err err;
    int rc = 1;
    const qd_db_tuning tuning = {.busy_timeout_ms = (int)(cfg.store_busy_timeout * 1000)};
    if (!which_database(&cfg))
        ;
    else if (qd_store_open_tuned(cfg.db_path, &tuning, &store, &err) != QD_OK ||
             qd_tokens_open_tuned(cfg.db_path, &tuning, &t, &err) != QD_OK)
        fprintf(stderr, "quantd token: %s\n", err.message);
    else if (a->act == A_CREATE)
        rc = create(t, a);
    else if (a->act == A_LIST)
        rc = list(t, a->json);
    else
        rc = revoke_token(t, a->name);
    qd_tokens_close(t);
    qd_store_close(store);
    qd_config_free(&cfg);
    return rc;
}

bool qd_cmd_is_token(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-') return strcmp(argv[i], "token") == 0;
        if (qd_config_flag_arity(argv[i]) == 1) i++; /* its value */
    }
    return false;
}

int qd_cmd_token(int argc, char **argv)
{
    token_args a = {0};
    int rc = scan(&a, argc, argv);
    if (rc == 0 && a.help) fputs(usage_text, stdout);
    if (rc == 0 && !a.help) rc = run(&a);
    free(a.settings);
    return rc;
}
