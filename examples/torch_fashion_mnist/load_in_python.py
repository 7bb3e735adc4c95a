#!/usr/bin/env python3
"""Loads a checkpoint of train_torch_fashion_mnist into the same CNN written in PyTorch, by name,
and prints its test accuracy: the file is a safetensors file whose keys are the module's
state_dict names, so Python reads it with no part of this library.

    /usr/bin/python3 examples/torch_fashion_mnist/load_in_python.py \
        --checkpoint=/tmp/run/ckpt-8.safetensors --data_dir=/usr/share/datasets/fashion-mnist

With the `safetensors` package installed it reads the file through `safetensors.torch.load_file`;
Debian 12 has no such package, so without it the file is read here, by the format's definition:
8 bytes of little-endian header length, a JSON header naming each tensor's dtype, shape and byte
range, then the bytes. Keys of the file that are not the module's (the optimizer's slots, the step
counter) are left out; every key of the module must be in the file (load_state_dict, strict).
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch

# The example's model (cnn.h): the same names, shapes and forward pass.
PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 5)
        self.conv2 = torch.nn.Conv2d(16, 32, 5)
        self.fc1 = torch.nn.Linear(32 * 4 * 4, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, images):
        x = torch.relu(torch.max_pool2d(self.conv1((images - PIXEL_MEAN) / PIXEL_STD), 2))
        x = torch.relu(torch.max_pool2d(self.conv2(x), 2))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}


def read_safetensors(path):
    try:
        from safetensors.torch import load_file
    except ImportError:
        pass
    else:
        return load_file(path)
    with open(path, "rb") as f:
        data = f.read()
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_size])
    body = data[8 + header_size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(body[begin:end])
        tensor = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[entry["dtype"]])
        tensors[name] = tensor.reshape(entry["shape"]).clone()
    return tensors


def read_idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a .safetensors file the example wrote")
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.set_num_threads(1)

    saved = read_safetensors(args.checkpoint)
    model = Cnn()
    names = list(model.state_dict().keys())
    missing = [name for name in names if name not in saved]
    if missing:
        sys.exit(f"{args.checkpoint} lacks the module's {', '.join(missing)} (it holds {', '.join(sorted(saved))})")
    model.load_state_dict({name: saved[name] for name in names}, strict=True)
    model.eval()

    images = read_idx(os.path.join(args.data_dir, "t10k-images-idx3-ubyte.gz"), 16)
    labels = read_idx(os.path.join(args.data_dir, "t10k-labels-idx1-ubyte.gz"), 8)
    images = torch.from_numpy(images.copy()).float().div_(255.0).reshape(-1, 1, 28, 28)
    labels = torch.from_numpy(labels.astype(np.int64))
    right = 0
    with torch.no_grad():
        for begin in range(0, len(labels), 500):
            logits = model(images[begin:begin + 500])
            right += int(logits.argmax(1).eq(labels[begin:begin + 500]).sum())
    print(f"loaded {len(names)} tensors by name ({', '.join(names)}); test accuracy {right / len(labels):.4f}")


if __name__ == "__main__":
    main()
