"""The top of py-spy's folded stacks (--format raw): the functions where the
samples were, by own time and by time under them.
Usage: python3 folded_top.py FILE.folded [N]"""
import collections
import sys


def main() -> None:
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    own, under = collections.Counter(), collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            k = int(count)
            total += k
            frames = stack.split(";")
            own[frames[-1]] += k
            for fr in set(frames):
                under[fr] += k
    print(f"{path}: {total} samples")
    print("  own:")
    for fr, k in own.most_common(n):
        print(f"  {100 * k / total:5.1f}%  {fr[:150]}")
    print("  under:")
    for fr, k in under.most_common(n):
        print(f"  {100 * k / total:5.1f}%  {fr[:150]}")


if __name__ == "__main__":
    main()
