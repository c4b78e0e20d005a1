"""The HLP hybrid LM (src/model) re-written in plain PyTorch, op for op, for the peer benchmark.

Same architecture, same parameter names (so the weights exported by hlp-export-init load by
name), same order of floating-point operations where it matters:
  RMSNorm, SwiGLU, causal attention with RoPE / GQA / sliding window, Gated DeltaNet (chunked
  core, docs/model-math.md) in both variants (gated_deltanet, jetblock), LoRALinear with
  scale alpha / r, tied embeddings, loss = mean cross entropy.

Shapes in comments: B batch, T time, D hidden, H heads, dk / dv head dims, V vocab.
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------
# Layers (src/model/layers.cpp, lora_linear.cpp)

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        inv_rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * inv_rms * self.weight


class LoRALinear(nn.Module):
    """y = x W^T + b + (alpha / r) * (x A^T) B^T. Adapters exist only when rank > 0."""

    def __init__(self, d_in, d_out, bias, rank=0, alpha=0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None
        self.rank = rank
        self.scale = alpha / rank if rank > 0 else 0.0
        if rank > 0:
            self.lora_A = nn.Parameter(torch.empty(rank, d_in))
            self.lora_B = nn.Parameter(torch.zeros(d_out, rank))

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        if self.rank > 0:
            y = y + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)
        return y


class SwiGLU(nn.Module):
    def __init__(self, D, mlp, make_linear, prefix):
        super().__init__()
        self.gate_proj = make_linear(prefix + "gate_proj", D, mlp, False)
        self.up_proj = make_linear(prefix + "up_proj", D, mlp, False)
        self.down_proj = make_linear(prefix + "down_proj", mlp, D, False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# ---------------------------------------------------------------------------------------------
# Attention (src/model/attention.cpp)

def apply_rope(x, theta):
    """x: [B, H, T, hd]; the two halves of hd share frequencies."""
    T, hd = x.size(2), x.size(3)
    inv_freq = torch.pow(theta, -torch.arange(0, hd, 2, dtype=torch.float64) / float(hd))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], -1)  # [T, hd]
    cos = angles.cos().to(device=x.device, dtype=x.dtype)
    sin = angles.sin().to(device=x.device, dtype=x.dtype)
    h0, h1 = x.chunk(2, -1)
    rotated = torch.cat([-h1, h0], -1)
    return x * cos + rotated * sin


def causal_window_mask(T, window, device=None):
    pos = torch.arange(T, device=device)
    distance = pos.unsqueeze(1) - pos.unsqueeze(0)  # [T, T]: i - j
    allowed = distance >= 0
    if window > 0:
        allowed = allowed & (distance < window)
    return allowed


class CausalSelfAttention(nn.Module):
    # "naive": scores [B, H, T, T] materialised, masked softmax (op for op as HLP's reference
    # kernel); "sdpa": torch's scaled_dot_product_attention (flash / memory-efficient kernels on
    # CUDA; is_causal for full attention, a boolean band mask for a sliding window), what a
    # PyTorch user runs on a GPU. bench/peer/peer_step.py sets it.
    impl = "naive"

    def __init__(self, c, window, make_linear, prefix):
        super().__init__()
        self.head_dim = c["attn_head_dim"]
        self.window = window
        self.rope_theta = c["rope_theta"]
        qw = c["attn_heads"] * c["attn_head_dim"]
        kvw = c["attn_kv_heads"] * c["attn_head_dim"]
        bias = c["attn_qkv_bias"]
        self.q_proj = make_linear(prefix + "q_proj", c["hidden"], qw, bias)
        self.k_proj = make_linear(prefix + "k_proj", c["hidden"], kvw, bias)
        self.v_proj = make_linear(prefix + "v_proj", c["hidden"], kvw, bias)
        self.o_proj = make_linear(prefix + "o_proj", qw, c["hidden"], False)

    def forward(self, x):
        B, T = x.size(0), x.size(1)
        hd = self.head_dim
        q = self.q_proj(x).view(B, T, -1, hd).transpose(1, 2)  # [B, H, T, hd]
        k = self.k_proj(x).view(B, T, -1, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, -1, hd).transpose(1, 2)
        heads, kv_heads = q.size(1), k.size(1)
        q = apply_rope(q, self.rope_theta)
        k = apply_rope(k, self.rope_theta)
        if heads != kv_heads:
            k = k.repeat_interleave(heads // kv_heads, 1)
            v = v.repeat_interleave(heads // kv_heads, 1)
        if self.impl == "sdpa":
            if self.window > 0:
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=causal_window_mask(T, self.window, q.device))
            else:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(out.transpose(1, 2).reshape(B, T, heads * hd))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)  # [B, H, T, T]
        allowed = causal_window_mask(T, self.window, q.device)
        scores = scores.masked_fill(allowed.logical_not(), float("-inf"))
        probs = torch.softmax(scores, -1)
        out = torch.matmul(probs, v)  # [B, H, T, hd]
        out = out.transpose(1, 2).reshape(B, T, heads * hd)
        return self.o_proj(out)


# ---------------------------------------------------------------------------------------------
# Gated DeltaNet (src/model/gdn_core.cpp, gated_deltanet.cpp)

def gated_delta_rule_chunked(q_in, k_in, v_in, beta_in, g_in, C):
    """q, k [B, T, H, dk]; v [B, T, H, dv]; beta, g [B, T, H] -> o [B, T, H, dv] (S_0 = 0)."""
    B, T, H = q_in.shape[0], q_in.shape[1], q_in.shape[2]
    dv = v_in.size(3)
    pad = (C - T % C) % C
    N = (T + pad) // C

    def to_chunks(x):  # [B, T, H, d] -> [B, H, N, C, d]
        y = x.transpose(1, 2)
        if pad > 0:
            y = F.pad(y, (0, 0, 0, pad))
        return y.reshape(B, H, N, C, x.size(3))

    def gates_to_chunks(x):  # [B, T, H] -> [B, H, N, C]
        y = x.transpose(1, 2)
        if pad > 0:
            y = F.pad(y, (0, pad))
        return y.reshape(B, H, N, C)

    q, k, v = to_chunks(q_in), to_chunks(k_in), to_chunks(v_in)
    beta, g = gates_to_chunks(beta_in), gates_to_chunks(g_in)
    gamma = g.cumsum(-1)  # [B, H, N, C]
    dev = q_in.device
    lower_incl = torch.ones(C, C, dtype=torch.bool, device=dev).tril()
    lower_strict = torch.ones(C, C, dtype=torch.bool, device=dev).tril(-1)
    D = (gamma.unsqueeze(-1) - gamma.unsqueeze(-2)).masked_fill(
        lower_incl.logical_not(), float("-inf")).exp()  # [B, H, N, C, C]
    kk = torch.matmul(k, k.transpose(-1, -2))
    A = (beta.unsqueeze(-1) * kk * D).masked_fill(lower_strict.logical_not(), 0.0)
    I_plus_A = A + torch.eye(C, dtype=q.dtype, device=dev)
    W = torch.linalg.solve_triangular(I_plus_A, (beta * gamma.exp()).unsqueeze(-1) * k,
                                      upper=False, left=True, unitriangular=True)
    U = torch.linalg.solve_triangular(I_plus_A, beta.unsqueeze(-1) * v,
                                      upper=False, left=True, unitriangular=True)
    q_decayed = q * gamma.exp().unsqueeze(-1)
    qk_decayed = torch.matmul(q, k.transpose(-1, -2)) * D
    gamma_last = gamma.select(-1, C - 1)  # [B, H, N]
    k_to_end = k * (gamma_last.unsqueeze(-1) - gamma).exp().unsqueeze(-1)
    chunk_decay = gamma_last.exp().unsqueeze(-1).unsqueeze(-1)  # [B, H, N, 1, 1]
    S = torch.zeros(B, H, k_in.size(3), dv, dtype=v_in.dtype, device=dev)
    W_n, U_n, qd_n = W.unbind(2), U.unbind(2), q_decayed.unbind(2)
    qk_n, kend_n, decay_n = qk_decayed.unbind(2), k_to_end.unbind(2), chunk_decay.unbind(2)
    outputs = []
    for n in range(N):
        v_new = U_n[n] - torch.matmul(W_n[n], S)
        outputs.append(torch.matmul(qd_n[n], S) + torch.matmul(qk_n[n], v_new))
        S = decay_n[n] * S + torch.matmul(kend_n[n].transpose(-1, -2), v_new)
    o = torch.stack(outputs, 2).reshape(B, H, N * C, dv)
    if pad > 0:
        o = o.narrow(2, 0, T)
    return o.transpose(1, 2)


class ShortConv(nn.Module):
    """Causal depthwise convolution + SiLU. weight [C, 1, width]."""

    def __init__(self, channels, width):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, width))

    def forward(self, x):  # [B, T, C]
        width, channels = self.weight.size(2), self.weight.size(0)
        y = F.pad(x.transpose(1, 2), (width - 1, 0))
        y = F.conv1d(y, self.weight, None, 1, 0, 1, channels)
        return F.silu(y.transpose(1, 2))


class KernelGenerator(nn.Module):
    def __init__(self, w1, w2):
        super().__init__()
        self.w1 = w1
        self.w2 = w2


class DynamicShortConv(nn.Module):
    """JetBlock: per-token kernel = w2(SiLU(w1 x)) + w2.bias, causal depthwise, then SiLU."""

    def __init__(self, D, channels, width, reduction, make_linear, prefix):
        super().__init__()
        self.width = width
        self.kernel_generator = KernelGenerator(
            make_linear(prefix + "kernel_generator.w1", D, channels // reduction, False),
            make_linear(prefix + "kernel_generator.w2", channels // reduction, channels * width, True))

    def forward(self, x, generator_input):
        B, T = x.size(0), x.size(1)
        kg = self.kernel_generator
        kernels = kg.w2(F.silu(kg.w1(generator_input))).view(B, T, -1, self.width)
        padded = F.pad(x.transpose(1, 2), (self.width - 1, 0))  # [B, C, T+w-1]
        windows = padded.unfold(2, self.width, 1).permute(0, 2, 1, 3)  # [B, T, C, w]
        return F.silu((windows * kernels).sum(-1))


def l2_normalize(x):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class GatedDeltaNet(nn.Module):
    def __init__(self, c, make_linear, prefix):
        super().__init__()
        H, dk, dv, D = c["gdn_heads"], c["gdn_head_dim_k"], c["gdn_head_dim_v"], c["hidden"]
        self.dk, self.dv, self.chunk = dk, dv, c["gdn_chunk"]
        self.variant = c["gdn_variant"]
        key, value = H * dk, H * dv
        self.q_proj = make_linear(prefix + "q_proj", D, key, False)
        self.k_proj = make_linear(prefix + "k_proj", D, key, False)
        self.v_proj = make_linear(prefix + "v_proj", D, value, False)
        self.a_proj = make_linear(prefix + "a_proj", D, H, False)
        self.b_proj = make_linear(prefix + "b_proj", D, H, False)
        self.g_proj = make_linear(prefix + "g_proj", D, value, False)
        self.o_proj = make_linear(prefix + "o_proj", value, D, False)
        if self.variant == "gated_deltanet":
            self.q_conv1d = ShortConv(key, c["gdn_conv_width"])
            self.k_conv1d = ShortConv(key, c["gdn_conv_width"])
            self.v_conv1d = ShortConv(value, c["gdn_conv_width"])
        else:
            self.dynamic_conv1d = DynamicShortConv(D, value, c["gdn_conv_width"],
                                                   c["gdn_dconv_reduction"], make_linear,
                                                   prefix + "dynamic_conv1d.")
        self.A_log = nn.Parameter(torch.zeros(H))
        self.dt_bias = nn.Parameter(torch.zeros(H))
        self.o_norm = RMSNorm(dv, c.get("gdn_norm_eps", c["rms_eps"]))  # Jet config: jet.norm_eps

    def forward(self, x):
        B, T = x.size(0), x.size(1)
        if self.variant == "gated_deltanet":
            q = self.q_conv1d(self.q_proj(x))
            k = self.k_conv1d(self.k_proj(x))
            v = self.v_conv1d(self.v_proj(x))
        else:
            q = F.silu(self.q_proj(x))
            k = F.silu(self.k_proj(x))
            v = self.dynamic_conv1d(self.v_proj(x), x)
        q = q.view(B, T, -1, self.dk)
        k = k.view(B, T, -1, self.dk)
        v = v.view(B, T, -1, self.dv)
        q = l2_normalize(q) / math.sqrt(self.dk)
        k = l2_normalize(k)
        beta = torch.sigmoid(self.b_proj(x))  # [B, T, H]
        g = -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)
        # the core in float32 under bf16 autocast, as HLP's (docs/model-math.md); float32 and
        # float64 inputs (the fixtures' exact reference) as they are
        def core_dtype(t):
            return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t
        with torch.autocast(device_type=x.device.type, enabled=False):
            core = gated_delta_rule_chunked(*(core_dtype(t) for t in (q, k, v, beta, g)),
                                            self.chunk)
        gate = self.g_proj(x).view(B, T, -1, self.dv)
        o = self.o_norm(core) * F.silu(gate)
        return self.o_proj(o.reshape(B, T, -1))


# ---------------------------------------------------------------------------------------------
# Block and model (src/model/block.cpp, hybrid_lm.cpp)

class Block(nn.Module):
    def __init__(self, c, layer, make_linear):
        super().__init__()
        kind = c["pattern"][layer]
        prefix = "blocks.%d." % layer
        self.mixer_norm = RMSNorm(c["hidden"], c["rms_eps"])
        if kind == "G":
            self.mixer = GatedDeltaNet(c, make_linear, prefix + "mixer.")
        elif kind == "A":
            self.mixer = CausalSelfAttention(c, 0, make_linear, prefix + "mixer.")
        elif kind == "S":
            self.mixer = CausalSelfAttention(c, c["window"], make_linear, prefix + "mixer.")
        else:
            raise ValueError("unknown layer letter %r in pattern %s" % (kind, c["pattern"]))
        self.mlp_norm = RMSNorm(c["hidden"], c["rms_eps"])
        self.mlp = SwiGLU(c["hidden"], c["mlp_hidden"], make_linear, prefix + "mlp.")

    def forward(self, x):
        h = x + self.mixer(self.mixer_norm(x))
        return h + self.mlp(self.mlp_norm(h))


class HybridLM(nn.Module):
    def __init__(self, c, lora_rank, lora_alpha, adapted):
        """adapted: set of module names that carry LoRA adapters (from the exported names)."""
        super().__init__()
        if not c["tied_embeddings"]:
            raise ValueError("the peer implements tied embeddings only (all HLP presets)")

        def make_linear(name, d_in, d_out, bias):
            r = lora_rank if name in adapted else 0
            return LoRALinear(d_in, d_out, bias, r, lora_alpha)

        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.blocks = nn.ModuleList(Block(c, i, make_linear) for i in range(len(c["pattern"])))
        self.final_norm = RMSNorm(c["hidden"], c["rms_eps"])

    def forward(self, tokens):  # [B, T] -> logits [B, T, V]
        x = self.embed_tokens(tokens)
        for b in self.blocks:
            x = b(x)
        return torch.matmul(self.final_norm(x), self.embed_tokens.weight.t())


def cross_entropy_loss(logits, targets):
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


# ---------------------------------------------------------------------------------------------
# Loading what hlp-export-init wrote

def read_export_index(export_dir):
    """config.json and params.json of an export, and the modules that carry adapters."""
    with open(os.path.join(export_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(export_dir, "params.json")) as f:
        index = json.load(f)
    adapted = {e["name"][: -len(".lora_A")] for e in index if e["name"].endswith(".lora_A")}
    return cfg, index, adapted


def export_params(model, index):
    """The model's parameters by name; ValueError unless names and shapes equal the index's."""
    params = dict(model.named_parameters())
    if set(params) != {e["name"] for e in index}:
        missing = sorted({e["name"] for e in index} ^ set(params))[:5]
        raise ValueError("peer model and export disagree on parameter names, e.g. %s" % missing)
    for e in index:
        shape = tuple(params[e["name"]].shape)
        if shape != tuple(e["shape"]):
            raise ValueError("%s: peer shape %s, export %s" % (e["name"], shape, tuple(e["shape"])))
    return params


def load_export(export_dir):
    """Returns (config dict, model with the exported weights and requires_grad, tokens [K, G, T+1])."""
    cfg, index, adapted = read_export_index(export_dir)
    blob = np.fromfile(os.path.join(export_dir, "params.bin"), dtype=np.float32)
    lora = cfg["lora"]
    model = HybridLM(cfg["model"], int(lora["rank"]), float(lora["alpha"]), adapted)
    params = export_params(model, index)
    with torch.no_grad():
        for e in index:
            n = int(np.prod(e["shape"])) if e["shape"] else 1
            start = e["offset_bytes"] // 4
            values = torch.from_numpy(blob[start:start + n].copy()).view(e["shape"])
            p = params[e["name"]]
            p.copy_(values)
            p.requires_grad_(bool(e["trainable"]))
    d = cfg["data"]
    tokens = np.fromfile(os.path.join(export_dir, "tokens.bin"), dtype=np.int64)
    tokens = torch.from_numpy(tokens).view(d["batches"], d["global_batch"], d["seq_len"] + 1)
    return cfg, model, tokens
