#!/usr/bin/env python3
# collect_stats.py -- owns the "training job with a real model" example: runs
# the float Llama of a Hugging Face checkpoint (llama_np.py) on token sequences it samples from
# the model itself (seeded), and records, per linear layer input, the statistics a training job
# would post: `absmax` (max |x| over each sequence, averaged over the batch, as Qwix averages over
# act_batch_axes before it records; shape [1]) and `mean_sq` (the mean of x^2 over every axis but
# the input-feature axis; shape [in], the importance statistic). It posts one step per batch to
# POST /v1/models/{model}/stats (JSON, an Idempotency-Key per step, retried as train_stats.py
# does), or with --out writes the sums as one Qwix quant_stats dump in JSON.
# Needs NumPy (Debian: python3-numpy). Run: python3 examples/collect_stats.py --help
# SPDX-License-Identifier: Apache-2.0
import argparse
import http.client
import json
import os
import secrets
import sys
import urllib.parse

import numpy as np

import llama_np
from train_stats import Client, Poster, show_model

STATISTICS = ("absmax", "mean_sq")


def act_name(module_path):
    """The activation name Qwix records for a linear layer's input: the module path with '/'
    between components, then the operand (quantd reads the module path back from it)."""
    return module_path.replace(".", "/") + "/dot_general0_lhs"


def step_stats(model, tokens, which):
    """{activation: {statistic: list}} of one forward pass over tokens [B, T]."""
    out = {}

    def hook(module_path, x):
        entry = {}
        if "absmax" in which:
            per_seq = np.max(np.abs(x), axis=tuple(range(1, x.ndim)))  # one value a sequence
            entry["absmax"] = [float(np.mean(per_seq, dtype=np.float64))]
        if "mean_sq" in which:
            x64 = x.astype(np.float64).reshape(-1, x.shape[-1])
            entry["mean_sq"] = [float(v) for v in np.mean(x64 * x64, axis=0)]
        out[act_name(module_path)] = entry

    model.forward(tokens, hook=hook)
    return out


def add_to(sums, stats):
    for act, keys in stats.items():
        acc = sums.setdefault(act, {})
        for key, values in keys.items():
            v = np.asarray(values, dtype=np.float64)
            acc[key] = acc[key] + v if key in acc else v


def dump(sums, count):
    """A Qwix quant_stats dump: per activation its count and sum_of_<statistic>; quantd takes it
    as a merge (POST .../stats?mode=merge)."""
    stats = {}
    for act, keys in sums.items():
        entry = {"count": count}
        for key, v in keys.items():
            entry["sum_of_" + key] = [float(x) for x in v]
        stats[act] = entry
    return {"stats": stats}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Run a Llama checkpoint (Hugging Face layout) in NumPy on sequences sampled "
                    "from itself and post its linear layers' input statistics to quantd as a "
                    "training job would (or write them to a file).")
    p.add_argument("checkpoint", help="directory with config.json and model.safetensors (or "
                   "shards and model.safetensors.index.json)")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="quantd's base URL "
                   "(default %(default)s)")
    p.add_argument("--model", default="stories", help="statistics model name (default "
                   "%(default)s)")
    p.add_argument("--token", default=os.environ.get("QUANTD_TOKEN"),
                   help="a trainer token (default: $QUANTD_TOKEN)")
    p.add_argument("--cacert", metavar="FILE", help="CA to trust for an https:// URL")
    p.add_argument("--steps", type=int, default=8, help="batches, one post each (default "
                   "%(default)s)")
    p.add_argument("--batch", type=int, default=8, help="sequences per step (default "
                   "%(default)s)")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per sequence, BOS included "
                   "(default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed; step s samples with the "
                   "seed sequence [SEED, s] (default %(default)s)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature "
                   "(default %(default)s)")
    p.add_argument("--stats", default=",".join(STATISTICS),
                   help="comma-separated statistics to record: absmax, mean_sq (default "
                   "%(default)s; mean_sq is the importance statistic: quantd takes it "
                   "from migration 0006 on)")
    p.add_argument("--out", metavar="FILE", help="write one Qwix quant_stats dump (JSON: "
                   "{\"stats\": {ACT: {\"count\", \"sum_of_absmax\", \"sum_of_mean_sq\"}}}) "
                   "to FILE instead of posting")
    p.add_argument("--run-id", default=None, help="Idempotency-Keys are RUN_ID-STEP (default: "
                   "12 random hex digits)")
    p.add_argument("--retries", type=int, default=5, help="retries of a lost post (default "
                   "%(default)s)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default "
                   "%(default)s)")
    a = p.parse_args(argv)
    for name in ("steps", "batch", "seq_len"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.temperature <= 0:
        p.error("--temperature must be positive")
    a.which = [s.strip() for s in a.stats.split(",") if s.strip()]
    bad = [s for s in a.which if s not in STATISTICS]
    if bad or not a.which or len(set(a.which)) != len(a.which):
        p.error("--stats: a comma-separated list of distinct absmax, mean_sq (got %r)" % a.stats)
    if a.run_id is None:
        a.run_id = secrets.token_hex(6)
    return a


def run(a):
    try:
        model = llama_np.Llama(a.checkpoint)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("collect_stats: %s" % e)
    client = poster = None
    if not a.out:
        client = Client(a.url, a.timeout, a.token, a.cacert)
        poster = Poster(client, a.retries, prog="collect_stats")
    path = "/v1/models/%s/stats" % urllib.parse.quote(a.model, safe="")
    sums = {}
    for step in range(a.steps):
        tokens = model.sample(a.batch, a.seq_len, [a.seed, step], a.temperature)
        stats = step_stats(model, tokens, a.which)
        if a.out:
            add_to(sums, stats)
            continue
        body = json.dumps({"step": step, "stats": stats}, separators=(",", ":")).encode()
        poster.post(path, body, "application/json", "%s-%d" % (a.run_id, step))
    what = "%d steps x %d sequences x %d tokens (seed %d), %d activations (%s)" % (
        a.steps, a.batch, a.seq_len, a.seed, len(model.linears), ", ".join(a.which))
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dump(sums, a.steps), f, separators=(",", ":"))
            f.write("\n")
        os.replace(tmp, a.out)
        print("wrote %s: %s" % (a.out, what))
        return
    print("posted %s to model %s" % (what, a.model))
    show_model(client, a.model)
    client.close()


def main(argv=None):
    a = parse_args(argv)
    try:
        run(a)
    except (OSError, http.client.HTTPException) as e:
        sys.exit("collect_stats: %s" % e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
