"""The keras-hub reference Transformer the benchmarks compare the zoo's with.

One model, two uses: ``training_model()`` (train_throughput.py: a functional
``keras.Model`` trained with a plain custom step) and ``call()`` (decode_speed.py:
beam search with ``keras_hub.samplers.BeamSampler`` and per-layer key/value
caches). It has the zoo Transformer's dimensions (keras-hub's layers are
post-norm with a ReLU feed-forward, as the zoo's default) and learned positions.
"""

from __future__ import annotations

BOS_ID = 2


class KerasHubTransformer:
    """keras-hub ``TokenAndPositionEmbedding`` (one per language),
    ``TransformerEncoder``/``TransformerDecoder`` stacks and a logits layer."""

    def __init__(self, vocabulary_size, model_dim, intermediate_dim, num_heads,
                 num_encoder_layers, num_decoder_layers, max_positions, dropout=0.0,
                 **unused):
        import keras
        import keras_hub

        del unused  # the rest of a zoo_config
        self.vocabulary_size, self.dropout = vocabulary_size, dropout
        self.num_heads, self.head_dim = num_heads, model_dim // num_heads
        self.source_embedding = keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size, max_positions, model_dim, name="source_embedding")
        self.target_embedding = keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size, max_positions, model_dim, name="target_embedding")
        self.encoders = [keras_hub.layers.TransformerEncoder(
            intermediate_dim, num_heads, dropout=dropout, name=f"encoder_{i}")
            for i in range(num_encoder_layers)]
        self.decoders = [keras_hub.layers.TransformerDecoder(
            intermediate_dim, num_heads, dropout=dropout, name=f"decoder_{i}")
            for i in range(num_decoder_layers)]
        self.output_layer = keras.layers.Dense(vocabulary_size, dtype="float32",
                                               name="logits")
        self._functions = {}

    # ---- training -----------------------------------------------------------------------

    def training_model(self):
        """``keras.Model({"source_ids", "target_ids"}) -> logits``, dropout after the
        embeddings (as the zoo's), padding (id 0) masked."""
        import keras
        from keras import ops

        source = keras.Input((None,), dtype="int32", name="source_ids")
        target = keras.Input((None,), dtype="int32", name="target_ids")
        source_mask = ops.not_equal(source, 0)
        target_mask = ops.not_equal(target, 0)
        x = keras.layers.Dropout(self.dropout)(self.source_embedding(source))
        for layer in self.encoders:
            x = layer(x, padding_mask=source_mask)
        y = keras.layers.Dropout(self.dropout)(self.target_embedding(target))
        for layer in self.decoders:
            y = layer(y, x, decoder_padding_mask=target_mask,
                      encoder_padding_mask=source_mask)
        return keras.Model({"source_ids": source, "target_ids": target},
                           self.output_layer(y), name="keras_hub_transformer")

    # ---- decoding -----------------------------------------------------------------------

    def encode(self, source_ids):
        from keras import ops

        mask = ops.not_equal(source_ids, 0)
        x = self.source_embedding(source_ids)
        for layer in self.encoders:
            x = layer(x, padding_mask=mask)
        return x, mask

    def _decode_one(self, token_ids, index, memory, memory_mask, self_caches,
                    cross_caches, seed_cross):
        x = self.target_embedding(token_ids, start_index=index)
        new_self, new_cross = [], []
        for layer, self_cache, cross_cache in zip(self.decoders, self_caches,
                                                  cross_caches):
            x, self_cache, cross_cache = layer(
                x, encoder_sequence=memory, encoder_padding_mask=memory_mask,
                self_attention_cache=self_cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=0 if seed_cross else None)
            new_self.append(self_cache)
            new_cross.append(cross_cache)
        return self.output_layer(x)[:, 0, :], x[:, 0, :], new_self, new_cross

    def generate_function(self, num_beams):
        """tf.function(source_ids [B, S], prompt [B, T + 2]) -> tokens [B, T + 2]."""
        if num_beams in self._functions:
            return self._functions[num_beams]
        import keras_hub
        import tensorflow as tf
        from keras import ops

        sampler = keras_hub.samplers.BeamSampler(num_beams=num_beams)

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                      tf.TensorSpec([None, None], tf.int32)])
        def generate(source_ids, prompt):
            memory, memory_mask = self.encode(source_ids)
            batch = ops.shape(source_ids)[0]
            self_shape = [batch, 2, ops.shape(prompt)[1], self.num_heads, self.head_dim]
            cross_shape = [batch, 2, ops.shape(source_ids)[1], self.num_heads,
                           self.head_dim]
            layers = range(len(self.decoders))
            self_caches = [ops.zeros(self_shape) for _ in layers]
            cross_caches = [ops.zeros(cross_shape) for _ in layers]
            # Seeding pass on BOS: fills slot 0 and the cross-attention caches.
            _, _, self_caches, cross_caches = self._decode_one(
                prompt[:, :1], 0, memory, memory_mask, self_caches, cross_caches,
                seed_cross=True)

            def next_fn(prompt, cache, index):
                self_caches, cross_caches, memory, memory_mask = cache
                token = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
                logits, hidden, self_caches, _ = self._decode_one(
                    token, index - 1, memory, memory_mask, self_caches, cross_caches,
                    seed_cross=False)
                return logits, hidden, (self_caches, cross_caches, memory, memory_mask)

            return sampler(next=next_fn, prompt=prompt,
                           cache=(self_caches, cross_caches, memory, memory_mask),
                           index=1)

        self._functions[num_beams] = generate
        return generate

    def call(self, source_ids, steps, num_beams):
        """A callable decoding ``steps`` + 1 positions (T tokens + the EOS step)."""
        import numpy as np
        import tensorflow as tf

        prompt = np.zeros([source_ids.shape[0], steps + 2], "int32")
        prompt[:, 0] = BOS_ID
        generate = self.generate_function(num_beams)
        source = tf.constant(source_ids)
        prompt = tf.constant(prompt)
        return lambda: generate(source, prompt)
