#!/usr/bin/env python3
# serve_fetch.py -- owns the "serving job" example of issue 5: waits for a quantd job to succeed
# (GET /v1/jobs/{id}), then downloads each of its outputs (GET /v1/jobs/{id}/outputs/{name}) into
# a directory, streaming, hashing with SHA-256 as the bytes arrive, and checks the digest against
# the response's ETag and the job's outputs[].sha256. A download cut short leaves NAME.part (and
# NAME.part.etag, the ETag its bytes came from); the next run hashes what is there and asks for
# the rest (Range, with If-Range: that ETag, so another file comes whole). Exit status 0 when
# every output verified, 1 on a failed job, a mismatch or an HTTP/IO error, 2 on bad usage.
# A server with tokens needs a reader (or operator) token: --token or $QUANTD_TOKEN; HTTPS with
# a private CA: --cacert FILE.
# Python standard library only. Run: python3 examples/serve_fetch.py --help
# SPDX-License-Identifier: Apache-2.0
import argparse
import hashlib
import http.client
import json
import os
import ssl
import sys
import time
import urllib.parse

CHUNK = 1 << 20


class Failure(Exception):
    """A reason to exit 1."""


class Client:
    """One HTTP/1.1 connection to quantd, reused for every request (keep-alive)."""

    def __init__(self, url, timeout, token=None, cacert=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise Failure("--url must be http://HOST[:PORT] or https://...")
        if u.scheme == "https":
            ctx = ssl.create_default_context(cafile=cacert)
            self.conn = http.client.HTTPSConnection(u.hostname, u.port, timeout=timeout,
                                                    context=ctx)
        else:
            self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        self.auth = {"Authorization": "Bearer " + token} if token else {}

    def open(self, method, path, headers=None):
        """Sends the request and returns the response, whose body the caller must read whole
        before the next request. Reconnects once when the server had closed the connection."""
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, headers={**self.auth, **(headers or {})})
                return self.conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                if attempt:
                    raise

    def get_json(self, path):
        resp = self.open("GET", path)
        body = resp.read()
        if resp.status != 200:
            raise Failure("GET %s: HTTP %d: %s" % (path, resp.status,
                                                   body.decode("utf-8", "replace")))
        return json.loads(body)

    def close(self):
        self.conn.close()


def wait_job(client, job_id, poll, timeout, quiet):
    """Polls the job until it succeeds; returns it. Fails when it fails or is cancelled."""
    t0 = time.monotonic()
    last = None
    while True:
        job = client.get_json("/v1/jobs/%d" % job_id)
        state = job.get("state")
        if state == "succeeded":
            return job
        if state not in ("queued", "running"):
            raise Failure("job %d is %s: %s" % (job_id, state, job.get("error")))
        p = job.get("progress") or {}
        now = (state, p.get("tensors_done"), p.get("tensors_total"))
        if not quiet and now != last:
            print("job %d: %s, %s/%s tensors" % ((job_id,) + now), file=sys.stderr)
            last = now
        if time.monotonic() - t0 > timeout:
            raise Failure("job %d still %s after %.0f s" % (job_id, state, timeout))
        time.sleep(poll)


def hash_file(path, h):
    """Feeds the file's bytes to h; returns how many."""
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return n
            h.update(b)
            n += len(b)


def etag_digest(resp):
    """The SHA-256 hex digest the response's ETag carries (quantd quotes it)."""
    tag = resp.getheader("ETag") or ""
    if tag.startswith("W/"):
        tag = tag[2:]
    return tag.strip('"').lower()


def content_range_start(resp):
    """The first byte of a 206's Content-Range ("bytes A-B/N"), or None."""
    cr = resp.getheader("Content-Range") or ""
    try:
        return int(cr.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return None


class Download:
    """One output: OUT/NAME.part while it arrives, renamed to OUT/NAME once verified."""

    def __init__(self, client, job_id, out, want, stop_after):
        self.client = client
        self.want = want  # the job's outputs[] entry: name, bytes, sha256, url
        if want["name"] in ("", ".", "..") or os.path.basename(want["name"]) != want["name"]:
            raise Failure("job %d lists an output named %r, not a file name" % (job_id,
                                                                               want["name"]))
        self.path = os.path.join(out, want["name"])
        self.part = self.path + ".part"
        url = want.get("url") or "/v1/jobs/%d/outputs/%s" % (
            job_id, urllib.parse.quote(want["name"], safe=""))
        self.url = urllib.parse.urlsplit(url).path or url
        self.stop_after = stop_after  # testing: stop after this many bytes of this run

    def request(self, have, validator):
        """GET, as a Range request resuming at `have` bytes when there are some, with If-Range
        naming the ETag those bytes came from (another file gets a 200 with all of it)."""
        headers = {}
        if have:
            headers["Range"] = "bytes=%d-" % have
            headers["If-Range"] = validator
        resp = self.client.open("GET", self.url, headers)
        if resp.status == 416 and have:
            resp.read()  # the part is no prefix of this file: start over
            return self.request(0, None)
        if resp.status not in (200, 206):
            body = resp.read()
            raise Failure("GET %s: HTTP %d: %s" % (self.url, resp.status,
                                                   body.decode("utf-8", "replace")))
        return resp

    def part_validator(self):
        """The ETag NAME.part's bytes came from (NAME.part.etag), or None."""
        try:
            with open(self.part + ".etag", encoding="ascii") as f:
                return f.read().strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def start(self, h):
        """Hashes what NAME.part holds and opens the request for the rest. A 206 is taken only
        when it continues those bytes (its Content-Range starts there, its ETag is the part's);
        anything else starts over from byte 0. Records the ETag a fresh download comes from."""
        validator = self.part_validator() if os.path.exists(self.part) else None
        have = hash_file(self.part, h) if validator else 0
        if have >= self.want["bytes"]:
            have = 0
        resp = self.request(have, validator)
        if resp.status == 206 and (content_range_start(resp) != have
                                   or etag_digest(resp) != validator.strip('"').lower()):
            resp.read()
            resp = self.request(0, None)
        if resp.status == 200:
            have, h = 0, hashlib.sha256()
            with open(self.part + ".etag", "w", encoding="ascii") as f:
                f.write((resp.getheader("ETag") or "") + "\n")
        return resp, have, h

    def run(self):
        """Returns a line describing what happened; raises Failure on a mismatch."""
        h = hashlib.sha256()
        resp, have, h = self.start(h)
        resumed = have
        tag = etag_digest(resp)
        got = self.stream(resp, have, h)
        if got < self.want["bytes"]:
            return "%s: stopped at %d of %d bytes (--stop-after); run again to resume" % (
                self.want["name"], got, self.want["bytes"])
        return self.finish(h.hexdigest(), tag, got, resumed)

    def stream(self, resp, have, h):
        """Appends the body to NAME.part (truncated first for a 200), hashing as it goes."""
        budget = self.stop_after if self.stop_after is not None else -1
        with open(self.part, "ab" if have else "wb") as f:
            while True:
                n = CHUNK if budget < 0 else min(CHUNK, budget)
                b = resp.read(n) if n else b""
                if not b:
                    break
                f.write(b)
                h.update(b)
                have += len(b)
                budget -= len(b) if budget >= 0 else 0
            f.flush()
            os.fsync(f.fileno())
        if budget == 0:
            self.client.close()  # the body was not read to its end: drop the connection
        return have

    def remove_part(self):
        for path in (self.part, self.part + ".etag"):
            if os.path.exists(path):
                os.unlink(path)

    def finish(self, digest, tag, got, resumed):
        name, want = self.want["name"], self.want["sha256"]
        if got != self.want["bytes"]:
            raise Failure("%s: %d bytes, the job says %d" % (name, got, self.want["bytes"]))
        if digest != tag or digest != want:
            self.remove_part()
            raise Failure("%s: sha256 %s, ETag %s, job %s: mismatch (partial file removed)"
                          % (name, digest, tag or "(none)", want))
        os.replace(self.part, self.path)
        self.remove_part()
        how = " (resumed at byte %d)" % resumed if resumed else ""
        return "%s: %d bytes, sha256 %s = ETag = job%s" % (name, got, digest, how)


def already_there(path, want):
    """True when OUT/NAME exists with the job's size and digest (nothing to fetch)."""
    if not os.path.isfile(path) or os.path.getsize(path) != want["bytes"]:
        return False
    h = hashlib.sha256()
    hash_file(path, h)
    return h.hexdigest() == want["sha256"]


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Act as a serving job: wait for a quantd job to succeed and download its "
                    "outputs, verifying each one's SHA-256 against the ETag and the job; a cut "
                    "download is resumed with a Range request. Exit status 1 on any mismatch.")
    p.add_argument("job", type=int, help="the job id (POST /v1/jobs answered it)")
    p.add_argument("--url", default=os.environ.get("QUANTD_URL", "http://127.0.0.1:8080"),
                   help="quantd's base URL (default: $QUANTD_URL, else "
                   "http://127.0.0.1:8080; now %(default)s)")
    p.add_argument("--token", default=os.environ.get("QUANTD_TOKEN"),
                   help="a reader or operator token, sent as 'Authorization: Bearer' "
                   "(default: $QUANTD_TOKEN; none on an open loopback server)")
    p.add_argument("--cacert", metavar="FILE", default=os.environ.get("QUANTD_CACERT"),
                   help="PEM file of the CA (or self-signed certificate) to trust for an "
                   "https:// URL (default: $QUANTD_CACERT)")
    p.add_argument("-o", "--out", default=".", help="directory for the outputs, created if "
                   "needed (default: the current one)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="fetch only this output (repeatable; default: all)")
    p.add_argument("--poll", type=float, default=0.5, help="seconds between job polls "
                   "(default %(default)s)")
    p.add_argument("--wait", type=float, default=3600.0, help="give up when the job has not "
                   "succeeded after this many seconds (default %(default)s)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per socket operation "
                   "(default %(default)s)")
    p.add_argument("--stop-after", type=int, metavar="BYTES",
                   help="testing: stop each download after BYTES bytes of this run, leaving "
                   "NAME.part to resume")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    a = p.parse_args(argv)
    if a.job < 1:
        p.error("the job id must be a positive integer")
    if a.stop_after is not None and a.stop_after < 0:
        p.error("--stop-after must be >= 0")
    return a


def run(a):
    client = Client(a.url, a.timeout, a.token, a.cacert)
    job = wait_job(client, a.job, a.poll, a.wait, a.quiet)
    outputs = job.get("outputs") or []
    if a.only:
        missing = set(a.only) - {o["name"] for o in outputs}
        if missing:
            raise Failure("job %d has no output %s" % (a.job, ", ".join(sorted(missing))))
        outputs = [o for o in outputs if o["name"] in a.only]
    os.makedirs(a.out, exist_ok=True)
    for want in outputs:
        path = os.path.join(a.out, want["name"])
        if already_there(path, want):
            print("%s: already there, sha256 %s" % (want["name"], want["sha256"]))
            continue
        print(Download(client, a.job, a.out, want, a.stop_after).run())
    client.close()


def main(argv=None):
    a = parse_args(argv)
    try:
        run(a)
    except Failure as e:
        print("serve_fetch: %s" % e, file=sys.stderr)
        return 1
    except (OSError, http.client.HTTPException, ValueError) as e:
        print("serve_fetch: %s: %s" % (a.url, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
