"""A Hugging Face Llama with its attention routed through flashattn, checked against transformers' SDPA.

    pip install . -r python/requirements-test.txt      # flashattn and a pinned transformers
    python examples/llama_transformers.py              # fp32 on the CPU; bf16 on CUDA when available

The model is built from a small LlamaConfig with random weights (nothing is downloaded). One
function registered with transformers' AttentionInterface is all it takes: batches without padding
call flash_attn_func (causal); padded batches are unpadded and run through flash_attn_varlen_func.
The script compares logits and gradients of the same weights under `sdpa` and `flashattn` and exits
non-zero when they disagree.
"""

import argparse
import copy
import sys

import torch
from transformers import AttentionInterface, AttentionMaskInterface, AutoModelForCausalLM, LlamaConfig
from transformers.masking_utils import flash_attention_mask

import flashattn


def flashattn_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                        softcap=None, is_causal=None, **kwargs):
    """transformers calls this with (batch, heads, seqlen, head_dim) tensors and expects
    ((batch, seqlen, heads, head_dim), attention weights or None) back. GQA needs no repeat_kv."""
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # (b, s, h, d) views, head_dim contiguous
    options = dict(
        dropout_p=dropout if module.training else 0.0,
        softmax_scale=scaling,
        causal=getattr(module, "is_causal", True) if is_causal is None else is_causal,
        window_size=(-1, -1) if sliding_window is None else (sliding_window - 1, sliding_window - 1),
        softcap=softcap or 0.0,
    )
    if attention_mask is None:  # no padding (flash_attention_mask returns None then)
        return flashattn.flash_attn_func(q, k, v, **options), None

    # Padding: attention_mask is the 2D (batch, kv_len) keep mask. Pack the real tokens and go varlen.
    batch, q_len = q.shape[:2]
    kv_mask = attention_mask.bool()
    q_mask = kv_mask[:, -q_len:]
    q_rows, k_rows = q_mask.flatten().nonzero().squeeze(1), kv_mask.flatten().nonzero().squeeze(1)
    q_lens, k_lens = q_mask.sum(1, dtype=torch.int32), kv_mask.sum(1, dtype=torch.int32)
    zero = torch.zeros(1, dtype=torch.int32, device=q.device)
    cu_q = torch.cat([zero, q_lens.cumsum(0, dtype=torch.int32)])
    cu_k = torch.cat([zero, k_lens.cumsum(0, dtype=torch.int32)])
    packed = flashattn.flash_attn_varlen_func(
        q.flatten(0, 1)[q_rows], k.flatten(0, 1)[k_rows], v.flatten(0, 1)[k_rows], cu_q, cu_k,
        int(q_lens.max()), int(k_lens.max()), **options)
    out = q.new_zeros(batch * q_len, *packed.shape[1:]).index_copy(0, q_rows, packed)
    return out.view(batch, q_len, *packed.shape[1:]), None


# transformers reserves names containing "flash" for its own flash-attention loaders, hence "fa_cpp".
IMPLEMENTATION = "fa_cpp"
AttentionInterface.register(IMPLEMENTATION, flashattn_attention)
AttentionMaskInterface.register(IMPLEMENTATION, flash_attention_mask)  # None, or the 2D padding mask


def small_llama_config():
    return LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)


def compare(device="cpu", dtype=torch.float32, batch=2, seqlen=48, pad=11, seed=0, backward=True):
    """Logits (and with `backward`, gradients) of one random Llama under `sdpa` and under flashattn.

    The second sequence is left-padded by `pad` tokens (pad=0: no padding). Returns the largest
    differences, relative to the largest magnitude of the sdpa result."""
    config = small_llama_config()
    models = {}
    for implementation in ("sdpa", IMPLEMENTATION):
        torch.manual_seed(seed)  # same random weights
        # a config copy each: the model records its attention implementation in its config
        models[implementation] = AutoModelForCausalLM.from_config(
            copy.deepcopy(config), attn_implementation=implementation, dtype=dtype).to(device)
        assert models[implementation].config._attn_implementation == implementation
    input_ids = torch.randint(0, config.vocab_size, (batch, seqlen), device=device)
    attention_mask = torch.ones(batch, seqlen, dtype=torch.long, device=device)
    attention_mask[1, :pad] = 0
    # No loss on pads, nor on the first real token of a padded row: it is predicted from a pad
    # position, whose output is arbitrary (flashattn gives 0 for a query row with no key to attend).
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[1, pad] = -100
    valid = attention_mask.bool()

    results = {}
    for implementation, model in models.items():
        output = model(input_ids=input_ids, attention_mask=attention_mask if pad else None, labels=labels)
        if backward:
            output.loss.backward()
        grads = {name: p.grad.float() for name, p in model.named_parameters() if p.grad is not None}
        results[implementation] = (output.logits.float()[valid], output.loss.float(), grads)

    ref_logits, ref_loss, ref_grads = results["sdpa"]
    logits, loss, grads = results[IMPLEMENTATION]

    def relative(a, b):
        return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()

    diffs = {"logits": relative(logits, ref_logits), "loss": relative(loss, ref_loss)}
    if backward:
        diffs["gradients"] = max(relative(grads[name], g) for name, g in ref_grads.items())
    return diffs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() and flashattn.cuda_available()
                        else "cpu")
    parser.add_argument("--pad", type=int, default=11, help="left padding of the second sequence (0 = none)")
    args = parser.parse_args(argv)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    try:
        diffs = compare(args.device, dtype, pad=args.pad)
    except flashattn.FlashAttnError as error:
        if error.status != "FA_ERROR_UNSUPPORTED":
            raise
        print(f"note: {error}; comparing the forward only")
        diffs = compare(args.device, dtype, pad=args.pad, backward=False)
    print(f"flashattn vs sdpa, {args.device} {str(dtype).split('.')[-1]}, pad {args.pad}: "
          + ", ".join(f"{name} {value:.2e}" for name, value in diffs.items()) + f" (relative; tolerance {tolerance})")
    return 0 if max(diffs.values()) <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
