#!/usr/bin/env python3
# torch_stats.py -- owns the PyTorch training-job client: StatsHooks registers a forward pre-hook
# on every nn.Linear of a model, accumulates per layer the input's absmax (max of |x| over every
# token since the last post, one value per tensor or per input column) and mean_sq (the mean of
# x^2 over those tokens, one value per input column), and every N steps posts all layers in one
# request to quantd (POST /v1/models/{model}/stats) under the names quantd's SRQ rules and
# weight_importance look for: the module path, '.' written '/', then "/dot_general0_lhs". Each
# post carries an Idempotency-Key RUN-STEP, the token of $QUANTD_TOKEN and the CA of
# $QUANTD_CACERT; a 503 is retried after its Retry-After, a lost connection after a backoff,
# both within a bounded time, after which StatsPostError says what failed. As a script it is a
# demo: a Llama checkpoint (torch_llama.py) run over a short text, posting every N steps.
# Needs PyTorch (Debian: python3-torch); otherwise the standard library (urllib, ssl).
# Run: python3 examples/torch_stats.py --help
# SPDX-License-Identifier: Apache-2.0
import argparse
import contextlib
import email.utils
import json
import os
import random
import re
import secrets
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import torch
from torch import nn

OPERAND = "dot_general0_lhs"  # the operand Qwix names a linear layer's input by
# answers a retry cannot change: 501 and 505 never work, 507 wants an operator (stats_quota)
PERMANENT_5XX = (501, 505, 507)


class StatsPostError(Exception):
    """A post quantd refused, or did not take within the retries and time allowed."""


def activation_name(module_path):
    """The activation quantd reads the weight's module path back from: model.layers.0.mlp.up_proj
    -> model/layers/0/mlp/up_proj/dot_general0_lhs."""
    return module_path.replace(".", "/") + "/" + OPERAND


def retry_after(headers):
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), or None."""
    value = (headers.get("Retry-After") or "").strip() if headers is not None else ""
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class Poster:
    """POSTs bodies to quantd with urllib: the token as a Bearer header, an https:// URL checked
    against the CA file, and retries of what may not have been stored (connection errors,
    timeouts, 5xx but 501/505/507) at most `retries` times and within `max_wait` seconds."""

    def __init__(self, url, token=None, cacert=None, retries=5, max_wait=60.0, timeout=30.0):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("quantd URL %r: must be http://HOST[:PORT] or https://..." % url)
        self.base = url.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=cacert) if u.scheme == "https" else None
        self.token, self.retries, self.max_wait, self.timeout = token, retries, max_wait, timeout
        self.posts = self.retried = self.replays = 0

    def _send(self, path, body, headers):
        """(status, headers, body bytes), or (None, None, reason) when no answer came."""
        req = urllib.request.Request(self.base + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ctx) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()
        except (urllib.error.URLError, OSError) as e:
            return None, None, str(getattr(e, "reason", e) or type(e).__name__)

    def post(self, path, body, key, content_type="application/json"):
        """POSTs body with Idempotency-Key key; returns the answer's JSON. Raises StatsPostError
        naming the URL, the key and quantd's answer when it is not 2xx."""
        headers = {"Content-Type": content_type, "Idempotency-Key": key}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        deadline = time.monotonic() + self.max_wait
        self.posts += 1
        for attempt in range(self.retries + 1):
            status, resp_headers, reply = self._send(path, body, headers)
            if status is not None and 200 <= status < 300:
                if (resp_headers.get("Idempotent-Replayed") or "").lower() == "true":
                    self.replays += 1
                return json.loads(reply or b"{}")
            if status is None:
                why = "no answer (%s)" % reply
            else:
                why = "HTTP %d: %s" % (status, reply.decode("utf-8", "replace").strip())
            transient = status is None or (status >= 500 and status not in PERMANENT_5XX)
            wait = retry_after(resp_headers)
            if wait is None:  # exponential backoff with full jitter: 0.25 s, 0.5 s, 1 s, ...
                wait = random.uniform(0, min(10.0, 0.25 * 2 ** attempt))
            if not transient or attempt == self.retries or time.monotonic() + wait > deadline:
                tries = " (%d retries)" % attempt if attempt else ""
                raise StatsPostError("POST %s%s (Idempotency-Key %s)%s: %s" % (
                    self.base, path, key, tries, why))
            print("torch_stats: POST %s: %s; retry %d of %d in %.2f s" % (
                path, why[:200], attempt + 1, self.retries, wait), file=sys.stderr)
            time.sleep(wait)
            self.retried += 1
        raise AssertionError("unreachable")


class StatsHooks:
    """Forward pre-hooks on every nn.Linear of `model` (whose module path matches `include`, a
    full-match regex) that post the inputs' statistics to quantd every `every` calls of step().

    url, token and cacert default to $QUANTD_URL (else http://127.0.0.1:8080), $QUANTD_TOKEN and
    $QUANTD_CACERT. absmax is "tensor" (one value per layer: the max of |x|) or "column" (one per
    input feature). on_error "raise" lets StatsPostError reach the training loop; "warn" prints
    it, drops that batch of statistics and goes on. The Idempotency-Key of a post is
    RUN_ID-STEP: give the same run_id to a restarted job that posts steps again."""

    def __init__(self, model, url=None, model_name="torch", every=1, run_id=None, token=None,
                 cacert=None, absmax="tensor", include=".*", retries=5, max_wait=60.0,
                 timeout=30.0, on_error="raise"):
        if every < 1:
            raise ValueError("every must be at least 1")
        if absmax not in ("tensor", "column"):
            raise ValueError("absmax must be 'tensor' or 'column'")
        if on_error not in ("raise", "warn"):
            raise ValueError("on_error must be 'raise' or 'warn'")
        env = os.environ
        self.poster = Poster(url or env.get("QUANTD_URL") or "http://127.0.0.1:8080",
                             token if token is not None else env.get("QUANTD_TOKEN"),
                             cacert if cacert is not None else env.get("QUANTD_CACERT"),
                             retries, max_wait, timeout)
        self.path = "/v1/models/%s/stats" % urllib.parse.quote(model_name, safe="")
        self.every, self.absmax, self.on_error = every, absmax, on_error
        self.run_id = run_id or secrets.token_hex(6)
        self.steps = 0
        self.recording = True
        self.acc = {}  # activation -> [absmax, sum of x^2 (float64), tokens]
        self.last_body = None  # the last body posted (bytes) and its key
        self.last_key = None
        pattern = re.compile(include)
        self.handles = []
        for path, module in model.named_modules():
            if isinstance(module, nn.Linear) and pattern.fullmatch(path):
                self.handles.append(module.register_forward_pre_hook(self._hook(path)))
        if not self.handles:
            raise ValueError("no nn.Linear module path of the model matches %r" % include)

    def _hook(self, module_path):
        name = activation_name(module_path)

        def hook(module, inputs):
            if not self.recording:
                return
            x = inputs[0].detach()
            if x.numel() == 0:
                return
            x = x.reshape(-1, x.shape[-1])
            amax = x.abs().amax() if self.absmax == "tensor" else x.abs().amax(dim=0)
            sq = x.double().square().sum(dim=0)
            a = self.acc.get(name)
            if a is None:
                self.acc[name] = [amax, sq, x.shape[0]]
            else:
                a[0] = torch.maximum(a[0], amax)
                a[1] += sq
                a[2] += x.shape[0]

        return hook

    @contextlib.contextmanager
    def paused(self):
        """Forward passes in this block (evaluation, generation) are not recorded."""
        was, self.recording = self.recording, False
        try:
            yield self
        finally:
            self.recording = was

    def body(self, step):
        """The JSON post of what was recorded since the last post."""
        stats = {}
        for name, (amax, sq, tokens) in self.acc.items():
            stats[name] = {"absmax": [float(v) for v in amax.reshape(-1)],
                           "mean_sq": [float(v) for v in (sq / tokens)]}
        return json.dumps({"step": step, "stats": stats}, separators=(",", ":")).encode()

    def step(self, step=None):
        """Ends a training step (numbered step, else the count of calls); every `every` steps,
        posts. Returns quantd's answer when it posted, else None."""
        self.steps += 1
        if self.steps % self.every:
            return None
        return self.flush(self.steps if step is None else step)

    def flush(self, step=None):
        """Posts what was recorded since the last post, if anything, as step `step`."""
        if not self.acc:
            return None
        step = self.steps if step is None else step
        self.last_key = "%s-%d" % (self.run_id, step)
        self.last_body = self.body(step)
        self.acc = {}
        try:
            return self.poster.post(self.path, self.last_body, self.last_key)
        except StatsPostError as e:
            if self.on_error == "raise":
                raise
            print("torch_stats: statistics of step %d dropped: %s" % (step, e), file=sys.stderr)
            return None

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


# The demo's training text (TinyStories' register, written for this example).
TEXT = ("Once upon a time, there was a little dog named Max. Max liked to run in the park with "
        "his friend Sue. One day, Sue found a big red ball under a tree. She threw the ball and "
        "Max ran after it. The ball rolled into the pond. Max jumped into the water and got the "
        "ball. Sue laughed and said, \"You are a good dog, Max!\" They played until the sun went "
        "down, and then they went home to eat dinner. Max was happy and tired. He slept in his "
        "warm bed and dreamed of balls and ponds.")


def batches(ids, batch, seq_len, steps):
    """steps batches [batch, seq_len] of windows of the token ids, at offsets 7 tokens apart."""
    span = len(ids) - seq_len
    if span < 1:
        raise ValueError("the text has %d tokens; --seq-len must be less" % len(ids))
    for s in range(steps):
        starts = [((s * batch + b) * 7) % span for b in range(batch)]
        yield torch.tensor([ids[i:i + seq_len] for i in starts])


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Demo training job: run a Llama checkpoint in PyTorch over a short text and "
                    "post its nn.Linear inputs' absmax and mean_sq to quantd every N steps.")
    p.add_argument("checkpoint", help="directory with config.json, model.safetensors and "
                   "llama2.c's tokenizer.bin (e.g. stories15M)")
    p.add_argument("--url", default=None, help="quantd's base URL (default: $QUANTD_URL, else "
                   "http://127.0.0.1:8080); the token is $QUANTD_TOKEN, the CA $QUANTD_CACERT")
    p.add_argument("--model", default="stories15M", help="statistics model name (default "
                   "%(default)s)")
    p.add_argument("--steps", type=int, default=8, help="training steps (default %(default)s)")
    p.add_argument("--every", type=int, default=2, help="post every N steps (default "
                   "%(default)s)")
    p.add_argument("--batch", type=int, default=2, help="sequences a step (default %(default)s)")
    p.add_argument("--seq-len", type=int, default=32, help="tokens a sequence (default "
                   "%(default)s)")
    p.add_argument("--lr", type=float, default=0.0, help="SGD learning rate; 0 (the default) "
                   "runs the forward passes only")
    p.add_argument("--absmax", choices=("tensor", "column"), default="tensor",
                   help="absmax per tensor or per input column (default %(default)s)")
    p.add_argument("--run-id", default=None, help="Idempotency-Keys are RUN_ID-STEP (default: "
                   "12 random hex digits)")
    p.add_argument("--retries", type=int, default=5, help="retries of a post (default "
                   "%(default)s)")
    p.add_argument("--max-wait", type=float, default=60.0, help="seconds a post may take with "
                   "its retries (default %(default)s)")
    p.add_argument("--greedy", type=int, default=12, metavar="N", help="first print the greedy "
                   "continuation of 'Once upon a time' in N tokens (0: none; default %(default)s)")
    p.add_argument("--keep-bodies", metavar="DIR", help="also write each post's body to "
                   "DIR/KEY.json (to inspect or replay it)")
    a = p.parse_args(argv)
    for name in ("steps", "every", "batch", "seq_len"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.retries < 0 or a.max_wait < 0 or a.greedy < 0 or a.lr < 0:
        p.error("--retries, --max-wait, --greedy and --lr must be 0 or more")
    return a


def run(a):
    import torch_llama

    torch.manual_seed(0)
    try:
        model = torch_llama.load(a.checkpoint)
        tok = torch_llama.Tokenizer(os.path.join(a.checkpoint, "tokenizer.bin"),
                                    model.config["vocab_size"])
    except (OSError, ValueError, KeyError) as e:
        sys.exit("torch_stats: %s" % e)
    hooks = StatsHooks(model, a.url, a.model, a.every, a.run_id, absmax=a.absmax,
                       retries=a.retries, max_wait=a.max_wait)
    if a.greedy:
        with hooks.paused():
            out = torch_llama.greedy(model, tok.encode("Once upon a time"), a.greedy)
        print("greedy: %s" % tok.decode(out))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr) if a.lr else None
    t0 = time.monotonic()
    for tokens in batches(tok.encode(TEXT), a.batch, a.seq_len, a.steps):
        with torch.set_grad_enabled(opt is not None):
            logits = model(tokens[:, :-1])
        if opt:
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                               tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if hooks.step() is not None and a.keep_bodies:
            with open(os.path.join(a.keep_bodies, hooks.last_key + ".json"), "wb") as f:
                f.write(hooks.last_body)
    layers = len(hooks.handles)
    hooks.remove()
    p = hooks.poster
    print("%d steps of %d x %d tokens, %d posts of %d activations to %s in %.1f s: "
          "%d retries, %d replays (run %s)" % (a.steps, a.batch, a.seq_len - 1, p.posts, layers,
                                               hooks.path, time.monotonic() - t0, p.retried,
                                               p.replays, hooks.run_id))


def main(argv=None):
    a = parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        run(a)
    except (StatsPostError, ValueError) as e:
        sys.exit("torch_stats: %s" % e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
