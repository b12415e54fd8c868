#!/usr/bin/env python3
# torch_llama.py -- owns the small PyTorch Llama the torch_stats.py demo trains on: a Hugging Face
# Llama checkpoint directory (config.json + model.safetensors, read here with the standard
# library and torch.frombuffer, no safetensors or transformers package) loaded into nn.Modules
# named as the checkpoint names its tensors (model.layers.0.self_attn.q_proj, ...), so that
# model.named_modules() gives the weights' module paths; its forward pass (RMSNorm, rotary
# embeddings in Hugging Face's rotate_half layout, causal multi-head attention with grouped KV
# heads, SwiGLU); greedy decoding; and llama2.c's tokenizer.bin (encode and decode).
# Needs PyTorch (Debian: python3-torch). Run: python3 examples/torch_llama.py --help
# SPDX-License-Identifier: Apache-2.0
import argparse
import json
import math
import os
import struct
import sys

import torch
from torch import nn
from torch.nn import functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    """{name: float32 tensor} of a safetensors file (F32, F16 or BF16 tensors)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: shorter than a safetensors header" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError("%s: header length %d past the end of the file" % (path, n))
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise ValueError("%s: tensor %s: dtype %s (F32, F16 or BF16 expected)" % (
                path, name, info.get("dtype")))
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(data) - base:
            raise ValueError("%s: tensor %s: data_offsets past the end" % (path, name))
        count = math.prod(info["shape"])
        if count * torch.tensor([], dtype=dtype).element_size() != end - begin:
            raise ValueError("%s: tensor %s: shape %s does not fill its %d bytes" % (
                path, name, info["shape"], end - begin))
        t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=dtype)
        out[name] = t.reshape(info["shape"]).to(torch.float32)
    return out


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c["hidden_size"] // self.heads
        d = c["hidden_size"]
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, h = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, h, bias=False)
        self.up_proj = nn.Linear(d, h, bias=False)
        self.down_proj = nn.Linear(h, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c.get("rms_norm_eps", 1e-5)
        self.input_layernorm = RMSNorm(c["hidden_size"], eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    """The checkpoint's `model.` prefix: embedding, layers, final norm."""

    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-5))


class Llama(nn.Module):
    """A causal Llama whose parameters carry the checkpoint's tensor names."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Body(config)
        self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)
        if config.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def rope(self, t):
        c = self.config
        hd = c["hidden_size"] // c["num_attention_heads"]
        inv = 1.0 / c.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2).float() / hd)
        ang = torch.outer(torch.arange(t).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        return ang.cos(), ang.sin()

    def forward(self, tokens):
        """Logits [B, T, vocab] of token ids [B, T]."""
        cos, sin = self.rope(tokens.shape[1])
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))


def load(directory):
    """The Llama of a checkpoint directory, in eval mode, its weights float32."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "vocab_size"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise ValueError("%s/config.json: %s must be a positive integer" % (directory, key))
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    model = Llama(config)
    tensors = read_safetensors(os.path.join(directory, "model.safetensors"))
    expected = dict(model.named_parameters())
    if config.get("tie_word_embeddings", False):
        expected.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise ValueError("%s/model.safetensors: no tensor %s" % (directory, missing[0]))
    with torch.no_grad():
        for name, p in expected.items():
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise ValueError("%s/model.safetensors: tensor %s has shape %s, the config "
                                 "gives %s" % (directory, name, list(tensors[name].shape),
                                               list(p.shape)))
            p.copy_(tensors[name])
    return model.eval()


@torch.no_grad()
def greedy(model, tokens, n):
    """tokens (a list of ids) followed by n greedily decoded ones."""
    out = list(tokens)
    for _ in range(n):
        logits = model(torch.tensor([out]))
        out.append(int(logits[0, -1].argmax()))
    return out


class Tokenizer:
    """llama2.c's tokenizer.bin: int32 max_len, then per token float32 score, int32 length and
    the bytes. Ids 0, 1, 2 are unk, BOS, EOS; ids 3..258 the bytes 0x00..0xff."""

    def __init__(self, path, vocab_size):
        with open(path, "rb") as f:
            data = f.read()
        self.pieces, self.scores, at = [], [], 4
        for i in range(vocab_size):
            if at + 8 > len(data):
                raise ValueError("%s: ends at token %d of %d" % (path, i, vocab_size))
            score, n = struct.unpack_from("<fi", data, at)
            if n < 0 or at + 8 + n > len(data):
                raise ValueError("%s: token %d: length %d past the end" % (path, i, n))
            self.pieces.append(data[at + 8:at + 8 + n])
            self.scores.append(score)
            at += 8 + n
        self.ids = {p: i for i, p in enumerate(self.pieces)}

    def encode(self, text, bos=True):
        """SentencePiece's BPE as llama2.c runs it: a leading space, one id per character
        (bytes + 3 when the character is not a piece), then the best-scoring merge of two
        neighbours, again and again, while one is a piece."""
        ids = []
        for ch in " " + text:
            b = ch.encode("utf-8")
            ids.extend([self.ids[b]] if b in self.ids else [x + 3 for x in b])
        while True:
            best, at = None, -1
            for i in range(len(ids) - 1):
                j = self.ids.get(self.pieces[ids[i]] + self.pieces[ids[i + 1]])
                if j is not None and (best is None or self.scores[j] > self.scores[best]):
                    best, at = j, i
            if best is None:
                break
            ids[at:at + 2] = [best]
        return [1] + ids if bos else ids

    def decode(self, ids):
        """The text of ids, without BOS/EOS; byte pieces <0xNN> as their bytes."""
        out = b""
        for i in ids:
            if i in (1, 2):
                continue
            out += bytes([i - 3]) if 3 <= i < 259 else self.pieces[i]
        return out.decode("utf-8", "replace").lstrip(" ")


def main(argv=None):
    p = argparse.ArgumentParser(description="Load a Llama checkpoint directory in PyTorch and "
                                "print the greedy continuation of a prompt.")
    p.add_argument("checkpoint", help="directory with config.json, model.safetensors and "
                   "llama2.c's tokenizer.bin")
    p.add_argument("--prompt", default="Once upon a time", help="default %(default)r")
    p.add_argument("--tokens", type=int, default=20, help="tokens to decode (default "
                   "%(default)s)")
    a = p.parse_args(argv)
    try:
        model = load(a.checkpoint)
        tok = Tokenizer(os.path.join(a.checkpoint, "tokenizer.bin"), model.config["vocab_size"])
    except (OSError, ValueError, KeyError) as e:
        sys.exit("torch_llama: %s" % e)
    ids = tok.encode(a.prompt)
    out = greedy(model, ids, a.tokens)
    print("prompt ids:", " ".join(map(str, ids)))
    print(tok.decode(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
