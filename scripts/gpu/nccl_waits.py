"""A torch.distributed job that makes one rank late by a known amount, for
scripts/gpu/check-nccl.sh.

Run by torchrun, one process a GPU. Each rank, in order:
  warm-up   one of each collective below (connections set up), between two
            barriers through torchrun's store (no NCCL kernel waits in them),
            so that no rank's GPU waits here for another's setting up
  [--hold]  writes DIR/ready.RANK (its pid), then every 50 ms an all-reduce
            of one int (a max of "DIR/go exists") until it says go on every
            rank: the job runs, and makes NCCL and CUDA calls, while
            cudaprobe attaches; the ranks leave it together
  late      ITERS iterations of: synchronize; rank --late-rank sleeps
            LATE_MS; all-reduce of 4 KiB, 4 MiB and 64 MiB (f32), broadcast
            of 64 MiB from rank 0, all-gather of 16 MiB a rank (bf16). The
            others' first kernel of an iteration waits LATE_MS on their GPU
            for the late rank's: ITERS x LATE_MS in all, by each
  shapes    REPS of each, timed by CUDA events: all-to-all (64 MiB,
            all_to_all_single), reduce-scatter (64 MiB in), a pipeline
            stage's send to the next rank and receive from the one before
            (batch_isend_irecv, 64 MiB), three all-reduces coalesced in one
            group (8, 8 and 16 MiB)
  timed     TIMED all-reduces of 64 MiB, each timed by CUDA events
Each timed call: a 1 ms spin kernel first (so that the NCCL kernel is queued
by the time the start event is reached: the events time the GPU's work, not
the host's launch), start event, the call, end event, synchronize.

Then the ranks share their event times and each writes DIR/rank.RANK.json:
its pid; the lateness it was given; per operation (as nccl-tests names it,
and its size as nccl-tests counts it), the calls made in the warm-up and
after the hold, and for the timed ones the event times of every rank and
the job's own algbw/busbw: of this rank's events, and of the call's time
once every rank had joined it, the least of the ranks' event times (the
rank that came last waited for no one: its events time the transfer).
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
SPIN_CYCLES = 2_000_000  # about 1 ms at an H200's clock: longer than a launch takes
HOLD_S = 0.05


def store_barrier(store, name: str, world: int) -> None:
    """Every rank here, through torchrun's TCP store: no NCCL kernel waits on it."""
    store.add(name, 1)
    while int(store.add(name, 0)) < world:
        time.sleep(0.001)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--late-rank", type=int, default=1)
    ap.add_argument("--late-ms", type=float, default=30.0)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--timed", type=int, default=20)
    ap.add_argument("--hold", action="store_true")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    store = dist.distributed_c10d._get_default_store()
    n = world
    f32, bf16 = torch.float32, torch.bfloat16
    small, mid, big = (torch.ones(b // 4, dtype=f32, device=dev) for b in (4 << 10, 4 * MIB,
                                                                             64 * MIB))
    bcast = torch.ones(16 * MIB, dtype=f32, device=dev)
    ag_in = torch.ones(8 * MIB, dtype=bf16, device=dev)  # 16 MiB a rank
    ag_out = torch.empty(8 * MIB * n, dtype=bf16, device=dev)
    a2a_in, a2a_out = (torch.ones(16 * MIB, dtype=f32, device=dev) for _ in range(2))
    rs_in = torch.ones(16 * MIB, dtype=f32, device=dev)  # 64 MiB in
    rs_out = torch.empty(16 * MIB // n, dtype=f32, device=dev)
    p2p_send, p2p_recv = (torch.ones(16 * MIB, dtype=f32, device=dev) for _ in range(2))
    co = [torch.ones(m * MIB // 4, dtype=f32, device=dev) for m in (8, 8, 16)]
    flag = torch.zeros(1, dtype=torch.int32, device=dev)
    nxt, prev = (rank + 1) % n, (rank - 1) % n

    def pipeline() -> None:
        for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, p2p_send, nxt),
                                           dist.P2POp(dist.irecv, p2p_recv, prev)]):
            req.wait()

    def coalesced() -> None:
        with dist._coalescing_manager(device=dev, async_ops=True) as cm:
            for t in co:
                dist.all_reduce(t)
        cm.wait()

    late_ops = {  # name -> (nccl-tests' name, its size, the call)
        "all_reduce_4k": ("all_reduce", small.nbytes, lambda: dist.all_reduce(small)),
        "all_reduce_4m": ("all_reduce", mid.nbytes, lambda: dist.all_reduce(mid)),
        "all_reduce_64m": ("all_reduce", big.nbytes, lambda: dist.all_reduce(big)),
        "broadcast": ("broadcast", bcast.nbytes, lambda: dist.broadcast(bcast, src=0)),
        "all_gather": ("all_gather", ag_out.nbytes,
                       lambda: dist.all_gather_into_tensor(ag_out, ag_in)),
    }
    shapes = {
        "alltoall": ("alltoall", a2a_in.nbytes, lambda: dist.all_to_all_single(a2a_out, a2a_in)),
        "reduce_scatter": ("reduce_scatter", rs_in.nbytes,
                           lambda: dist.reduce_scatter_tensor(rs_out, rs_in)),
        "sendrecv": ("sendrecv", p2p_send.nbytes, pipeline),
        "coalesced_all_reduce": ("all_reduce", sum(t.nbytes for t in co), coalesced),
    }
    calls = {name: {"warmup": 0, "main": 0} for name in (*late_ops, *shapes)}
    # the ranks made their buffers in their own time: none waits for another at the first call
    torch.cuda.synchronize()
    store_barrier(store, "start", n)
    for name, (*_, call) in (*late_ops.items(), *shapes.items()):
        call()
        calls[name]["warmup"] += 1
    torch.cuda.synchronize()
    store_barrier(store, "warm", n)

    if args.hold:
        (args.out / f"ready.{rank}").write_text(str(os.getpid()))
        deadline = time.monotonic() + 600
        while True:
            flag.fill_(int((args.out / "go").exists() or time.monotonic() > deadline))
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item():
                break
            time.sleep(HOLD_S)

    for _ in range(args.iters):
        torch.cuda.synchronize()
        if rank == args.late_rank:
            time.sleep(args.late_ms / 1000)
        for name, (*_, call) in late_ops.items():
            call()
            calls[name]["main"] += 1
    torch.cuda.synchronize()

    def timed(name: str, call, times: int) -> list[float]:
        out = []
        for _ in range(times):
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda._sleep(SPIN_CYCLES)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            out.append(start.elapsed_time(end))  # ms
            calls[name]["main"] += 1
        return out

    event_ms = {name: timed(name, call, args.reps) for name, (*_, call) in shapes.items()}
    event_ms["all_reduce_64m"] = timed("all_reduce_64m", late_ops["all_reduce_64m"][2],
                                       args.timed)
    everyone: list[dict] = [{} for _ in range(n)]
    dist.all_gather_object(everyone, event_ms)
    ops = {}
    for name, (test, size, _) in (*late_ops.items(), *shapes.items()):
        factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "sendrecv": 1.0}.get(
            test, (n - 1) / n)
        op = {"nccl_tests": test, "size": size, "bus_factor": factor, **calls[name]}
        if name in event_ms:
            by_rank = [e[name] for e in everyone]
            mine = sum(by_rank[rank]) / len(by_rank[rank])
            joined = sum(map(min, zip(*by_rank))) / len(by_rank[rank])
            op |= {"timed_calls": len(by_rank[rank]), "event_ms_by_rank": by_rank,
                   "busbw_own_gbps": size / (mine * 1e6) * factor,
                   "busbw_joined_gbps": size / (joined * 1e6) * factor}
        ops[name] = op
    report = {"rank": rank, "world": n, "pid": os.getpid(), "hold": args.hold,
              "late_rank": args.late_rank, "late_ms": args.late_ms, "iters": args.iters,
              "expected_wait_ms": 0.0 if rank == args.late_rank else args.iters * args.late_ms,
              "ops": ops}
    (args.out / f"rank.{rank}.json").write_text(json.dumps(report, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
