"""Context-parallel Llama with Hugging Face transformers: ring attention as an attn_implementation.

Every rank builds the same random-init Llama (same seed) and runs the whole 4096-token sequence
through it (HF's SDPA attention) as the reference; then a copy switched to gshmem ring attention
runs on this rank's zigzag shard only. The CP logits, loss and gradients must be as close to an
fp32 run of the full sequence as the bf16 reference is (bf16 rounding alone differs by ~1e-2).

    python -m gshmem.run -n 2 examples/cp_llama_hf.py        # needs transformers >= 5
"""

from __future__ import annotations

import copy
import sys
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

import gshmem
import gshmem.torch as gt
from gshmem.attention import hf, zigzag_unshard

SEQ, STEPS = 4096, 5
comm = gshmem.init()  # finds the peers gshmem.run started; sets torch's current device
world, rank, dev = comm.nranks, comm.rank, torch.device("cuda", comm.device)

# Same seed everywhere: identical weights and batch on every rank, with nothing to broadcast.
torch.manual_seed(0)
cfg = LlamaConfig(
    vocab_size=1000,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,  # GQA: only the 2 K/V heads travel around the ring
    max_position_embeddings=SEQ,
)
fp32 = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(dev)
ref = copy.deepcopy(fp32).to(torch.bfloat16)
ids = torch.randint(0, cfg.vocab_size, (1, SEQ)).to(dev)

# The CP model: the same weights; only the attention implementation differs. register() also
# installs a mask function, so HF builds no [S, S] mask for it.
cp = copy.deepcopy(ref)
cp.set_attn_implementation(hf.register(comm))

# This rank's tokens, their GLOBAL positions (RoPE must see where each token really is) and
# labels shifted on the full sequence (a shard's last token predicts a token on another rank).
shard = hf.shard_inputs(ids, world=world, rank=rank)
# The loss is a mean over every labelled token of the full batch: each rank divides its summed
# loss by the global count, so the ranks' losses (and gradients) add up to the full ones.
n_items = gt.all_reduce((shard.shift_labels != -100).sum().float().reshape(1), comm=comm)


def step(model: torch.nn.Module, **inputs: torch.Tensor):
    model.zero_grad(set_to_none=True)
    out = model(**inputs, use_cache=False)  # a KV cache of local shards would be meaningless
    out.loss.backward()
    return out


def run_ref(model: torch.nn.Module = ref):
    return step(model, input_ids=ids, labels=ids)


def run_cp():
    # labels= makes HF compute a loss, shift_labels= stops it from shifting them again
    return step(
        cp,
        input_ids=shard.input_ids,
        position_ids=shard.position_ids,
        labels=shard.shift_labels,
        shift_labels=shard.shift_labels,
        num_items_in_batch=n_items,
    )


def gather(t: torch.Tensor) -> torch.Tensor:
    """The full-sequence tensor from every rank's [S/W, ...] shard (gshmem all-gather, then the
    zigzag order undone)."""
    every = gt.all_gather(t.contiguous(), comm=comm)
    return zigzag_unshard(list(every.chunk(world)), dim=0)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


PARAMS = ("model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.down_proj.weight")


def results(out, model: torch.nn.Module, sharded: bool) -> dict[str, torch.Tensor]:
    got = {"logits": out.logits[0], "loss": out.loss.detach().reshape(1)}
    got.update((name, p.grad) for name, p in model.named_parameters() if name in PARAMS)
    if sharded:
        # Each rank holds its part of the loss and of every gradient (ring attention already sent
        # the dK/dV of its keys' users home): the sums over ranks are the full ones.
        got = {k: gt.all_reduce(v.clone(), comm=comm) for k, v in got.items() if k != "logits"}
        got["logits"] = gather(out.logits[0])
    return got


truth = results(run_ref(fp32), fp32, sharded=False)
base = results(run_ref(), ref, sharded=False)
cp_res = results(run_cp(), cp, sharded=True)  # the first call also allocates ring buffers
errors = {k: (rel(cp_res[k], truth[k]), rel(base[k], truth[k])) for k in truth}


def timed(fn) -> float:
    torch.cuda.synchronize()
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / STEPS * 1e3


ms_ref, ms_cp = timed(run_ref), timed(run_cp)
# bf16 tolerance: at most twice the bf16 reference's own error against fp32 (1e-3 at least)
ok = all(err <= max(2 * base_err, 1e-3) for err, base_err in errors.values())
if rank == 0:
    print("relative error against fp32:      context-parallel   HF sdpa bf16")
    for what, (err, base_err) in errors.items():
        print(f"  {what:38s} {err:9.2e} {base_err:14.2e}")
    print(
        f"{'PASS' if ok else 'FAIL'}: {world} ranks, {SEQ} tokens; forward+backward: full "
        f"sequence on one GPU {ms_ref:.1f} ms, context-parallel {ms_cp:.1f} ms per rank"
    )
comm.finalize()
sys.exit(0 if ok else 1)
