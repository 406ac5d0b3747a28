"""A small transformer's training loop (4 layers, bf16 autocast, AdamW) whose
forward ops come from known lines, for the check of backward kernels on their
forward line (scripts/gpu/check-backward.sh). Each forward line ends with a
`# LINE:name` marker.

Prints "step N" every 50 steps, then one JSON object: ms/step (median of the
steps after --warmup, each ended by the loss's .item()).

With --profile OUT.json, it runs torch.profiler (with_stack) over --steps
steps instead and writes PyTorch's own link of backward and forward: for each
function of this file (by its first line: torch.profiler's stacks name
functions so), the GPU time of the kernels of the backward ops whose sequence
number is that of a forward op made in it; the oracle the check compares
cudaprobe with. Each marked forward op is in a function of its own.

Usage: python backward_torch.py [--steps 100] [--warmup 20] [--profile OUT.json] [--compile]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


class Block(torch.nn.Module):
    """Each forward op in a method of its own: torch.profiler's stacks name a
    function by its first line, so the check compares functions."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def norm1(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln1(x)  # LINE:ln1

    def project(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t, d = h.shape
        return self.qkv(h).view(b, t, 3, self.heads, d // self.heads).unbind(2)  # LINE:qkv

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),  # LINE:attn
                                              v.transpose(1, 2), is_causal=True)

    def output(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x + self.out(a.transpose(1, 2).reshape(b, t, d))  # LINE:out

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc1(self.ln2(x)))  # LINE:fc1

    def contract(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(h)  # LINE:fc2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.output(x, self.attend(*self.project(self.norm1(x))))
        return self.contract(x, self.expand(x))


class Model(torch.nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = torch.nn.Linear(d, vocab)

    def embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)  # LINE:embed

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x)  # LINE:head

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.logits(x)


def loss_of(logits: torch.Tensor, tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, vocab).float(),  # LINE:loss
                           tokens[:, 1:].reshape(-1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--profile", metavar="OUT.json")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model: its backward is one compiled node")
    args = ap.parse_args()
    torch.manual_seed(0)
    vocab, d = 8192, 512
    model = Model(vocab, d, 4, 8).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    forward = torch.compile(model) if args.compile else model
    tokens = torch.randint(0, vocab, (16, 256), device="cuda")

    def step() -> float:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(forward(tokens[:, :-1]), tokens, vocab)  # LINE:model
        opt.zero_grad(set_to_none=True)
        loss.backward()  # LINE:backward
        opt.step()  # LINE:step
        return loss.item()

    if args.profile:
        for _ in range(args.warmup):
            step()
        # the ops' Python stacks: with_stack, and (PyTorch 2.1+) a verbose config
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                     experimental_config=torch._C._profiler._ExperimentalConfig(verbose=True)
                     ) as prof:
            for _ in range(args.steps):
                step()
        torch.cuda.synchronize()
        write_oracle(prof, args.profile)
        return
    times = []
    for i in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
        if i % 50 == 0:
            print(f"step {i}", flush=True)
    kept = times[args.warmup:] or times
    print(json.dumps({"ms_per_step": round(1e3 * statistics.median(kept), 3),
                      "steps": len(kept)}), flush=True)


BACKWARD = "autograd::engine::evaluate_function: "


OWN = re.compile(r"(?:^|/)" + re.escape(os.path.basename(__file__)) + r"\((\d+)\)")


def own_line(stack: list[str]) -> int | None:
    """The innermost frame of this file in a profiler stack ("path(line): fn",
    the path cut short by the profiler)."""
    for frame in stack:
        if m := OWN.match(frame):
            return int(m.group(1))
    return None


def write_oracle(prof, path: str) -> None:
    """PyTorch's own link: each backward op's node number -> the forward op of the
    same number on its forward thread (the latest to start: the one that made
    the node) -> that op's line; GPU time per line, backward and forward."""
    events = prof.events()
    forward: dict[tuple[int, int], tuple[int, int | None]] = {}  # (thread, seq) -> (start, line)
    for e in events:
        if e.sequence_nr >= 0 and not e.name.startswith(BACKWARD) and e.stack \
                and not e.is_async:
            key = (e.thread, e.sequence_nr)
            start = e.time_range.start
            if key not in forward or start >= forward[key][0]:
                forward[key] = (start, own_line(e.stack))
    backward_ns: dict[str, int] = {}
    total_backward = 0
    for e in events:
        if not e.name.startswith(BACKWARD):
            continue
        ns = int(e.device_time_total * 1000)
        total_backward += ns
        node = next((c for c in e.cpu_children if c.sequence_nr >= 0), None)
        line = None
        if node is not None:
            line = forward.get((node.fwd_thread, node.sequence_nr), (0, None))[1]
        key = str(line) if line is not None else "none"
        backward_ns[key] = backward_ns.get(key, 0) + ns
    with open(path, "w") as f:
        json.dump({"backward_ns_by_line": backward_ns, "backward_ns": total_backward,
                   "kernels_ns": int(sum(e.device_time_total for e in events
                                         if e.cpu_parent is None) * 1000)}, f, indent=1)


if __name__ == "__main__":
    main()
