#!/usr/bin/python3
"""Random-weight checkpoints written by transformers 5's save_pretrained, and transformers' own
losses on fixed token sequences: the reference hlp-eval is tested against (tests/hf/CMakeLists.txt,
hf_transformers5_*). Runs where transformers 5 is installed: the Debian sid root
(tools/debian-root.sh; python3-transformers 5.12.1, python3-torch 2.14.1, CPU):

    python3 tests/hf/transformers5/make_reference.py OUTDIR

OUTDIR/<name>/config.json, model.safetensors   the checkpoint, as save_pretrained wrote it
OUTDIR/<name>/tokens.txt                        the sequences, one a line (hlp-eval --tokens)
OUTDIR/<name>/reference.json                    transformers' loss of each sequence (fp32
                                                weights, its `loss`), the same model's loss in
                                                fp64 (its logits in float64, cross-entropy
                                                here: transformers' loss casts logits to float32),
                                                its versions, and the model's fields
OUTDIR/<name>/train_tokens.txt                  (mixture-of-experts models) the training batch,
                                                2 sequences of 65 tokens, one a line
(The fp64 model still rounds to float32 where transformers casts explicitly: its RMSNorms, the rope
cos/sin tables, for Qwen3.5 / Qwen3-Next the delta rule and the gated norm, and for Qwen3-Next's
MoE layers the router's softmax, top-k and renormalisation: the routing weights.)
The committed copy is tests/hf/transformers5/fixtures/ (each checkpoint under 2 MB): ctest reads it,
so CI needs no sid root. Regenerate it only with a reason (a new transformers release, a new
model), and say which. The models are made in the order of MODELS from one seed: a new model goes
at the end, so that the ones before it come out byte-identical.

The Qwen3.5 / Qwen3-Next models (Gated DeltaNet "linear_attention" layers and gated
"full_attention" layers) run transformers' torch path (torch_chunk_gated_delta_rule, conv1d by
F.conv1d): the root has neither fla nor causal-conv1d, and make() refuses to go on if it had.
Their 1-D parameters, which transformers initialises to constants, are drawn at random here
(see perturb), so that the norm conventions, dt_bias and A_log are all exercised. qwen3_5_vl is
the vision-language wrapper (Qwen3_5ForConditionalGeneration, model_type qwen3_5: weights under
model.language_model.* and model.visual.*, lm_head); its losses are on text-only input_ids.

qwen3_next_moe_a / qwen3_next_moe_b are Qwen3-Next with sparse mixture-of-experts layers
(Qwen3NextSparseMoeBlock; a layer is sparse when it is not in mlp_only_layers and
(layer + 1) % decoder_sparse_step == 0: layers 0, 2, 3 of a, 1 and 3 of b). MoE adds no 1-D
parameter (router mlp.gate.weight [E, D], mlp.shared_expert_gate.weight [1, D], the experts' fused
3-D gate_up_proj [E, 2I, D] / down_proj [E, D, I] are all scaled by 5 with the other >= 2-D ones),
so perturb is unchanged. save_pretrained writes the experts one by one, as the Hub checkpoints do
(mlp.experts.<e>.gate_proj / up_proj / down_proj.weight: it reverts transformers 5's fusion).
Their reference.json also has sparse_layers, experts_implementation (fp32: transformers' default
grouped_mm; fp64: eager, as torch's CPU grouped_mm takes no float64) and "train": one training-mode
forward (model.train(), labels = input_ids, output_router_logits=True) on train_tokens.txt (a
generator seeded by crc32(name)): fp32 transformers' loss (cross-entropy + router_aux_loss_coef *
aux_loss), aux_loss and the cross-entropy alone; fp64 the cross-entropy of float64 logits taken
here, transformers' float64 aux_loss and their sum; and per sparse layer the tokens each expert
gets (top num_experts_per_tok of the softmax of its router logits, fp32 run). The per-sequence
tokens.txt comes from a generator seeded by len(name), so all three qwen3_next fixtures (16
characters each) share theirs.
"""
import json
import os
import sys
import zlib

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

torch.set_num_threads(1)
torch.manual_seed(0)

# Each model: (name, model_type, fields). Small shapes; T not a multiple of 64, several chunks.
MODELS = [
    ("qwen2_v5", "qwen2", dict(vocab_size=384, hidden_size=64, intermediate_size=96,
                               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=1024, tie_word_embeddings=False,
                               rope_theta=50000.0, rms_norm_eps=1e-6)),
    ("qwen2_v5_tied", "qwen2", dict(vocab_size=300, hidden_size=48, intermediate_size=80,
                                    num_hidden_layers=2, num_attention_heads=6,
                                    num_key_value_heads=2, max_position_embeddings=1024,
                                    tie_word_embeddings=True, rms_norm_eps=1e-5)),
    # rope_parameters in the v5 dialect: transformers then also saves a stale top-level
    # "partial_rotary_factor": 0.25 (its default); rope_parameters' 0.5 is the one it uses.
    # 4 value heads on 2 key heads; conv width 3.
    ("qwen3_5_text_a", "qwen3_5_text", dict(
        vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=24, linear_conv_kernel_dim=3,
        rope_parameters=dict(rope_type="default", rope_theta=50000.0, partial_rotary_factor=0.5,
                             mrope_interleaved=True, mrope_section=[11, 11, 10]),
        max_position_embeddings=1024, tie_word_embeddings=False, rms_norm_eps=1e-6)),
    # tied; default conv width (4), partial_rotary_factor (0.25) and rope_theta (10000); layer_types
    # from full_attention_interval 3 (linear, linear, full); one key head per value head; eps 1e-5
    ("qwen3_5_text_tied", "qwen3_5_text", dict(
        vocab_size=300, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
        full_attention_interval=3, num_attention_heads=3, num_key_value_heads=1, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=12, max_position_embeddings=1024, tie_word_embeddings=True,
        rms_norm_eps=1e-5)),
    # the vision-language wrapper, text-only input; the smallest vision tower transformers takes
    ("qwen3_5_vl", "qwen3_5", dict(
        text_config=dict(
            vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
            layer_types=["linear_attention", "full_attention", "linear_attention"],
            num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=16, max_position_embeddings=1024, tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0,
                                 partial_rotary_factor=0.25, mrope_interleaved=True,
                                 mrope_section=[11, 11, 10]),
            rms_norm_eps=1e-6),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=1,
                           patch_size=2, temporal_patch_size=1, spatial_merge_size=1,
                           out_hidden_size=32, num_position_embeddings=4),
        image_token_id=252, video_token_id=253, vision_start_token_id=254,
        vision_end_token_id=255, tie_word_embeddings=False)),
    # Qwen3-Next with every MLP dense (mlp_only_layers lists every layer; num_experts keeps its
    # default 512, so the config names experts that no layer has); fused in_proj_qkvz / in_proj_ba
    # with 3 value heads a key head; legacy-dialect rope_theta / partial_rotary_factor arguments
    ("qwen3_next_dense", "qwen3_next", dict(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        mlp_only_layers=[0, 1, 2, 3], full_attention_interval=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16,
        linear_value_head_dim=8, rope_theta=1000000.0, partial_rotary_factor=0.5,
        max_position_embeddings=1024, tie_word_embeddings=False, rms_norm_eps=1e-6)),
    # Qwen3-Next with sparse mixture-of-experts MLPs (Qwen3NextSparseMoeBlock: router, 8 routed
    # experts of top 2 renormalised, a shared expert scaled by sigmoid(shared_expert_gate)); layer
    # 1 dense by mlp_only_layers, so the sparse layers are 0, 2, 3 (one full-attention layer, 3)
    ("qwen3_next_moe_a", "qwen3_next", dict(
        vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        full_attention_interval=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
        moe_intermediate_size=32, shared_expert_intermediate_size=48, mlp_only_layers=[1],
        decoder_sparse_step=1, router_aux_loss_coef=0.01, rope_theta=1000000.0,
        partial_rotary_factor=0.5, max_position_embeddings=1024, tie_word_embeddings=False,
        rms_norm_eps=1e-6)),
    # 6 experts, top 3 not renormalised; decoder_sparse_step 2 and no mlp_only_layers: sparse where
    # (layer + 1) % 2 == 0, so layers 1 and 3 (both full attention), 0 and 2 dense
    ("qwen3_next_moe_b", "qwen3_next", dict(
        vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        full_attention_interval=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, num_experts=6, num_experts_per_tok=3, norm_topk_prob=False,
        moe_intermediate_size=32, shared_expert_intermediate_size=48, mlp_only_layers=[],
        decoder_sparse_step=2, router_aux_loss_coef=0.02, rope_theta=1000000.0,
        partial_rotary_factor=0.5, max_position_embeddings=1024, tie_word_embeddings=False,
        rms_norm_eps=1e-6)),
]
# the auto class of each model_type (the others: AutoModelForCausalLM)
AUTO = {"qwen3_5": AutoModelForImageTextToText}
LENGTHS = [2, 17, 150, 201]  # tokens per sequence: T = 1, 16, 149, 200
TRAIN_BATCH, TRAIN_LENGTH = 2, 65  # the MoE models' training batch: 2 sequences, T = 64


def perturb(model):
    """Qwen3.5 / Qwen3-Next: transformers sets its 1-D parameters to constants (the (1 + w) RMSNorms
    to 0, the gated norm to 1, dt_bias to 1) and A_log to log U(0, 16), which makes exp(g) ~ 0: every
    linear-attention head would forget at once. Draw them instead: norms 0.1 N(0, 1) about their
    init, dt_bias 1 + 0.5 N(0, 1), A = exp(A_log) in U(0.02, 2) (slow and fast decay)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() != 1 or ".visual." in n:
                continue
            if n.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.02, 2.0).log())
            elif n.endswith("dt_bias"):
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
            elif n.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
            else:
                raise ValueError(f"perturb: unexpected 1-D parameter {n}")


def make(model_type, cfg):
    auto = AUTO.get(model_type, AutoModelForCausalLM)
    model = auto.from_config(cfg, dtype=torch.float32)
    if model_type.startswith("qwen3"):
        # the reference is transformers' torch path (torch_chunk_gated_delta_rule), not fla's kernels
        deltanets = [m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet")]
        assert deltanets, model_type
        for m in deltanets:
            mod = sys.modules[type(m).__module__]
            assert not mod.is_fast_path_available and m.causal_conv1d_fn is None, model_type
            assert m.chunk_gated_delta_rule is mod.torch_chunk_gated_delta_rule, model_type
            assert type(m.norm).__name__.endswith("RMSNormGated"), model_type
    return model


def sparse_layers(cfg):
    """transformers' rule (Qwen3NextDecoderLayer): layer i is a Qwen3NextSparseMoeBlock when i is
    not in mlp_only_layers and num_experts > 0 and (i + 1) % decoder_sparse_step == 0."""
    if getattr(cfg, "model_type", None) != "qwen3_next":
        return []
    return [i for i in range(cfg.num_hidden_layers) if i not in cfg.mlp_only_layers
            and cfg.num_experts > 0 and (i + 1) % cfg.decoder_sparse_step == 0]


def train_reference(name, cfg, model, model64, d):
    """The MoE models' training-mode reference: one batch of TRAIN_BATCH sequences of TRAIN_LENGTH
    tokens (train_tokens.txt; a generator seeded by crc32(name)), labels = input_ids,
    output_router_logits=True, model.train(). fp32: transformers' loss (cross-entropy +
    router_aux_loss_coef * aux_loss), its aux_loss, and the cross-entropy alone (its
    loss_function on the same logits). fp64: the cross-entropy of the float64 logits here
    (transformers' would cast them to float32), transformers' aux_loss (float64: its
    load_balancing_loss_func softmaxes in the logits' dtype) and their sum. And the tokens each
    expert of each sparse layer gets in the fp32 run (top num_experts_per_tok of the softmax of its
    router logits, which are recorded in layer order)."""
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    batch = torch.randint(0, cfg.vocab_size, (TRAIN_BATCH, TRAIN_LENGTH), generator=gen)
    with open(os.path.join(d, "train_tokens.txt"), "w") as f:
        for s in batch:
            f.write(" ".join(str(int(t)) for t in s) + "\n")
    rng = torch.get_rng_state()
    layers = sparse_layers(cfg)
    coef = cfg.router_aux_loss_coef
    out = {}
    for key, m in (("fp32", model), ("fp64", model64)):
        m.train()
        with torch.no_grad():
            o = m(input_ids=batch, labels=batch, output_router_logits=True)
        m.eval()
        assert len(o.router_logits) == len(layers), (name, len(o.router_logits), layers)
        if key == "fp32":
            ce = m.loss_function(o.logits, batch, cfg.vocab_size)
            assert float(o.loss) == float(ce + coef * o.aux_loss), name
            routed = {}
            for i, logits in zip(layers, o.router_logits):
                probs = torch.nn.functional.softmax(logits, dtype=torch.float, dim=-1)
                top = torch.topk(probs, cfg.num_experts_per_tok, dim=-1).indices
                routed[str(i)] = torch.bincount(top.reshape(-1), minlength=cfg.num_experts).tolist()
            out[key] = {"loss": float(o.loss), "aux_loss": float(o.aux_loss), "ce_loss": float(ce)}
        else:
            assert o.logits.dtype == torch.float64 and o.aux_loss.dtype == torch.float64, name
            ce = torch.nn.functional.cross_entropy(o.logits[:, :-1].reshape(-1, cfg.vocab_size),
                                                   batch[:, 1:].reshape(-1))
            out[key] = {"loss": float(ce + coef * o.aux_loss), "aux_loss": float(o.aux_loss),
                        "ce_loss": float(ce)}
    assert torch.equal(torch.get_rng_state(), rng), name  # the models after this one unchanged
    return {"batch": TRAIN_BATCH, "length": TRAIN_LENGTH, "router_aux_loss_coef": coef,
            "loss_fp32": out["fp32"], "loss_fp64": out["fp64"], "tokens_per_expert": routed}


def main(out):
    summary = {}
    for name, model_type, fields in MODELS:
        cfg = AutoConfig.for_model(model_type, **fields)
        model = make(model_type, cfg)
        # transformers initialises with std 0.02: scale up so the losses are far from log(V)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.mul_(5.0)
        if model_type.startswith("qwen3"):
            perturb(model)
        model.eval()
        d = os.path.join(out, name)
        model.save_pretrained(d)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(d, extra)):
                os.remove(os.path.join(d, extra))
        gen = torch.Generator().manual_seed(len(name))
        vocab = cfg.get_text_config().vocab_size
        seqs = [torch.randint(0, vocab, (n,), generator=gen) for n in LENGTHS]
        with open(os.path.join(d, "tokens.txt"), "w") as f:
            for s in seqs:
                f.write(" ".join(str(int(t)) for t in s) + "\n")
        losses32, losses64 = [], []
        auto = AUTO.get(model_type, AutoModelForCausalLM)
        moe = sparse_layers(cfg)
        assert moe == [i for i, l in enumerate(model.model.layers) if type(l.mlp).__name__ ==
                       "Qwen3NextSparseMoeBlock"] if model_type == "qwen3_next" else not moe, name
        # transformers' default experts_implementation, grouped_mm, takes no float64 on the CPU
        # (torch._grouped_mm): the fp64 model runs the eager loop over experts
        extra = dict(experts_implementation="eager") if moe else {}
        model64 = auto.from_pretrained(d, dtype=torch.float64, **extra).eval()
        with torch.no_grad():
            for s in seqs:
                ids = s.unsqueeze(0)
                losses32.append(float(model(input_ids=ids, labels=ids).loss))
                # transformers' loss casts the logits to float32: the fp64 loss is taken here
                logits = model64(input_ids=ids).logits[0, :-1]
                losses64.append(float(torch.nn.functional.cross_entropy(logits, ids[0, 1:])))
        ref = {"transformers": transformers.__version__, "torch": torch.__version__,
               "model_type": model_type, "fields": fields, "lengths": LENGTHS,
               "loss_fp32": losses32, "loss_fp64": losses64}
        if moe:
            ref["sparse_layers"] = moe
            ref["experts_implementation"] = {"fp32": model.config._experts_implementation,
                                             "fp64": model64.config._experts_implementation}
            ref["train"] = train_reference(name, cfg, model, model64, d)
            print(name, "train", ref["train"])
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
        summary[name] = losses32
        print(name, "fp32", losses32, "fp64", losses64)
    return summary


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures")
