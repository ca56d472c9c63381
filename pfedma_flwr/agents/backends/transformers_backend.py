"""Local Hugging Face transformers backend: left-padded batched ``generate`` (GPU-box path).

Loads any local HF model directory, a ``.gguf`` file, or a Hugging Face model id already in the
local Hugging Face cache. A GGUF is dequantised by transformers (slow: 15-45 s), so it is
converted once into a safetensors cache dir and reloaded from there (0.3-0.9 s) using the
``hf_quantizer = None`` workaround measured in ``docs/models.md`` §3. Nothing is downloaded
unless the user's own environment says ``HF_HUB_OFFLINE=0`` (the default here is offline).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pfedma_flwr.agents.backends.base import (
    Backend,
    GenerationResult,
    Messages,
    ModelNotFoundError,
)
from pfedma_flwr.agents.backends.embedded import (
    EMBEDDED_MODELS,
    cache_dir,
    embedded_model_path,
    file_sha256,
)

logger = logging.getLogger(__name__)


_FALSE = frozenset({"0", "false", "no", "off"})


def hub_downloads_allowed() -> bool:
    """Whether the user explicitly allowed hub downloads (``HF_HUB_OFFLINE=0``); unset = no."""
    return os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() in _FALSE


def resolve_model_dir(model: str) -> Path:
    """The local directory (or ``.gguf`` file) of ``model``.

    ``model`` is an embedded model name, a local HF directory or ``.gguf`` file, or a Hugging
    Face model id (``org/name``) found in the local HF cache (``$HF_HUB_CACHE``). An id that
    is not cached is downloaded only when the user set ``HF_HUB_OFFLINE=0``.

    Raises
    ------
    ModelNotFoundError
        (a ``ValueError``) naming the model, where it was looked for, and how to make it
        available.
    """
    if model in EMBEDDED_MODELS:
        return embedded_model_path(model)
    path = Path(model).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix == ".gguf"):
        return path
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    online = hub_downloads_allowed()
    try:
        return Path(snapshot_download(model, local_files_only=not online))
    except HFValidationError:  # not of the form org/name either
        why = "no such local directory or .gguf file, and not a Hugging Face model id"
    except LocalEntryNotFoundError:
        why = (f"not a local path, and not in the Hugging Face cache {constants.HF_HUB_CACHE} "
               f"(download it once: `hf download {model}`, or allow downloads with "
               "HF_HUB_OFFLINE=0)")
    except OSError as e:  # an allowed download that failed (network, gated repo, no repo)
        why = f"not a local path, and the download failed: {type(e).__name__}: {str(e)[:160]}"
    raise ModelNotFoundError(
        f"model {model!r}: {why}; the transformers backend takes a local HF directory, a .gguf "
        f"file, an embedded name {sorted(EMBEDDED_MODELS)} or a cached Hugging Face model id")


def dir_sha256(directory: Path) -> str:
    """sha256 over the sorted relative names and contents of every file under ``directory``.

    Symbolic links (a Hugging Face cache snapshot links to its blobs) are followed.
    """
    h = hashlib.sha256()
    for f in sorted(p for p in directory.rglob("*") if p.is_file()):
        h.update(f.relative_to(directory).as_posix().encode("utf-8") + b"\0")
        h.update(file_sha256(f).encode("ascii"))
    return h.hexdigest()


def _converted_dir(gguf: Path) -> Path:
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
    return cache_dir().parent / "hf" / f"{gguf.stem}-{key[:12]}"


def convert_gguf(gguf: Path) -> Path:
    """Dequantise ``gguf`` once into a safetensors dir (atomic rename) and return the dir."""
    missing = [m for m in ("accelerate", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        # transformers' GGUF loader imports them deep inside from_pretrained; fail early and say so
        raise ImportError(
            f"loading {gguf.name} through transformers needs {' and '.join(missing)}: "
            "pip install 'pfedma-flwr[transformers]' (or use the llama_cpp backend for GGUF files)"
        )
    target = _converted_dir(gguf)
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to safetensors in %s (one-off)", gguf.name, target)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # transformers refuses to save GGUF-loaded models although the weights are dense.
    model.hf_quantizer = None  # type: ignore[assignment]  # typed as a module
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; its dir is equivalent
            logger.info("conversion of %s already published by another process", gguf.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


class TransformersBackend(Backend):
    """Batched generation with a local transformers causal LM.

    Parameters
    ----------
    model : str
        HF model directory, a ``.gguf`` file, an embedded model name, or a Hugging Face model
        id in the local HF cache (:func:`resolve_model_dir`).
    device : str
        ``auto`` (cuda if available), ``cpu`` or ``cuda[:k]``.
    dtype : str
        ``auto`` (bf16 on CUDA, fp32 on CPU), ``float32``, ``bfloat16`` or ``float16``.
    max_batch : int
        Most prompts per ``generate`` call.
    """

    name = "transformers"
    cache_default = True

    def __init__(
        self, *, model: str, device: str = "auto", dtype: str = "auto", max_batch: int = 16
    ) -> None:
        super().__init__()
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto|float32|bfloat16|float16, got {dtype!r}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        path = resolve_model_dir(model)
        if path.is_file() and path.suffix == ".gguf":
            path = convert_gguf(path)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.model_dir = path
        self._identity: dict[str, Any] | None = None
        if dtype == "auto":
            dtype = "bfloat16" if device.startswith("cuda") else "float32"
        self.max_batch = max_batch
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(
            str(path), local_files_only=True, dtype=getattr(torch, dtype)
        ).to(device)  # type: ignore[arg-type]  # stubs: .to on the class
        self.model.eval()
        logger.info("transformers backend: %s on %s (%s)", path, device, dtype)

    def cache_identity(self) -> dict[str, Any]:
        """The weights directory's content hash, device, dtype and library versions.

        Hashed once per backend (reads every file of the model directory).
        """
        if self._identity is None:
            import transformers

            self._identity = {
                "backend": "transformers", "weights_sha256": dir_sha256(self.model_dir),
                "device": self.device.split(":")[0], "dtype": str(self.model.dtype),
                "transformers": transformers.__version__, "torch": self._torch.__version__}
        return self._identity

    def _generate_batch(
        self,
        prompts: list[Messages],
        *,
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        seed: int | None,
    ) -> list[GenerationResult]:
        # json_schema is not enforced here (no grammar); the prompt asks for JSON and the
        # parser tolerates the usual deviations.
        out: list[GenerationResult] = []
        for start in range(0, len(prompts), self.max_batch):
            out.extend(
                self._chunk(prompts[start : start + self.max_batch], max_tokens, temperature, seed)
            )
        return out

    def _chunk(
        self, prompts: list[Messages], max_tokens: int, temperature: float, seed: int | None
    ) -> list[GenerationResult]:
        torch = self._torch
        try:
            texts = [
                self.tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                for p in prompts
            ]
        except (ValueError, TypeError) as e:
            return [GenerationResult.failure(f"chat template failed: {e}") for _ in prompts]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = enc.to(self.device)
        if seed is not None:
            torch.manual_seed(seed)
        kwargs: dict[str, Any] = {"do_sample": temperature > 0}
        if temperature > 0:
            kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
        with torch.inference_mode():
            gen = self.model.generate(
                **enc, max_new_tokens=max_tokens, pad_token_id=self.tokenizer.pad_token_id, **kwargs
            )
        new = gen[:, enc["input_ids"].shape[1] :]
        eos = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        results = []
        for k in range(len(prompts)):
            ids = new[k].tolist()
            n = next((i for i, t in enumerate(ids) if t in eos), len(ids))
            results.append(
                GenerationResult(
                    text=str(self.tokenizer.decode(ids[:n], skip_special_tokens=True)),
                    prompt_tokens=int(enc["attention_mask"][k].sum()),
                    completion_tokens=n,
                    finish_reason="stop" if n < len(ids) or n < max_tokens else "length",
                )
            )
        return results
