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
# Heat maps of RNNsearch's attention drawn per cell: its first test pairs.
HEATMAP_EXAMPLES = 3


def probe(context):
    """RNNsearch's heat maps (`heatmaps`) join `context.files`; no numbers: `{}`."""
    heatmaps(context.model, context.stats, context.alignment_layer, context.out_dir,
             context.files)
    return {}


def heatmaps(model, stats, alignment_layer, out_dir, files):
    """Heat maps of RNNsearch's attention on the first `HEATMAP_EXAMPLES` probed
    pairs, forced to the reference, under ``heatmaps/`` (names added to `files`)."""
    from keras_attn_zoo.evaluation.plots import plot_alignment
    from keras_attn_zoo.models.bahdanau_rnn import BahdanauRNN

    if not isinstance(model, BahdanauRNN):
        return
    for k in range(min(HEATMAP_EXAMPLES, len(stats["pieces"]))):
        source_pieces, target_pieces = stats["pieces"][k]
        name = f"heatmaps/sentence_{k}.png"
        plot_alignment(stats["cross"][k][alignment_layer].mean(axis=0), source_pieces,
                       target_pieces, out_dir / name,
                       title="RNNsearch attention, forced to the reference")
        files.append(name)


CLAIMS = [
    (BAHDANAU_PAPER, "The attention learns the word alignment (AER against eflomal, below "
                     "a monotone alignment)",
     lower_aer("RNNsearch", "monotone", "monotone alignment of the same sentences")),
]
