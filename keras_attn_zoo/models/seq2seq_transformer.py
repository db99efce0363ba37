"""The encoder-decoder Transformer every Transformer-family model of the zoo is.

`Seq2SeqTransformer` is a `keras.Model` built functionally in `__init__` (the
keras-hub pattern): `fit`, `summary`, `.keras` saving and TensorBoard work as
for any Keras model. It also implements the zoo's step protocol, reusing the
same layer objects, so `keras_attn_zoo.decoding` and the exporter can drive it:

* `encode(source_ids) -> memory`
* `initial_state(memory, max_length) -> state`
* `decode_step(token, step, state) -> (logits, state)`

The variants differ only in which attention layer sits in which slot; a slot is
filled by an *attention kind* from the registry (`models.attention_kinds`,
`register_attention_kind`), so no block code is copied between variants.

A kind may also own one *stack layer* per slot: a layer computed once per
forward pass whose outputs feed every attention layer of that slot (RAN's
recurrently refined attention matrices). It is called on the slot's token ids
and returns one dict of extra attention inputs per block. While decoding, the
decoder stacks' outputs are computed once in `initial_state` and kept under
`state["shared"]`, which the searches never tile or reorder.

One forward pass: `_encoder_pass` and `_decoder_pass` build the functional
graph and serve `encode` and `attention_maps`; `decode_step` runs the same
blocks one position at a time.
"""

import types

import keras
import numpy as np
from keras import ops

from keras_attn_zoo.layers.attention_utils import padding_mask_from_ids
from keras_attn_zoo.layers.embedding import SharedEmbedding
from keras_attn_zoo.layers.layer_drop import LayerDrop
from keras_attn_zoo.layers.layer_normalization import LayerNormalization
from keras_attn_zoo.layers.transformer_blocks import LAYER_NORM_EPSILON
from keras_attn_zoo.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_attn_zoo.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_attn_zoo.models import attention_kinds
from keras_attn_zoo.models.attention_kinds import CROSS
from keras_attn_zoo.models.attention_kinds import DECODER_SELF
from keras_attn_zoo.models.attention_kinds import ENCODER_SELF
from keras_attn_zoo.models.zoo_model import ZooModel


def _stack_inputs(parts, slot, ids, depth):
    """The slot's stack-layer outputs, one dict per block (None without a stack)."""
    if slot in parts.stack_layers:
        return parts.stack_layers[slot](ids)
    return [None] * depth


def _encoder_pass(parts, source_ids, training=None, return_attention=False):
    """`(memory, source mask, maps)`: the encoder; `maps` one dict per block."""
    mask = padding_mask_from_ids(source_ids)
    extra = _stack_inputs(parts, ENCODER_SELF, source_ids, len(parts.encoder_blocks))
    x = parts.embedding(source_ids, training=training)
    maps = []
    for block, block_extra in zip(parts.encoder_blocks, extra):
        x = block(x, padding_mask=mask, attention_inputs=block_extra,
                  training=training, return_attention=return_attention)
        if return_attention:
            x, block_maps = x
            maps.append(block_maps)
    if parts.encoder_final_norm is not None:
        x = parts.encoder_final_norm(x)
    return x, mask, maps


def _decoder_pass(parts, target_ids, memory, memory_mask, training=None,
                  return_attention=False):
    """`(decoder output before the logits, maps)`: the teacher-forced decoder.

    With `decoder_layer_drop` each block has a `LayerDrop` that, in training,
    may replace the block's output by its input (one draw per block and
    batch). Stack-layer inputs (RAN's matrices) come from the slot's stack
    layer, not from the blocks, so a skipped block leaves the next block's
    inputs as they are.
    """
    depth = len(parts.decoder_blocks)
    self_extra = _stack_inputs(parts, DECODER_SELF, target_ids, depth)
    cross_extra = _stack_inputs(parts, CROSS, target_ids, depth)
    layer_drops = parts.decoder_layer_drops or [None] * depth
    y = parts.embedding(target_ids, training=training)
    maps = []
    for block, s_extra, c_extra, layer_drop in zip(
            parts.decoder_blocks, self_extra, cross_extra, layer_drops):
        block_output = block(y, memory, memory_mask=memory_mask,
                             self_attention_inputs=s_extra,
                             cross_attention_inputs=c_extra, training=training,
                             return_attention=return_attention)
        if return_attention:
            block_output, block_maps = block_output
            maps.append(block_maps)
        # LayerDrop: during training the whole block may be the identity.
        y = (block_output if layer_drop is None
             else layer_drop(y, block_output, training=training))
    if parts.decoder_final_norm is not None:
        y = parts.decoder_final_norm(y)
    return y, maps


def _stack_maps(per_block, rename):
    """Per-block map dicts -> `{name: float32 [L, ...]}`; a map that some
    blocks lack (GMM's components where a block has no mixture) is NaN there."""
    arrays = [{rename.get(name, name): np.asarray(ops.convert_to_numpy(value),
                                                  np.float32)
               for name, value in maps.items()} for maps in per_block]
    names = list(dict.fromkeys(name for maps in arrays for name in maps))
    result = {}
    for name in names:
        shape = next(maps[name].shape for maps in arrays if name in maps)
        result[name] = np.stack([maps.get(name, np.full(shape, np.nan, np.float32))
                                 for maps in arrays])
    return result


@keras.saving.register_keras_serializable(package="keras_attn_zoo")
class Seq2SeqTransformer(ZooModel):
    """Encoder-decoder Transformer with pluggable attention.

    Inputs are a dict `{"source_ids": int32[B, S], "target_ids": int32[B, T]}`
    (0 = padding; `target_ids` is the decoder input starting with BOS); the
    output is float32 logits `[B, T, vocabulary_size]`.

    Args:
        vocabulary_size: size of the joint vocabulary (embeddings are shared
            between source, target and the output layer).
        model_dim: the model's width d.
        intermediate_dim: the feed-forward networks' inner width.
        num_heads: attention heads.
        num_encoder_layers: encoder blocks.
        num_decoder_layers: decoder blocks.
        dropout: residual and embedding dropout.
        attention_dropout: dropout on attention weights (of the attention
            layers that take it: dot-product, the Gaussian mixture, the
            fixed-pattern baselines, the branched layers; RAN's layers have
            their own `attention_options["recurrent"]["dropout"]`).
        activation_dropout: dropout after the feed-forward activation
            (fairseq's name; Sennrich & Zhang 2019 and Araabi & Monz 2020 use
            it on small data). It acts on the blocks' feed-forward networks;
            a model with none (the Weighted Transformer's default layout,
            whose branches hold their own, see `branch_feed_forward_dropout`)
            refuses a rate above 0.
        decoder_layer_drop: LayerDrop (Fan et al., 2019) on the decoder:
            during training each decoder block is skipped (the identity) with
            this probability, drawn once per batch and block; at inference
            (and in `decode_step`) every block runs. 0 (the default) adds no
            layer and no weight: the model is exactly the one without it.
            Works for every attention kind: the only state passed between
            blocks besides the residual stream is a stack layer's (RAN's
            recurrent attention matrices), computed before the blocks from
            the token ids alone, so a skipped block passes it through
            unchanged (the next block gets its own matrix, as at inference).
        norm_first: pre-norm instead of the paper's post-norm.
        encoder_self_attention: the encoder self-attention's kind name (see
            `models.attention_kinds`).
        decoder_self_attention: the decoder self-attention's kind name.
        cross_attention: the cross-attention's kind name.
        attention_options: options per kind name, e.g. `{"gaussian_mixture":
            {"num_components": 4}}`; the kinds' defaults fill the rest and the
            model keeps the full dict in its config. (A flat dict, whose keys
            are options of one of the model's kinds, is still read.) Some
            options act at training time through `wrap_optimizer`, e.g. the
            Weighted Transformer's `"branch_weight_warmup_steps"`.
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
        activation_dropout=0.0,
        decoder_layer_drop=0.0,
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
            activation_dropout=activation_dropout,
            decoder_layer_drop=decoder_layer_drop,
        )
        for option in ("activation_dropout", "decoder_layer_drop"):
            if not 0.0 <= float(config[option]) <= 1.0:
                raise ValueError(f"{option} must be in [0, 1], got {config[option]}.")
        slot_kinds = attention_kinds.slot_kinds(config)
        for slot, kind in slot_kinds.items():
            attention_kinds.check_slot(kind, slot)
        used = set(slot_kinds.values())
        nested = attention_kinds.nest_options(config["attention_options"], used)
        unused = sorted(set(nested) - used)
        if unused:
            raise ValueError(
                f"attention_options has options for {unused}, which this model does "
                f"not use (its kinds: {sorted(used)})."
            )
        config["attention_options"] = {
            kind: attention_kinds.kind_options({**config, "attention_options": nested},
                                               kind)
            for kind in sorted(used)
            if attention_kinds.attention_kind(kind).option_defaults or kind in nested
        }
        for kind in used:
            record = attention_kinds.attention_kind(kind)
            if record.validate is not None:
                record.validate(attention_kinds.kind_options(config, kind))

        def attention(slot, index):
            record = attention_kinds.attention_kind(slot_kinds[slot])
            return record.make_layer(slot, index, config)

        block_args = dict(
            intermediate_dim=intermediate_dim, dropout=dropout, norm_first=norm_first,
            activation_dropout=activation_dropout,
        )
        embedding = SharedEmbedding(
            vocabulary_size, model_dim, dropout=dropout, name="shared_embedding"
        )
        encoder_blocks = [
            TransformerEncoderBlock(
                attention(ENCODER_SELF, i),
                use_feed_forward=attention_kinds.block_uses_feed_forward(
                    config, [encoder_self_attention]),
                name=f"encoder_block_{i}",
                **block_args,
            )
            for i in range(num_encoder_layers)
        ]
        decoder_blocks = [
            TransformerDecoderBlock(
                attention(DECODER_SELF, i),
                attention(CROSS, i),
                use_feed_forward=attention_kinds.block_uses_feed_forward(
                    config, [decoder_self_attention, cross_attention]),
                name=f"decoder_block_{i}",
                **block_args,
            )
            for i in range(num_decoder_layers)
        ]
        if activation_dropout and not any(
                block.feed_forward is not None
                for block in encoder_blocks + decoder_blocks):
            raise ValueError(
                f"activation_dropout={activation_dropout} acts on the blocks' "
                "feed-forward networks and this model's blocks have none (its "
                "attention layers hold their own, e.g. the Weighted Transformer's "
                "branch_feed_forward_dropout).")
        # LayerDrop: no layer (and no seed variable) at rate 0.
        decoder_layer_drops = [
            LayerDrop(decoder_layer_drop, name=f"decoder_layer_drop_{i}")
            for i in range(num_decoder_layers)
        ] if decoder_layer_drop else []
        stack_layers = {}
        for slot, kind in slot_kinds.items():
            make_stack = attention_kinds.attention_kind(kind).make_stack
            if make_stack is not None:
                stack_layers[slot] = make_stack(slot, config)
        final_norms = {
            side: LayerNormalization(
                epsilon=LAYER_NORM_EPSILON, name=f"{side}_final_norm"
            )
            if norm_first
            else None
            for side in ("encoder", "decoder")
        }

        parts = types.SimpleNamespace(
            embedding=embedding, encoder_blocks=encoder_blocks,
            decoder_blocks=decoder_blocks, stack_layers=stack_layers,
            decoder_layer_drops=decoder_layer_drops,
            encoder_final_norm=final_norms["encoder"],
            decoder_final_norm=final_norms["decoder"],
        )
        # Functional graph (teacher forcing).
        source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
        target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
        memory, source_mask, _ = _encoder_pass(parts, source_ids)
        y, _ = _decoder_pass(parts, target_ids, memory, source_mask)
        logits = embedding.logits(y)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=logits,
            **kwargs,
        )

        # The same graph up to the tied output layer, for the Trainer's
        # real-token projection (`forward_before_projection`). A namespace:
        # Keras does not track it, so weights, saving and `layers` are
        # those of this model alone.
        self._before_projection = types.SimpleNamespace(model=keras.Model(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=y, name=f"{self.name}_before_projection"))
        self.zoo_config = config
        self.embedding = embedding
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.decoder_layer_drops = decoder_layer_drops
        self.encoder_final_norm = final_norms["encoder"]
        self.decoder_final_norm = final_norms["decoder"]
        self.stack_layers = stack_layers

    def wrap_optimizer(self, optimizer):
        """`optimizer` as each of the model's kinds wants it (the Weighted
        Transformer's `branch_weight_warmup_steps`: a `BranchWeightAdam`)."""
        for kind in sorted(set(attention_kinds.slot_kinds(self.zoo_config).values())):
            record = attention_kinds.attention_kind(kind)
            if record.wrap_optimizer is not None:
                optimizer = record.wrap_optimizer(
                    optimizer, attention_kinds.kind_options(self.zoo_config, kind))
        return optimizer

    # ---- step protocol ----------------------------------------------------------

    @property
    def max_decode_length(self):
        """Decoder positions this model has (EOS included); None: unlimited."""
        return self.zoo_config["max_length"]

    def encode(self, source_ids, training=False):
        """Runs the encoder. Returns `{"memory": [B, S, d], "memory_mask": [B, S]}`."""
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        memory, mask, _ = _encoder_pass(self, source_ids, training=training)
        return {"memory": memory, "memory_mask": mask}

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
                slot: _stack_inputs(self, slot, dummy_target, depth)
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

    def forward_before_projection(self, inputs, training=False):
        """`(decoder output [B, T, d], tied output layer)`: `call` before its logits.

        Runs the model's own functional graph without its last node, so the
        layers run in the order `call` runs them and every dropout layer
        draws the same masks (a direct `_encoder_pass` / `_decoder_pass`
        embeds the target before the source in Keras' order: other masks).
        `tests/test_training_step.py` checks losses and gradients agree.
        """
        hidden = self._before_projection.model(inputs, training=training)
        return hidden, self.embedding.logits

    def attention_maps(self, source_ids, target_ids):
        """One teacher-forced pass's attention, `{name: float32 [L, B, h, T, S]}`.

        `"encoder_self"`, `"decoder_self"`, `"cross"` and any extra maps the
        layers report (GMM: `"cross_dot_product"`, `"cross_mixture"`,
        `"gmm_gate"` `[L, B, h, T]`, NaN in blocks without a mixture); see
        `keras_attn_zoo.evaluation.attention` for their meaning.
        """
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        target_ids = ops.convert_to_tensor(target_ids, "int32")
        memory, mask, encoder_maps = _encoder_pass(
            self, source_ids, training=False, return_attention=True)
        _, decoder_maps = _decoder_pass(
            self, target_ids, memory, mask, training=False, return_attention=True)
        return {**_stack_maps(encoder_maps, {"self": "encoder_self"}),
                **_stack_maps(decoder_maps, {"self": "decoder_self"})}

    def cross_attention_weights(self, source_ids, target_ids):
        """Teacher-forced cross-attention of every decoder layer, `[L, B, h, T, S]`."""
        return self.attention_maps(source_ids, target_ids)["cross"]
