"""A small causal Transformer language model: SelSync's "2-layer Transformer LM" (WikiText-103).

Token embedding + learned positions -> N pre-LayerNorm blocks (causal multi-head
self-attention, GELU MLP) -> final LayerNorm -> vocabulary head. Defaults: 2 layers,
d_model 256, 4 heads, MLP 4x. The head is untied by default, as in the PyTorch word-language
model the paper's scripts build on; `tie_embeddings=True` reuses the embedding matrix and
saves vocab x d_model parameters (68M with WikiText-103's 267k vocabulary).
No dropout and no mutable state, so the model is stateless under `FunctionalModel` and
`lm_loss` gives the plain `loss_fn(params, batch)` form.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from .functional import FunctionalModel

_EMBED_INIT = nnx.initializers.normal(0.02)


class CausalSelfAttention(nnx.Module):
    def __init__(self, d_model: int, num_heads: int, *, rngs: nnx.Rngs):
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.qkv = nnx.Linear(d_model, 3 * d_model, rngs=rngs)
        self.out = nnx.Linear(d_model, d_model, rngs=rngs)

    def __call__(self, x):
        b, t, d = x.shape
        q, k, v = jnp.split(self.qkv(x).reshape(b, t, 3 * self.num_heads, d // self.num_heads), 3, axis=2)
        y = jax.nn.dot_product_attention(q, k, v, is_causal=True)  # (b, t, heads, head_dim)
        return self.out(y.reshape(b, t, d))


class Block(nnx.Module):
    """Pre-LN residual block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model: int, num_heads: int, mlp_ratio: int = 4, *, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(d_model, epsilon=1e-5, rngs=rngs)
        self.attn = CausalSelfAttention(d_model, num_heads, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d_model, epsilon=1e-5, rngs=rngs)
        self.fc = nnx.Linear(d_model, mlp_ratio * d_model, rngs=rngs)
        self.proj = nnx.Linear(mlp_ratio * d_model, d_model, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(nnx.gelu(self.fc(self.ln2(x))))


class TransformerLM(nnx.Module):
    """Maps int tokens (batch, seq) with seq <= max_len to next-token logits (batch, seq, vocab)."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int = 256,
        num_heads: int = 4,
        num_layers: int = 2,
        mlp_ratio: int = 4,
        tie_embeddings: bool = False,
        *,
        rngs: nnx.Rngs,
    ):
        self.max_len = max_len
        self.embed = nnx.Embed(vocab_size, d_model, embedding_init=_EMBED_INIT, rngs=rngs)
        self.pos = nnx.Param(_EMBED_INIT(rngs.params(), (max_len, d_model)))
        self.blocks = nnx.List([Block(d_model, num_heads, mlp_ratio, rngs=rngs) for _ in range(num_layers)])
        self.ln_f = nnx.LayerNorm(d_model, epsilon=1e-5, rngs=rngs)
        # small head init (as the embedding): the initial loss is log(vocab), not above it
        self.head = None if tie_embeddings else nnx.Linear(d_model, vocab_size, kernel_init=_EMBED_INIT, rngs=rngs)

    def __call__(self, tokens):
        t = tokens.shape[-1]
        if t > self.max_len:
            raise ValueError(f"sequence length {t} exceeds the model's max_len {self.max_len}")
        x = self.embed(tokens) + self.pos[...][:t]
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        return self.embed.attend(x) if self.head is None else self.head(x)


def lm_loss(fm: FunctionalModel, input_key: str = "tokens", target_key: str | None = None):
    """Next-token cross entropy, mean over predicted tokens: `loss_fn(params, batch)`.

    Without `target_key` position i predicts token i+1 of `batch[input_key]` (seq - 1
    predictions per row); with it, `batch[target_key]` holds the target of every position
    (inputs and targets cut from one stream of seq + 1 tokens)."""
    def loss_fn(params, batch):
        tokens = batch[input_key]
        logits, _ = fm.apply(params, fm.model_state, tokens, train=True)
        if target_key is None:
            logits, targets = logits[:, :-1], tokens[:, 1:]
        else:
            targets = batch[target_key]
        return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets).mean()

    return loss_fn
