"""Long-context training of the Llama 3 architecture on gshmem's context-parallel attention
(docs/training.md): the model (model.py), its shapes (config.py), the chunked loss (loss.py),
model FLOPs (flops.py), synthetic data (data.py) and the context-parallel batch split (cp.py)."""
