"""Convert the packaged Gemma 3 GGUF into a Hugging Face folder that vLLM serves on a CPU.

Run with the Python of vLLM's own environment (:mod:`.vllm_env`; transformers, torch, safetensors,
gguf and accelerate are there), never imported by hopsearch::

    <vllm-env>/bin/python vllm_convert.py MODEL.gguf OUT_DIR --dtype bfloat16

vLLM cannot serve the GGUF on a CPU (its GGUF plugin's dequantize kernels are CUDA-only). transformers
reads it (``gguf_file=``) and dequantizes it; ``save_pretrained`` refuses a GGUF-quantized model, so the
weights are written directly (safetensors, the tied ``lm_head`` left out: it is ``embed_tokens``) with
``config.json``. Two things the GGUF lacks are put right: it carries no chat template (Gemma's is
written, the one llama.cpp's ``--chat_format gemma`` applies) and the converted tokenizer does not add
``<bos>`` (without it vLLM's output differed from llama.cpp's on the same prompt). ``generation_config.json``
names ``<eos>`` and ``<end_of_turn>`` as ends of a generation and nothing else (no sampling defaults).
The folder is written under a temporary name and renamed when complete: a folder that exists is whole.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

#: Gemma's chat template (text only): ``<start_of_turn>user|model`` turns closed by ``<end_of_turn>``,
#: a system message folded into the first user turn.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)
#: Written beside the weights; a folder without it (or with another) is converted again.
MARKER = "hopsearch-conversion.json"
CONVERSION_VERSION = 3


def _module(name: str) -> Any:
    return importlib.import_module(name)


def _weights(gguf: Path, dtype: str) -> tuple[dict[str, Any], Any, str]:
    """Return the dequantized weights in ``dtype`` (shared tensors left out), the model's config and its class."""
    torch, transformers = _module("torch"), _module("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, dtype)
    )
    state = model.state_dict()
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    tensors = {name: tensor.detach().to(getattr(torch, dtype)).contiguous() for name, tensor in state.items()}
    model.config.torch_dtype = dtype
    return tensors, model.config, type(model).__name__


def _plain_config(path: Path, architecture: str) -> None:
    """Drop the GGUF's ``quantization_config`` from ``config.json`` (the weights written are plain tensors;
    vLLM refuses the method: ``Unknown quantization method: gguf``) and name the model class, which the
    GGUF's config lacks (vLLM then takes the text model for an embedding model)."""
    config = json.loads(path.read_text())
    config.pop("quantization_config", None)
    config["architectures"] = [architecture]
    path.write_text(json.dumps(config, indent=2))


def _tokenizer(gguf: Path, out: Path) -> dict[str, Any]:
    """Save the tokenizer with Gemma's chat template and ``<bos>`` added; return what it encodes."""
    tokenizer = _module("transformers").AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.chat_template = GEMMA_TEMPLATE
    tokenizer.add_bos_token = True
    tokenizer.save_pretrained(str(out))
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["add_bos_token"] = True
    config["chat_template"] = GEMMA_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False))
    reloaded = _module("transformers").AutoTokenizer.from_pretrained(str(out))
    ids = reloaded("Question:")["input_ids"]
    if not ids or ids[0] != reloaded.bos_token_id:
        raise SystemExit(f"the converted tokenizer does not add <bos> (ids {ids[:4]})")
    return {"bos_token_id": reloaded.bos_token_id, "eos": reloaded.convert_tokens_to_ids(["<eos>", "<end_of_turn>"])}


def convert(gguf: Path, out: Path, dtype: str) -> dict[str, Any]:
    """Write the Hugging Face folder ``out`` from ``gguf`` (weights in ``dtype``); returns the marker."""
    started = time.monotonic()
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tensors, config, architecture = _weights(gguf, dtype)
    _module("safetensors.torch").save_file(tensors, str(partial / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(partial))
    _plain_config(partial / "config.json", architecture)
    tokens = _tokenizer(gguf, partial)
    generation = {"bos_token_id": tokens["bos_token_id"], "eos_token_id": tokens["eos"], "pad_token_id": 0}
    (partial / "generation_config.json").write_text(json.dumps(generation, indent=2))
    marker = {
        "version": CONVERSION_VERSION,
        "source": str(gguf),
        "source_bytes": gguf.stat().st_size,
        "dtype": dtype,
        "tensors": len(tensors),
        "seconds": round(time.monotonic() - started, 1),
    }
    (partial / MARKER).write_text(json.dumps(marker, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return marker


def main(argv: list[str] | None = None) -> int:
    """Convert as the command line says and print the marker (JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    args = parser.parse_args(argv)
    print(json.dumps(convert(args.gguf, args.out, args.dtype)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
