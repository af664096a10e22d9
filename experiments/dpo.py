"""Chapter 13's preference tuning: DPO (Rafailov et al. 2023, eq. 7) on the book's SFT chat model, beside best-of-n.

Pairs come from the SFT model's own samples (`posttraining.chat_sft_model(0)`, 4 replies per "continue as"
training prompt, best and worst by `posttraining.metre_reward`, a programmatic reward, not a human preference).
- "best_of_n": for n in 1, 2, 4, 8, 16, the mean reward of the best of n SFT samples on held-out prompts, and its KL
  bound log n - (n-1)/n.
- "dpo": for each beta, the reward and the Monte Carlo KL(policy || SFT) of the policy's samples on the same
  held-out prompts every `--eval-every` steps, the training log, and the implicit-reward accuracy on held-out pairs
  (pairs made the same way from the validation speeches' test half).
- "dpo_norm": the per-token-mean ablation ("DPO-Norm") at beta x the mean answer length, so the implicit rewards
  have the same scale on an answer of average length; its reward, KL and reply length.
Writes transformerbook/results/dpo.json. About 5 minutes of CPU time (13 minutes on the shared 2-core machine),
once the SFT model is cached (`experiments/sft.py` trains it).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys

import torch

from transformerbook.data import RESULTS_DIR, experiment_record, load_tinyshakespeare, save_result, train_val_split
from transformerbook.posttraining import (REPLY_TOKENS, _pair_rows, best_of_n_kl, chat_sft_model, dpo, dpo_loss,
                                          generate_reply, line_conversations, metre_reward, preference_pairs,
                                          response_logprobs, reward_and_kl)

NAME = "dpo"


@torch.no_grad()
def best_of_n(model, tok, prompts, ns=(1, 2, 4, 8, 16), seed: int = 0) -> list:
    "Mean reward of the best of n samples per prompt (the first n of max(ns) samples), with the KL bound."
    m = max(ns)
    replies = generate_reply(model, tok, [p[:1] for p in prompts for _ in range(m)], max_new_tokens=REPLY_TOKENS,
                             generator=torch.Generator().manual_seed(seed))
    starts = [p[0]["content"].split(": ", 1)[1] for p in prompts]
    rewards = torch.tensor([metre_reward(starts[i // m] + tok.decode([t for t in r if t != tok.end_id]))
                            for i, r in enumerate(replies)], dtype=torch.float).view(len(prompts), m)
    return [{"n": n, "reward": rewards[:, :n].max(1).values.mean().item(), "kl_bound": best_of_n_kl(n)} for n in ns]


@torch.no_grad()
def implicit_accuracy(policy, reference, tok, pairs, beta: float, reduction: str = "sum") -> dict:
    "`dpo_loss`'s metrics (TRL's names) on held-out pairs: rewards/accuracies is CS336's implicit-reward accuracy."
    token_ids, loss_mask = _pair_rows(pairs, tok)
    n = len(pairs)
    lp, ref = (response_logprobs(m.eval(), token_ids, loss_mask, reduction) for m in (policy, reference))
    loss, metrics = dpo_loss(lp[:n], lp[n:], ref[:n], ref[n:], beta)
    return {"loss": loss.item(), **metrics}


def train_one(sft_model, tok, pairs, held, prompts, beta, steps, eval_every, lr, reduction, seed) -> dict:
    "One DPO run from the SFT model, measured every `eval_every` steps on the same held-out prompts."
    curve = []
    def measure(step, policy):
        if step % eval_every == 0:
            stats = reward_and_kl(policy, sft_model, tok, prompts, generator=torch.Generator().manual_seed(seed + 1))
            curve.append({"step": step, **stats})
            print(json.dumps({"beta": beta, "reduction": reduction, **curve[-1]}), flush=True)
    policy = copy.deepcopy(sft_model)
    log = dpo(policy, sft_model, tok, pairs, beta=beta, max_iters=steps, learning_rate=lr, reduction=reduction,
              generator=torch.Generator().manual_seed(seed), on_step=measure)
    return {"beta": beta, "reduction": reduction, "lr": lr, "steps": steps, "curve": curve,
            "train_log": log[::max(1, steps // 20)], "first_loss": log[0]["loss"],
            "held_out": implicit_accuracy(policy, sft_model, tok, held, beta, reduction)}


def run(betas=(0.1, 1.0), steps: int = 60, eval_every: int = 20, lr: float = 1e-4, n_eval: int = 150,
        n_samples: int = 4, seed: int = 0, norm_beta: float = 1.0, sft_steps: int = 300) -> dict:
    sft_model, tok = chat_sft_model(0, max_iters=sft_steps)
    _, val_text = train_val_split(load_tinyshakespeare())
    lines = line_conversations(val_text)
    g = torch.Generator().manual_seed(seed)
    pairs = preference_pairs(sft_model, tok, lines["train"], n_samples=n_samples, generator=g)
    held = preference_pairs(sft_model, tok, lines["test"], n_samples=n_samples, generator=g)
    prompts = lines["test"][:n_eval]
    _, mask = _pair_rows(pairs, tok)
    mean_tokens = mask[:, 1:].sum(-1).float().mean().item()
    out = {"n_pairs": len(pairs), "n_held_out_pairs": len(held), "n_prompts": len(prompts), "n_samples": n_samples,
           "mean_answer_tokens": mean_tokens, "examples": pairs[:4],
           "pair_rewards": [sum(p["rewards"][i] for p in pairs) / len(pairs) for i in (0, 1)],
           "best_of_n": best_of_n(sft_model, tok, prompts, seed=seed), "dpo": []}
    print(json.dumps({k: out[k] for k in ("n_pairs", "n_held_out_pairs", "best_of_n")}), flush=True)
    for beta in betas:
        out["dpo"].append(train_one(sft_model, tok, pairs, held, prompts, beta, steps, eval_every, lr, "sum", seed))
    out["dpo_norm"] = train_one(sft_model, tok, pairs, held, prompts, norm_beta * mean_tokens, steps, eval_every, lr,
                                "mean", seed)
    out["dpo_norm"]["beta_sum_equivalent"] = norm_beta
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--betas", type=float, nargs="+", default=[0.1, 1.0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--n-eval", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sft-steps", type=int, default=300, help="steps of the SFT model it starts from")
    parser.add_argument("--out", default=str(RESULTS_DIR/f"{NAME}.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    command = " ".join(["python experiments/dpo.py", *(argv if argv is not None else sys.argv[1:])])
    record = experiment_record(command, [args.seed], run(tuple(args.betas), args.steps, args.eval_every,
                                                         n_eval=args.n_eval, seed=args.seed, sft_steps=args.sft_steps))
    save_result(args.out, record)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
