"""Chapter 13: the chat format (a property test of the loss mask over 1,000 random conversations with both of the
book's tokenizers, and the rendering's round trip), SFT's refusals, LoRA against PEFT (outputs and merged weights
on every projection, K and V under grouped-query attention included), DPO's loss and metrics against TRL's on the
same log-probabilities, and the committed experiments."""
from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformerbook.data import load_result, load_tinyshakespeare
from transformerbook.finetune import IGNORE_INDEX
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.posttraining import (LORA_TARGETS, ChatTokenizer, LoRALinear, apply_lora, best_of_n_kl,
                                          chat_batch, dpo_loss, merge_lora, parse_chat, render_chat, sft_loss,
                                          sft_targets, unmerge_lora, with_chat_vocab)
from transformerbook.tokenization import CharTokenizer, TiktokenGPT2

from conftest import load_experiment

CHAR = ChatTokenizer(CharTokenizer.train(load_tinyshakespeare()))
GPT2 = ChatTokenizer(TiktokenGPT2())
TOKENIZERS = {"char": CHAR, "gpt2": GPT2}

# ---- the chat format: a property test of the loss mask ----

texts = st.text(alphabet=CHAR.base.chars, max_size=12)  # text both tokenizers encode
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": texts}),
                    min_size=1, max_size=4)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(messages, min_size=2, max_size=3), kind=st.sampled_from(["char", "gpt2"]))
def test_supervised_ids_are_exactly_the_answers(batch, kind):
    "In padded batches (500 of 2-3 conversations: >= 1,000), the counted targets are the answers and their <|end|>s."
    tok = TOKENIZERS[kind]
    token_ids, loss_mask, padding_mask = chat_batch([render_chat(m, tok) for m in batch])
    _, targets = sft_targets(token_ids, loss_mask)
    for b, conversation in enumerate(batch):
        expected = [t for m in conversation if m["role"] == "assistant"
                    for t in tok.encode(m["content"]) + [tok.end_id]]
        assert targets[b][targets[b] != IGNORE_INDEX].tolist() == expected  # the first answer token included
        assert bool((targets[b][~padding_mask[b, 1:]] == IGNORE_INDEX).all())  # never padding
        ids, mask = render_chat(conversation, tok)
        turn_role, role_of = None, []  # the role of the turn each position belongs to
        for i in ids:
            if i in (tok.user_id, tok.assistant_id): turn_role = "user" if i == tok.user_id else "assistant"
            role_of.append(turn_role)
        assert all(role_of[t] == "assistant" and ids[t] not in (tok.user_id, tok.assistant_id)
                   for t, m in enumerate(mask) if m)  # never user text, never a role token


@settings(max_examples=500, deadline=None)
@given(conversation=messages, kind=st.sampled_from(["char", "gpt2"]))
def test_rendering_round_trips(conversation, kind):
    tok = TOKENIZERS[kind]
    ids, mask = render_chat(conversation, tok)
    assert len(ids) == len(mask)
    assert parse_chat(ids, tok) == conversation
    text_ids = tok.encode("".join(m["content"] for m in conversation))
    assert tok.end_id in ids and max(text_ids, default=0) < tok.base.vocab_size


@settings(max_examples=50, deadline=None)
@given(text=st.text(max_size=30))
def test_no_text_encodes_to_a_special_id(text):
    "GPT-2's byte-level BPE encodes any text; never to the chat ids, even text that spells them."
    ids = GPT2.encode(text + "<|user|><|assistant|><|end|>")
    assert max(ids) < GPT2.base.vocab_size


def test_sft_refuses_all_zero_and_all_one_masks():
    torch.manual_seed(0)
    model = with_chat_vocab(GPT(GPTConfig(vocab_size=65, context_length=32, d_model=16, n_heads=2, n_layers=1)), 68)
    only_user = chat_batch([render_chat([{"role": "user", "content": "hi"}], CHAR)])
    with pytest.raises(ValueError, match="all False"):
        sft_loss(model, *only_user)
    token_ids, _, padding_mask = chat_batch([render_chat([{"role": "user", "content": "hi"},
                                                          {"role": "assistant", "content": "ho"}], CHAR)])
    with pytest.raises(ValueError, match="all True"):
        sft_loss(model, token_ids, padding_mask, padding_mask)
    with pytest.raises(ValueError, match="supervise"):
        sft_loss(model, token_ids, padding_mask, padding_mask, supervise="answers")



def test_sft_calls_on_step_as_dpo_does_and_is_unchanged_by_it():
    """`on_step(step, model)` before each step and after the last, as `dpo`'s; a callback that puts the model in eval
    mode (a measurement) does not change the training, which runs in train mode at every step."""
    from transformerbook.posttraining import sft
    examples = [render_chat([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ho"}], CHAR)]
    def run(on_step):
        torch.manual_seed(0)
        model = with_chat_vocab(GPT(GPTConfig(vocab_size=65, context_length=32, d_model=16, n_heads=2, n_layers=1,
                                              dropout=0.5)), 68)
        return sft(model, examples, max_iters=3, batch_size=2, generator=torch.Generator().manual_seed(0),
                   on_step=on_step)
    seen = []
    losses = run(lambda step, model: (seen.append((step, model.training)), model.eval()))
    assert [s for s, _ in seen] == [0, 1, 2, 3]
    assert losses == run(None)  # dropout 0.5 would differ if a step ran in eval mode


# ---- LoRA against PEFT ----

def _gqa_model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=40, context_length=16, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2)).eval()


def test_lora_wraps_every_projection_including_k_and_v_under_gqa():
    model = _gqa_model()
    names = apply_lora(model, rank=4)
    assert names == [f"blocks.{i}.{n}" for i in range(2) for n in ("attn.q_proj", "attn.k_proj", "attn.v_proj",
                                                                    "attn.out_proj", "mlp.fc", "mlp.proj")]
    assert model.blocks[0].attn.k_proj.base.out_features == 2 * 8  # n_kv_heads * d_head < d_model: GQA
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        f"{name}.lora_{m}" for name in names for m in "AB"}


@pytest.mark.parametrize("rank,alpha", [(4, 8.0), (2, 16.0)])
def test_lora_equals_peft_with_nonzero_b(rank, alpha):
    peft = pytest.importorskip("peft")
    ours, theirs = _gqa_model(), _gqa_model()
    original = {k: v.clone() for k, v in ours.state_dict().items()}
    theirs = peft.get_peft_model(theirs, peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(LORA_TARGETS),
                                                         init_lora_weights=False, lora_dropout=0.0))
    names = apply_lora(ours, rank=rank, alpha=alpha)
    wrapped = [n for n, m in theirs.named_modules() if isinstance(m, peft.tuners.lora.Linear)]
    assert sorted(n.removeprefix("base_model.model.") for n in wrapped) == sorted(names)  # the same layers
    for name in names:
        peft_layer = theirs.base_model.model.get_submodule(name)
        layer = ours.get_submodule(name)
        assert isinstance(layer, LoRALinear) and layer.scaling == peft_layer.scaling["default"]
        with torch.no_grad():
            layer.lora_A.copy_(peft_layer.lora_A["default"].weight)  # (r, in)
            layer.lora_B.copy_(peft_layer.lora_B["default"].weight)  # (out, r), non-zero
        assert layer.lora_B.abs().sum() > 0
    x = torch.randint(0, 40, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
        assert not torch.allclose(ours(x), GPT(ours.config).eval()(x))  # the adapter changes the output
        merge_lora(ours)
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)  # merged: the same function
        merged_theirs = theirs.merge_and_unload().state_dict()
        for name in names:
            torch.testing.assert_close(ours.get_submodule(name).base.weight, merged_theirs[f"{name}.weight"],
                                       atol=1e-6, rtol=1e-6)
        unmerge_lora(ours)
    for name in names:
        torch.testing.assert_close(ours.get_submodule(name).base.weight, original[f"{name}.weight"], atol=1e-6, rtol=0)


# ---- DPO against TRL ----

def _trl_metrics(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta, loss_type="sigmoid",
                 lengths=None):
    """TRL's DPOTrainer._compute_loss on given summed log-probs: a stub trainer (precomputed reference log-probs) and
    a stub model whose per-token log-probs put each answer's whole log-prob on its first token."""
    trl = pytest.importorskip("trl")
    B = len(policy_chosen)
    lengths = torch.ones(2 * B, dtype=torch.long) if lengths is None else lengths  # (2B,) chosen, then rejected
    L = int(lengths.max())
    logps = torch.cat([policy_chosen, policy_rejected])  # (2B,)
    mask = torch.zeros(2 * B, L + 1, dtype=torch.long)  # completion mask before the shift: column 0 is the prompt
    mask[:, 1:] = (torch.arange(L) < lengths[:, None]).long()
    per_token = torch.zeros(2 * B, L, dtype=logps.dtype)
    per_token[:, 0] = logps
    zeros = torch.zeros_like(per_token)
    out = SimpleNamespace(log_probs=per_token, entropy=zeros, mean_logits=zeros,
                          is_top1=torch.zeros(2 * B, L, dtype=torch.bool))
    model = lambda **kw: out  # noqa: E731
    acc = SimpleNamespace(device=torch.device("cpu"), gather=lambda t: t, gather_for_metrics=lambda t: t)
    stub = SimpleNamespace(model=SimpleNamespace(training=True), accelerator=acc, aux_loss_enabled=False,
                           ld_alpha=None, precompute_ref_logps=True, f_divergence_type="reverse_kl",
                           loss_types=[loss_type], loss_weights=[1.0], beta=beta, label_smoothing=0.0,
                           use_weighting=False, _metrics={"train": defaultdict(list)}, _total_train_tokens=0,
                           _tp_size=1)
    inputs = {"input_ids": torch.zeros(2 * B, L + 1, dtype=torch.long), "attention_mask": mask,
              "completion_mask": mask, "ref_chosen_logps": ref_chosen, "ref_rejected_logps": ref_rejected}
    loss = trl.DPOTrainer._compute_loss(stub, model, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in stub._metrics["train"].items()}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_dpo_loss_and_metrics_equal_trl(seed, beta):
    g = torch.Generator().manual_seed(seed)
    pc, pr, rc, rr = (-30 * torch.rand(8, generator=g, dtype=torch.float64) for _ in range(4))
    loss, metrics = dpo_loss(pc, pr, rc, rr, beta)
    trl_loss, trl_metrics = _trl_metrics(pc, pr, rc, rr, beta)
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-6)
    for name in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"):
        assert metrics[name] == pytest.approx(trl_metrics[name], abs=1e-6), name


def test_dpo_norm_equals_trls_sigmoid_norm():
    "The per-token mean (DPO-Norm) is TRL's 'sigmoid_norm': eq. 7 on log-ratios divided by the answer lengths."
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (-30 * torch.rand(6, generator=g, dtype=torch.float64) for _ in range(4))
    lc, lr = torch.randint(1, 9, (6,), generator=g), torch.randint(1, 9, (6,), generator=g)  # answer lengths
    trl_loss, _ = _trl_metrics(pc, pr, rc, rr, 0.3, "sigmoid_norm", lengths=torch.cat([lc, lr]))
    ours, _ = dpo_loss(pc / lc, pr / lr, rc / lc, rr / lr, 0.3)  # response_logprobs(..., reduction="mean")
    assert ours.item() == pytest.approx(trl_loss.item(), abs=1e-6)


def test_dpo_step_zero_is_ln2_with_zero_margin():
    lp = -20 * torch.rand(16, dtype=torch.float64)
    loss, metrics = dpo_loss(lp, lp - 1, lp, lp - 1, beta=0.1)
    assert loss.item() == pytest.approx(math.log(2), abs=1e-12) and metrics["rewards/margins"] == 0.0


def test_best_of_n_kl():
    assert best_of_n_kl(1) == 0 and best_of_n_kl(16) == pytest.approx(math.log(16) - 15 / 16)


# ---- the cached chat model ----

def test_chat_sft_model_fine_tunes_once_under_its_folders_lock(tmp_path, monkeypatch):
    """`chat_sft_model` fine-tunes inside `model_cache.run_lock` of its folder and looks for the checkpoint again once
    it holds the lock: a process that asks while another fine-tunes waits, then loads what the other wrote."""
    import threading
    from filelock import FileLock, Timeout
    import transformerbook.posttraining as posttraining
    from transformerbook.training import save_checkpoint
    monkeypatch.setenv("TRANSFORMERBOOK_CACHE", str(tmp_path/"cache"))
    torch.manual_seed(0)
    base = GPT(GPTConfig(vocab_size=65, context_length=64, d_model=16, n_heads=2, n_layers=1)).eval()
    monkeypatch.setattr(posttraining, "shakespeare_model", lambda *a, **k: (base, CHAR.base))
    calls = []

    def held(model, examples, **kwargs):
        with pytest.raises(Timeout): FileLock(lock_file, timeout=0).acquire()  # another caller would wait here
        calls.append(kwargs["max_iters"])
        return []
    monkeypatch.setattr(posttraining, "sft", held)
    key = {"base": posttraining.model_key(base.config), "seed": 0, "steps": 1, "lr": 3e-4, "batch_size": 32,
           "supervise": "assistant", "tasks": ["who", "line"]}
    lock_file = posttraining.run_dir("chat-sft", **key)/".lock"
    model, tok = posttraining.chat_sft_model(max_iters=1)
    assert calls == [1] and tok.vocab_size == 68 and (lock_file.parent/"ckpt.pt").is_file()
    posttraining.chat_sft_model(max_iters=1)  # cached: loaded, not fine-tuned again
    assert calls == [1]

    lock_file = posttraining.run_dir("chat-sft", **{**key, "steps": 2})/".lock"  # a run not in the cache
    lock_file.parent.mkdir(parents=True)
    other = FileLock(lock_file)
    other.acquire()  # "another process" is fine-tuning it
    got = []
    asker = threading.Thread(target=lambda: got.append(posttraining.chat_sft_model(max_iters=2)))
    asker.start()
    asker.join(timeout=1.0)
    assert asker.is_alive() and not got  # it waits on the lock
    save_checkpoint(lock_file.parent/"ckpt.pt", with_chat_vocab(base, 68), None, 2, tokenizer=CHAR.base)
    other.release()
    asker.join(timeout=30)
    assert calls == [1] and got[0][0].config.vocab_size == 68  # it loaded the other's checkpoint


# ---- the command line ----

@pytest.fixture
def tiny_checkpoint(tmp_path):
    from transformerbook.training import save_checkpoint
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=65, context_length=64, d_model=16, n_heads=2, n_layers=1))
    return save_checkpoint(tmp_path/"base", model, None, 0, tokenizer=CHAR.base)


def _jsonl(path, records) -> str:
    "Write `records` one JSON object a line (None: a blank line); return the path."
    import json
    path.write_text("".join("\n" if r is None else json.dumps(r) + "\n" for r in records))
    return str(path)


@pytest.mark.parametrize("lora", [[], ["--lora-rank", "2"]])
def test_cli_finetune_sft_then_dpo_on_jsonl(tmp_path, tiny_checkpoint, lora, capsys):
    from transformerbook.cli import main
    from transformerbook.training import load_model
    chats = [{"messages": [{"role": "user", "content": f"who says: line {c}"},
                           {"role": "assistant", "content": "PETRUCHIO"}]} for c in "abcd"]
    sft_out = tmp_path/"sft"
    args = ["finetune", "--method", "sft", "--data", _jsonl(tmp_path/"c.jsonl", chats), "--checkpoint",
            str(tiny_checkpoint), "--max-iters", "2", "--batch-size", "2", "--out", str(sft_out), *lora]
    assert main(args) == 0, capsys.readouterr().err
    assert "SFT: 100%" in capsys.readouterr().err  # the progress bar reached the last step (2/2)
    model, tok = load_model(sft_out)
    assert model.config.vocab_size == 68 and tok.vocab_size == 65  # the chat ids follow the base tokenizer
    card = (sft_out/"MODEL_CARD.md").read_text()
    assert "Fine-tuning (chapter 13)" in card and f"--checkpoint {sft_out} --prompt" in card  # how to ask it
    assert f"- Fine-tuned for 2 steps from `{tiny_checkpoint}` with" in card  # not "trained for 2 steps"
    assert "c.jsonl` (every record; no held-out part)." in card and "90% train" not in card
    assert "- Not stored in this checkpoint" in card and "| setting | value |" not in card  # no empty table
    pairs = [{"prompt": [{"role": "user", "content": "as TRANIO: Sir"}], "chosen": " give me leave",
              "rejected": " x"}] * 3
    args = ["finetune", "--method", "dpo", "--data", _jsonl(tmp_path/"p.jsonl", pairs), "--checkpoint",
            str(sft_out), "--max-iters", "2", "--batch-size", "2", "--out", str(tmp_path/"dpo"), "--no-progress", *lora]
    assert main(args) == 0, capsys.readouterr().err
    assert "DPO" not in capsys.readouterr().err  # --no-progress
    assert (tmp_path/"dpo"/"ckpt.pt").is_file()


@pytest.mark.parametrize("records,message", [
    ([{"messages": []}], "line 1, field messages"),
    ([{"messages": [{"role": "user", "content": "a"}]}, {"text": "b"}], "line 2: missing field 'messages'"),
    ([{"messages": [{"role": "user", "content": "{~}"}]}], "line 1, field messages: character '{'"),
    ([{"messages": [{"role": "user", "content": "a"}]}, None, {"messages": [{"role": "user", "content": "a" * 80}]}],
     "line 3, field messages: 82 tokens do not fit context_length=64"),  # <|user|> 80 <|end|>; None: a blank line
])
def test_cli_finetune_refuses_a_malformed_file(tmp_path, tiny_checkpoint, records, message, capsys):
    from transformerbook.cli import main
    args = ["finetune", "--method", "sft", "--data", _jsonl(tmp_path/"bad.jsonl", records), "--checkpoint",
            str(tiny_checkpoint), "--max-iters", "1", "--out", str(tmp_path/"out")]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path/"out"/"ckpt.pt").exists()


PAIR = {"prompt": [{"role": "user", "content": "as TRANIO: Sir"}], "chosen": " give me leave", "rejected": " x"}


@pytest.mark.parametrize("bad,message", [
    ({"rejected": "a" * 60}, "line 3, field rejected: 78 tokens do not fit context_length=64"),  # 1+14+1, 1+60+1
    ({"chosen": "caf\u00e9"}, "line 3, field chosen: character 'é'"),
    ({"prompt": [{"role": "user", "content": "a" * 70}]}, "line 3, field prompt: 72 tokens do not fit"),
    ({"rejected": ["x"]}, "line 3, field rejected: must be a str, got ['x']"),  # read_jsonl's check
    ({"prompt": "as TRANIO: Sir"}, "line 3, field prompt: messages must be a non-empty list"),
])
def test_cli_finetune_names_the_line_and_field_of_a_bad_pair(tmp_path, tiny_checkpoint, bad, message, capsys):
    "A DPO file's errors name the line in the file (blank lines counted) and which part of the pair is at fault."
    from transformerbook.cli import main
    path = _jsonl(tmp_path/"pairs.jsonl", [PAIR, None, {**PAIR, **bad}])  # the bad pair is on line 3
    args = ["finetune", "--method", "dpo", "--data", path, "--checkpoint", str(tiny_checkpoint), "--max-iters", "1",
            "--out", str(tmp_path/"out")]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path/"out"/"ckpt.pt").exists()


CHAT = {"messages": [*PAIR["prompt"], {"role": "assistant", "content": PAIR["chosen"]}]}


@pytest.mark.parametrize("method,extra,message", [
    ("sft", ["--lr", "0"], "learning_rate=0.0 must be a positive finite number"),  # was read as "no --lr"
    ("sft", ["--learning-rate", "-1"], "learning_rate=-1.0 must be a positive finite number"),  # train's spelling
    ("dpo", ["--lr", "nan"], "learning_rate=nan must be a positive finite number"),
    ("dpo", ["--max-iters", "0"], "max_iters=0 must be a positive int"),
    ("sft", ["--data", "tinyshakspeare"], "--data 'tinyshakspeare' is neither 'tinyshakespeare' nor a JSONL file"),
])
def test_cli_finetune_refuses_bad_settings(tmp_path, tiny_checkpoint, method, extra, message, capsys):
    "Each setting is refused by name with its value, and nothing is written."
    from transformerbook.cli import main
    data = _jsonl(tmp_path/"d.jsonl", [PAIR] if method == "dpo" else [CHAT])
    args = ["finetune", "--method", method, "--data", data, "--checkpoint", str(tiny_checkpoint), "--max-iters", "1",
            "--out", str(tmp_path/"out"), *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path/"out"/"ckpt.pt").exists()


def test_cli_finetune_replaces_a_run_only_with_force(tmp_path, tiny_checkpoint, capsys):
    "An --out that holds a run is refused; --force replaces it and removes its best.pt, so `load_model` reads the new."
    import shutil
    from transformerbook.cli import main
    from transformerbook.training import load_model
    out = tmp_path/"run"
    out.mkdir()
    shutil.copy(tiny_checkpoint, out/"best.pt")  # a trained run's best weights (vocabulary 65, no chat ids)
    data = _jsonl(tmp_path/"c.jsonl", [CHAT])
    args = ["finetune", "--method", "sft", "--data", data, "--checkpoint", str(tiny_checkpoint), "--max-iters", "1",
            "--batch-size", "1", "--out", str(out)]
    assert main(args) == 2
    assert "best.pt already exists" in capsys.readouterr().err and not (out/"ckpt.pt").exists()
    assert main([*args, "--force"]) == 0, capsys.readouterr().err
    assert not (out/"best.pt").exists()
    assert load_model(out)[0].config.vocab_size == 68  # the fine-tuned model, with the chat ids
    before = (out/"ckpt.pt").read_bytes()
    assert main(args) == 2 and (out/"ckpt.pt").read_bytes() == before  # its own ckpt.pt is protected too



def test_cli_chat_answers_a_finetuned_model_and_sample_refuses_it(tmp_path, tiny_checkpoint, capsys,
                                                                 monkeypatch):
    """A fine-tuned checkpoint has 3 ids its tokenizer cannot write: `sample` says so before generating and names
    `chat`, which prints what `generate_reply` samples for the same seed; a model without the chat ids is refused."""
    from transformerbook.cli import main
    from transformerbook.posttraining import generate_reply
    from transformerbook.training import load_model
    out = tmp_path/"sft"
    assert main(["finetune", "--method", "sft", "--data", _jsonl(tmp_path/"c.jsonl", [CHAT]), "--checkpoint",
                 str(tiny_checkpoint), "--max-iters", "1", "--batch-size", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["sample", "--checkpoint", str(out)]) == 2
    assert "the model has 68 ids, its tokenizer 65" in capsys.readouterr().err
    question = [{"role": "user", "content": "as TRANIO: Sir"}]
    for n in (1, 12):
        assert main(["chat", "--checkpoint", str(out), "--prompt", question[0]["content"], "--max-new-tokens", str(n),
                     "--seed", "3"]) == 0
        model, tok = load_model(out)
        chat_tok = ChatTokenizer(tok)
        reply = generate_reply(model, chat_tok, [question], n, generator=torch.Generator().manual_seed(3))[0]
        ended = reply[-1] == chat_tok.end_id
        assert capsys.readouterr().out == chat_tok.decode(reply[:-1] if ended else reply) + (
            "\n" if ended else " [cut at --max-new-tokens]\n")
    # a reply that ends: printed without its <|end|> and without the cut mark (the toy model's replies above are cut)
    import transformerbook.posttraining_cli as pcli
    ended = lambda model, chat_tok, *a, **k: [chat_tok.encode(" give me leave") + [chat_tok.end_id]]  # noqa: E731
    monkeypatch.setattr(pcli, "generate_reply", ended)
    assert main(["chat", "--checkpoint", str(out), "--prompt", "as TRANIO: Sir"]) == 0
    assert capsys.readouterr().out == " give me leave\n"
    assert main(["chat", "--checkpoint", str(tiny_checkpoint), "--prompt", "x"]) == 2
    assert "is not a chat model: its 65 ids" in capsys.readouterr().err
    assert main(["chat", "--checkpoint", str(out), "--prompt", "x", "--max-new-tokens", "0"]) == 2
    assert "max_new_tokens=0" in capsys.readouterr().err
    assert main(["chat", "--checkpoint", str(out), "--prompt", "a" * 61]) == 2  # 61 + 3 chat tokens = context 64
    assert "--prompt is 64 tokens with the chat tokens; the model reads 64" in capsys.readouterr().err
    assert main(["chat", "--checkpoint", str(out), "--prompt", "a" * 60, "--max-new-tokens", "1"]) == 0


def test_cli_chat_reads_one_question_per_line_until_an_empty_one(tmp_path, tiny_checkpoint, capsys, monkeypatch):
    """Without --prompt, `chat` answers each line of the input on its own, with one generator seeded once: the replies
    are `generate_reply`'s to each question in turn. A line that cannot be asked is refused on stderr and skipped;
    reading stops at an empty line. --top-k reaches the sampler: top-k 1 is greedy decoding."""
    import io
    import sys
    from transformerbook.cli import main
    from transformerbook.posttraining import generate_reply
    from transformerbook.training import load_model
    out = tmp_path/"sft"
    assert main(["finetune", "--method", "sft", "--data", _jsonl(tmp_path/"c.jsonl", [CHAT]), "--checkpoint",
                 str(tiny_checkpoint), "--max-iters", "1", "--batch-size", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    lines = ["who says: Sir", "a" * 61, "as TRANIO: Madam", "", "who says: never asked"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["chat", "--checkpoint", str(out), "--max-new-tokens", "6", "--seed", "3"]) == 0
    got = capsys.readouterr()
    model, tok = load_model(out)
    chat_tok, gen = ChatTokenizer(tok), torch.Generator().manual_seed(3)
    replies = [generate_reply(model, chat_tok, [[{"role": "user", "content": q}]], 6, generator=gen)[0]
               for q in (lines[0], lines[2])]  # the same generator, in turn
    text = lambda r: chat_tok.decode(r[:-1]) if r[-1] == chat_tok.end_id else chat_tok.decode(r) + \
        " [cut at --max-new-tokens]"  # noqa: E731
    assert got.out == "".join(text(r) + "\n" for r in replies)
    assert "one question per line" in got.err and "the question is 64 tokens with the chat tokens" in got.err
    greedy = []
    for extra in (["--temperature", "0"], ["--top-k", "1", "--seed", "5"]):
        assert main(["chat", "--checkpoint", str(out), "--prompt", "who says: Sir", "--max-new-tokens", "8",
                     *extra]) == 0
        greedy.append(capsys.readouterr().out)
    assert greedy[0] == greedy[1]
    assert main(["chat", "--checkpoint", str(out), "--prompt", "x", "--top-p", "1.5"]) == 2
    assert "top_p" in capsys.readouterr().err


def test_chat_reads_a_terminal_through_input_with_a_prompt(monkeypatch):
    "At a terminal `chat` reads with `input('> ')` (line editing, a visible prompt); Ctrl-D ends like an empty line."
    import builtins
    import io
    import sys
    from transformerbook.posttraining_cli import _read_line
    tty = io.StringIO()
    tty.isatty = lambda: True
    monkeypatch.setattr(sys, "stdin", tty)
    typed, prompts = iter(["  who says: Sir  "]), []

    def fake_input(prompt):
        prompts.append(prompt)
        try: return next(typed)
        except StopIteration: raise EOFError from None
    monkeypatch.setattr(builtins, "input", fake_input)
    assert (_read_line(), _read_line(), prompts) == ("who says: Sir", "", ["> ", "> "])


# ---- the experiments ----

def _load_experiment(name: str):
    return load_experiment(name)


def test_sft_result_is_complete():
    committed = load_result("sft")
    assert {"command", "seeds", "created", "results"} <= set(committed)
    res = committed["results"]
    for method in ("masked", "unmasked"):
        assert sorted(r["seed"] for r in res["runs"] if r["method"] == method) == [0, 1, 2]
    assert any(r["method"] == "lora" for r in res["runs"])
    for run in res["runs"] + [res["zero_shot"]]:
        assert run["low"] <= run["accuracy"] <= run["high"] and run["n"] == res["n_test"]
    shares = [row["share"] for row in res["lora_table"]]
    assert shares[0] == 1.0 and shares[1:] == sorted(shares[1:])  # full, then rank 1, 2, ...
    assert next(row for row in res["lora_table"] if row["rank"] == 8)["share"] < 0.1
    assert all(row["optimizer_bytes"] >= 8 * row["trainable"] for row in res["lora_table"])  # two fp32 moments


def test_dpo_result_is_complete():
    res = load_result("dpo")["results"]
    for run in res["dpo"] + [res["dpo_norm"]]:
        assert run["first_loss"] == pytest.approx(math.log(2), abs=1e-6)  # step 0: policy == reference
        assert run["curve"][0]["step"] == 0 and abs(run["curve"][0]["kl"]) < 1e-4
        assert 0 <= run["held_out"]["rewards/accuracies"] <= 1
    for b in res["best_of_n"]:
        assert b["kl_bound"] == pytest.approx(best_of_n_kl(b["n"]))
    rewards = [b["reward"] for b in res["best_of_n"]]
    assert rewards == sorted(rewards)  # the best of more samples is never worse (the same samples, nested)


@pytest.mark.slow
def test_sft_experiment_slice_reproduces():
    "The zero-shot baseline (no training: the cached chapter-8 model) gives the committed accuracy again."
    committed = load_result("sft")["results"]
    torch.set_num_threads(1)
    again = _load_experiment("sft").run(seeds=(), methods=(), tables=True)
    assert again["zero_shot"] == committed["zero_shot"]
    assert again["lora_table"] == committed["lora_table"]
