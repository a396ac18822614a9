"""Multi-node training input with detfmt (the README's multi-node recipe), run by torchrun.

    torchrun --nproc_per_node 2 tools/example_ddp.py ROOT --batch-size 16 [--epochs 2]
    torchrun --nnodes 4 --nproc_per_node 8 --rdzv-endpoint HOST:29500 tools/example_ddp.py \
        s3://bucket/train --cache-dir /local/nvme/detfmt-cache

ROOT is a 1.0 dataset directory, a sharded (1.1) root, or an fsspec URL of a sharded root
(each node then downloads whole shards into ``--cache-dir``). Every rank builds the same
`detfmt.torch.Loader`; it reads its rank and world size from ``torch.distributed``, takes a
contiguous slice of each global batch, and yields as many batches as every other rank (no DDP
hang). The global order depends on (seed, epoch) only, so a job can stop, and resume from
``--resume`` on another number of GPUs with no sample seen twice or skipped.

``--report FILE`` (rank 0) writes the global sequence of sample indices, used by the tests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root")
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache-dir", default=None, help="node-local shard cache (remote roots)")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop after this many steps and save the resume state")
    parser.add_argument("--state", default=None, help="file for the resume state")
    parser.add_argument("--resume", action="store_true", help="start from --state")
    parser.add_argument("--augment", action="store_true", help="run affine + flip + HSV")
    parser.add_argument("--report", default=None)
    args = parser.parse_args(argv)

    import detfmt
    from detfmt import augment
    from detfmt.torch import Delivery, Loader

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else None
    if device is not None:
        torch.cuda.set_device(device)

    options = {"cache_dir": args.cache_dir} if args.cache_dir else {}
    ds = detfmt.open(args.root, **options)
    loader = Loader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        seed=args.seed,
        drop_last=True,
        delivery=Delivery(num_threads=args.threads, device=device),
    )
    if args.resume:
        with open(args.state) as f:
            loader.load_state_dict(json.load(f))
    pipeline = None
    if args.augment:
        generator = torch.Generator(device=device or "cpu").manual_seed(1000 + rank)
        pipeline = augment.Compose([
            augment.RandomAffine(degrees=10, scale=0.5, translate=0.1, size=(640, 640),
                                 generator=generator),
            augment.RandomFlip(p=0.5, generator=generator),
            augment.RandomHSV(h=0.015, s=0.7, v=0.4, generator=generator),
        ])

    seen: list[np.ndarray] = []
    steps = 0
    stopped = False
    first_epoch = loader.state_dict()["epoch"]
    for epoch in range(first_epoch, args.epochs):
        if epoch != first_epoch or not args.resume:
            loader.set_epoch(epoch)
        for batch in loader:
            if pipeline is not None:
                batch = pipeline(batch)
            # model(batch.images) ... loss.backward() ... optimizer.step()
            mine = torch.as_tensor(np.asarray(batch.indices), dtype=torch.int64)
            every = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(every, mine)  # the global batch, ranks in order
            seen.append(torch.cat(every).numpy())
            steps += 1
            if args.stop_after is not None and steps == args.stop_after:
                stopped = True
                break
        if stopped:
            break
    if stopped and rank == 0 and args.state:
        with open(args.state, "w") as f:
            json.dump(loader.state_dict(), f)
    counts = torch.tensor([steps])
    dist.all_reduce(counts, op=dist.ReduceOp.MAX)
    assert counts.item() == steps, "ranks ran different numbers of steps"
    if rank == 0:
        order = np.concatenate(seen) if seen else np.zeros(0, np.int64)
        digest = hashlib.sha256(order.astype("<i8").tobytes()).hexdigest()[:16]
        print(f"world {world}: {steps} steps per rank, {len(order)} samples, "
              f"global order sha256 {digest}")
        if args.report:
            with open(args.report, "w") as f:
                json.dump({"world": world, "steps": steps, "order": order.tolist()}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
