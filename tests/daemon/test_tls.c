/* test_tls.c -- the TLS suite: qd_tls on its own (loading, the errors that name the file,
 * describe, reload keeping the old pair on failure, the libmicrohttpd options), and the real
 * quantd over HTTPS: a job uploaded and downloaded through TLS, clients that must be refused
 * (another CA, plain HTTP), certificate and key replaced on SIGHUP (new connections see the new
 * certificate, open ones carry on), a broken replacement that leaves the old pair serving, the
 * warnings (expired certificate, key readable by others) and the starts that must fail.
 * Certificates are made on the fly (tlsgen.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"
#include "tls.h"
#include "tlsgen.h"

#define SHARD1 "tests/data/stories260K-bf16-sharded/model-00001-of-00002.safetensors"
#define RULES  "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"
#define MONTH  (30L * 86400)

/* A directory of test certificates: pairs a and b (CN quantd-test-a / -b), and the live
 * cert.pem / key.pem that quantd is given (a copy of one pair). */
typedef struct pki {
    char *dir;
    char *cert, *key;    /* the live files */
    char *a_crt, *a_key; /* pair a; a_crt is also the CA file that trusts it */
    char *b_crt, *b_key; /* pair b */
} pki;

static void pki_make(pki *p)
{
    p->dir = qdt_tmpdir();
    p->cert = kit_join(p->dir, "cert.pem");
    p->key = kit_join(p->dir, "key.pem");
    p->a_crt = kit_join(p->dir, "a.crt");
    p->a_key = kit_join(p->dir, "a.key");
    p->b_crt = kit_join(p->dir, "b.crt");
    p->b_key = kit_join(p->dir, "b.key");
    tlsgen_pair(p->a_crt, p->a_key, "quantd-test-a", MONTH);
    tlsgen_pair(p->b_crt, p->b_key, "quantd-test-b", MONTH);
}

static void pki_free(pki *p)
{
    kit_rmtree(p->dir);
    char **all[] = {&p->dir, &p->cert, &p->key, &p->a_crt, &p->a_key, &p->b_crt, &p->b_key};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(*all[i]);
}

/* Writes text to path (whole, then renamed into place) with mode. */
static void put_text(const char *path, const char *text, size_t len, mode_t mode)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(tmp, mode), 0);
    ck_assert_int_eq(rename(tmp, path), 0);
}

static void copy_file(const char *from, const char *to, mode_t mode)
{
    char *s = qdt_read_file(from, NULL);
    put_text(to, s, strlen(s), mode);
    free(s);
}

/* The live files become pair a or b. */
static void install(pki *p, const char *crt, const char *key)
{
    copy_file(crt, p->cert, 0644);
    copy_file(key, p->key, 0600);
}

/* ---- qd_tls on its own ------------------------------------------------------------------------
 */

static void expect_open_error(const char *cert, const char *key, const char *prio, const char *want)
{
    qd_tls *t = NULL;
    qd_err err = {{0}};
    ck_assert_int_ne(qd_tls_open(cert, key, prio, &t, &err), QD_OK);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.message, want) != NULL, "error \"%s\", wanted \"%s\"", err.message,
                  want);
}

START_TEST(test_open_errors)
{
    pki p;
    pki_make(&p);
    char *missing = kit_join(p.dir, "missing.pem"), *junk = kit_join(p.dir, "junk.pem");
    char want[4300];
    put_text(junk, "hello\n", 6, 0600);
    snprintf(want, sizeof want, "%s: No such file", missing);
    expect_open_error(missing, p.a_key, NULL, want);
    expect_open_error(p.a_crt, missing, NULL, want);
    snprintf(want, sizeof want, "%s: no certificate found", junk);
    expect_open_error(junk, p.a_key, NULL, want);
    snprintf(want, sizeof want, "%s: not an unencrypted PEM private key", junk);
    expect_open_error(p.a_crt, junk, NULL, want);
    snprintf(want, sizeof want, "%s: the key does not match the certificate in %s", p.b_key,
             p.a_crt);
    expect_open_error(p.a_crt, p.b_key, NULL, want);
    expect_open_error(p.a_crt, p.a_key, "NORMAL:+BOGUS-THING:-VERS-SSL3.0",
                      "[tls] priorities (--tls-priorities): syntax error at '+BOGUS-THING'");
    expect_open_error(p.dir, p.a_key, NULL, ": not a regular file");
    /* a chain whose second certificate did not issue the first */
    char *chain = kit_join(p.dir, "chain.pem"), *a = qdt_read_file(p.a_crt, NULL),
         *b = qdt_read_file(p.b_crt, NULL);
    char *both = malloc(strlen(a) + strlen(b) + 1);
    strcpy(stpcpy(both, a), b);
    put_text(chain, both, strlen(both), 0644);
    snprintf(want, sizeof want, "%s: the certificates are out of order", chain);
    expect_open_error(chain, p.a_key, NULL, want);
    free(both), free(a), free(b), free(chain), free(missing), free(junk);
    pki_free(&p);
}
END_TEST

START_TEST(test_open_describe_reload)
{
    pki p;
    pki_make(&p);
    install(&p, p.a_crt, p.a_key);
    qd_tls *t = NULL;
    qd_err err;
    ck_assert_int_eq(qd_tls_open(p.cert, p.key, "NORMAL", &t, &err), QD_OK);
    char desc[256];
    qd_tls_describe(t, desc, sizeof desc);
    ck_assert_msg(strncmp(desc, "CN=quantd-test-a SANs=2 chain=1 not_after=20", 44) == 0, "%s",
                  desc);
    ck_assert_uint_eq(strlen(desc), 44 + 18); /* ...YYYY-MM-DDTHH:MM:SSZ */
    int64_t left = qd_tls_expires_in(t);
    ck_assert_msg(left > MONTH - 120 && left <= MONTH, "%lld", (long long)left);
    ck_assert(!qd_tls_key_exposed(t));
    /* a broken key: refused, the old pair stays */
    put_text(p.key, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", 58, 0600);
    ck_assert_int_ne(qd_tls_reload(t, &err), QD_OK);
    ck_assert_msg(strstr(err.message, "key.pem: not an unencrypted PEM private key"), "%s",
                  err.message);
    qd_tls_describe(t, desc, sizeof desc);
    ck_assert_ptr_nonnull(strstr(desc, "CN=quantd-test-a "));
    /* pair b, its key readable by the group */
    install(&p, p.b_crt, p.b_key);
    ck_assert_int_eq(chmod(p.key, 0640), 0);
    ck_assert_int_eq(qd_tls_reload(t, &err), QD_OK);
    qd_tls_describe(t, desc, sizeof desc);
    ck_assert_ptr_nonnull(strstr(desc, "CN=quantd-test-b "));
    ck_assert(qd_tls_key_exposed(t));
    /* what libmicrohttpd gets */
    struct MHD_OptionItem opts[QD_TLS_MHD_OPTIONS];
    ck_assert_uint_eq(qd_tls_mhd_options(t, opts), MHD_USE_TLS);
    ck_assert_int_eq(opts[0].option, MHD_OPTION_HTTPS_CERT_CALLBACK);
    ck_assert_ptr_nonnull(opts[0].ptr_value);
    ck_assert_int_eq(opts[1].option, MHD_OPTION_HTTPS_PRIORITIES);
    ck_assert_str_eq(opts[1].ptr_value, "NORMAL");
    ck_assert_int_eq(opts[2].option, MHD_OPTION_END);
    ck_assert_uint_eq(qd_tls_mhd_options(NULL, opts), 0);
    ck_assert_int_eq(opts[0].option, MHD_OPTION_END);
    qd_tls_free(t);
    qd_tls_free(NULL);
    pki_free(&p);
}
END_TEST

/* ---- the daemon over HTTPS --------------------------------------------------------------------
 */

static size_t discard(char *ptr, size_t size, size_t n, void *user)
{
    (void)ptr, (void)user;
    return size * n;
}

static CURL *client(const char *url, const char *ca)
{
    CURL *c = curl_easy_init();
    ck_assert_ptr_nonnull(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    if (ca) curl_easy_setopt(c, CURLOPT_CAINFO, ca);
    return c;
}

/* One GET on handle c; *status: the HTTP status, 0 when there was none. */
static CURLcode get_on(CURL *c, long *status)
{
    *status = 0;
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    return rc;
}

/* GET scheme://127.0.0.1:PORT/healthz on a fresh connection trusting ca. */
static CURLcode try_get(const qdp *d, const char *scheme, const char *ca, long *status)
{
    char url[128];
    snprintf(url, sizeof url, "%s://127.0.0.1:%d/healthz", scheme, d->port);
    CURL *c = client(url, ca);
    CURLcode rc = get_on(c, status);
    curl_easy_cleanup(c);
    return rc;
}

static void expect_verified(const qdp *d, const char *ca)
{
    long status;
    CURLcode rc = try_get(d, "https", ca, &status);
    ck_assert_msg(rc == CURLE_OK && status == 200, "CA %s: %s, status %ld", ca,
                  curl_easy_strerror(rc), status);
}

static void expect_unverified(const qdp *d, const char *ca)
{
    long status;
    CURLcode rc = try_get(d, "https", ca, &status);
    ck_assert_msg(rc == CURLE_PEER_FAILED_VERIFICATION,
                  "CA %s: %s, status %ld (wanted a failed "
                  "verification)",
                  ca, curl_easy_strerror(rc), status);
}

static char *log_text(const qdp *d)
{
    char *path = kit_join(d->root, "quantd.log");
    char *s = qdt_read_file(path, NULL);
    free(path);
    return s;
}

/* Waits (up to 20 s) until quantd's log holds needle. */
static void wait_log(const qdp *d, const char *needle)
{
    for (int i = 0; i < 2000; i++) {
        char *s = log_text(d);
        bool found = strstr(s, needle) != NULL;
        free(s);
        if (found) return;
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    ck_abort_msg("quantd's log never said \"%s\"", needle);
}

static void start_https(qdp *d, const pki *p, const char *ca)
{
    const char *extra[] = {"--tls-cert", p->cert, "--tls-key", p->key, NULL};
    qdp_start_tls(d, extra, ca);
    ck_assert_int_eq(strncmp(d->base, "https://", 8), 0);
}

static void put_rules(qdp *d)
{
    qdp_resp r =
        qdp_req(d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_msg(r.status == 201, "PUT: %ld %s", r.status, r.body);
    qdp_resp_free(&r);
}

static long long upload_job(qdp *d)
{
    qdp_resp r = qdp_upload(d, "/v1/jobs?ruleset=int8", SHARD1);
    ck_assert_msg(r.status == 202, "upload: %ld %s", r.status, r.body);
    json_t *j = qdp_json(&r);
    long long id = (long long)json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    qdp_resp_free(&r);
    return id;
}

static void sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[32];
    ck_assert_int_eq(gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, md), 0);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

START_TEST(test_https_job_round_trip)
{
    pki p;
    pki_make(&p);
    install(&p, p.a_crt, p.a_key);
    qdp d;
    start_https(&d, &p, p.a_crt);
    qdp_resp r = qdp_req(&d, "GET", "/healthz", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    put_rules(&d);
    long long id = upload_job(&d);
    json_t *j = qdp_wait_job(&d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_t *out = json_array_get(json_object_get(j, "outputs"), 0);
    char path[64], etag[80], got[65];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, (size_t)json_integer_value(json_object_get(out, "bytes")));
    sha256_hex(r.body, r.len, got);
    snprintf(etag, sizeof etag, "\"%s\"", got);
    char *tag = qdp_header(&r, "etag");
    ck_assert_str_eq(tag, etag); /* the bytes that came through TLS are the published ones */
    ck_assert_str_eq(json_string_value(json_object_get(out, "sha256")), got);
    free(tag);
    qdp_resp_free(&r);
    json_decref(j);
    char *log = log_text(&d);
    ck_assert_ptr_nonnull(strstr(log, "msg=\"tls certificate loaded\" tls=on"));
    ck_assert_ptr_nonnull(strstr(log, "certificate=\"CN=quantd-test-a SANs=2 chain=1 not_after="));
    ck_assert_ptr_nonnull(strstr(log, "msg=listening "));
    ck_assert_ptr_nonnull(strstr(log, " tls=on auth=open source_roots=none version="));
    ck_assert_ptr_null(strstr(log, "level=warn")); /* not expiring, key 0600 */
    free(log);
    qdp_stop(&d);
    pki_free(&p);
}
END_TEST

START_TEST(test_https_refuses_strangers)
{
    pki p;
    pki_make(&p);
    install(&p, p.a_crt, p.a_key);
    qdp d;
    start_https(&d, &p, p.a_crt);
    expect_verified(&d, p.a_crt);
    expect_unverified(&d, p.b_crt); /* a client trusting another CA */
    long status;
    CURLcode rc = try_get(&d, "http", NULL, &status); /* plain HTTP on the TLS port */
    ck_assert_msg(status != 200, "plain HTTP got %ld (%s)", status, curl_easy_strerror(rc));
    ck_assert_msg(rc != CURLE_OK, "plain HTTP got an HTTP answer (%ld)", status);
    expect_verified(&d, p.a_crt); /* and the server still serves */
    qdp_stop(&d);
    pki_free(&p);
}
END_TEST

START_TEST(test_sighup_new_certificate)
{
    pki p;
    pki_make(&p);
    install(&p, p.a_crt, p.a_key);
    qdp d;
    start_https(&d, &p, p.a_crt);
    char url[128];
    snprintf(url, sizeof url, "%s/healthz", d.base);
    CURL *kept = client(url, p.a_crt); /* a keep-alive connection opened before the reload */
    long status;
    ck_assert_int_eq(get_on(kept, &status), CURLE_OK);
    ck_assert_int_eq(status, 200);
    install(&p, p.b_crt, p.b_key);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    wait_log(&d, "msg=\"tls certificate reloaded\" tls=on");
    char *log = log_text(&d);
    ck_assert_ptr_nonnull(strstr(log, "certificate=\"CN=quantd-test-b SANs=2"));
    free(log);
    expect_verified(&d, p.b_crt);
    expect_unverified(&d, p.a_crt);
    /* the open connection carries on with the pair it was made with */
    ck_assert_int_eq(get_on(kept, &status), CURLE_OK);
    ck_assert_int_eq(status, 200);
    long connects = -1;
    curl_easy_getinfo(kept, CURLINFO_NUM_CONNECTS, &connects);
    ck_assert_int_eq(connects, 0); /* reused, not reconnected */
    curl_easy_cleanup(kept);
    d.ca_file = p.b_crt;
    qdp_resp r = qdp_req(&d, "GET", "/readyz", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    qdp_stop(&d);
    pki_free(&p);
}
END_TEST

START_TEST(test_sighup_broken_files_keep_old_pair)
{
    pki p;
    pki_make(&p);
    install(&p, p.a_crt, p.a_key);
    qdp d;
    start_https(&d, &p, p.a_crt);
    /* a key that is no key */
    put_text(p.key, "not a key\n", 10, 0600);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    wait_log(&d, "key.pem: not an unencrypted PEM private key");
    char *log = log_text(&d);
    ck_assert_ptr_nonnull(
        strstr(log, "level=warn msg=\"tls certificate not reloaded (the previous one stays in "
                    "use)\" error="));
    ck_assert_ptr_null(strstr(log, "tls certificate reloaded"));
    free(log);
    expect_verified(&d, p.a_crt);
    /* the new certificate with the old key */
    copy_file(p.b_crt, p.cert, 0644);
    copy_file(p.a_key, p.key, 0600);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    wait_log(&d, "key.pem: the key does not match the certificate in ");
    expect_verified(&d, p.a_crt);
    expect_unverified(&d, p.b_crt);
    /* fixed: the next SIGHUP takes it */
    copy_file(p.b_key, p.key, 0600);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    wait_log(&d, "tls certificate reloaded");
    expect_verified(&d, p.b_crt);
    qdp_stop(&d);
    pki_free(&p);
}
END_TEST

START_TEST(test_warnings)
{
    pki p;
    pki_make(&p);
    tlsgen_pair(p.cert, p.key, "quantd-test-old", -60); /* expired a minute ago */
    ck_assert_int_eq(chmod(p.key, 0644), 0);
    qdp d;
    start_https(&d, &p, p.cert);
    wait_log(&d, "msg=listening");
    char *log = log_text(&d);
    ck_assert_ptr_nonnull(strstr(log, "level=warn msg=\"tls certificate has expired\""));
    ck_assert_ptr_nonnull(
        strstr(log, "level=warn msg=\"tls key file is readable by group or others"));
    free(log);
    long status;
    CURLcode rc = try_get(&d, "https", p.cert, &status); /* served, but clients refuse it */
    ck_assert_msg(rc == CURLE_PEER_FAILED_VERIFICATION, "%s", curl_easy_strerror(rc));
    tlsgen_pair(p.cert, p.key, "quantd-test-soon", 2 * 86400);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    wait_log(&d, "msg=\"tls certificate expires soon\"");
    log = log_text(&d);
    ck_assert_ptr_nonnull(strstr(log, "expires_in_days=2.0"));
    free(log);
    expect_verified(&d, p.cert);
    qdp_stop(&d);
    pki_free(&p);
}
END_TEST

/* quantd must exit 1 at start and its log must hold want. */
static void expect_refused(const char *cert, const char *key, const char *prio, const char *want)
{
    const char *extra[] = {"--tls-cert", cert, "--tls-key", key, prio ? "--tls-priorities" : NULL,
                           prio,         NULL};
    qdp d;
    char *log = NULL;
    ck_assert_int_eq(qdp_start_fail(&d, extra, &log), 1);
    ck_assert_msg(strstr(log, "level=error msg=\"cannot set up tls\"") && strstr(log, want),
                  "log without \"%s\":\n%s", want, log);
    free(log);
    qdp_stop(&d);
}

START_TEST(test_bad_start)
{
    pki p;
    pki_make(&p);
    char *missing = kit_join(p.dir, "missing.pem"), *junk = kit_join(p.dir, "junk.pem");
    put_text(junk, "-----BEGIN CERTIFICATE-----\nnope\n", 34, 0644);
    char want[4300];
    snprintf(want, sizeof want, "%s: No such file or directory", missing);
    expect_refused(missing, p.a_key, NULL, want);
    snprintf(want, sizeof want, "%s: not a PEM certificate chain", junk);
    expect_refused(junk, p.a_key, NULL, want);
    snprintf(want, sizeof want, "%s: the key does not match the certificate in %s", p.b_key,
             p.a_crt);
    expect_refused(p.a_crt, p.b_key, NULL, want);
    expect_refused(p.a_crt, p.a_key, "NORMAL:GARBAGE",
                   "error=\"[tls] priorities (--tls-priorities): syntax error at 'GARBAGE'\"");
    free(missing);
    free(junk);
    pki_free(&p);
}
END_TEST

/* The examples reach a TLS server with a private CA: upload_checkpoint.sh with --cacert FILE or
 * $QUANTD_CACERT (a whole checkpoint up, its outputs down), train_stats.py with $QUANTD_URL and
 * $QUANTD_CACERT alone; without the CA the script fails showing curl's own error. */
START_TEST(test_examples_with_private_ca)
{
    pki p;
    pki_make(&p);
    install(&p, p.a_crt, p.a_key);
    qdp d;
    start_https(&d, &p, p.a_crt);
    put_rules(&d);
    char *out = kit_join(p.dir, "got"), *err = kit_join(p.dir, "err.txt"), cmd[8192];
    snprintf(cmd, sizeof cmd,
             "examples/upload_checkpoint.sh -u %s --cacert %s int8 "
             "tests/data/stories260K-bf16-sharded %s/one >/dev/null 2>%s && test -s %s/one/"
             "model-00001-of-00002.safetensors",
             d.base, p.a_crt, out, err, out);
    ck_assert_msg(system(cmd) == 0, "%s: %s", cmd, (char *)qdt_read_file(err, NULL));
    snprintf(cmd, sizeof cmd,
             "QUANTD_URL=%s QUANTD_CACERT=%s examples/upload_checkpoint.sh int8 "
             "tests/data/stories260K-bf16-sharded %s/two >/dev/null 2>%s && test -s %s/two/"
             "model.safetensors.index.json",
             d.base, p.a_crt, out, err, out);
    ck_assert_msg(system(cmd) == 0, "%s: %s", cmd, (char *)qdt_read_file(err, NULL));
    snprintf(cmd, sizeof cmd,
             "QUANTD_URL=%s examples/upload_checkpoint.sh int8 tests/data/stories260K-bf16-sharded "
             "%s/three >/dev/null 2>%s",
             d.base, out, err);
    int rc = system(cmd);
    char *text = qdt_read_file(err, NULL);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 1 && text && strstr(text, "curl: (60)") &&
                      strstr(text, "creating the job at https://"),
                  "exit %d: %s", rc, text ? text : "");
    free(text);
    /* train_stats.py: the URL and the CA from the environment only */
    snprintf(cmd, sizeof cmd,
             "QUANTD_URL=%s QUANTD_CACERT=%s python3 examples/train_stats.py --model envca "
             "--steps 2 >/dev/null 2>%s",
             d.base, p.a_crt, err);
    ck_assert_msg(system(cmd) == 0, "%s: %s", cmd, (char *)qdt_read_file(err, NULL));
    qdp_resp r = qdp_req(&d, "GET", "/v1/models/envca", NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200 && strstr(r.body, "\"posts\":2"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    free(out);
    free(err);
    qdp_stop(&d);
    pki_free(&p);
}
END_TEST

Suite *suite_tls(void)
{
    Suite *s = suite_create("tls");
    TCase *unit = tcase_create("credentials");
    tcase_add_test(unit, test_open_errors);
    tcase_add_test(unit, test_open_describe_reload);
    suite_add_tcase(s, unit);
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_https_job_round_trip);
    tcase_add_test(tc, test_https_refuses_strangers);
    tcase_add_test(tc, test_sighup_new_certificate);
    tcase_add_test(tc, test_sighup_broken_files_keep_old_pair);
    tcase_add_test(tc, test_warnings);
    tcase_add_test(tc, test_bad_start);
    tcase_add_test(tc, test_examples_with_private_ca);
    suite_add_tcase(s, tc);
    return s;
}
