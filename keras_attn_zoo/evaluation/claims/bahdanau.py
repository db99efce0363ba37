"""The RNNsearch seed study's claim (Bahdanau et al., 2015) and its heat maps.

Thresholds and where they come from:

* RNNsearch alignment: the seed study only shows heat maps ("the introduced
  Attention mechanism is able to learn the alignment"). AER of the argmax
  attention links (words) against eflomal's links on the test sentences,
  compared with a trivial monotone alignment of the same sentences (target
  word j to source word floor(j S / T)): a seed is for when the attention's
  AER is at least `AER_MARGIN` (0.05) lower than the monotone one, against
  when it is not lower at all.
"""

from keras_attn_zoo.evaluation.claims.checks import lower_aer

BAHDANAU_PAPER = "RNNsearch (Bahdanau et al., 2015; seed study)"
# The pairs RNNsearch's attention is drawn on per cell. Written for these maps, not
# taken from the test split: the maps are committed with the cells, the corpus is not.
HEATMAP_PAIRS = (
    ("Der alte Bahnhof unserer Stadt wird im nächsten Jahr abgerissen.",
     "The old station of our town will be torn down next year."),
    ("Kannst du mir sagen, wann der letzte Bus zum Flughafen fährt?",
     "Can you tell me when the last bus to the airport leaves?"),
    ("Meine Schwester hat ihre Schlüssel gestern im Büro vergessen.",
     "My sister forgot her keys at the office yesterday."),
)


def probe(context):
    """RNNsearch's heat maps (`heatmaps`) join `context.files`; no numbers: `{}`."""
    heatmaps(context.model, context.make_batch, context.alignment_layer, context.out_dir,
             context.files)
    return {}


def heatmaps(model, make_batch, alignment_layer, out_dir, files, pairs=HEATMAP_PAIRS):
    """Heat maps of RNNsearch's attention on `pairs` (`HEATMAP_PAIRS`), forced to the
    reference, averaged over heads, under ``heatmaps/`` (names added to `files`)."""
    from keras_attn_zoo.evaluation.attention import attention_maps
    from keras_attn_zoo.evaluation.plots import plot_alignment
    from keras_attn_zoo.models.bahdanau_rnn import BahdanauRNN

    if not isinstance(model, BahdanauRNN):
        return
    source, target, source_pieces, target_pieces = make_batch(list(pairs))
    cross = attention_maps(model, source, target)["cross"]  # [L, B, h, T, S]
    for k in range(len(pairs)):
        name = f"heatmaps/sentence_{k}.png"
        plot_alignment(cross[alignment_layer, k].mean(axis=0), source_pieces[k],
                       target_pieces[k], out_dir / name,
                       title="RNNsearch attention, forced to the reference")
        files.append(name)


CLAIMS = [
    (BAHDANAU_PAPER, "The attention learns the word alignment (AER against eflomal, below "
                     "a monotone alignment)",
     lower_aer("RNNsearch", "monotone", "monotone alignment of the same sentences")),
]
