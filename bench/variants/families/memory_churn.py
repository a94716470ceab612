"""CPU memory churn: a large temporary buffer allocated and freed in every step.

Buffers of tens of MB go to mmap and back to the system when freed, so every step faults their pages in
afresh. CPU005 (host-memory-faulted-in-every-step) tells it; it was being written when this family was (GPU010 is
the allocator's churn on a GPU, not this)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import MODELS, Prog, model

WORKSPACE_HELPER = '''\
def noisy_targets(out: torch.Tensor, workspace: torch.Tensor | None = None) -> torch.Tensor:
    """A large scratch buffer for the label noise."""
    if workspace is None:
        workspace = torch.zeros({n})
    else:
        workspace.zero_()
    workspace[: out.numel()] = 0.01
    return out + workspace[: out.numel()].view_as(out)
'''


class MemoryChurn(Family):
    name = "memory_churn"
    rules = ("CPU005",)
    summary = "a large temporary buffer is allocated and freed in every step"
    axes = {
        "what": ("torch_zeros", "numpy_buffer", "stacked_frames", "param_snapshot", "helper_workspace",
                 "forward_buffer"),
        "driver": ("plain", "while", "function", "loader", "eval_first", "closure"),
        "model": MODELS,
    }

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = model(axes["model"], rng)
        p = Prog("", m, driver=axes["driver"])
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)"
        n = rng.choice((8, 12, 16)) * 1024 * 1024   # floats: 32-64 MB
        what = axes["what"]
        if what == "torch_zeros":
            p.setup = [f"scratch = torch.zeros({n})"] if fixed else []
            p.out = (["scratch.zero_()"] if fixed else [f"scratch = torch.zeros({n})"]) + [
                "scratch[: x.numel()] = x.reshape(-1)", "out = model(scratch[: x.numel()].view_as(x))"]
        elif what == "numpy_buffer":
            p.imports.append("import numpy as np")
            p.setup = [f"staging = np.zeros({n}, dtype=np.float32)"] if fixed else []
            p.out = (["staging.fill(0.0)"] if fixed else [f"staging = np.zeros({n}, dtype=np.float32)"]) + [
                "staging[: x.numel()] = x.numpy().reshape(-1)",
                "out = model(torch.from_numpy(staging[: x.numel()]).view_as(x))"]
        elif what == "stacked_frames":
            k = 8
            p.setup = [f"frames = torch.empty({k}, {n // k})"] if fixed else []
            p.out = (["frames.fill_(0.01)"] if fixed else
                     [f"frames = torch.stack([torch.full(({n // k},), 0.01) for _ in range({k})])"]) + [
                "out = model(x + frames.mean())"]
        elif what == "param_snapshot":
            p.setup = ["snapshot = [q.detach().clone() for q in model.parameters()]",
                       f"history = torch.empty({n})"] if fixed else []
            p.post = (["for s, q in zip(snapshot, model.parameters()):", "    s.copy_(q.detach())", "history.zero_()"]
                      if fixed else ["snapshot = [q.detach().clone() for q in model.parameters()]",
                                     f"history = torch.zeros({n})"])
        elif what == "helper_workspace":
            p.defs.append(WORKSPACE_HELPER.format(n=n))
            p.setup = [f"workspace = torch.zeros({n})"] if fixed else []
            p.loss = ["loss = nn.functional.cross_entropy(noisy_targets(out" + (", workspace" if fixed else "")
                      + "), y)"]
        else:
            m.init = [*m.init, f"self.register_buffer(\"scratch\", torch.zeros({n}), persistent=False)"] if fixed \
                else m.init
            p.methods.append("def mix_in_scratch(self, h: torch.Tensor) -> torch.Tensor:\n"
                             + ("    scratch = self.scratch\n    scratch.zero_()\n" if fixed
                                else f"    scratch = torch.zeros({n})\n")
                             + "    scratch[: h.numel()] = 1.0\n    return h * scratch[: h.numel()].view_as(h)\n")
            p.feat = ["h = self.mix_in_scratch(h)"]
        return p


FAMILY = MemoryChurn()
