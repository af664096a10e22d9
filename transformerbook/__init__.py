"""A literate, tested companion to textbook chapters on Transformers and Large Language Models

Modules:

- `transformerbook.blocks`: Layer normalization, the position-wise feed-forward network, residual connections, and the post-norm and pre-norm blocks that a transformer stacks (J&M 10.3-10.4; 6.390 11.3.1).
- `transformerbook.checks.attention`: The checkers behind the exercises of "Attention": attention weights, masked scaled dot-product attention, and a permutation-equivariance gap.
- `transformerbook.checks.embeddings`: `check_one_hot_embedding`, `check_sinusoidal_encoding`, `check_rotation_matrix` and `check_cosine_similarity`, used in the chapter "Embeddings".
- `transformerbook.checks.multihead`: Checkers for Chapter 3's exercises: splitting and merging heads, a multi-head attention class, and loading weights from `torch.nn.MultiheadAttention`.
- `transformerbook.checks.sampling`: The checkers behind the exercises of "Sampling and generation": temperature, top-k and top-p filters, appending to a KV cache, and the chance that pure sampling wanders into the tail.
- `transformerbook.checks.training`: The checkers behind the exercises of "Training a GPT": the language-model loss with padding, packing documents into context windows, and the warm-up + cosine learning-rate schedule.
- `transformerbook.cli`: `transformerbook train` and `transformerbook sample`: train a GPT on TinyShakespeare (or any text file) with a progress bar and checkpoints, resume it, and generate text from a checkpoint.
- `transformerbook.embeddings`: Token embeddings as row selection from E, learned and sinusoidal position embeddings, and what the geometry of embedding space encodes (J&M 10.5; notes 19.2; 6.390 11.1).
- `transformerbook.sampling`: Decoding methods (greedy, random, top-k, top-p, temperature), a batched `generate` with a KV cache, and language models as task solvers (J&M 10.7–10.8).
- `transformerbook.training`: From the chain rule of probability to a trained character-level Shakespeare model: the cross-entropy loss, teacher forcing, batching and packing, AdamW with warm-up and cosine decay, checkpoints that resume exactly (J&M 10.9)."""

__version__ = "0.1.0"
