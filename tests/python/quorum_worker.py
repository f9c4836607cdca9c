"""One rank of a training loop of quorum steps, for quorum_test.py.

    python3 quorum_worker.py TARGET JOB RANK WORLD --steps 5 --min_ranks 2 \
        --grace 2.0 [--pause_at S] [--shared_memory off]

Step s all-reduces (sum, float64) the gradient g_r(s)[i] = (r + 1) * (s + 1)
+ i % 7, i < PARAMS: out of place on even steps, in place on odd ones. It
prints one line per event on stdout, flushed:

    PAUSE <s>          (--pause_at: before step s, then sleeps, to be killed)
    STEP <json>        {"step", "contributors", "joined", "result"}
    DONE

A failed check or call raises: the process exits non-zero with the traceback.
"""

import argparse
import json
import time

import numpy as np

import reducer

PARAMS = 16
PAUSE_S = 60  # longer than the test waits: the test kills the process


def gradient(rank, step):
    return (rank + 1.0) * (step + 1) + np.arange(PARAMS) % 7


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("job")
    parser.add_argument("rank", type=int)
    parser.add_argument("world", type=int)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--min_ranks", type=int, default=0)
    parser.add_argument("--grace", type=float, default=2.0)
    parser.add_argument("--pause_at", type=int, default=-1)
    parser.add_argument("--shared_memory", default="auto")
    args = parser.parse_args()

    with reducer.Client(target=args.target, job=args.job, rank=args.rank,
                        world_size=args.world, timeout=30,
                        shared_memory=args.shared_memory) as client:
        for step in range(args.steps):
            if step == args.pause_at:
                print(f"PAUSE {step}", flush=True)
                time.sleep(PAUSE_S)
            g = gradient(args.rank, step)
            if step % 2 == 0:
                out = client.all_reduce_quorum(g, min_ranks=args.min_ranks,
                                               grace=args.grace)
                assert isinstance(out.result, np.ndarray) and out.result is not g
                np.testing.assert_array_equal(g, gradient(args.rank, step))
            else:
                out = client.all_reduce_quorum_(g, min_ranks=args.min_ranks,
                                                grace=args.grace)
                assert out.result is g
            result, contributors = out
            assert isinstance(out, tuple) and len(out) == 2
            print("STEP " + json.dumps({
                "step": out.step, "contributors": contributors, "joined": out.joined,
                "result": result.tolist()}), flush=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
