"""Tiny offline stand-ins for a real policy: a random Llama model (and a reward model), a character-level tokenizer.

Tests across rlvr need a causal LM whose logits depend on its input, a real fast tokenizer with
a chat template, and (for the GGUF path) a GGUF file, all built in milliseconds with no network.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification, PreTrainedTokenizerFast

# Special tokens, spelled and numbered as in SmolLM2 (whose id 0 is `<|endoftext|>`).
UNK_TOKEN = "<unk>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (UNK_TOKEN, IM_START_TOKEN, IM_END_TOKEN)

# One token per character. Upper case is folded to lower case by the tokenizer's normalizer, so
# "Answer: 42" still encodes without unknown tokens while the vocabulary stays at 64 entries.
CHARACTERS = (
    "\n "
    + "0123456789"
    + "abcdefghijklmnopqrstuvwxyz"
    + "<>/.,:;!?+-*=()'\"_#%&[]"
)
TINY_VOCAB = SPECIAL_TOKENS + tuple(CHARACTERS)
TINY_VOCAB_SIZE = len(TINY_VOCAB)  # 64
assert TINY_VOCAB_SIZE == 64 and len(set(TINY_VOCAB)) == 64

UNK_TOKEN_ID = TINY_VOCAB.index(UNK_TOKEN)
IM_START_TOKEN_ID = TINY_VOCAB.index(IM_START_TOKEN)
IM_END_TOKEN_ID = TINY_VOCAB.index(IM_END_TOKEN)

# SmolLM2's template without its default system prompt.
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_tokenizer(merges: tuple[tuple[str, str], ...] = ()) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer over `TINY_VOCAB`, shaped like SmolLM2's.

    As in SmolLM2, the pad token is `<|im_end|>`, the same as EOS: code that finds padding by
    comparing ids with `pad_token_id` would also drop real end-of-turn tokens, and this catches it.
    Padding is on the left, as generation needs. No BOS is added.
    `merges` (pairs of characters) add one token each after the 64, e.g. ("1", "2") -> "12": then
    the ids ['1', '2'] decode to a text that encodes to ['12'], so decode -> encode does not round-trip.
    """
    vocab = {token: index for index, token in enumerate(TINY_VOCAB)}
    for left, right in merges:
        vocab[left + right] = len(vocab)
    # A BPE model with no merges cuts text into single characters; unknown ones become <unk>.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=list(merges), unk_token=UNK_TOKEN))
    backend.normalizer = normalizers.Lowercase()
    backend.decoder = decoders.Fuse()  # join characters without inserting spaces
    backend.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in SPECIAL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=UNK_TOKEN,
        eos_token=IM_END_TOKEN,
        pad_token=IM_END_TOKEN,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=256,
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    vocab_size: int = TINY_VOCAB_SIZE,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 64,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    initializer_range: float = 0.2,
) -> LlamaForCausalLM:
    """A randomly initialised Llama causal LM, in eval mode, with tied embeddings like SmolLM2.

    `initializer_range` is 0.2 rather than Llama's 0.02: with weights that small a 32-wide model
    gives near-uniform next-token distributions whatever the input, which lets wrong code pass.
    Grouped-query attention (`num_kv_heads < num_heads`) is on by default, as in SmolLM2.
    The global random state is left untouched.
    """
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=256,
        initializer_range=initializer_range,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=IM_START_TOKEN_ID,
        eos_token_id=IM_END_TOKEN_ID,
        pad_token_id=IM_END_TOKEN_ID,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.to(dtype)
    model.eval()
    return model


def save_tiny_model(folder: str | Path, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> Path:
    """Write a tiny model and its tokenizer to `folder`, loadable as a local-folder model spec."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    build_tiny_model(seed=seed, dtype=dtype).save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)
    return folder


def save_tiny_reward_model(folder: str | Path, *, seed: int = 0, num_labels: int = 1) -> Path:
    """Write a tiny random `LlamaForSequenceClassification` (one output logit unless `num_labels` says otherwise,
    pad token = EOS as in the policy) and its tokenizer to `folder`: a reward model for `rm:BASE`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = build_tiny_model().config
    config.num_labels = num_labels
    config.tie_word_embeddings = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(config)
    model.save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)
    return folder


def random_lora_b(policy, *, seed: int, std: float = 1.0) -> None:
    """Fill every LoRA B matrix of `policy` with seeded Gaussian noise of `std`, in its own dtype. PEFT starts B
    at 0, where a merged adapter equals the base model and a sync that drops the adapter goes unseen."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * std)


def _llama_cpp_permute(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp's reordering of q/k projection rows (rotary halves interleaved); its loader undoes it."""
    rows = weight.shape[0]
    return (
        weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_tiny_llama_gguf(path: str | Path, model: LlamaForCausalLM, *, name: str = "tiny-llama") -> Path:
    """Write `model` as an unquantised (F32) llama-architecture GGUF file, as llama.cpp would.

    Tensor names follow llama.cpp's map, q/k rows are permuted the way llama.cpp's converter does,
    and the tokenizer is `TINY_VOCAB` as a byte-level BPE vocabulary (the kind SmolLM2's file has)
    with SmolLM2's special token ids and the tiny chat template.
    """
    import gguf
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    config = model.config
    if config.model_type != "llama" or config.vocab_size != TINY_VOCAB_SIZE:
        raise ValueError(
            f"write_tiny_llama_gguf writes llama models with the tiny {TINY_VOCAB_SIZE}-token vocabulary; "
            f"got model_type={config.model_type!r}, vocab_size={config.vocab_size}"
        )
    path = Path(path)
    head_dim = config.hidden_size // config.num_attention_heads
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_rope_dimension_count(head_dim)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])

    byte_spelling = bytes_to_unicode()  # byte-level BPE spells " " as "Ġ" and "\n" as "Ċ"
    tokens = [
        token if token in SPECIAL_TOKENS else "".join(byte_spelling[byte] for byte in token.encode("utf-8"))
        for token in TINY_VOCAB
    ]
    control, normal = int(gguf.TokenType.CONTROL), int(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([control if token in SPECIAL_TOKENS else normal for token in TINY_VOCAB])
    # Single characters only, so no merges; transformers then derives them (none) from the scores.
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_bos_token_id(IM_START_TOKEN_ID)
    writer.add_eos_token_id(IM_END_TOKEN_ID)
    writer.add_unk_token_id(UNK_TOKEN_ID)
    writer.add_pad_token_id(IM_END_TOKEN_ID)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TINY_CHAT_TEMPLATE)

    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # llama.cpp omits `output.weight` when it is the embedding matrix
        stem, suffix = hf_name.rsplit(".", 1)
        gguf_name = name_map.get_name(stem)
        if gguf_name is None:
            raise ValueError(f"no GGUF tensor name for {hf_name!r}")
        weight = tensor.detach().to(torch.float32).numpy().copy()
        if stem.endswith("q_proj"):
            weight = _llama_cpp_permute(weight, config.num_attention_heads)
        elif stem.endswith("k_proj"):
            weight = _llama_cpp_permute(weight, config.num_key_value_heads)
        writer.add_tensor(f"{gguf_name}.{suffix}", weight)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
