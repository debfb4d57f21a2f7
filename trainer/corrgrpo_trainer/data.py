"""Datasets as users get them: a hub id, a local file or folder, or a file URL, all read by
`datasets.load_dataset`.

The shipped configs name the public sources; `$CORRGRPO_DATA_DIR` points them at local copies laid out as
LOCAL_COPIES says (the tests and CI set it to `../shared/data`). Single-turn rows are the prompt plus the
columns the service's item is built from; AgentDojo's rows come from the service (`agentdojo/trl_inputs.py`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .config import InputError
from .config_shape import CodeRows, ToolcallRows
from .models import first_line

DATA_DIR_ENV = "CORRGRPO_DATA_DIR"
TOOLRL = "https://raw.githubusercontent.com/qiancheng0/ToolRL/main/dataset"
# (source, split) of the shipped configs → its copy under $CORRGRPO_DATA_DIR (../shared/data's layout).
LOCAL_COPIES = {
    ("newfacade/LeetCodeDataset", "train"): "leetcode/LeetCodeDataset-v0.2.0-train.jsonl.gz",
    ("newfacade/LeetCodeDataset", "test"): "leetcode/LeetCodeDataset-v0.3.1-test.jsonl.gz",
    (f"{TOOLRL}/rlla_4k/test.parquet", "train"): "rlla_4k/test.parquet",
    (f"{TOOLRL}/rlla_4k_raw/rlla_sft.json", "train"): "rlla_4k/rlla_sft.json",
}
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def local_copy(source: str, split: str) -> str | None:
    """The copy of a shipped source under $CORRGRPO_DATA_DIR, when that is set and lists it."""
    data_dir = os.environ.get(DATA_DIR_ENV)
    relative = LOCAL_COPIES.get((source, split))
    if not data_dir or relative is None:
        return None
    copy = Path(data_dir).expanduser().resolve() / relative
    if not copy.is_file():
        raise InputError(f"{source} ({split}): no local copy {copy} (${DATA_DIR_ENV}={data_dir})")
    print(f"[data] {source} ({split}): the local copy {copy}", flush=True)
    return str(copy)


def file_builder(source: str) -> str | None:
    """load_dataset's builder for a data file (its suffix, `.gz` aside), None for a hub id or a folder."""
    suffixes = [s for s in Path(source.split("?")[0]).suffixes if s != ".gz"]
    return FILE_BUILDERS.get(suffixes[-1]) if suffixes else None


def load_source(source: str, split: str = "train") -> Any:
    """The `datasets.Dataset` of a hub id (that split), a local file or folder, or a file URL. One InputError
    line when it cannot be read (a missing file, an unreachable hub)."""
    from datasets import load_dataset

    path = local_copy(source, split) or source
    builder = file_builder(path)
    if path.startswith("/") and not Path(path).exists():
        raise InputError(f"dataset {path}: no such file or folder")
    try:
        with hub_warnings_hidden():
            if builder is not None:
                return load_dataset(builder, data_files=path, split="train")
            return load_dataset(path, split=split)
    except (OSError, ValueError) as error:
        raise InputError(
            f"cannot load the dataset {source} (split {split}): {first_line(error)}; without a hub, set "
            f"${DATA_DIR_ENV} to a "
            "folder of local copies (trainer/README.md) or dataset.path to a local file"
        ) from None


@contextlib.contextmanager
def hub_warnings_hidden() -> Iterator[None]:
    """huggingface_hub logs each retry of an unreachable hub. The user gets the one InputError line
    instead."""
    from huggingface_hub.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def rows_of(section: CodeRows | ToolcallRows) -> Any:
    """The rows `offset` to `offset + limit` of a dataset section's source."""
    data = load_source(section.path, section.split)
    start = section.offset
    stop = len(data) if section.limit is None else min(len(data), start + section.limit)
    return data.select(range(min(start, stop), stop))


def load_rows(section: CodeRows | ToolcallRows) -> list[dict[str, Any]]:
    """The rows of a `code` or `toolcall` config's `dataset` (or `evaluation`) section, as the section shapes
    them."""
    return [section.row(record) for record in rows_of(section)]
