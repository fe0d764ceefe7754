"""Greedy text generation from a small GPT-style decoder, re-running the whole prefix for every new token."""

import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self, vocab=500, d=128, heads=4, layers=3, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, dropout=0.0)
        self.body = nn.TransformerEncoder(layer, layers)
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, ids):
        T = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        h = self.tok(ids) + self.pos(torch.arange(T))
        return self.lm_head(self.body(h, mask=mask, is_causal=True))


@torch.no_grad()
def generate(model, prompt, new_tokens):
    ids = prompt
    for _ in range(new_tokens):
        logits = model(ids)  # full context every time
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


torch.manual_seed(0)
model = Decoder().eval()
outs = []
for r in range(20):
    prompt = torch.randint(0, 500, (1, 16))
    outs.append(generate(model, prompt, 220))
print(
    f"generated {len(outs)} sequences of {outs[0].shape[1]} tokens ({len(outs) * 220} decode steps)"
)
