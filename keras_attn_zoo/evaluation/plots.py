"""Plots of the attention analyses: alignment heat maps and the analysis report's figures.

`plot_alignment` draws one heat map; the others draw the figures of
`recipes/analyze.py`'s report (each appends the file it wrote to `files`).

matplotlib is an optional dependency (the `dev` extra). Figures are drawn on
an Agg canvas created here, so nothing touches `matplotlib.pyplot`'s global
state or needs a display: safe in servers, tests and training callbacks.
"""

import math
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

    Examples:
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


# ---- the report's figures ---------------------------------------------------------------


def _figure(width, height):
    Figure, FigureCanvasAgg = _require_matplotlib()
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _write_figure(figure, path):
    """Lays the figure out and writes it (parent directories created); returns the path."""
    figure.tight_layout()
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path


def _save(figure, path, files):
    figure.tight_layout()
    figure.savefig(path)
    files.append(path.name if path.parent.name != "heatmaps" else f"heatmaps/{path.name}")


def plot_bleu_by_length(report, out, files):
    """BLEU and chrF by source length (and the compared model's); adds the file to `files`."""
    rows = report["bleu_by_length"]
    figure = _figure(7, 3.5)
    for position, metric in enumerate(("bleu", "chrf")):
        axes = figure.add_subplot(1, 2, position + 1)
        labels = [r["bucket"] for r in rows]
        x = np.arange(len(labels))
        series = [("model", rows)]
        if report.get("compare"):
            series.append(("compare", report["compare"]["bleu_by_length"]))
        width = 0.8 / len(series)
        for k, (name, data) in enumerate(series):
            values = [r[metric] if r[metric] is not None else 0.0 for r in data]
            axes.bar(x + k * width, values, width, label=name)
        axes.set_xticks(x + width * (len(series) - 1) / 2)
        axes.set_xticklabels(labels, fontsize=8)
        axes.set_xlabel("source words")
        axes.set_title(metric.upper() if metric == "bleu" else "chrF")
        if len(series) > 1:
            axes.legend(fontsize=7)
    _save(figure, out / "bleu_by_length.png", files)


def plot_ngram(report, out, files):
    """n-gram precision (or its gap to the compared model); adds the file to `files`."""
    ngram = report["ngram_precision"]
    figure = _figure(6, 3.5)
    axes = figure.add_subplot(1, 1, 1)
    orders = np.arange(1, len(ngram["model"]) + 1)
    if ngram.get("difference") is not None:
        axes.bar(orders, ngram["difference"])
        axes.axhline(0.0, color="black", linewidth=0.8)
        axes.set_ylabel("precision gap (model - compare), points")
        axes.set_title("n-gram precision gap (GMM paper Figure 6)")
    else:
        axes.bar(orders, ngram["model"])
        axes.set_ylabel("precision (%)")
        axes.set_title("n-gram precision")
    axes.set_xticks(orders)
    axes.set_xlabel("n")
    _save(figure, out / "ngram_precision.png", files)


def _matrix_panels(matrices, path, files, xlabel, text_options, **image_options):
    """One annotated matrix per slot, side by side; rows are layers."""
    figure = _figure(3.2 * len(matrices), 3.2)
    for k, (slot, values) in enumerate(matrices.items()):
        values = np.asarray(values, dtype=float)
        axes = figure.add_subplot(1, len(matrices), k + 1)
        image = axes.imshow(values, **image_options)
        for (i, j), value in np.ndenumerate(values):
            axes.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                      **text_options)
        axes.set_xlabel(xlabel)
        axes.set_ylabel("layer")
        axes.set_xticks(range(values.shape[1]))
        axes.set_yticks(range(values.shape[0]))
        axes.set_title(slot, fontsize=9)
        figure.colorbar(image, ax=axes, fraction=0.046)
    _save(figure, path, files)


def plot_entropy(summary, out, files):
    """Entropy per layer (rows) and head (columns), one panel per attention slot."""
    _matrix_panels(summary["per_layer_head"], out / "entropy_per_layer_head.png", files,
                   "head", {"color": "white"}, cmap="viridis", aspect="auto")


def plot_entropy_by_length(series, out, files):
    """Attention entropy by source length, one line per series; adds the file to `files`."""
    figure = _figure(6, 3.5)
    axes = figure.add_subplot(1, 1, 1)
    for name, rows in series.items():
        labels = [r["bucket"] for r in rows]
        values = [np.nan if r["entropy"] is None else r["entropy"] for r in rows]
        axes.plot(labels, values, marker="o", label=name)
    axes.set_xlabel("source words")
    axes.set_ylabel("entropy (nats)")
    axes.set_title("attention entropy by source length (GMM paper Table 6)")
    axes.legend(fontsize=7)
    _save(figure, out / "entropy_by_length.png", files)


def plot_js(summary, out, files):
    """JS divergence between layers (0 to ln 2), one panel per attention slot."""
    _matrix_panels(summary["js_divergence"], out / "js_divergence.png", files, "layer",
                   {}, cmap="magma_r", vmin=0.0, vmax=math.log(2.0))


def draw_report_figures(report, out, files):
    """Every figure the report dict has data for (heat maps: `draw_heatmaps`)."""
    plot_bleu_by_length(report, out, files)
    plot_ngram(report, out, files)
    if report["attention"]:
        plot_entropy(report["attention"], out, files)
        if report["attention"]["js_divergence"]:
            plot_js(report["attention"], out, files)
    if report["entropy_by_length"]:
        plot_entropy_by_length(report["entropy_by_length"], out, files)


def draw_heatmaps(chosen, own, own_alignments, out, files, model=None,
                  make_batch=None):
    """Heat maps of chosen sentences; returns a list of {"file", "source", "target", ...}.

    With a zoo `model` that has attention: every decoder layer's cross-attention
    (heads averaged), teacher forced on the given target (the reference for data
    sentences, the second column of --sentences) or else on the model's own
    translation. Without: the exported alignment of the model's own translation.

    Args:
        chosen: `(source, target or None)` pairs to draw.
        own: the model's translations of the chosen sources, as
            `recipes/analyze.py` translates them.
        own_alignments: their exported alignments (`{"weights",
            "source_pieces", "target_pieces"}` or None).
        out: the report directory (maps go to `out/heatmaps/`).
        files: the report's file list, appended to.
        model: the zoo model to teacher force, or None.
        make_batch: `pairs -> (source_ids, target_ids, source_pieces,
            target_pieces)`, needed with `model`.
    """
    from keras_attn_zoo.evaluation.attention import attention_maps

    directory = out / "heatmaps"
    drawn = []
    for k, (source, target) in enumerate(chosen):
        if model is not None:
            forced = "reference" if target is not None else "own translation"
            target = target if target is not None else own[k]
            src, tgt, source_pieces, target_pieces = make_batch([(source, target)])
            cross = attention_maps(model, src, tgt)["cross"][:, 0]  # [L, h, T, S]
            for layer in range(cross.shape[0]):
                path = directory / f"sentence_{k}_layer_{layer}.png"
                plot_alignment(cross[layer].mean(axis=0), source_pieces[0],
                               target_pieces[0], path,
                               title=f"layer {layer}, heads averaged, forced {forced}")
                files.append(f"heatmaps/{path.name}")
                drawn.append({"file": f"heatmaps/{path.name}", "source": source,
                              "target": target, "layer": layer})
            continue
        alignment = own_alignments[k] if k < len(own_alignments) else None
        if alignment is None or not np.any(alignment["weights"]):
            continue
        path = directory / f"sentence_{k}.png"
        plot_alignment(alignment["weights"], alignment["source_pieces"],
                       alignment["target_pieces"], path,
                       title="exported alignment (one layer, heads averaged), own "
                             "translation")
        files.append(f"heatmaps/{path.name}")
        drawn.append({"file": f"heatmaps/{path.name}", "source": source,
                      "target": own[k], "layer": "exported"})
    return drawn


# ---- learning curves --------------------------------------------------------------------


def plot_learning_curves(curves, path, title=None, metric="bleu", groups=None):
    """Dev score against training minutes (left) and steps (right), one line per run.

    Args:
        curves: `{name: [{"step": ..., "minutes": ..., metric: ...}, ...]}`
            (points without minutes are left out of the left panel); a run
            with no points is left out.
        path: the image written (format by suffix); parent directories are created.
        title: optional figure title.
        metric: the key plotted ("bleu" or "chrf").
        groups: optional `{name: group}`: the runs of a group (a model's seeds)
            share a colour and one legend entry, so that many runs stay readable.

    Returns:
        The `pathlib.Path` written.
    """
    return _write_figure(learning_curves_figure(curves, title, metric, groups), path)


def learning_curves_figure(curves, title=None, metric="bleu", groups=None):
    """The figure of `plot_learning_curves` (same arguments), not written."""
    group_of, colours = groups or {}, {}
    # Ten colours repeat beyond ten groups; tab20 keeps up to twenty apart.
    palette = [f"C{index}" for index in range(10)]
    if len({group_of.get(name, name) for name in curves}) > 10:
        from matplotlib import colormaps

        palette = [colormaps["tab20"](index) for index in range(20)]
    figure = _figure(12 if groups else 11, 4.2)
    label = "BLEU" if metric == "bleu" else "chrF" if metric == "chrf" else metric
    for position, axis in enumerate(("minutes", "step")):
        axes = figure.add_subplot(1, 2, position + 1)
        labelled = set()
        for name, points in curves.items():
            points = [p for p in points if p.get(axis) is not None and p.get(metric) is not None]
            if not points:
                continue
            points.sort(key=lambda p: p["step"])
            group = group_of.get(name, name)
            axes.plot([p[axis] for p in points], [p[metric] for p in points],
                      marker="o", markersize=3, linewidth=1, color=colours.setdefault(
                          group, palette[len(colours) % len(palette)]),
                      label=None if group in labelled else group)
            labelled.add(group)
        axes.set_xlabel("training minutes" if axis == "minutes" else "steps")
        axes.set_ylabel(f"dev {label}")
        axes.grid(alpha=0.3)
        if position == 1 and axes.get_legend_handles_labels()[0]:
            # Outside the plot, right of the second panel: the curves stay visible.
            axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


def plot_run_curve(points, path, best_step=None, metric=None, title=None):
    """One run's dev BLEU and chrF against steps, the best step marked.

    Args:
        points: `[{"step", "bleu", "chrf", "minutes" (optional)}]`.
        path: the image written; parent directories are created.
        best_step: the step whose weights the run kept (a dashed line and,
            on `metric`'s panel, a star), or None.
        metric: the metric the best step was chosen by ("bleu" or "chrf").
        title: optional figure title.

    Returns:
        The `pathlib.Path` written.
    """
    points = sorted(points, key=lambda p: p["step"])
    figure = _figure(11, 4.2)
    for position, key in enumerate(("bleu", "chrf")):
        axes = figure.add_subplot(1, 2, position + 1)
        steps = [p["step"] for p in points]
        values = [p[key] for p in points]
        axes.plot(steps, values, marker="o", markersize=3, linewidth=1, color="C0")
        if best_step is not None:
            axes.axvline(best_step, color="C3", linestyle="--", linewidth=1,
                         label=f"best step {best_step}"
                               + (f" (by {metric})" if metric else ""))
            best = [p[key] for p in points if p["step"] == best_step]
            if best and key == metric:
                axes.plot([best_step], best, marker="*", markersize=12, color="C3")
            axes.legend(fontsize=7, loc="lower right")
        axes.set_xlabel("steps")
        axes.set_ylabel("dev BLEU" if key == "bleu" else "dev chrF")
        axes.grid(alpha=0.3)
    if title:
        figure.suptitle(title, fontsize=10)
    return _write_figure(figure, path)


def plot_score_against(rows, key, path, xlabel, metric="bleu"):
    """Mean score against `key` per model, the seed spread as error bars.

    Args:
        rows: `[{"model", key, metric, f"{metric}_std", f"{key}_std" (optional)}]`,
            the leaderboard's aggregated rows; rows without `key` are left out.
        path: the image written; parent directories are created.
        xlabel: the x axis' label.

    Returns:
        The `pathlib.Path` written.
    """
    figure = _figure(6.5, 4.5)
    axes = figure.add_subplot(1, 1, 1)
    for row in rows:
        if row.get(key) is None or row.get(metric) is None:
            continue
        axes.errorbar(row[key], row[metric], yerr=row.get(f"{metric}_std") or 0.0,
                      xerr=row.get(f"{key}_std") or 0.0, fmt="o", capsize=3)
        axes.annotate(row["model"], (row[key], row[metric]), fontsize=7,
                      textcoords="offset points", xytext=(4, 4))
    axes.set_xlabel(xlabel)
    axes.set_ylabel(f"test {'BLEU' if metric == 'bleu' else metric} (mean ± std over seeds)")
    axes.grid(alpha=0.3)
    return _write_figure(figure, path)


def plot_attention_grid(weights, path, title=None):
    """Attention matrices `[layers, heads, queries, keys]` as one grid of heat maps.

    Rows are layers, columns heads; each panel's rows are queries and its
    columns keys (a self-attention, e.g. RAN's learned matrices).

    Returns:
        The `pathlib.Path` written (parent directories created).
    """
    weights = np.asarray(weights, dtype=float)
    layers, heads = weights.shape[:2]
    figure = _figure(1.8 * heads + 0.6, 1.8 * layers + (0.5 if title else 0.2))
    for layer in range(layers):
        for head in range(heads):
            axes = figure.add_subplot(layers, heads, layer * heads + head + 1)
            axes.imshow(weights[layer, head], cmap="Greys", vmin=0.0, aspect="equal")
            axes.set_xticks([])
            axes.set_yticks([])
            if layer == layers - 1:
                axes.set_xlabel(f"head {head}: keys", fontsize=7)
            if head == 0:
                axes.set_ylabel(f"layer {layer}: queries", fontsize=7)
    if title:
        figure.suptitle(title, fontsize=9)
    return _write_figure(figure, path)
