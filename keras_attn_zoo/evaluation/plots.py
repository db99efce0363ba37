"""Plots of the attention analyses: alignment heat maps.

matplotlib is an optional dependency (the `dev` extra). Figures are drawn on
an Agg canvas created here, so nothing touches `matplotlib.pyplot`'s global
state or needs a display: safe in servers, tests and training callbacks.
"""

import pathlib

import numpy as np


def _require_matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plot_alignment needs matplotlib: pip install matplotlib "
            "(or the package's 'dev' extra)."
        ) from error
    return Figure, FigureCanvasAgg


def plot_alignment(weights, source_tokens, target_tokens, path, title=None,
                   cmap="Greys", dpi=100):
    """Draws an attention / alignment matrix as a heat map and saves it.

    Source words run along the x axis (columns), target words down the y axis
    (rows), as in Bahdanau et al.'s figure 3: cell (t, s) is the weight target
    token t gave source token s.

    Args:
        weights: array-like `[T, S]` (e.g. one row of a search's `alignment`
            output, or `BahdanauRNN.attention_weights(...)[b]`). It may be
            larger than the token lists (padding): the top-left
            `[len(target_tokens), len(source_tokens)]` block is drawn.
        source_tokens: the S labels of the columns.
        target_tokens: the T labels of the rows.
        path: output file; the format follows the suffix (`.png`, `.pdf`,
            `.svg`); parent directories are created.
        title: optional figure title.
        cmap: matplotlib colour map (default black = weight 1 on white).
        dpi: resolution of raster formats.

    Returns:
        The `pathlib.Path` written.

    Raises:
        ValueError: when `weights` is not 2-D or is smaller than the labels.

    Example:
    >>> plot_alignment(result["alignment"][0, 0], source_pieces, target_pieces,
    ...                "alignment.png")
    """
    weights = np.asarray(weights, dtype=np.float32)
    source_tokens = [str(token) for token in source_tokens]
    target_tokens = [str(token) for token in target_tokens]
    if weights.ndim != 2:
        raise ValueError(f"weights must be 2-D [target, source], got shape {weights.shape}.")
    rows, columns = len(target_tokens), len(source_tokens)
    if weights.shape[0] < rows or weights.shape[1] < columns:
        raise ValueError(
            f"weights of shape {weights.shape} cannot label {rows} target and "
            f"{columns} source tokens."
        )
    weights = weights[:rows, :columns]

    Figure, FigureCanvasAgg = _require_matplotlib()
    cell = 0.35  # inches per token
    width = min(max(3.0, 1.5 + cell * columns), 60.0)
    height = min(max(3.0, 1.5 + cell * rows), 60.0)
    figure = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    image = axes.imshow(weights, cmap=cmap, vmin=0.0,
                        vmax=max(1.0, float(weights.max(initial=0.0))),
                        aspect="auto", interpolation="nearest")
    axes.set_xticks(range(columns))
    axes.set_xticklabels(source_tokens, rotation=90)
    axes.set_yticks(range(rows))
    axes.set_yticklabels(target_tokens)
    axes.xaxis.tick_top()
    axes.set_xlabel("source")
    axes.xaxis.set_label_position("top")
    axes.set_ylabel("target")
    if title:
        axes.set_title(title, pad=12)
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    figure.tight_layout()

    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path
