#!/usr/bin/env python3
# train_stats.py -- owns the "training job" example of issue 5: posts per-step activation
# statistics to quantd (POST /v1/models/{model}/stats) in a loop, as JSON or as a safetensors
# body built by hand, over one keep-alive connection, and prints posts/s. With --merge it instead
# keeps the sums locally, as a Qwix host keeps its quant_stats, and posts one dump at the end
# (?mode=merge). Python standard library only.
# Run: python3 examples/train_stats.py --help
# SPDX-License-Identifier: Apache-2.0
import argparse
import array
import http.client
import json
import random
import struct
import sys
import time
import urllib.parse


class Client:
    """One HTTP/1.1 connection to quantd, reused for every request (keep-alive)."""

    def __init__(self, url, timeout):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise SystemExit("train_stats: --url must be http://HOST[:PORT] or https://...")
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        self.conn = cls(u.hostname, u.port, timeout=timeout)

    def request(self, method, path, body=None, content_type=None):
        """Returns (status, body bytes); reconnects once if the server closed the connection."""
        headers = {"Content-Type": content_type} if content_type else {}
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                if attempt:
                    raise

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


def post(client, path, body, content_type):
    """POSTs the body; returns the seconds until the answer. Exits 1 unless it is 2xx."""
    t0 = time.monotonic()
    status, reply = client.request("POST", path, body, content_type)
    if status // 100 != 2:
        sys.exit("train_stats: POST %s: HTTP %d: %s" % (path, status,
                                                        reply.decode("utf-8", "replace")))
    return time.monotonic() - t0


def show_model(client, model):
    """Prints the server's view of the model (GET /v1/models)."""
    status, reply = client.request("GET", "/v1/models")
    if status != 200:
        return
    doc = json.loads(reply)
    rows = doc.get("models", doc) if isinstance(doc, dict) else doc
    for row in rows:
        if isinstance(row, dict) and row.get("name") == model:
            print("server: model %s: %s activations, %s posts, averaging %s, updated %s"
                  % (model, row.get("activations"), row.get("posts"), row.get("averaging"),
                     row.get("updated_at")))


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Act as a training job: post activation statistics to quantd every step "
                    "(POST /v1/models/MODEL/stats) and report posts/s.")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="quantd's base URL "
                   "(default %(default)s)")
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
    a = p.parse_args(argv)
    for name in ("steps", "activations", "size"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name)
    if a.activations > 1 and "{i}" not in a.name_format:
        p.error("--name-format needs {i} when --activations is more than 1")
    if a.merge and a.format != "json":
        p.error("--merge posts a JSON dump; leave --format at json")
    return a


def run(a):
    client = Client(a.url, a.timeout)
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
        waited += post(client, path, body, ctype)
        posts += 1
        sent += len(body)
    if a.merge:
        body = merge_body(sums, a.steps)
        waited += post(client, path + "?mode=merge", body, "application/json")
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
