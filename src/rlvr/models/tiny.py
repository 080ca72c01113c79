"""A tiny random causal LM and a byte-level ChatML tokenizer, built in-process for tests.

Nothing is downloaded or read from disk. The tokenizer maps each byte to the token whose id is
that byte's value (0..255; GPT-2 byte-to-unicode alphabet, no merges), followed by the special
tokens `<|im_start|>` (256), `<|im_end|>` (257, also eos) and `<|pad|>` (258). The model is a
2-layer Llama (SmolLM2's architecture; hidden 64, 4 heads, 2 kv heads, MLP 128, tied embeddings)
in fp32 whose weights depend only on `seed`: the global torch RNG is forked, so building one
neither reads nor advances the caller's random state.

Why Llama and not Qwen2: transformers 5 reloads any saved `qwen2` checkpoint with its own
Qwen2Tokenizer (NFC, Qwen regex, an added `<|endoftext|>`), so a saved tiny Qwen2 would not
round-trip; a `llama` checkpoint keeps the tokenizer.json pipeline as saved.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|pad|>"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-character map, the alphabet of ByteLevel."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {byte: chr(char) for byte, char in zip(printable, chars)}


def tiny_byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level ChatML tokenizer: token id = byte value, then the three special tokens."""
    vocab = {char: byte for byte, char in _bytes_to_unicode().items()}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([IM_START, IM_END, PAD])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        padding_side="left",
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def tiny_random_model_and_tokenizer(seed: int = 0, *, max_positions: int = 1024
                                    ) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A 2-layer random Llama (fp32, train mode) and its byte-level tokenizer; same seed ⇒ same weights.

    ``max_positions``: the positions it takes (the weights do not depend on it: rotary positions).
    Convention: initialised by transformers' own init under `torch.manual_seed(seed)` inside
    `torch.random.fork_rng`, so the caller's global RNG state is untouched.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}; pass e.g. seed=0")
    tokenizer = tiny_byte_tokenizer()
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(PAD)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = None
    return model, tokenizer
