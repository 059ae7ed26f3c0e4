"""Run another zoo script with one rank's all-reduce kernel planted: on rank ``PLANT_RANK``
(default 1) ``c10d::allreduce_`` is replaced, for the CPU key (below the recorder, so invisible
to it as an op of its own), by gloo's own all-reduce (the backend, called directly: the same
collective as every other rank's) that then hands the bucket back in another order, its two
halves swapped: a rank whose gradient bucket is laid out differently from the others'.

    torchrun --standalone --nproc-per-node 2 planted_ddp.py ddp.py ARGS...
"""

import os
import runpy
import sys
import warnings

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", category=UserWarning, module="torch.library")

if os.environ.get("RANK") == os.environ.get("PLANT_RANK", "1"):
    _lib = torch.library.Library("c10d", "IMPL")

    def _allreduce_halves_swapped(tensors, process_group, reduce_op, sparse_indices,
                                  async_op=True, timeout=-1):
        backend = dist.ProcessGroup.unbox(process_group)._get_backend(torch.device("cpu"))
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.SUM
        work = backend.allreduce(tensors, opts)
        work.wait()
        for t in tensors:
            flat = t.view(-1)
            flat.copy_(flat.roll(flat.numel() // 2))
        return tensors, work.boxed()

    _lib.impl("allreduce_", _allreduce_halves_swapped, "CPU")

if __name__ == "__main__":
    target = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(target, run_name="__main__")
