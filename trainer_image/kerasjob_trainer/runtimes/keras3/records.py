"""Training examples as ArrayRecord files, the Keras 3 trainer's file dataset (read through
Grain, `grain_input.py`), and how a user makes them.

A dataset is a directory: `train-00000-of-00004.array_record` ... (the training examples,
sharded in files; the order in the files does not matter) and optionally `test-*` files;
or one `.array_record` file of training examples. Each record is one example: a short
header (each array's dtype and shape, JSON) then the bytes of `x` and `y` (any shapes and
dtypes, the same for every example): self-describing, decoded with NumPy alone, no pickle,
without a copy (`encode`, `decode`). Records are read by index
(ArrayRecord keeps an index per file), so an example is a pure function of its number:
what the exact data position needs.

Make one from arrays or an npz (`x_train`, `y_train`, optionally `x_test`, `y_test`):

    python -m kerasjob_trainer.runtimes.keras3.records from-npz data.npz /data/mnist --shards 4

or from your own code, any iterable of (x, y):

    from kerasjob_trainer.runtimes.keras3 import records
    records.write("/data/mine/train-00000-of-00001.array_record", examples)
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import math
import os
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from kerasjob_contract.trainer_config import ConfigError

SUFFIX = ".array_record"


MAGIC = b"KJR1"


def encode(x: Any, y: Any) -> bytes:
    """One example: MAGIC, a 2-byte length, a JSON header (each array's dtype and shape),
    then x's and y's bytes (C order)."""
    xa, ya = np.asarray(x, order="C"), np.asarray(y, order="C")  # 0-d stays 0-d
    header = json.dumps([[xa.dtype.str, list(xa.shape)], [ya.dtype.str, list(ya.shape)]])
    raw = header.encode()
    return MAGIC + struct.pack("<H", len(raw)) + raw + xa.tobytes() + ya.tobytes()


@functools.lru_cache(maxsize=16)
def _layout(header: bytes) -> tuple[tuple[np.dtype[Any], tuple[int, ...], int], ...]:
    out = []
    for dtype, shape in json.loads(header):
        dt = np.dtype(dtype)
        out.append((dt, tuple(shape), dt.itemsize * math.prod(shape)))
    return tuple(out)


def decode(record: bytes) -> tuple[np.ndarray, np.ndarray]:
    if record[:4] != MAGIC:
        raise ValueError("not a kerasjob example record")
    (length,) = struct.unpack_from("<H", record, 4)
    (xd, xs, xn), (yd, ys, yn) = _layout(record[6 : 6 + length])
    at = 6 + length
    x = np.frombuffer(record, xd, count=xn // xd.itemsize, offset=at).reshape(xs)
    y = np.frombuffer(record, yd, count=yn // yd.itemsize, offset=at + xn).reshape(ys)
    return x, y


def write(path: str, examples: Iterable[tuple[Any, Any]]) -> int:
    """Write one ArrayRecord file of (x, y) examples (written whole, then renamed)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    tmp = f"{path}.tmp-{os.getpid()}"
    writer = ArrayRecordWriter(tmp, "group_size:1")
    count = 0
    for x, y in examples:
        writer.write(encode(x, y))
        count += 1
    writer.close()
    os.replace(tmp, path)
    return count


def write_split(directory: str, split: str, x: np.ndarray, y: np.ndarray, shards: int) -> list[str]:
    """`x`, `y` as `shards` files `<split>-NNNNN-of-SSSSS.array_record` in `directory`."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, part in enumerate(np.array_split(np.arange(len(y)), shards)):
        path = os.path.join(directory, f"{split}-{i:05d}-of-{shards:05d}{SUFFIX}")
        write(path, ((x[j], y[j]) for j in part))
        paths.append(path)
    return paths


def files(path: str, split: str = "train") -> list[str]:
    """The files of `split` at `path` (a directory, or one file of training examples)."""
    if os.path.isfile(path):
        return [path] if split == "train" else []
    return sorted(glob.glob(os.path.join(path, f"{split}-*{SUFFIX}")))


class Records:
    """Random access to the examples of ArrayRecord files: `len`, `[i]` -> (x, y)
    (a Grain data source; picklable, for Grain's worker processes)."""

    def __init__(self, paths: Sequence[str]) -> None:
        if not paths:
            raise FileNotFoundError("no ArrayRecord files")
        self.paths = list(paths)
        self._source: Any = None

    def _open(self) -> Any:
        if self._source is None:
            import grain

            self._source = grain.sources.ArrayRecordDataSource(self.paths)
        return self._source

    def __len__(self) -> int:
        return len(self._open())

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return decode(self._open()[index])

    def __getstate__(self) -> dict[str, Any]:
        return {"paths": self.paths, "_source": None}

    def shapes(self) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """The shape and dtype of an example's x (the first example's)."""
        x, _ = self[0]
        return tuple(x.shape), x.dtype


def open_dataset(
    path: str, input_shape: tuple[int, ...]
) -> tuple[Records, tuple[np.ndarray, np.ndarray] | None]:
    """(the training records, the test set in memory or None) at `path`; ConfigError when
    there are no training files or their examples do not fit the model's input."""
    train_files = files(path, "train")
    if not train_files:
        raise ConfigError(f"dataset {path!r}: no train-*{SUFFIX} files (or {SUFFIX} file)")
    train = Records(train_files)
    shape, _ = train.shapes()
    if shape != tuple(input_shape):
        raise ConfigError(
            f"dataset {path!r}: examples of shape {list(shape)}, the model takes "
            f"{list(input_shape)}"
        )
    test_files = files(path, "test")
    if not test_files:
        return train, None
    test = Records(test_files)
    pairs = [test[i] for i in range(len(test))]
    return train, (np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kerasjob_trainer.runtimes.keras3.records")
    sub = parser.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("from-npz", help="x_train/y_train (+ x_test/y_test) -> ArrayRecord")
    conv.add_argument("npz")
    conv.add_argument("directory")
    conv.add_argument("--shards", type=int, default=1)
    args = parser.parse_args(argv)
    with np.load(args.npz, allow_pickle=False) as f:
        for split in ("train", "test"):
            if f"x_{split}" in f:
                x, y = f[f"x_{split}"], f[f"y_{split}"]
                paths = write_split(args.directory, split, x, y, args.shards)
                print(f"{split}: {len(y)} examples in {len(paths)} file(s) under {args.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
