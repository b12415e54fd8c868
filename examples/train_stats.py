#!/usr/bin/env python3
# train_stats.py -- owns the "training job" example of issue 5: posts per-step activation
# statistics to quantd (POST /v1/models/{model}/stats) in a loop, as JSON or as a safetensors
# body built by hand, over one keep-alive connection, and prints posts/s. Each post carries an
# Idempotency-Key (RUN_ID-STEP), so a post whose answer was lost (connection error, timeout,
# 5xx) is retried safely, with exponential backoff or the server's Retry-After: quantd answers a
# retry of a post it already stored as a replay instead of counting it twice. With --merge it
# instead keeps the sums locally, as a Qwix host keeps its quant_stats, and posts one dump at the
# end (?mode=merge). Python standard library only.
# Run: python3 examples/train_stats.py --help
# SPDX-License-Identifier: Apache-2.0
import argparse
import array
import email.utils
import http.client
import json
import os
import random
import secrets
import ssl
import struct
import sys
import time
import urllib.parse


class Client:
    """One HTTP/1.1 connection to quantd, reused for every request (keep-alive)."""

    def __init__(self, url, timeout, token=None, cacert=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise SystemExit("train_stats: --url must be http://HOST[:PORT] or https://...")
        if u.scheme == "https":
            ctx = ssl.create_default_context(cafile=cacert)
            self.conn = http.client.HTTPSConnection(u.hostname, u.port, timeout=timeout,
                                                    context=ctx)
        else:
            self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        self.auth = {"Authorization": "Bearer " + token} if token else {}

    def request(self, method, path, body=None, headers=None):
        """Returns (status, response headers, body bytes); reconnects once if the server had
        closed the kept-alive connection. Other failures (refused, timed out, cut) raise: the
        connection is closed first, so the next request opens a new one."""
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=body, headers={**self.auth, **(headers or {})})
                resp = self.conn.getresponse()
                return resp.status, resp.headers, resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                if attempt:
                    raise
            except (OSError, http.client.HTTPException):
                self.conn.close()
                raise

    def send_only(self, method, path, body, headers):
        """Sends a request and drops the connection without reading the answer (--drop-answers:
        what a timeout looks like to the client)."""
        try:
            self.conn.request(method, path, body=body, headers={**self.auth, **headers})
        finally:
            self.conn.close()

    def close(self):
        self.conn.close()


def act_names(fmt, n):
    """Activation names as Qwix records them (module path, then the operand), {i} = 0..n-1."""
    return [fmt.replace("{i}", str(i)) for i in range(n)]


class Activations:
    """Simulated statistics: a fixed per-element profile per activation, scaled each step by a
    factor that drifts and settles, as calibration statistics do during training."""

    def __init__(self, names, size, seed):
        rnd = random.Random(seed)
        self.names = names
        self.size = size
        self.rnd = rnd
        self.base = {n: [0.5 + rnd.random() * (1 + i % 7) for _ in range(size)]
                     for i, n in enumerate(names)}

    def step(self, kind):
        """{name: {"absmax": [...]}} or {name: {"min": [...], "max": [...]}} for one step."""
        out = {}
        for n in self.names:
            f = 1.0 + 0.1 * (self.rnd.random() - 0.5)
            hi = [b * f for b in self.base[n]]
            if kind == "absmax":
                out[n] = {"absmax": hi}
            else:
                out[n] = {"min": [-0.25 * v for v in hi], "max": hi}
        return out


def json_body(step, stats):
    doc = {"step": step, "stats": stats}
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def f32_le(values):
    """The values as little-endian float32 bytes (what struct.pack("<%df") gives, faster)."""
    a = array.array("f", values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def safetensors_body(step, stats):
    """A safetensors file: 8-byte little-endian header length, the JSON header padded with
    spaces to a multiple of 8, then the F32 little-endian data of every tensor ACT/KEY."""
    header = {"__metadata__": {"step": str(step)}}
    blobs = []
    offset = 0
    for name, keys in stats.items():
        for key, values in keys.items():
            data = f32_le(values)
            header["%s/%s" % (name, key)] = {
                "dtype": "F32",
                "shape": [len(values)],
                "data_offsets": [offset, offset + len(data)],
            }
            blobs.append(data)
            offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def merge_body(sums, count):
    """A Qwix quant_stats dump: per activation count and sum_of_<key>."""
    stats = {}
    for name, keys in sums.items():
        entry = {"count": count}
        for key, values in keys.items():
            entry["sum_of_" + key] = values
        stats[name] = entry
    return json.dumps({"stats": stats}, separators=(",", ":")).encode("utf-8")


def accumulate(sums, stats):
    for name, keys in stats.items():
        acc = sums.setdefault(name, {})
        for key, values in keys.items():
            if key in acc:
                acc[key] = [a + v for a, v in zip(acc[key], values)]
            else:
                acc[key] = list(values)


# 5xx answers not worth a retry: the same post would get them again (507: the model's
# stats_quota, or the server's disk, wants an operator; 501, 505: never going to work).
PERMANENT_5XX = (501, 505, 507)


def retry_after(headers):
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), or None."""
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff(attempt, base=0.25, cap=30.0):
    """Exponential backoff with full jitter: up to base * 2^attempt seconds, at most cap."""
    return random.uniform(0, min(cap, base * (2 ** attempt)))


class Poster:
    """Posts with an Idempotency-Key each and retries what may not have been stored: connection
    errors, timeouts and 5xx answers (503 with Retry-After: after that long), at most `retries`
    times. Safe because of the key: a retry of a post quantd already stored is answered as a
    replay (Idempotent-Replayed: true) and counted once. Any other answer ends the run."""

    def __init__(self, client, retries, drop_every=0, prog="train_stats"):
        self.prog = prog  # the script named in messages
        self.client = client
        self.retries = retries
        self.drop_every = drop_every
        self.posts = self.retried = self.replays = 0

    def post(self, path, body, content_type, key):
        """POSTs the body; returns the seconds until the answer. Exits 1 unless it is 2xx."""
        headers = {"Content-Type": content_type, "Idempotency-Key": key}
        t0 = time.monotonic()
        self.posts += 1
        if self.drop_every and self.posts % self.drop_every == 0:
            self.client.send_only("POST", path, body, headers)  # its answer is "lost"
            self.retried += 1
        attempt = 0
        while True:
            try:
                status, resp_headers, reply = self.client.request("POST", path, body, headers)
            except (OSError, http.client.HTTPException) as e:
                why, status, resp_headers, reply = str(e) or type(e).__name__, None, None, b""
            else:
                why = "HTTP %d" % status
            if status is not None and status // 100 == 2:
                if resp_headers.get("Idempotent-Replayed", "").lower() == "true":
                    self.replays += 1
                return time.monotonic() - t0
            transient = status is None or (status // 100 == 5 and status not in PERMANENT_5XX)
            if not transient or attempt >= self.retries:
                tail = (": " + reply.decode("utf-8", "replace")) if reply else ""
                again = " after %d retries" % attempt if attempt else ""
                sys.exit("%s: POST %s (Idempotency-Key %s): %s%s%s" % (
                    self.prog, path, key, why, again, tail))
            wait = retry_after(resp_headers)
            wait = backoff(attempt) if wait is None else min(wait, 300.0)
            print("%s: POST %s: %s; retry %d of %d in %.2f s" % (
                self.prog, path, why, attempt + 1, self.retries, wait), file=sys.stderr)
            time.sleep(wait)
            attempt += 1
            self.retried += 1


def show_model(client, model):
    """Prints the server's view of the model (GET /v1/models)."""
    status, _, reply = client.request("GET", "/v1/models")
    if status != 200:
        return
    doc = json.loads(reply)
    rows = doc.get("models", doc) if isinstance(doc, dict) else doc
    for row in rows:
        if isinstance(row, dict) and row.get("name") == model:
            print("server: model %s: %s activations, %s posts, averaging %s, updated %s, "
                  "%s bytes of sums" % (model, row.get("activations"), row.get("posts"),
                                        row.get("averaging"), row.get("updated_at"),
                                        row.get("stats_bytes")))


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Act as a training job: post activation statistics to quantd every step "
                    "(POST /v1/models/MODEL/stats) and report posts/s.")
    p.add_argument("--token", default=os.environ.get("QUANTD_TOKEN"),
                   help="a trainer (or operator) token, sent as 'Authorization: Bearer' "
                   "(default: $QUANTD_TOKEN; none on an open loopback server)")
    p.add_argument("--cacert", metavar="FILE", default=os.environ.get("QUANTD_CACERT"),
                   help="PEM file of the CA (or self-signed certificate) to trust for an "
                   "https:// URL (default: $QUANTD_CACERT)")
    p.add_argument("--url", default=os.environ.get("QUANTD_URL", "http://127.0.0.1:8080"),
                   help="quantd's base URL (default: $QUANTD_URL, else "
                   "http://127.0.0.1:8080; now %(default)s)")
    p.add_argument("--model", default="demo", help="model name (default %(default)s)")
    p.add_argument("--steps", type=int, default=100, help="training steps, one post each "
                   "(default %(default)s)")
    p.add_argument("--first-step", type=int, default=0, help="step number of the first post "
                   "(default %(default)s)")
    p.add_argument("--activations", type=int, default=4, help="activations per post "
                   "(default %(default)s)")
    p.add_argument("--name-format", default="layers/{i}/mlp/dot_general0_lhs",
                   help="activation names, {i} replaced by 0..N-1; the module path is the name "
                   "less its last component, '/' read as '.' (default %(default)s)")
    p.add_argument("--size", type=int, default=1, help="values per activation (e.g. per-channel "
                   "statistics; default %(default)s)")
    p.add_argument("--kind", choices=("absmax", "minmax"), default="absmax",
                   help="absmax (symmetric scales) or min and max (asymmetric, with zero points; "
                   "default %(default)s)")
    p.add_argument("--format", choices=("json", "safetensors"), default="json",
                   help="request body: JSON, or a safetensors file of F32 tensors ACT/absmax "
                   "(ACT/min, ACT/max) sent as application/octet-stream (default %(default)s)")
    p.add_argument("--merge", action="store_true",
                   help="keep count and sums locally for --steps steps, as a Qwix host keeps its "
                   "quant_stats, and post them once as a dump (?mode=merge, JSON)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated statistics")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request "
                   "(default %(default)s)")
    p.add_argument("--run-id", default=None,
                   help="this run's name in the Idempotency-Keys RUN_ID-STEP (RUN_ID-merge for "
                   "--merge); default: 12 random hex digits, new each run. Give the run's id "
                   "again when a restarted job re-posts steps it may have posted already")
    p.add_argument("--retries", type=int, default=5,
                   help="retries of a post after a connection error, a timeout or a 5xx answer "
                   "(default %(default)s)")
    p.add_argument("--drop-answers", type=int, default=0, metavar="N",
                   help="demo: every Nth post, drop the connection before the answer (as a "
                   "timeout would) and retry it; quantd answers the retry as a replay")
    a = p.parse_args(argv)
    for name in ("steps", "activations", "size"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name)
    if a.activations > 1 and "{i}" not in a.name_format:
        p.error("--name-format needs {i} when --activations is more than 1")
    if a.merge and a.format != "json":
        p.error("--merge posts a JSON dump; leave --format at json")
    if a.retries < 0 or a.drop_answers < 0:
        p.error("--retries and --drop-answers must be 0 or more")
    if a.run_id is None:
        a.run_id = secrets.token_hex(6)
    elif not a.run_id or len(a.run_id) > 200 or any(not 0x21 <= ord(c) <= 0x7e
                                                     for c in a.run_id):
        p.error("--run-id must be 1-200 visible ASCII characters (it goes into a header)")
    return a


def run(a):
    client = Client(a.url, a.timeout, a.token, a.cacert)
    poster = Poster(client, a.retries, a.drop_answers)
    path = "/v1/models/%s/stats" % urllib.parse.quote(a.model, safe="")
    acts = Activations(act_names(a.name_format, a.activations), a.size, a.seed)
    make, ctype = ((json_body, "application/json") if a.format == "json"
                   else (safetensors_body, "application/octet-stream"))
    sums = {}
    posts = sent = 0
    waited = 0.0
    t0 = time.monotonic()
    for step in range(a.first_step, a.first_step + a.steps):
        stats = acts.step(a.kind)
        if a.merge:
            accumulate(sums, stats)
            continue
        body = make(step, stats)
        waited += poster.post(path, body, ctype, "%s-%d" % (a.run_id, step))
        posts += 1
        sent += len(body)
    if a.merge:
        body = merge_body(sums, a.steps)
        waited += poster.post(path + "?mode=merge", body, "application/json",
                              "%s-merge" % a.run_id)
        posts, sent = 1, len(body)
    dt = max(time.monotonic() - t0, 1e-9)
    shape = "%d activations, %d value%s each, %s, %s" % (
        a.activations, a.size, "" if a.size == 1 else "s", a.kind, a.format)
    if a.merge:
        print("1 merged dump of %d steps (%s): %d bytes in %.3f s"
              % (a.steps, shape, sent, waited))
    else:
        print("%d posts (%s) in %.2f s (%.2f s waiting for quantd): %.1f posts/s, "
              "%.2f MB/s of body" % (posts, shape, dt, waited, posts / dt, sent / dt / 1e6))
    print("run %s: %d retries, %d replays (retried posts quantd had already stored, not counted "
          "again)" % (a.run_id, poster.retried, poster.replays))
    show_model(client, a.model)
    client.close()


def main(argv=None):
    a = parse_args(argv)
    try:
        run(a)
    except (OSError, http.client.HTTPException) as e:
        sys.exit("train_stats: %s: %s" % (a.url, e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
