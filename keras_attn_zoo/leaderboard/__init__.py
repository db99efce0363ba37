"""The leaderboard: every zoo model, several seeds, one recipe; a verdict per paper claim.

`recipes/leaderboard.py` parses the command into a `Leaderboard` (its settings)
and calls what is here:

* `cells`: one (model, seed) trained by `workflow.training_run`, its test split
  translated and scored, its decoding timed against its speed peers and its
  paper's claim probed, kept in `cell.json`;
* `jobs`: cells in parallel processes, each pinned to its own cores
  (`run_in_processes`, the command's `--jobs`);
* `timing`: decoding speeds timed after the cells, in one process
  (`time_seeds`, `retime_decoding`);
* `report`: the paired tests added to the cells, then the table, the claims'
  verdicts and the plots (`evaluation.leaderboard`) written, and a markdown
  page's generated section rewritten.

It ranks with `workflow` (it trains through it); the table and the verdicts it
writes are computed one rank below the trainer, in `evaluation`.
"""

from keras_attn_zoo.leaderboard.cells import Leaderboard
from keras_attn_zoo.leaderboard.cells import adopt_run
from keras_attn_zoo.leaderboard.cells import align_gold
from keras_attn_zoo.leaderboard.cells import run_cell
from keras_attn_zoo.leaderboard.jobs import run_in_processes
from keras_attn_zoo.leaderboard.report import rewrite_page
from keras_attn_zoo.leaderboard.report import write_report
from keras_attn_zoo.leaderboard.timing import retime_decoding
from keras_attn_zoo.leaderboard.timing import time_seeds

__all__ = [
    "Leaderboard",
    "align_gold",
    "retime_decoding",
    "rewrite_page",
    "run_cell",
    "run_in_processes",
    "time_seeds",
    "write_report",
]
