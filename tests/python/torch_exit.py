"""Test support: a torch worker's process groups released before it exits.

A Gloo group that lives until the interpreter's exit can abort the process
("terminate called without an active exception"): its thread frees a
finished work's tensors then, and a thread that takes the GIL during
finalization is ended mid-unwind. DDP and other modules hold their groups in
reference cycles, so destroy_process_group() alone leaves them alive. Each
torch worker calls release_process_groups() as its scenario returns:

    SCENARIOS[sys.argv[1]]()
    torch_exit.release_process_groups()
"""

import gc

import torch.distributed as dist


def release_process_groups():
    """Destroys every group left and frees those still referenced from cycles,
    so that their threads stop while the interpreter is whole."""
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
