#!/usr/bin/env python3
# torch_vs_numpy.py -- the torch suite's independent check of what examples/torch_stats.py posts:
# the same token batches run through the NumPy Llama (examples/llama_np.py, its own forward
# pass and its own hook on every linear layer's input), the statistics computed again in
# float64 (absmax: the max of |x| over the steps' tokens; mean_sq: the mean of x^2 per input
# column), and compared with one post body the demo kept (--keep-bodies). Prints the largest
# relative differences; exits 1 when one is over the tolerance or an activation differs.
# Usage: torch_vs_numpy.py CHECKPOINT BODY.json --first-step S --steps N --batch B --seq-len T
# SPDX-License-Identifier: Apache-2.0
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
import llama_np  # noqa: E402
import torch_llama  # noqa: E402
import torch_stats  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("body")
    p.add_argument("--first-step", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--tolerance", type=float, default=1e-4)
    a = p.parse_args()
    with open(a.body) as f:
        posted = json.load(f)["stats"]
    model = llama_np.Llama(a.checkpoint)
    tok = torch_llama.Tokenizer(os.path.join(a.checkpoint, "tokenizer.bin"), 32000)
    ids = tok.encode(torch_stats.TEXT)
    acc = {}

    def hook(module_path, x):
        x = x.astype(np.float64).reshape(-1, x.shape[-1])
        name = torch_stats.activation_name(module_path)
        amax, sq, n = acc.get(name, (0.0, 0.0, 0))
        acc[name] = (max(amax, float(np.abs(x).max())), sq + (x * x).sum(axis=0), n + len(x))

    all_batches = torch_stats.batches(ids, a.batch, a.seq_len, a.first_step + a.steps)
    for s, tokens in enumerate(all_batches):
        if s >= a.first_step:
            model.forward(tokens[:, :-1].numpy(), hook=hook)
    # the tied lm_head is no linear layer of the NumPy model: compare what both have
    names = sorted(acc)
    missing = [n for n in names if n not in posted]
    if missing or len(names) != 42:
        sys.exit("activations: NumPy %d, missing from the post: %s" % (len(names), missing))
    worst = {"absmax": 0.0, "mean_sq": 0.0}
    for name in names:
        amax, sq, n = acc[name]
        want = {"absmax": np.array([amax]), "mean_sq": sq / n}
        for key, w in want.items():
            got = np.array(posted[name][key], dtype=np.float64)
            if got.shape != w.shape:
                sys.exit("%s %s: shape %s, NumPy %s" % (name, key, got.shape, w.shape))
            worst[key] = max(worst[key], float(np.max(np.abs(got - w) / np.abs(w))))
    print("42 activations; largest relative difference: absmax %.3g, mean_sq %.3g" % (
        worst["absmax"], worst["mean_sq"]))
    return 1 if max(worst.values()) > a.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
