"""The encoder-decoder Transformer every Transformer-family model of the zoo is.

`Seq2SeqTransformer` is a `keras.Model` built functionally in `__init__` (the
keras-hub pattern): `fit`, `summary`, `.keras` saving and TensorBoard work as
for any Keras model. It also implements the zoo's step protocol, reusing the
same layer objects, so `keras_attn_zoo.decoding` and the exporter can drive it:

* `encode(source_ids) -> memory`
* `initial_state(memory, max_length) -> state`
* `decode_step(token, step, state) -> (logits, state)`

The variants differ only in which attention layer sits in which slot; a slot is
filled by an *attention kind* from `ATTENTION_KINDS` (see
`register_attention_kind`), so no block code is copied between variants.

A kind may also own one *stack layer* per slot: a layer computed once per
forward pass whose outputs feed every attention layer of that slot (RAN's
recurrently refined attention matrices). It is called on the slot's token ids
and returns one dict of extra attention inputs per block. While decoding, the
decoder stacks' outputs are computed once in `initial_state` and kept under
`state["shared"]`, which the searches never tile or reorder.
"""

import keras
from keras import ops

from keras_attn_zoo.layers.attention_utils import padding_mask_from_ids
from keras_attn_zoo.layers.embedding import SharedEmbedding
from keras_attn_zoo.layers.multi_head_attention import MultiHeadAttention
from keras_attn_zoo.layers.transformer_blocks import LAYER_NORM_EPSILON
from keras_attn_zoo.layers.transformer_blocks import TransformerDecoderBlock
from keras_attn_zoo.layers.transformer_blocks import TransformerEncoderBlock
from keras_attn_zoo.models.zoo_model import ZooModel
from keras_attn_zoo.training.simplex import BRANCH_WEIGHT_WARMUP
from keras_attn_zoo.training.simplex import check_branch_weight_warmup
from keras_attn_zoo.training.simplex import with_branch_weight_warmup

# Slots an attention kind can fill.
ENCODER_SELF = "encoder_self"
DECODER_SELF = "decoder_self"
CROSS = "cross"

ATTENTION_KINDS = {}
STACK_KINDS = {}


def register_attention_kind(name, make_layer, uses_feed_forward=True, make_stack=None):
    """Registers `make_layer(slot, layer_index, config) -> keras Layer`.

    `config` is the model's constructor arguments (a dict), so a kind can read
    the model width, heads, dropout and its own `attention_options`.
    `uses_feed_forward=False` for layers that contain their own FFNs.
    `make_stack(slot, config) -> keras Layer` (optional) builds the slot's
    stack layer: `stack_layer(ids)` returns a list with one dict of extra
    inputs per block, passed to the attention layer's `call` and `step`.
    """
    ATTENTION_KINDS[name] = (make_layer, uses_feed_forward)
    if make_stack is not None:
        STACK_KINDS[name] = make_stack


def _make_multi_head(slot, layer_index, config):
    return MultiHeadAttention(
        num_heads=config["num_heads"],
        key_dim=config["model_dim"] // config["num_heads"],
        dropout=config["attention_dropout"],
        name=f"{slot}_attention_{layer_index}",
    )


register_attention_kind("multi_head", _make_multi_head)


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class Seq2SeqTransformer(ZooModel):
    """Encoder-decoder Transformer with pluggable attention.

    Inputs are a dict `{"source_ids": int32[B, S], "target_ids": int32[B, T]}`
    (0 = padding; `target_ids` is the decoder input starting with BOS); the
    output is float32 logits `[B, T, vocabulary_size]`.

    Args:
        vocabulary_size: size of the joint vocabulary (embeddings are shared
            between source, target and the output layer).
        model_dim, intermediate_dim, num_heads: widths.
        num_encoder_layers, num_decoder_layers: depths.
        dropout: residual and embedding dropout.
        attention_dropout: dropout on attention weights.
        norm_first: pre-norm instead of the paper's post-norm.
        encoder_self_attention, decoder_self_attention, cross_attention:
            attention kind names (see `ATTENTION_KINDS`).
        attention_options: dict of kind-specific options. One is read by the
            model itself, at training time: `"branch_weight_warmup_steps"`
            (int), the public port's κ/α learning-rate warm-up for models
            with branched (Weighted Transformer) layers, applied by
            `wrap_optimizer`; refused for a model without such layers.
        max_length: longest sequence the model accepts (`None`: no limit;
            fixed-size mechanisms such as RAN require one).
        alignment_layer: decoder layer whose head-averaged cross-attention
            is reported as the alignment while decoding.
    """

    def __init__(
        self,
        vocabulary_size,
        model_dim=256,
        intermediate_dim=1024,
        num_heads=4,
        num_encoder_layers=3,
        num_decoder_layers=3,
        dropout=0.1,
        attention_dropout=0.0,
        norm_first=False,
        encoder_self_attention="multi_head",
        decoder_self_attention="multi_head",
        cross_attention="multi_head",
        attention_options=None,
        max_length=None,
        alignment_layer=-1,
        **kwargs,
    ):
        if model_dim % num_heads:
            raise ValueError(
                f"model_dim={model_dim} is not divisible by num_heads={num_heads}."
            )
        config = dict(
            vocabulary_size=vocabulary_size,
            model_dim=model_dim,
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers,
            dropout=dropout,
            attention_dropout=attention_dropout,
            norm_first=norm_first,
            encoder_self_attention=encoder_self_attention,
            decoder_self_attention=decoder_self_attention,
            cross_attention=cross_attention,
            attention_options=dict(attention_options or {}),
            max_length=max_length,
            alignment_layer=alignment_layer,
        )
        for kind in (encoder_self_attention, decoder_self_attention, cross_attention):
            if kind not in ATTENTION_KINDS:
                raise ValueError(
                    f"Unknown attention kind {kind!r}; registered kinds are "
                    f"{sorted(ATTENTION_KINDS)}."
                )

        def attention(slot, kind, index):
            make_layer, _ = ATTENTION_KINDS[kind]
            return make_layer(slot, index, config)

        block_args = dict(
            intermediate_dim=intermediate_dim, dropout=dropout, norm_first=norm_first
        )
        embedding = SharedEmbedding(
            vocabulary_size, model_dim, dropout=dropout, name="shared_embedding"
        )
        encoder_blocks = [
            TransformerEncoderBlock(
                attention(ENCODER_SELF, encoder_self_attention, i),
                use_feed_forward=ATTENTION_KINDS[encoder_self_attention][1],
                name=f"encoder_block_{i}",
                **block_args,
            )
            for i in range(num_encoder_layers)
        ]
        decoder_blocks = [
            TransformerDecoderBlock(
                attention(DECODER_SELF, decoder_self_attention, i),
                attention(CROSS, cross_attention, i),
                use_feed_forward=(
                    ATTENTION_KINDS[decoder_self_attention][1]
                    and ATTENTION_KINDS[cross_attention][1]
                ),
                name=f"decoder_block_{i}",
                **block_args,
            )
            for i in range(num_decoder_layers)
        ]
        slot_kinds = {
            ENCODER_SELF: encoder_self_attention,
            DECODER_SELF: decoder_self_attention,
            CROSS: cross_attention,
        }
        stack_layers = {
            slot: STACK_KINDS[kind](slot, config)
            for slot, kind in slot_kinds.items()
            if kind in STACK_KINDS
        }
        final_norms = {
            side: keras.layers.LayerNormalization(
                epsilon=LAYER_NORM_EPSILON, name=f"{side}_final_norm"
            )
            if norm_first
            else None
            for side in ("encoder", "decoder")
        }

        # Functional graph (teacher forcing).
        source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
        target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
        source_mask = padding_mask_from_ids(source_ids)

        def stack_inputs(slot, ids, depth):
            if slot in stack_layers:
                return stack_layers[slot](ids)
            return [None] * depth

        encoder_extra = stack_inputs(ENCODER_SELF, source_ids, num_encoder_layers)
        x = embedding(source_ids)
        for block, extra in zip(encoder_blocks, encoder_extra):
            x = block(x, padding_mask=source_mask, attention_inputs=extra)
        memory = final_norms["encoder"](x) if norm_first else x
        decoder_extra = stack_inputs(DECODER_SELF, target_ids, num_decoder_layers)
        cross_extra = stack_inputs(CROSS, target_ids, num_decoder_layers)
        y = embedding(target_ids)
        for block, self_extra, cross_extra_i in zip(
            decoder_blocks, decoder_extra, cross_extra
        ):
            y = block(
                y, memory, memory_mask=source_mask,
                self_attention_inputs=self_extra, cross_attention_inputs=cross_extra_i,
            )
        if norm_first:
            y = final_norms["decoder"](y)
        logits = embedding.logits(y)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=logits,
            **kwargs,
        )

        self.zoo_config = config
        self.embedding = embedding
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.encoder_final_norm = final_norms["encoder"]
        self.decoder_final_norm = final_norms["decoder"]
        self.stack_layers = stack_layers
        warmup = config["attention_options"].get(BRANCH_WEIGHT_WARMUP)
        if warmup is not None:
            # Now, not at training time: the κ/α exist once the graph is built.
            check_branch_weight_warmup(warmup, self.weights)

    def wrap_optimizer(self, optimizer):
        """`optimizer`, or with `branch_weight_warmup_steps` its `BranchWeightAdam`."""
        warmup = self.zoo_config["attention_options"].get(BRANCH_WEIGHT_WARMUP)
        if warmup is None:
            return optimizer
        return with_branch_weight_warmup(optimizer, warmup)

    # ---- step protocol ----------------------------------------------------------

    @property
    def max_decode_length(self):
        """Decoder positions this model has (EOS included); None: unlimited."""
        return self.zoo_config["max_length"]

    def _stack_inputs(self, slot, ids, depth):
        if slot in self.stack_layers:
            return self.stack_layers[slot](ids)
        return [None] * depth

    def encode(self, source_ids, training=False):
        """Runs the encoder. Returns `{"memory": [B, S, d], "memory_mask": [B, S]}`."""
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        mask = padding_mask_from_ids(source_ids)
        extra = self._stack_inputs(ENCODER_SELF, source_ids, len(self.encoder_blocks))
        x = self.embedding(source_ids, training=training)
        for block, block_extra in zip(self.encoder_blocks, extra):
            x = block(x, padding_mask=mask, attention_inputs=block_extra,
                      training=training)
        if self.encoder_final_norm is not None:
            x = self.encoder_final_norm(x)
        return {"memory": x, "memory_mask": mask}

    def initial_state(self, memory, max_length):
        """Caches for `max_length` decoding steps; every leaf is batch-first."""
        batch_size = ops.shape(memory["memory"])[0]
        # Stack layers see a dummy target of the decoding length, once.
        dummy_target = ops.zeros((1, max_length), "int32")
        depth = len(self.decoder_blocks)
        return {
            "memory_mask": memory["memory_mask"],
            "layers": [
                block.initial_cache(batch_size, max_length, memory["memory"])
                for block in self.decoder_blocks
            ],
            "attention": ops.zeros(ops.shape(memory["memory_mask"]), "float32"),
            "shared": {
                slot: self._stack_inputs(slot, dummy_target, depth)
                for slot in (DECODER_SELF, CROSS)
                if slot in self.stack_layers
            },
        }

    def decode_step(self, token, step, state):
        """Decodes position `step` from the previous `token` `[B]`."""
        x = self.embedding(ops.reshape(token, (-1, 1)), start=step, training=False)
        caches = []
        alignments = []
        shared = state["shared"]
        depth = len(self.decoder_blocks)
        self_extra = shared.get(DECODER_SELF, [None] * depth)
        cross_extra = shared.get(CROSS, [None] * depth)
        for i, (block, cache) in enumerate(zip(self.decoder_blocks, state["layers"])):
            x, cache, weights = block.step(
                x, step, cache, state["memory_mask"],
                self_attention_inputs=self_extra[i],
                cross_attention_inputs=cross_extra[i],
            )
            caches.append(cache)
            alignments.append(weights)
        if self.decoder_final_norm is not None:
            x = self.decoder_final_norm(x)
        logits = self.embedding.logits(x)[:, 0, :]
        alignment = ops.mean(alignments[self.zoo_config["alignment_layer"]], axis=1)
        return logits, {
            "memory_mask": state["memory_mask"],
            "layers": caches,
            "attention": ops.cast(alignment[:, 0, :], "float32"),
            "shared": shared,
        }

    def cross_attention_weights(self, source_ids, target_ids):
        """Teacher-forced cross-attention of every decoder layer, `[L, B, h, T, S]`."""
        memory = self.encode(source_ids)
        target_ids = ops.convert_to_tensor(target_ids, "int32")
        depth = len(self.decoder_blocks)
        self_extra = self._stack_inputs(DECODER_SELF, target_ids, depth)
        cross_extra = self._stack_inputs(CROSS, target_ids, depth)
        y = self.embedding(target_ids)
        weights = []
        for i, block in enumerate(self.decoder_blocks):
            y, w = block(
                y, memory["memory"], memory_mask=memory["memory_mask"],
                self_attention_inputs=self_extra[i],
                cross_attention_inputs=cross_extra[i],
                return_attention=True,
            )
            weights.append(w)
        return ops.stack(weights)
