"""Planted bottleneck: activations are transposed and copied back and forth in every layer.

An MLP-Mixer-style model mixes along the token axis by transposing the
activations, making them contiguous, applying a Linear layer, and transposing
and copying them back. Each `.contiguous()` reads and writes the whole
activation, and the backward pass copies the strided gradients again.

    python examples/strided_copies.py                 # the slow version
    python examples/strided_copies.py --keep-layout   # the fix: one layout, (tokens, batch, channels), kept
"""

import argparse

import torch
from torch import nn


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, channels: int, keep_layout: bool) -> None:
        super().__init__()
        self.keep_layout = keep_layout
        self.norm = nn.LayerNorm(channels)
        self.token_mix = nn.Linear(tokens, tokens)
        self.channel_mix = nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        if self.keep_layout:  # x: (tokens, batch, channels); token mixing is one matmul over a view
            mixed = torch.addmm(self.token_mix.bias[:, None], self.token_mix.weight, h.view(h.shape[0], -1))
            h = mixed.view_as(h)
        else:  # x: (batch, tokens, channels)
            h = h.transpose(1, 2).contiguous()                 # (batch, channels, tokens)
            h = self.token_mix(h)
            h = h.transpose(1, 2).contiguous()                 # back to (batch, tokens, channels)
        return x + self.channel_mix(torch.relu(h))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep-layout", action="store_true", help="mix tokens without transposing")
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(*[MixerBlock(16, 64, args.keep_layout) for _ in range(4)])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 16, 64)
    if args.keep_layout:
        x = x.transpose(0, 1).contiguous()  # once, before training: (tokens, batch, channels)
    for step in range(args.steps):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
