"""The seed papers whose claims the leaderboard checks: the one list a new paper joins.

A paper's module (`ran`, `gmm`, `weighted`, `bahdanau`, `eager`) holds its
thresholds, its `CLAIMS` (the verdict rows, in the table's order) and
`probe(context) -> dict`, the measurements its claims need from one trained
model, which `probes.probe_model` merges into the cell's ``"probes"``
(`context`: a `probes.ProbeContext`; `{}` for a model the paper does not
study, or a paper whose claims need none). Adding a mechanism's paper means writing its module and
naming it here; `probes` and `claims` name no paper themselves.
"""

from keras_attn_zoo.evaluation.claims import bahdanau
from keras_attn_zoo.evaluation.claims import eager
from keras_attn_zoo.evaluation.claims import gmm
from keras_attn_zoo.evaluation.claims import ran
from keras_attn_zoo.evaluation.claims import weighted

# In the verdict table's order.
PAPERS = (ran, gmm, weighted, bahdanau, eager)
