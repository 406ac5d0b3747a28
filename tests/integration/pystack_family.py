"""A Python process whose children call CUDA: for --py-stacks --pid on the
parent. It prints "ready", reads a line from FIFO (the test writes it once
cudaprobe is attached), then forks a child that runs pystack_workload.py
(no exec: the same interpreter, its memory copied) and starts another with
subprocess (an exec of the same interpreter, as multiprocessing's spawn and
a DataLoader worker are), and waits for both. Each child prints what
pystack_workload.py prints: the stack of each of its calls.

    python pystack_family.py LIBCUDART FIFO
"""

import os
import runpy
import subprocess
import sys
from pathlib import Path

WORKLOAD = str(Path(__file__).with_name("pystack_workload.py"))


def main():
    lib, fifo = sys.argv[1], sys.argv[2]
    print("ready", flush=True)
    with open(fifo) as f:
        f.readline()
    pid = os.fork()
    if pid == 0:
        sys.argv = [WORKLOAD, lib]
        runpy.run_path(WORKLOAD, run_name="__main__")
        sys.stdout.flush()
        os._exit(0)
    spawned = subprocess.run([sys.executable, WORKLOAD, lib], check=True)
    _, status = os.waitpid(pid, 0)
    sys.exit(spawned.returncode or os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
