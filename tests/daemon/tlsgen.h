/* tlsgen.h -- test certificates made with GnuTLS: a self-signed ECDSA P-256 certificate for
 * 127.0.0.1 and localhost and its key, written as PEM files, that libcurl (OpenSSL) accepts for
 * https://127.0.0.1 when the certificate itself is its CAINFO.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef TLSGEN_H
#define TLSGEN_H

/* Writes a fresh key pair and certificate: cert_path gets the certificate (PEM), key_path the
 * unencrypted PKCS#8 key (PEM, mode 0600). Subject CN=cn; SANs IP 127.0.0.1 and DNS localhost;
 * valid from an hour ago until valid_s seconds from now (negative: already expired). Fails the
 * test on any error. */
void tlsgen_pair(const char *cert_path, const char *key_path, const char *cn, long valid_s);

#endif /* TLSGEN_H */
