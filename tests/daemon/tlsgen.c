/* tlsgen.c -- test certificates made with GnuTLS: key generation, a self-signed X.509 v3
 * certificate with the extensions OpenSSL wants of a trust anchor that is also the server's
 * certificate, and the PEM files (each written whole, then renamed into place).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qdtest.h"
#include "tlsgen.h"

#define GNUTLS_OK(call)                                                                            \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        ck_assert_msg(rc_ >= 0, "%s: %s", #call, gnutls_strerror(rc_));                            \
    } while (0)

/* Writes data to path + ".tmp" with mode, then renames it to path (a reader sees the old file
 * or the new one, never half of one). */
static void write_file(const char *path, const gnutls_datum_t *data, mode_t mode)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    ck_assert_msg(fd >= 0, "%s", tmp);
    ck_assert_int_eq(fchmod(fd, mode), 0);
    ck_assert_int_eq(write(fd, data->data, data->size), (ssize_t)data->size);
    ck_assert_int_eq(close(fd), 0);
    ck_assert_int_eq(rename(tmp, path), 0);
}

static void set_names(gnutls_x509_crt_t crt, const char *cn)
{
    static const unsigned char loopback[4] = {127, 0, 0, 1};
    GNUTLS_OK(gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                            (unsigned)strlen(cn)));
    GNUTLS_OK(gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, loopback,
                                                   sizeof loopback, GNUTLS_FSAN_APPEND));
    GNUTLS_OK(gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, "localhost", 9,
                                                   GNUTLS_FSAN_APPEND));
}

/* CA:TRUE and keyCertSign: OpenSSL then takes the certificate as its own issuer (a trust
 * anchor in CAINFO); serverAuth and digitalSignature: it may also serve as the leaf. */
static void set_extensions(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key)
{
    unsigned char id[64];
    size_t id_len = sizeof id;
    GNUTLS_OK(gnutls_x509_crt_set_basic_constraints(crt, 1, -1));
    GNUTLS_OK(gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE |
                                                     GNUTLS_KEY_KEY_CERT_SIGN));
    GNUTLS_OK(gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0));
    GNUTLS_OK(gnutls_x509_privkey_get_key_id(key, GNUTLS_KEYID_USE_SHA1, id, &id_len));
    GNUTLS_OK(gnutls_x509_crt_set_subject_key_id(crt, id, id_len));
    GNUTLS_OK(gnutls_x509_crt_set_authority_key_id(crt, id, id_len));
}

static void set_serial_and_times(gnutls_x509_crt_t crt, long valid_s)
{
    unsigned char serial[16];
    GNUTLS_OK(gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof serial));
    serial[0] &= 0x7f; /* positive */
    serial[0] |= 0x01; /* no leading zero byte */
    GNUTLS_OK(gnutls_x509_crt_set_serial(crt, serial, sizeof serial));
    time_t now = time(NULL);
    GNUTLS_OK(gnutls_x509_crt_set_activation_time(crt, now - 3600 + (valid_s < 0 ? valid_s : 0)));
    GNUTLS_OK(gnutls_x509_crt_set_expiration_time(crt, now + valid_s));
}

void tlsgen_pair(const char *cert_path, const char *key_path, const char *cn, long valid_s)
{
    gnutls_x509_privkey_t key;
    gnutls_x509_crt_t crt;
    gnutls_datum_t pem;
    GNUTLS_OK(gnutls_x509_privkey_init(&key));
    GNUTLS_OK(gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                           GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0));
    GNUTLS_OK(gnutls_x509_crt_init(&crt));
    GNUTLS_OK(gnutls_x509_crt_set_version(crt, 3));
    set_serial_and_times(crt, valid_s);
    set_names(crt, cn);
    set_extensions(crt, key);
    GNUTLS_OK(gnutls_x509_crt_set_key(crt, key));
    GNUTLS_OK(gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0));
    GNUTLS_OK(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &pem));
    write_file(cert_path, &pem, 0644);
    gnutls_free(pem.data);
    GNUTLS_OK(
        gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN, &pem));
    write_file(key_path, &pem, 0600);
    gnutls_free(pem.data);
    gnutls_x509_crt_deinit(crt);
    gnutls_x509_privkey_deinit(key);
}
