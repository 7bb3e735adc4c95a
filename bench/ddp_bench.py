#!/usr/bin/env python3
"""PyTorch DDP beside the library's Fashion-MNIST examples: the same model (--model=mlp, the main
example's 784-hidden...-10 ReLU MLP, with Adam; --model=cnn, examples/torch_fashion_mnist's CNN,
with SGD), data and global batch, one process per worker over Gloo, for docs/performance.md's and
docs/torch.md's comparisons. mpirun starts it (the rank and size come from Open MPI's
environment); worker 0's address is --master (the multi-host harness's host0 is 192.0.2.10):

  sudo tests/multihost/hosts.sh --hosts 2 --slots 1 --rate 10 -- -x GLOO_SOCKET_IFNAME=eth0 \\
      /usr/bin/python3 bench/ddp_bench.py --hidden=2048,2048 --hook=none

(Debian's python3-torch; on one machine: mpirun -np 2 -x GLOO_SOCKET_IFNAME=lo ... --master=127.0.0.1.)

Each timed step is a forward, a backward (DDP's bucketed all_reduce overlapping it) and the
optimizer step. The same steps under model.no_sync() move no gradients; 1 - (their time / the
synchronised steps' time) is the share of the step that communication adds, the exposed part.
Rank 0 prints median step times, samples/s and that share.
"""
import argparse
import gzip
import os
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel


def load_images(path):
    with gzip.open(path, "rb") as f:
        data = np.frombuffer(f.read(), dtype=np.uint8, offset=16)
    return torch.from_numpy(data.reshape(-1, 784).astype(np.float32) / 255.0)


def mlp(hidden):
    widths = [784] + [int(w) for w in hidden.split(",")] + [10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers), "MLP " + "-".join(map(str, widths))


def cnn():
    """examples/torch_fashion_mnist's CNN: two 5x5 convolutions with max pooling, two linear layers."""
    return torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 28, 28)),
        torch.nn.Conv2d(1, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 4 * 4, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10)), "CNN conv5x5(16)-conv5x5(32)-512-128-10"


def load_labels(path):
    with gzip.open(path, "rb") as f:
        data = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    return torch.from_numpy(data.astype(np.int64))


def timed_steps(model, optimizer, images, labels, batch, steps, sync):
    times = []
    for step in range(steps):
        begin = (step * batch) % (images.shape[0] - batch)
        x, y = images[begin:begin + batch], labels[begin:begin + batch]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        if sync:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        else:
            with model.no_sync():
                torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp", help="the MLP (Adam) or the CNN (SGD)")
    parser.add_argument("--hidden", default="2048,2048", help="the MLP's hidden layer widths")
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--batch_size", type=int, default=128, help="the global batch")
    parser.add_argument("--steps", type=int, default=40, help="timed steps of each kind")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    # bf16_compress_hook needs CUDA and NCCL (PyTorch 1.13 refuses it over Gloo).
    parser.add_argument("--hook", choices=["none", "fp16"], default="none",
                        help="DDP's communication hook: fp16_compress_hook")
    parser.add_argument("--bucket_mb", type=float, default=25, help="DDP's bucket_cap_mb")
    parser.add_argument("--master", default="192.0.2.10", help="worker 0's address")
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", args.master)
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.set_num_threads(1)  # one core per worker, as the library's one replica per worker
    dist.init_process_group("gloo", rank=rank, world_size=size)

    torch.manual_seed(1)
    module, description = mlp(args.hidden) if args.model == "mlp" else cnn()
    model = DistributedDataParallel(module, bucket_cap_mb=args.bucket_mb)
    if args.hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    if args.model == "mlp":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate)

    images = load_images(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    labels = load_labels(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    batch = args.batch_size // size
    mine = slice(rank * (images.shape[0] // size), (rank + 1) * (images.shape[0] // size))
    images, labels = images[mine], labels[mine]

    timed_steps(model, optimizer, images, labels, batch, args.warmup, True)
    synced, local = [], []
    for _ in range(4):  # alternately, so that both see the same machine minutes
        synced += timed_steps(model, optimizer, images, labels, batch, args.steps // 4, True)
        local += timed_steps(model, optimizer, images, labels, batch, args.steps // 4, False)
    dist.barrier()
    if rank == 0:
        step = statistics.median(synced)
        alone = statistics.median(local)
        print(f"# PyTorch {torch.__version__} DDP over Gloo, {size} workers, {description}, "
              f"global batch {args.batch_size}, bucket_cap_mb {args.bucket_mb}, hook {args.hook}")
        print(f"step {step * 1e3:.2f} ms, {args.batch_size / step:.0f} samples/s; without communication "
              f"{alone * 1e3:.2f} ms; communication's share of the step {100 * (1 - alone / step):.1f} %")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
