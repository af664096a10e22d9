"""A literate, tested companion to textbook chapters on Transformers and Large Language Models

Modules:

- `transformerbook.attention`: Scaled dot-product attention from scratch: scores, a row-wise softmax, and a weighted sum of values (J&M 10.1).
- `transformerbook.blocks`: Layer normalization, the position-wise feed-forward network, residual connections, and the post-norm and pre-norm blocks that a transformer stacks (J&M 10.3-10.4; 6.390 11.3.1).
- `transformerbook.chat`: A conversation written as tokens: role and end-of-turn tokens that no ordinary text can produce, a loss mask on what the assistant says, and the way back from ids to messages. A companion page of chapter 13, "From a language model to an assistant", which fine-tunes the book's model on it.
- `transformerbook.checkpoints`: Saving a training run so that it resumes exactly: an atomic write, a safe load with `weights_only=True`, the best weights kept beside the latest state, and the rule for which settings may change on resume. A companion page of chapter 8, "Training a GPT", whose loop writes them.
- `transformerbook.checks.attention`: The checkers behind the exercises of "Attention": attention weights, masked scaled dot-product attention, and a permutation-equivariance gap.
- `transformerbook.checks.blocks`: `check_layer_norm`, `check_pre_norm_block` and `check_affected_positions`, used in the chapter "Transformer blocks".
- `transformerbook.checks.core`: The small toolkit behind every exercise checker: one pass line, or an error that says exactly what is wrong.
- `transformerbook.checks.embeddings`: `check_one_hot_embedding`, `check_sinusoidal_encoding`, `check_rotation_matrix` and `check_cosine_similarity`, used in the chapter "Embeddings".
- `transformerbook.checks.evaluation`: The checkers behind the exercises of "What a trained model can do, what it learned from, and what can go wrong": a likelihood classifier, GPT-3's 13-gram contamination test and the epochs of a data mix.
- `transformerbook.checks.finetune`: The checkers behind the exercises of "Pre-training objectives and fine-tuning": BERT's masked-language-model corruption, freezing a classifier's body and the mean over the real positions that feeds its head.
- `transformerbook.checks.interpret`: The checkers behind the exercises of "Inside a trained model: heads and layers": a previous-token head score, the induction score and an attention-sink score.
- `transformerbook.checks.lm_head`: Exercise checkers for chapter 06: counting a GPT's parameters, tying the weights, and the logit lens.
- `transformerbook.checks.masking`: Checkers for Chapter 2's exercises: causal masks, padding masks, combined masks and NaN-free masked attention.
- `transformerbook.checks.modern`: `check_rms_norm`, `check_apply_rotary`, `check_kv_cache_size` and `check_swiglu`, used in the chapter "From GPT-2 to today's open models".
- `transformerbook.checks.moe`: `check_top_k_gate`, `check_load_balancing_loss` and `check_moe_dispatch`, used in the chapter "Mixture of Experts".
- `transformerbook.checks.multihead`: Checkers for Chapter 3's exercises: splitting and merging heads, a multi-head attention class, and loading weights from `torch.nn.MultiheadAttention`.
- `transformerbook.checks.posttraining`: The checkers behind the exercises of "From a language model to an assistant": the SFT targets of a loss mask, DPO's loss, the policy's log-probabilities DPO trains, LoRA's forward pass, and reading a reward–KL frontier.
- `transformerbook.checks.sampling`: The checkers behind the exercises of "Sampling and generation": temperature, top-k and top-p filters, appending to a KV cache, and the chance that pure sampling wanders into the tail.
- `transformerbook.checks.scale`: The checkers behind the exercises of "Training at scale": accumulating a gradient over slices, each rank's share of a global batch, and the memory of sharded Adam.
- `transformerbook.checks.scaling`: The checkers behind the exercises of "Scaling laws": the compute of a training run, spending a budget compute-optimally, and fitting a power law in log space.
- `transformerbook.checks.tokenization`: Checks for one BPE merge step, BPE training and byte-level decoding; each is tested against known mistakes.
- `transformerbook.checks.training`: The checkers behind the exercises of "Training a GPT": the language-model loss with padding, packing documents into context windows, and the warm-up + cosine learning-rate schedule.
- `transformerbook.checks.word2vec`: `check_negative_sampling_loss`, `check_pair_count` and `check_noise_shares`, used in the chapter "Word embeddings: skip-gram".
- `transformerbook.cli`: `transformerbook train`, `sample` and `prepare`: train a GPT on TinyShakespeare or your own corpus with a progress bar and checkpoints, on one device or many processes, resume it, and generate text from a checkpoint.
- `transformerbook.corpus`: How a corpus becomes training batches: TinyShakespeare, a corpus of any size tokenized once into memory-mapped token files, (B, T) windows with shifted targets, and packed documents (J&M 10.9, 10.9.1). A companion page of chapter 8, "Training a GPT", which trains on them.
- `transformerbook.data`: Where the book's real inputs come from, how they are verified and cached, and how to work offline.
- `transformerbook.embeddings`: Token embeddings as row selection from E, learned and sinusoidal position embeddings, and what the geometry of embedding space encodes (J&M 10.5; notes 19.2; 6.390 11.1).
- `transformerbook.environment`: Which versions of every package the book was last tested with, and how to see where your environment differs.
- `transformerbook.evaluation`: Tasks as likelihood comparisons with confidence intervals, GPT-3's data mix, deduplication and 13-gram contamination on TinyShakespeare, memorisation and extraction measured on the book's model, and its model card (J&M 10.7, 10.9.2, 10.10).
- `transformerbook.finetune`: BERT's masked characters with bidirectional attention, measured against the causal model on the same held-out characters, and a small randomly initialised head fine-tuned on the pre-trained model and on a random one, against few-shot prompts to a 1,024-character model (CS182 "Pre-training vs. fine-tuning"; MIT 6.390 §11.3.2; J&M 10.1.2).
- `transformerbook.interpret`: What the attention heads and the layers of the book's trained models actually do, measured rather than eyeballed: head scores, the in-context-learning curve, induction heads made to appear during training, and the logit lens (J&M 10.1, 10.4, 10.6; Olsson et al. 2022).
- `transformerbook.kv_cache`: Keys and values of every position so far, kept in buffers allocated ahead so that generation feeds one token per step: `LayerKVCache` for one attention layer, `KVCache` for a model, and `kv_cache_bytes` for its memory. A companion page of chapter 7, "Sampling and generation", which generates with it.
- `transformerbook.live`: Chapter 8's Shakespeare model and chapter 11's induction model exported to ONNX, run by ONNX Runtime in Python and in the web page, and checked against the package's own PyTorch functions.
- `transformerbook.lm_head`: Unembedding, weight tying, a softmax over the vocabulary, and the whole decoder-only model (J&M 10.6).
- `transformerbook.masking`: Causal masks for language modelling, padding masks for batches, and how to combine them (J&M 10.1.5).
- `transformerbook.model_cache`: Where the book's trained models live on disk: one folder per training run, named by a hash of everything that determines the run, so a model is trained once and a changed recipe never loads a stale one.
- `transformerbook.modern`: RMSNorm, rotary positions, SwiGLU, grouped-query attention and QK-norm: the five changes between GPT-2 and Llama 3 or Qwen3, each from its paper, each checked against Hugging Face, and all of them as switches of one GPT.
- `transformerbook.moe`: Replace the feed-forward network with many expert networks and a router that sends each token to only a few of them: more parameters at the same compute per token (notes 19.6; Shazeer et al. 2017; Fedus et al. 2021; Jiang et al. 2024).
- `transformerbook.multihead`: Several attention heads side by side, each with its own projections, concatenated and mixed by W_O (J&M 10.2).
- `transformerbook.posttraining`: A chat format with role and end-of-turn tokens, supervised fine-tuning with a loss mask, LoRA and DPO, from scratch on the book's own character model, on a CPU, offline
- `transformerbook.posttraining_cli`: `transformerbook finetune` runs chapter 13's supervised fine-tuning or DPO on the book's tasks or on your own JSONL file; `transformerbook chat` asks the model it makes your questions. A companion page of chapter 13, "From a language model to an assistant".
- `transformerbook.pretrained`: Hugging Face checkpoints in the book's GPT, GPT-2's and Llama's or Qwen3's: the configuration maps, the tensor maps, reading a checkpoint folder, and one `from_pretrained` for all of them.
- `transformerbook.recipes`: The settings of a training run (`TrainConfig`), how they adapt to a short run, the book's named recipes on TinyShakespeare (nanoGPT's baby GPT and its GPU model), and the losses the two CPU recipes reach over three seeds (the GPU recipe has no band yet). A companion page of chapter 8, "Training a GPT", which trains with them.
- `transformerbook.sampling`: Decoding methods (greedy, random, top-k, top-p, temperature), a batched `generate` with a KV cache, and language models as task solvers (J&M 10.7–10.8).
- `transformerbook.scale`: Where a training step's time goes and how to make it go further: tokens/s and MFU, mixed precision, `torch.compile`, gradient accumulation, data parallelism with torchrun, sharded optimizer states, and whether a loss curve is normal.
- `transformerbook.scaling`: How loss falls with parameters, data and compute: counting N and FLOPs exactly, Kaplan's and Chinchilla's power laws, compute-optimal allocation, and fitting the laws from scratch (J&M 10.9.3; notes 19.5).
- `transformerbook.tokenization`: From words and characters to byte-pair encoding: how text becomes token ids (notes 19.2.1; CS182 tokenization).
- `transformerbook.training`: From the chain rule of probability to a trained character-level Shakespeare model: the cross-entropy loss, teacher forcing, batching and packing, AdamW with warm-up and cosine decay, checkpoints that resume exactly (J&M 10.9).
- `transformerbook.validation`: The symbols, shape letters, tensor names and mask convention used throughout the book, how they map onto the textbooks' and the libraries' names, and the checks every module runs on its arguments.
- `transformerbook.word2vec`: Learning word vectors from co-occurrence: the skip-gram objective and its softmax (MIT 6.390 eqs. 11.3–11.5), negative sampling as the approximation that makes it cheap, and nearest neighbours on TinyShakespeare."""

__version__ = "0.1.0"
