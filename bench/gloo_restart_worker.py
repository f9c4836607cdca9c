#!/usr/bin/env python3
"""One rank of bench/quorum_bench.py's torchrun comparison: Gloo under elastic
restart.

Run by torchrun (torch.distributed.run), which sets RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RESTART_COUNT. Joins a
torch.distributed group with backend "gloo", then runs --steps float32 SUM
all_reduce calls of --size_bytes (rank r contributes 1 + r). After each step
it prints, flushed,
  STEP <restart> <rank> <step> <time.monotonic() when the step returned>
and checks the first and last results against the closed form
W + W(W-1)/2 (exits 1 naming the first wrong element). In the first
attempt (restart 0) the last rank prints `PAUSE <step> <pid>` before step
--kill_at and sleeps --pause_s, for the driver to SIGKILL it; torchrun then
restarts every rank, which runs the loop again from step 0 (no checkpoint).
"""

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size_bytes", type=int, default=64 << 20)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--kill_at", type=int, default=5,
                   help="the last rank pauses before this step in restart 0")
    p.add_argument("--pause_s", type=float, default=120)
    p.add_argument("--timeout_s", type=float, default=300,
                   help="torch.distributed timeout for rendezvous and each call")
    return p.parse_args(argv)


def say(line):
    """Writes one line in one write(): the ranks share torchrun's stdout, and
    print() may write a line's text and its newline separately."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv):
    args = parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    timeout = datetime.timedelta(seconds=args.timeout_s)
    # torchrun's agent keeps one store for all attempts (its static
    # rendezvous), and init_process_group's env:// adds no prefix per attempt
    # there: a restarted rank would read the killed attempt's Gloo addresses.
    # Each attempt takes its own prefix of the agent's store.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          world, is_master=not agent_store and rank == 0,
                          timeout=timeout)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt_{restart}", store),
                            rank=rank, world_size=world, timeout=timeout)
    expected = float(world + world * (world - 1) // 2)
    data = torch.full((args.size_bytes // 4,), 1.0 + rank, dtype=torch.float32)
    for step in range(args.steps):
        if restart == 0 and rank == world - 1 and step == args.kill_at:
            say(f"PAUSE {step} {os.getpid()}")
            time.sleep(args.pause_s)
        t = data.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        say(f"STEP {restart} {rank} {step} {time.monotonic():.6f}")
        if step in (0, args.steps - 1):
            wrong = (t != expected).nonzero()
            if len(wrong):
                i = int(wrong[0])
                print(f"rank {rank}: element {i} is {float(t[i])}, expected {expected}",
                      file=sys.stderr)
                return 1
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
