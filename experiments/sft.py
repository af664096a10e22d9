"""Chapter 13's supervised fine-tuning measurements on the book's character model (chapter 8's baby GPT).

- "who": the "who says" task of `posttraining.speaker_conversations` (validation split, four speakers, split by
  speech as chapter 11b): held-out 4-way accuracy with 95% Wilson intervals of
  - the pre-trained model zero-shot (chapter 11a's likelihood scoring: the name after which the piece is most
    likely, log P(piece | `NAME:\\n`); scoring the name too picks the shortest name),
  - SFT with the loss mask (`chat_sft_model`, 300 steps, 3 seeds), the same without the mask (`supervise="all"`,
    equal steps), and LoRA SFT (rank 8, alpha 16, every projection of every block, lr 1e-3, equal steps);
  - and, for the held-out "continue as" lines, the nats per answer token of each model.
- "lora_table": rank x trainable share x AdamW state bytes on the chat model, beside full fine-tuning.
Writes transformerbook/results/sft.json. About 70 CPU seconds per run of 300 steps (nine runs, plus the tables),
about 12 minutes of CPU time in all.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from transformerbook.data import RESULTS_DIR, experiment_record, load_tinyshakespeare, save_result, train_val_split
from transformerbook.evaluation import accuracy_with_ci, sequence_log_likelihood
from transformerbook.posttraining import (ChatTokenizer, apply_lora, chat_batch, chat_sft_model, classify_speaker,
                                          line_conversations, merge_lora, optimizer_state_bytes, render_chat,
                                          response_logprobs, sft, sft_examples, speaker_conversations,
                                          with_chat_vocab)
from transformerbook.training import shakespeare_model

NAME = "sft"


@torch.no_grad()
def zero_shot(base, tok, who) -> torch.Tensor:
    "The pre-trained model's zero-shot choice: the name under which the piece is most likely, log P(piece | NAME:)."
    rows = []
    for messages, _ in who["test"]:
        piece = messages[0]["content"].removeprefix("who says: ")
        for name in who["names"]:
            prefix, cand = tok.encode(f"\n\n{name}:\n"), tok.encode(piece)  # score the piece given the name
            rows.append((prefix + cand, [False] * len(prefix) + [True] * len(cand)))
    token_ids, loss_mask, _ = chat_batch(rows)
    return sequence_log_likelihood(base, token_ids, loss_mask).view(len(who["test"]), -1).argmax(-1)


@torch.no_grad()
def line_nats(model, chat_tok, lines) -> float:
    "Mean nats per answer token (characters and <|end|>) of the held-out 'continue as' answers."
    token_ids, loss_mask, _ = chat_batch([render_chat(m, chat_tok) for m in lines["test"]])
    return (-response_logprobs(model.eval(), token_ids, loss_mask).sum() / loss_mask[:, 1:].sum()).item()


def lora_sft(seed: int, steps: int, rank: int = 8, lr: float = 1e-3):
    "LoRA SFT from the pre-trained model, the same data and steps as `chat_sft_model`; returns the merged model."
    base, tok = shakespeare_model("char", progress=False)
    chat_tok = ChatTokenizer(tok)
    model = with_chat_vocab(base, chat_tok.vocab_size)
    apply_lora(model, rank=rank, alpha=2.0 * rank)
    sft(model, sft_examples(train_val_split(load_tinyshakespeare())[1], chat_tok), max_iters=steps, learning_rate=lr,
        generator=torch.Generator().manual_seed(seed))
    merge_lora(model)
    return model, chat_tok


def lora_table(ranks=(1, 2, 4, 8, 16, 32)) -> list:
    "Trainable parameters and AdamW state bytes for full fine-tuning and for LoRA at each rank."
    base, tok = shakespeare_model("char", progress=False)
    full = with_chat_vocab(base, tok.vocab_size + 3)
    total = sum(p.numel() for p in full.parameters())
    rows = [{"rank": None, "trainable": total, "share": 1.0, "optimizer_bytes": optimizer_state_bytes(full)}]
    for r in ranks:
        model = with_chat_vocab(base, tok.vocab_size + 3)
        apply_lora(model, rank=r, alpha=2.0 * r)
        n = sum(p.numel() for p in model.parameters() if p.requires_grad)
        rows.append({"rank": r, "trainable": n, "share": n / total, "optimizer_bytes": optimizer_state_bytes(model)})
    return rows


def run(seeds=(0, 1, 2), steps: int = 300, methods=("masked", "unmasked", "lora"), tables: bool = True) -> dict:
    base, tok = shakespeare_model("char", progress=False)
    chat_tok = ChatTokenizer(tok)
    _, val_text = train_val_split(load_tinyshakespeare())
    who, lines = speaker_conversations(val_text), line_conversations(val_text)
    answers = torch.tensor([y for _, y in who["test"]])
    counts = torch.bincount(answers, minlength=len(who["names"]))
    out = {"names": who["names"], "n_train": len(who["train"]), "n_test": len(who["test"]),
           "n_line_train": len(lines["train"]), "n_line_test": len(lines["test"]), "test_counts": counts.tolist(),
           "majority": counts.max().item() / len(answers), "uniform": 1 / len(who["names"]), "steps": steps,
           "runs": []}
    if tables:
        out["zero_shot"] = accuracy_with_ci(zero_shot(base, tok, who), answers)
        out["lora_table"] = lora_table()
        out["base_line_nats"] = line_nats(with_chat_vocab(base, chat_tok.vocab_size), chat_tok, lines)
        print(json.dumps(out["zero_shot"]), flush=True)
    for method in methods:
        for seed in seeds:
            t0, c0 = time.time(), time.process_time()
            if method == "lora": model, _ = lora_sft(seed, steps)
            else: model, _ = chat_sft_model(seed, max_iters=steps,
                                            supervise="assistant" if method == "masked" else "all")
            run = {"method": method, "seed": seed, "wall_s": time.time() - t0, "cpu_s": time.process_time() - c0,
                   **accuracy_with_ci(classify_speaker(model, chat_tok, who["test"], who["names"]), answers),
                   "line_nats": line_nats(model, chat_tok, lines)}
            print(json.dumps(run), flush=True)
            out["runs"].append(run)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--methods", nargs="+", default=["masked", "unmasked", "lora"])
    parser.add_argument("--no-tables", action="store_true", help="skip the zero-shot baseline and the LoRA table")
    parser.add_argument("--out", default=str(RESULTS_DIR/f"{NAME}.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    command = " ".join(["python experiments/sft.py", *(argv if argv is not None else sys.argv[1:])])
    record = experiment_record(command, args.seeds,
                               run(tuple(args.seeds), args.steps, tuple(args.methods), not args.no_tables))
    save_result(args.out, record)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
