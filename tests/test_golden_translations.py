"""Today's code computes what the code before the issue-15 refactor computed.

`tests/data/golden/` holds a fixed checkpoint of each of the ten published
models and the logits and translations the pre-refactor code gave from them
(`tests/golden.py` made them). Each model must load its checkpoint by variable
path, give the same teacher-forced logits (within float tolerance: a refactor
may reorder sums) and the same beam-4 translations; the Transformer also
through an exported SavedModel, byte for byte.
"""

import json

import numpy as np
import pytest

from keras_attn_zoo.models import MODEL_VARIANTS
from tests.golden import GOLDEN
from tests.golden import VOCABULARY
from tests.golden import build
from tests.golden import load_weights
from tests.golden import teacher_forced_inputs

EXPECTED = json.loads((GOLDEN / "expected.json").read_text())
# Beam search over the three kinds of decoding state (a recurrent stack state
# shared by all steps, a GRU, lockstep LSTMs); the Transformer's goes through
# its export below. The other attention kinds' steps equal their full pass
# (tests/test_step_fidelity.py), whose logits are checked here for all ten.
DECODED = ("RAN-ALL", "RNNsearch", "eager")


@pytest.fixture(scope="module")
def tokenizer():
    from keras_attn_zoo.data.vocabulary import load_tokenizer

    return load_tokenizer(VOCABULARY)


def golden_model(name, tokenizer):
    model = build(name, int(tokenizer.vocabulary_size()))
    load_weights(model, GOLDEN / f"{name}.npz")
    return model


@pytest.mark.parametrize("name", list(MODEL_VARIANTS))
def test_checkpoint_gives_the_same_logits_and_translations(name, tokenizer):
    from keras_attn_zoo.export import Translator

    model = golden_model(name, tokenizer)
    logits = np.asarray(model(teacher_forced_inputs(tokenizer), training=False))
    expected_logits = np.load(GOLDEN / "expected_logits.npz")[name]
    np.testing.assert_allclose(logits, expected_logits, atol=2e-5, rtol=0)
    if name in DECODED:
        translations = Translator(model, tokenizer).translate_texts(EXPECTED["sentences"])
        assert translations == EXPECTED["translations"][name]


def test_export_translates_byte_identically(tokenizer, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from keras_attn_zoo.export import export_saved_model
    from keras_attn_zoo.inference import Translator

    model = golden_model("transformer", tokenizer)
    version_dir = export_saved_model(Translator(model, tokenizer), tmp_path / "transformer")
    loaded = tf.saved_model.load(str(version_dir))
    outputs = loaded.signatures["translate"](text=tf.constant(EXPECTED["sentences"]))
    translations = [text.decode("utf-8") for text in outputs["translation"].numpy()]
    assert translations == EXPECTED["translations"]["transformer"]
