"""A torch.distributed job of known NCCL calls, for scripts/gpu/check-descendants.sh.

Run by torchrun, one process a GPU. Each rank makes, in order:
  warm-up   WARMUP of each: all_reduce, all_gather_into_tensor,
            reduce_scatter_tensor, broadcast (from rank 0), send (rank 0) /
            recv (rank 1): not timed (a first call sets up connections)
  [--hold]  writes DIR/ready.RANK (its pid) and waits for DIR/go
  timed     ITERS of each, in that order, each between two CUDA events on the
            current stream and followed by a synchronize: its time on the GPU
            as the program sees it. A 1 ms spin kernel (torch.cuda._sleep) comes
            before the first event, so that the NCCL kernel is queued by the time
            the event is reached: the events then time the GPU's work, not the
            host's time to launch it (the GPU would wait idle for that)
  slow      SLOW reduce (to rank 0) of 1 MiB, rank --slow-rank sleeping SLOW_MS
            before each: the rank the others wait for
and writes DIR/rank.RANK.json: the NCCL function each torch call makes and how
many of each it made (warm-up, timed, slow), the bytes of one call (count x
element size, as the call passes them), the timed calls' event times, and its
own algbw/busbw as nccl-tests defines them (size / mean time; size and bus
factor per collective).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

MIB = 1 << 20
SPIN_CYCLES = 2_000_000  # about 1 ms at the H100's clock: longer than a launch takes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--slow", type=int, default=10)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--slow-ms", type=float, default=30.0)
    ap.add_argument("--hold", action="store_true")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    n = world
    f32, bf16 = torch.float32, torch.bfloat16
    ar = torch.ones(32 * MIB, dtype=f32, device=dev)  # 128 MiB
    ag_in = torch.ones(16 * MIB, dtype=bf16, device=dev)  # 32 MiB a rank
    ag_out = torch.empty(16 * MIB * n, dtype=bf16, device=dev)
    rs_in = torch.ones(16 * MIB * n, dtype=f32, device=dev)
    rs_out = torch.empty(16 * MIB, dtype=f32, device=dev)  # 64 MiB a rank
    bc = torch.ones(32 * MIB, dtype=f32, device=dev)
    p2p = torch.ones(16 * MIB, dtype=f32, device=dev)  # 64 MiB
    slow = torch.ones(MIB // 4, dtype=f32, device=dev)  # 1 MiB
    peer = 1 - rank if n == 2 else None
    # torch op -> (NCCL function, bytes of one call, nccl-tests size, bus factor, call)
    p2p_fn = ("ncclSend" if rank == 0 else "ncclRecv") if peer is not None else None
    ops = {
        "all_reduce": ("ncclAllReduce", ar.nbytes, ar.nbytes, 2 * (n - 1) / n,
                       lambda: dist.all_reduce(ar)),
        "all_gather": ("ncclAllGather", ag_in.nbytes, ag_out.nbytes, (n - 1) / n,
                       lambda: dist.all_gather_into_tensor(ag_out, ag_in)),
        "reduce_scatter": ("ncclReduceScatter", rs_out.nbytes, rs_in.nbytes, (n - 1) / n,
                           lambda: dist.reduce_scatter_tensor(rs_out, rs_in)),
        "broadcast": ("ncclBroadcast|ncclBcast", bc.nbytes, bc.nbytes, 1.0,
                      lambda: dist.broadcast(bc, src=0)),
    }
    if p2p_fn is not None:
        ops["sendrecv"] = (p2p_fn, p2p.nbytes, p2p.nbytes, 1.0,
                           (lambda: dist.send(p2p, dst=peer)) if rank == 0 else
                           (lambda: dist.recv(p2p, src=peer)))
    for _ in range(args.warmup):
        for *_, call in ops.values():
            call()
            torch.cuda.synchronize()
    if args.hold:
        (args.out / f"ready.{rank}").write_text(str(os.getpid()))
        deadline = time.monotonic() + 300
        while not (args.out / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    times: dict[str, list[float]] = {name: [] for name in ops}
    for name, (*_, call) in ops.items():
        for _ in range(args.iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            torch.cuda._sleep(SPIN_CYCLES)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end))  # ms
    for _ in range(args.slow):
        if rank == args.slow_rank:
            time.sleep(args.slow_ms / 1000)
        dist.reduce(slow, dst=0)
        torch.cuda.synchronize()
    report = {"rank": rank, "world": n, "pid": os.getpid(), "iters": args.iters,
              "warmup": args.warmup, "hold": args.hold, "slow": args.slow,
              "slow_rank": args.slow_rank, "slow_ms": args.slow_ms,
              "slow_call": {"function": "ncclReduce", "bytes": slow.nbytes}, "ops": {}}
    for name, (fn, nbytes, size, factor, _) in ops.items():
        mean_ms = sum(times[name]) / len(times[name])
        algbw = size / (mean_ms * 1e6)  # bytes per ns: GB/s
        report["ops"][name] = {
            "function": fn, "bytes": nbytes, "size": size, "bus_factor": factor,
            "warmup_calls": args.warmup, "timed_calls": args.iters,
            "event_ms": times[name], "algbw_gbps": algbw, "busbw_gbps": algbw * factor}
    (args.out / f"rank.{rank}.json").write_text(json.dumps(report, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
