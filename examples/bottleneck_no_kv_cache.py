"""Planted bottleneck: autoregressive decoding without a KV cache (`inference.kv_cache`).

A tiny decoder generates 48 tokens per prompt by calling the model on the whole sequence so
far for each new token: the cost of a token grows with the context. `--kv-cache` decodes
the same way with cached keys and values (the control): each call sees the new token only.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

VOCAB, WIDTH, HEADS, LAYERS = 256, 128, 4, 2
PROMPT, NEW_TOKENS, PROMPTS = 16, 40, 4


class Block(nn.Module):
    """Causal self-attention with an optional cache of past keys and values, then an MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
        )

    def forward(self, x: torch.Tensor, cache: list[torch.Tensor] | None) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        causal = length > 1
        mixed = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + self.proj(mixed.transpose(1, 2).reshape(batch, length, WIDTH))
        return x + self.mlp(x)


class Decoder(nn.Module):
    """Token and position embeddings, blocks, and a head over the vocabulary."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(PROMPT + NEW_TOKENS, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(
        self, ids: torch.Tensor, start: int = 0, caches: list | None = None
    ) -> torch.Tensor:
        positions = torch.arange(start, start + ids.shape[1])
        x = self.tokens(ids) + self.positions(positions)
        for index, block in enumerate(self.blocks):
            x = block(x, caches[index] if caches is not None else None)
        return self.head(x[:, -1])


@torch.inference_mode()
def generate(model: Decoder, prompt: torch.Tensor, kv_cache: bool) -> torch.Tensor:
    ids = prompt
    caches: list | None = [[] for _ in range(LAYERS)] if kv_cache else None
    step_input, start = ids, 0
    for _ in range(NEW_TOKENS):
        if kv_cache:
            logits = model(step_input, start, caches)
            start += step_input.shape[1]
        else:
            logits = model(ids)  # the bottleneck: the whole context, every token
        token = logits.argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, token], dim=1)
        step_input = token
    return ids


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kv-cache", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Decoder().eval()
    for seed in range(PROMPTS):
        prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(seed))
        out = generate(model, prompt, args.kv_cache)
    print("tokens", out[0, -8:].tolist())
