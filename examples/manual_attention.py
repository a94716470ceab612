"""Planted bottleneck: causal self-attention written out by hand instead of the fused operator.

A small decoder block computes its attention as matmul, scale, mask, softmax and
matmul. Each of these reads and writes the whole (batch, heads, seq, seq) score
matrix, forward and backward, where `F.scaled_dot_product_attention` computes the
same result in one fused kernel that never materialises it.

    python examples/manual_attention.py           # the slow version
    python examples/manual_attention.py --sdpa    # the fix: F.scaled_dot_product_attention(is_causal=True)
"""

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, seq: int, fused: bool) -> None:
        super().__init__()
        self.heads, self.fused = heads, fused
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
            scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
            y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, seq: int, fused: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, seq, fused)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sdpa", action="store_true", help="use F.scaled_dot_product_attention")
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    torch.manual_seed(0)
    seq, dim = 512, 128
    model = nn.Sequential(*[Block(dim, heads=4, seq=seq, fused=args.sdpa) for _ in range(2)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(4, seq, dim)
    for step in range(args.steps):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
