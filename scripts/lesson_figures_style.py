"""The style the per-lesson figure scripts (scripts/figures_05.py, _06, _07) draw with: the
course's shared one, scripts/figures_common.py, where it exists; otherwise the same
conventions (white background, 150 dpi, one colour per meaning, no PNG metadata) defined here,
so that each script also runs on its own."""
import os

try:
    from figures_common import COLORS, arrow, box, new_figure, plt, save  # noqa: F401
except ImportError:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

    COLORS = {"q": "#4C72B0", "k": "#DD8452", "v": "#55A868", "o": "#8172B3", "s": "#C44E52",
              "onchip": "#FFF4C2", "global": "#E8E8E8", "edge": "#333333", "muted": "#999999",
              "visible": "#55A868", "partial": "#F2C14E", "masked": "#D9D9D9"}
    plt.rcParams.update({"figure.facecolor": "white", "axes.facecolor": "white",
                         "savefig.facecolor": "white", "font.size": 10, "axes.titlesize": 11,
                         "axes.labelsize": 10, "legend.fontsize": 9,
                         "font.family": "DejaVu Sans", "svg.hashsalt": "attn-course"})

    def new_figure(width, height):
        fig = plt.figure(figsize=(width, height))
        ax = fig.add_axes([0, 0, 1, 1])
        ax.set_xlim(0, width)
        ax.set_ylim(0, height)
        ax.set_aspect("equal")
        ax.axis("off")
        return fig, ax

    def box(ax, x, y, w, h, face="white", edge=None, lw=1.0, text=None, fontsize=9,
            rounded=False, text_color="black", weight="normal", alpha=1.0, ha="center",
            va="center", zorder=1):
        edge = edge or COLORS["edge"]
        cls = FancyBboxPatch if rounded else Rectangle
        kw = {"boxstyle": "round,pad=0.02,rounding_size=0.08"} if rounded else {}
        ax.add_patch(cls((x, y), w, h, facecolor=face, edgecolor=edge, linewidth=lw,
                         alpha=alpha, zorder=zorder, **kw))
        if text is not None:
            tx = x + w / 2 if ha == "center" else (x + 0.08 if ha == "left" else x + w - 0.08)
            ty = y + h / 2 if va == "center" else (y + h - 0.08 if va == "top" else y + 0.08)
            ax.text(tx, ty, text, ha=ha, va=va, fontsize=fontsize, color=text_color,
                    weight=weight, zorder=zorder + 1)

    def arrow(ax, x0, y0, x1, y1, color=None, lw=1.4, style="-|>", text=None, fontsize=8,
              text_offset=(0, 0.12), connection="arc3", zorder=5):
        color = color or COLORS["edge"]
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=12,
                                     color=color, linewidth=lw, connectionstyle=connection,
                                     zorder=zorder))
        if text:
            ax.text((x0 + x1) / 2 + text_offset[0], (y0 + y1) / 2 + text_offset[1], text,
                    ha="center", va="bottom", fontsize=fontsize, color=color, zorder=zorder)

    def save(fig, out_dir, name):
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=150, metadata={"Software": None})
        plt.close(fig)
        return path
