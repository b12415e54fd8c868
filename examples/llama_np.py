#!/usr/bin/env python3
# llama_np.py -- owns the NumPy forward pass of a Llama checkpoint in Hugging Face layout that
# collect_stats.py and eval_kld.py share: a safetensors reader (one file, or
# shards named by model.safetensors.index.json; F32, F16, BF16, F64), the model (embeddings,
# RMSNorm, rotary embeddings in HF's rotate_half convention, grouped-query attention with a
# causal mask, SwiGLU MLP, final norm, lm_head or tied embeddings), a hook that sees every linear
# layer's input, and seeded sampling of token sequences from the model itself. Run as a script it
# prints the model's shape and greedy continuation of BOS (a smoke test).
# Python 3 and NumPy only (Debian: python3-numpy). Not a runtime: float32, batches
# of equal-length sequences, a key/value cache for sampling only; stories260K runs in a second.
# SPDX-License-Identifier: Apache-2.0
import argparse
import json
import os
import struct
import sys

import numpy as np

# safetensors dtype -> (numpy dtype of the stored bytes, widening to float32)
_DTYPES = {
    "F32": (np.dtype("<f4"), lambda a: a),
    "F16": (np.dtype("<f2"), lambda a: a.astype(np.float32)),
    "F64": (np.dtype("<f8"), lambda a: a.astype(np.float32)),
    # bfloat16 is the high half of a float32: shift the 16 bits into place (exact)
    "BF16": (np.dtype("<u2"), lambda a: (a.astype(np.uint32) << 16).view(np.float32)),
}


def read_safetensors(path, names=None):
    """{name: float32 array} of one safetensors file: the 8-byte little-endian header length,
    the JSON header, then the data (offsets relative to the end of the header). `names`, when
    given, limits what is read. Non-float tensors are refused: a Llama has none."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (hlen,) = struct.unpack("<Q", blob[:8])
    if hlen > len(blob) - 8:
        raise ValueError("%s: header length %d past the end of the file" % (path, hlen))
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or (names is not None and name not in names):
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError("%s: tensor '%s': dtype %s is not a float type this reader knows "
                             "(F32, F16, BF16, F64)" % (path, name, info["dtype"]))
        dt, widen = _DTYPES[info["dtype"]]
        lo, hi = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if hi - lo != count * dt.itemsize or base + hi > len(blob):
            raise ValueError("%s: tensor '%s': data_offsets [%d, %d] do not hold %s %s" % (
                path, name, lo, hi, info["dtype"], list(shape)))
        a = np.frombuffer(blob, dtype=dt, count=count, offset=base + lo)
        out[name] = np.ascontiguousarray(widen(a).reshape(shape), dtype=np.float32)
    return out


def checkpoint_files(model_dir):
    """The safetensors files of a checkpoint directory: the shards named by
    model.safetensors.index.json, else every *.safetensors file, sorted."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return [os.path.join(model_dir, s) for s in sorted(set(weight_map.values()))]
    files = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    if not files:
        raise ValueError("%s: no *.safetensors file and no model.safetensors.index.json"
                         % model_dir)
    return [os.path.join(model_dir, n) for n in files]


def load_weights(model_dir):
    """Every tensor of the checkpoint as float32; a name in two files is an error."""
    weights = {}
    for path in checkpoint_files(model_dir):
        for name, a in read_safetensors(path).items():
            if name in weights:
                raise ValueError("%s: tensor '%s' is in two shards" % (model_dir, name))
            weights[name] = a
    return weights


def linear_names(n_layers, has_lm_head):
    """The module paths of the linear layers, in the order the forward pass runs them."""
    names = []
    for i in range(n_layers):
        p = "model.layers.%d." % i
        names += [p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj",
                  p + "self_attn.o_proj", p + "mlp.gate_proj", p + "mlp.up_proj",
                  p + "mlp.down_proj"]
    if has_lm_head:
        names.append("lm_head")
    return names


def _rms_norm(x, w, eps):
    """HF LlamaRMSNorm: x / sqrt(mean(x^2) + eps), then times the weight."""
    var = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(var + np.float32(eps))) * w


def _rotate_half(x):
    """HF's rotate_half: (x1, x2) -> (-x2, x1), halves of the last axis."""
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def _silu(x):
    return x / (np.float32(1) + np.exp(-x))


def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


class Llama:
    """A LlamaForCausalLM in float32. `forward(tokens, hook)` returns the logits [B, T, vocab];
    hook(module_path, x), when given, sees the input x [B, T, in] of every linear layer."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.config = cfg
        self.dim = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads", self.n_heads)
        self.head_dim = cfg.get("head_dim") or self.dim // self.n_heads
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.bos = cfg.get("bos_token_id", 1)
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError("%s: hidden_act %r: only silu (SwiGLU) is implemented"
                             % (model_dir, cfg["hidden_act"]))
        if cfg.get("rope_scaling"):
            raise ValueError("%s: rope_scaling is not implemented" % model_dir)
        for key in ("attention_bias", "mlp_bias"):
            if cfg.get(key):
                raise ValueError("%s: %s: biases are not implemented" % (model_dir, key))
        if self.n_heads % self.n_kv:
            raise ValueError("%s: %d heads are not a multiple of %d KV heads"
                             % (model_dir, self.n_heads, self.n_kv))
        self.w = load_weights(model_dir)
        self.has_lm_head = "lm_head.weight" in self.w
        if not self.has_lm_head and not cfg.get("tie_word_embeddings", False):
            raise ValueError("%s: no lm_head.weight and tie_word_embeddings is not set"
                             % model_dir)
        for name in linear_names(self.n_layers, self.has_lm_head):
            if name + ".weight" not in self.w:
                raise ValueError("%s: tensor '%s.weight' is missing" % (model_dir, name))
        self.linears = linear_names(self.n_layers, self.has_lm_head)

    def _linear(self, name, x, hook):
        if hook is not None:
            hook(name, x)
        return x @ self.w[name + ".weight"].T

    def _rope(self, pos0, t):
        """cos, sin [T, head_dim] of HF's default rotary embedding for positions pos0..pos0+t-1:
        inv_freq = 1 / theta^(2j / head_dim), angle = position * inv_freq, both halves."""
        inv = 1.0 / (self.theta ** (np.arange(0, self.head_dim, 2, dtype=np.float32)
                                    / np.float32(self.head_dim)))
        pos = np.arange(pos0, pos0 + t, dtype=np.float32)
        freqs = np.outer(pos, inv.astype(np.float32))
        emb = np.concatenate([freqs, freqs], axis=-1)
        return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)

    def _attention(self, i, x, cos, sin, mask, hook, cache):
        b, t, _ = x.shape
        p = "model.layers.%d.self_attn." % i
        q = self._linear(p + "q_proj", x, hook).reshape(b, t, self.n_heads, self.head_dim)
        k = self._linear(p + "k_proj", x, hook).reshape(b, t, self.n_kv, self.head_dim)
        v = self._linear(p + "v_proj", x, hook).reshape(b, t, self.n_kv, self.head_dim)
        q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))  # [B, heads, T, head_dim]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if cache is not None:  # earlier positions' keys and values, then these
            if cache[i] is not None:
                k = np.concatenate([cache[i][0], k], axis=2)
                v = np.concatenate([cache[i][1], v], axis=2)
            cache[i] = (k, v)
        rep = self.n_heads // self.n_kv  # query head h reads KV head h // rep
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
        scores = (q @ k.transpose(0, 1, 3, 2)) / np.float32(np.sqrt(self.head_dim)) + mask
        out = _softmax(scores) @ v
        out = out.transpose(0, 2, 1, 3).reshape(b, t, self.n_heads * self.head_dim)
        return self._linear(p + "o_proj", out, hook)

    def _mlp(self, i, x, hook):
        p = "model.layers.%d.mlp." % i
        g = self._linear(p + "gate_proj", x, hook)
        u = self._linear(p + "up_proj", x, hook)
        return self._linear(p + "down_proj", _silu(g) * u, hook)

    def forward(self, tokens, hook=None, cache=None):
        """Logits [B, T, vocab] of tokens [B, T]. cache: None, or a list kept by the caller
        across calls (start with new_cache()): the tokens then continue the ones it holds."""
        tokens = np.asarray(tokens)
        if tokens.ndim != 2:
            raise ValueError("tokens must be [batch, time]")
        t = tokens.shape[1]
        pos0 = 0 if cache is None or cache[0] is None else cache[0][0].shape[2]
        x = self.w["model.embed_tokens.weight"][tokens]
        cos, sin = self._rope(pos0, t)
        # query at position pos0 + a sees keys 0..pos0 + a
        mask = np.triu(np.full((t, pos0 + t), -np.inf, dtype=np.float32), k=pos0 + 1)
        for i in range(self.n_layers):
            p = "model.layers.%d." % i
            h = _rms_norm(x, self.w[p + "input_layernorm.weight"], self.eps)
            x = x + self._attention(i, h, cos, sin, mask, hook, cache)
            h = _rms_norm(x, self.w[p + "post_attention_layernorm.weight"], self.eps)
            x = x + self._mlp(i, h, hook)
        x = _rms_norm(x, self.w["model.norm.weight"], self.eps)
        if self.has_lm_head:
            return self._linear("lm_head", x, hook)
        return x @ self.w["model.embed_tokens.weight"].T

    def new_cache(self):
        """An empty key/value cache for forward(): one (keys, values) entry per layer."""
        return [None] * self.n_layers

    def greedy(self, n_tokens):
        """BOS, then n_tokens tokens each the most likely next one (ties: the lowest id)."""
        tokens = np.full((1, n_tokens + 1), self.bos, dtype=np.int64)
        cache = self.new_cache()
        for j in range(n_tokens):
            logits = self.forward(tokens[:, j:j + 1], cache=cache)
            tokens[0, j + 1] = int(np.argmax(logits[0, -1]))
        return tokens[0]

    def sample(self, n_seqs, seq_len, seed, temperature=1.0):
        """n_seqs sequences of seq_len tokens [n_seqs, seq_len] (int64): BOS, then tokens drawn
        from the model's own next-token distribution at `temperature` (numpy's PCG64 seeded
        with `seed`, so a seed always gives the same sequences for the same weights)."""
        if seq_len < 1 or n_seqs < 1:
            raise ValueError("need at least one sequence of at least one token")
        rng = np.random.default_rng(seed)
        tokens = np.full((n_seqs, seq_len), self.bos, dtype=np.int64)
        cache = self.new_cache()
        for j in range(seq_len - 1):
            logits = self.forward(tokens[:, j:j + 1], cache=cache)[:, -1, :]
            probs = _softmax(logits.astype(np.float64) / temperature)
            # inverse CDF: the first token whose cumulative probability exceeds u
            u = rng.random((n_seqs, 1))
            nxt = np.sum(np.cumsum(probs, axis=-1) <= u, axis=-1)
            tokens[:, j + 1] = np.minimum(nxt, self.vocab - 1)
        return tokens


def log_softmax64(logits):
    """log softmax along the last axis, in float64."""
    x = np.asarray(logits, dtype=np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def main(argv=None):
    p = argparse.ArgumentParser(description="Load a Llama checkpoint (Hugging Face layout) and "
                                "print its shape and its greedy continuation of BOS.")
    p.add_argument("checkpoint", help="directory with config.json and safetensors")
    p.add_argument("--greedy", type=int, default=16, metavar="N", help="tokens to decode "
                   "(default %(default)s)")
    a = p.parse_args(argv)
    try:
        m = Llama(a.checkpoint)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("llama_np: %s" % e)
    print("%s: dim %d, %d layers, %d heads / %d KV heads, vocab %d, %s" % (
        a.checkpoint, m.dim, m.n_layers, m.n_heads, m.n_kv, m.vocab,
        "lm_head" if m.has_lm_head else "tied embeddings"))
    print("greedy from BOS: %s" % " ".join(str(t) for t in m.greedy(a.greedy)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
