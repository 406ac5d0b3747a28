"""Which rank of a distributed job each traced process is.

Every row of a process that is one rank of a job (one of the processes that
`torchrun --nproc_per_node 2` or `mpirun` starts) carries its `rank` and,
where known, `world_size`: its CUDA runtime and driver calls as well as its
NCCL ones. Two sources, in this order:

1. The launcher's environment, read once from /proc/PID/environ at the
   process's first row (the environment it was started with): torchrun's
   `RANK` and `WORLD_SIZE` (also set by accelerate and DeepSpeed's launcher),
   Open MPI's `OMPI_COMM_WORLD_RANK`/`_SIZE`, MPICH's and Slurm's `PMI_RANK`/
   `PMI_SIZE`, srun's `SLURM_PROCID`/`SLURM_NTASKS`. Known from the first
   row on.
2. Else the first communicator the process makes (a traced ncclCommInitRank*
   that succeeded) or uses whose rank and number of ranks are known (read
   from its memory): its rank is the process's, from then on. A job's first
   communicator is its world.

A process with neither (no launcher, no communicator yet) has no rank: its
rows carry no `rank` key rather than a guess.
"""

from __future__ import annotations

import json

from cudaprobe.targets.jobs import MAX_ENVIRON, launcher_rank, read_proc


def read_launcher_rank(pid: int) -> tuple[int, int | None] | None:
    """launcher_rank of the process's environment (None where it cannot be read:
    gone, or a kernel thread)."""
    (environ,) = read_proc(pid, ("environ", MAX_ENVIRON))
    return launcher_rank(environ)


class Ranks:
    """The rank of each process met, where known: `known` (pid -> (rank, world
    size or None)) and `json` (pid -> its row's `,"rank":R,"world_size":N`),
    both read by the row makers for every row."""

    def __init__(self, read_environ=read_launcher_rank) -> None:
        self.known: dict[int, tuple[int, int | None]] = {}
        self.json: dict[int, str] = {}
        self._read_environ = read_environ
        self._seen: set[int] = set()

    def see(self, pid: int) -> None:
        """A process's first row: its launcher's rank, if it has one."""
        if pid not in self._seen:
            self._seen.add(pid)
            found = self._read_environ(pid)
            if found is not None:
                self._set(pid, *found)

    def communicator(self, pid: int, rank: int | None, nranks: int | None) -> None:
        """A communicator of the process, rank and size known: the process's
        rank if it has none yet."""
        self.see(pid)  # the launcher's rank comes first
        if pid not in self.known and isinstance(rank, int) and isinstance(nranks, int) \
                and 0 <= rank < nranks:
            self._set(pid, rank, nranks)

    def _set(self, pid: int, rank: int, size: int | None) -> None:
        self.known[pid] = (rank, size)
        self.json[pid] = f',"rank":{rank},"world_size":{json.dumps(size)}'

    def of(self, pid: int) -> tuple[int | None, int | None]:
        return self.known.get(pid, NO_RANK)


NO_RANK: tuple[None, None] = (None, None)
