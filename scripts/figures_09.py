#!/usr/bin/env python3
"""Figures of module 09's lesson (modules/09_hopper/README.md), called by
scripts/make_figures.py through make(out_dir); runnable alone:
python3 scripts/figures_09.py [out_dir].

  09_block.png       one thread block: the producer warpgroup (TMA), two consumer warpgroups
                     (wgmma, registers), the Q tile and the 2-slot K/V ring in shared memory
                     with their full/empty barriers, and the path of O back to global memory
  09_ring.png        the barrier protocol of the 2-slot ring over K/V tiles 0-5: slot, fill
                     and the phase parity every wait uses
  09_schedules.png   serial, overlap and ping-pong as swimlanes (schematic, not measured)
  09_ladder.png      TFLOP/s of every rung of bench_09 (docs/results/ladder09_h100.json)
  09_timeline.png    measured: when each consumer of one block waits for S, runs the softmax
                     and waits for P V, serial against ping-pong
                     (docs/results/timeline09_h100.json, bench_09 --timeline)
  09_vs_cudnn.png    measured: forward() beside cuDNN, FlashAttention-2 and the FP8 rung,
                     N = 512 ... 16384, one run (ladder09_lazy_*, bench09_lazy_h100_torch;
                     the FP8 rung from the run before, fp8_09_final_h100.json)
  09_scheduler.png   measured: the persistent-grid rungs (round robin, dynamic scheduler,
                     work-tile order) beside cuDNN, causal shapes, same run
  09_fp32.png        measured: the 3xTF32 rung (fp32 on wgmma) beside module 07's 3xTF32 and
                     PyTorch's fp32 SDPA, N = 512 ... 16384, one H200 run
                     (bench09_tf32_h200.json, torch09_tf32_h200.json)
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from figures_common import (COLORS, arrow, box, ladder_bars, new_figure, plt, save,  # noqa: E402
                            save_full_colour)

LIGHT = {  # light versions of the palette, for boxes that carry text
    "q": "#C9D6EC",
    "k": "#F5D3BC",
    "v": "#CBE6D2",
    "o": "#E3DDF2",
    "s": "#F6D5D6",
    "tma": "#DDE6F2",
    "producer": "#EFEFEF",
}
MONO = "DejaVu Sans Mono"


# ---------------------------------------------------------------------------------------------
# 09_block.png


def _chip(ax, x, y, name, full):
    """A small mbarrier box: 'full' ones with the copy engine's colour, 'empty' ones white."""
    box(ax, x, y, 0.95, 0.25, face=LIGHT["tma"] if full else "white", edge=COLORS["edge"],
        lw=0.7, text=name, fontsize=7, rounded=True, zorder=3)


def block(out_dir):
    fig, ax = new_figure(12.8, 7.6)
    ax.text(0.2, 7.35, "One thread block (d = 128 shown): 3 warpgroups = 384 threads, "
            "one tile of 128 query rows", fontsize=11, weight="bold", va="center")

    # Global memory.
    box(ax, 0.2, 0.95, 1.6, 5.95, face=COLORS["global"], rounded=True)
    ax.text(1.0, 6.65, "global memory", ha="center", va="center", fontsize=9, style="italic")
    for name, y, key in (("K", 5.45, "k"), ("V", 4.05, "v"), ("Q", 2.1, "q"), ("O", 1.15, "o")):
        box(ax, 0.45, y, 1.1, 0.7, face=COLORS[key], text=name, fontsize=10, weight="bold",
            text_color="white")

    # The copy engine.
    box(ax, 2.3, 1.05, 1.15, 5.1, face=LIGHT["tma"], rounded=True)
    ax.text(2.875, 3.75, "TMA\n(copy\nengine)", ha="center", va="center", fontsize=9,
            weight="bold")
    ax.text(2.875, 2.95, "a load's bytes\ncomplete its\n'full' barrier", ha="center",
            va="center", fontsize=7)
    for y in (5.8, 4.4, 2.45):  # loads: global -> TMA
        arrow(ax, 1.55, y, 2.3, y)
    arrow(ax, 2.3, 1.5, 1.55, 1.5, color=COLORS["o"])  # store: TMA -> global O
    ax.text(1.92, 1.62, "store", ha="center", va="bottom", fontsize=7, color=COLORS["o"])

    # The block.
    box(ax, 3.95, 0.85, 8.65, 6.2, face="white", edge=COLORS["edge"], lw=1.2, rounded=True)

    # Producer warpgroup.
    box(ax, 4.1, 6.05, 3.95, 0.85, face=LIGHT["producer"], rounded=True)
    ax.text(4.2, 6.7, "warpgroup 0: producer", fontsize=9, weight="bold", va="center")
    ax.text(4.2, 6.4, "one thread issues every TMA copy", fontsize=8, va="center")
    ax.text(4.2, 6.17, "setmaxnreg: 24 registers per thread", fontsize=8, va="center")
    arrow(ax, 4.1, 6.45, 3.3, 6.15, text="copy requests", fontsize=7, text_offset=(-0.25, 0.08))

    # Shared memory.
    box(ax, 4.1, 1.0, 3.95, 4.9, face=COLORS["onchip"], rounded=True)
    ax.text(4.2, 5.72, "shared memory", fontsize=9, weight="bold", va="center")
    ax.text(4.2, 5.47, "tiles as 64-column panels of 128-byte rows, 128-byte swizzle",
            fontsize=7, va="center")
    for slot, y in ((0, 4.0), (1, 2.6)):
        box(ax, 4.2, y, 3.75, 1.3, face="none", edge=COLORS["muted"], lw=0.8)
        ax.text(4.28, y + 1.15, f"ring slot {slot}", fontsize=7.5, va="center", style="italic")
        box(ax, 4.3, y + 0.1, 1.2, 0.9, face=COLORS["k"], text="K tile\nkBlockN x d",
            fontsize=7.5, text_color="white")
        box(ax, 5.6, y + 0.1, 1.2, 0.9, face=COLORS["v"], text="V tile\nkBlockN x d",
            fontsize=7.5, text_color="white")
        for n, (name, full) in enumerate((("K full", True), ("K empty", False),
                                          ("V full", True), ("V empty", False))):
            _chip(ax, 6.9, y + 0.96 - 0.29 * n, name, full)
        arrow(ax, 3.45, y + 0.55, 4.3, y + 0.55)  # TMA -> slot
    # Q tile: 2 panels of 64 columns.
    ax.text(4.28, 2.35, "Q tile, 128 rows x d (then O, staged for the store)", fontsize=7.5,
            va="center", style="italic")
    for panel in range(2):
        box(ax, 4.3 + panel * 1.3, 1.15, 1.2, 1.0, face=COLORS["q"],
            text=f"panel {panel}\ncolumns\n{64 * panel}-{64 * panel + 63}", fontsize=7.5,
            text_color="white")
    _chip(ax, 6.9, 1.72, "Q full", True)
    _chip(ax, 6.9, 1.35, "Q empty", False)
    arrow(ax, 3.45, 1.9, 4.3, 1.9)  # TMA -> Q
    arrow(ax, 4.3, 1.3, 3.45, 1.3, color=COLORS["o"])  # O staged -> TMA store

    # Consumer warpgroups.
    cx = 9.35
    for c, y in ((1, 4.0), (2, 1.0)):
        rows = f"{64 * (c - 1)}-{64 * c - 1}"
        box(ax, cx, y, 3.1, 2.85, face="white", edge=COLORS["o"], lw=1.2, rounded=True)
        ax.text(cx + 0.1, y + 2.65, f"warpgroup {c}: consumer", fontsize=9, weight="bold",
                va="center")
        ax.text(cx + 0.1, y + 2.38, f"query rows {rows}; setmaxnreg: 240 registers",
                fontsize=8, va="center")
        box(ax, cx + 0.1, y + 1.55, 2.9, 0.6, face=LIGHT["s"], edge=COLORS["s"],
            text="S = Q Kᵀ: 64 x kBlockN fp32\n(wgmma accumulator, registers)", fontsize=7.5)
        box(ax, cx + 0.1, y + 0.85, 2.9, 0.6, face=LIGHT["s"], edge=COLORS["s"],
            text="P = exp(S - m), packed to bf16\nin registers (wgmma A operand)",
            fontsize=7.5)
        box(ax, cx + 0.1, y + 0.15, 2.9, 0.6, face=LIGHT["o"], edge=COLORS["o"],
            text="O += P V: 64 x d fp32 (registers)\nrow max m, row sum l", fontsize=7.5)

    # Between shared memory and the consumers: wgmma reads, empty arrivals, O stores.
    arrow(ax, 8.05, 3.75, cx, 4.9, lw=1.2)
    arrow(ax, 8.05, 3.75, cx, 2.6, lw=1.2)
    ax.text(8.75, 3.75, "wgmma reads\nQ, K, V\n(matrix\ndescriptors)", ha="center",
            va="center", fontsize=7.5)
    arrow(ax, cx, 5.75, 7.85, 4.81, color=COLORS["s"], lw=1.0)
    arrow(ax, cx, 2.0, 7.85, 2.82, color=COLORS["s"], lw=1.0)
    ax.text(8.75, 5.75, "arrive on\n'empty'", ha="center", va="center", fontsize=7.5,
            color=COLORS["s"])
    arrow(ax, cx, 1.2, 6.8, 1.2, color=COLORS["o"], lw=1.2)
    ax.text(8.7, 1.27, "O: st.shared", ha="center", va="bottom", fontsize=7.5,
            color=COLORS["o"])

    ax.text(0.2, 0.55, "Loads: the producer announces a tile's bytes on its 'full' barrier "
            "(arrive_expect_bytes); the copy engine completes it when they have landed. "
            "Consumers wait on 'full',", fontsize=8, va="center")
    ax.text(0.2, 0.3, "read with wgmma and arrive on 'empty' once their wgmma has finished "
            "(8 consumer warps per slot). d = 64 runs 3 consumers (160 registers each, "
            "producer 32).", fontsize=8, va="center")
    return save(fig, out_dir, "09_block.png")


# ---------------------------------------------------------------------------------------------
# 09_ring.png

TILES = 6
STAGES = 2
LABEL_BOX = dict(facecolor="white", edgecolor="none", pad=0.5)  # hides the guides behind text


def ring_schedule(tiles=TILES, stages=STAGES, load=1.0, compute=2.0):
    """A schematic timeline of the ring: the producer's load of tile j starts once slot j % 2
    is empty again (tile j - 2 released) and its previous load is done; the consumers compute
    tile j once it has landed and tile j - 1 is done. Returns per tile (load start, landed,
    compute start, released)."""
    out = []
    for j in range(tiles):
        start = 0.0 if j == 0 else out[j - 1][1]
        if j >= stages:
            start = max(start, out[j - stages][3])
        landed = start + load
        begin = landed if j == 0 else max(landed, out[j - 1][3])
        out.append((start, landed, begin, begin + compute))
    return out


def ring(out_dir):
    fig, ax = new_figure(12.5, 9.6)
    ax.text(0.2, 9.35, "The 2-slot K/V ring: tile j uses slot j % 2, fill j / 2, phase parity "
            "(j / 2) % 2", fontsize=11, weight="bold", va="center")
    sched = ring_schedule()
    x0, scale, lane_h = 2.0, 0.78, 0.5

    def tx(t):
        return x0 + scale * t

    lanes = {"producer": 8.1, "slot 0": 6.95, "slot 1": 5.8, "consumers": 4.75}
    names = {"producer": "producer\n(1 thread)", "slot 0": "slot 0", "slot 1": "slot 1",
             "consumers": "consumers\n(8 warps)"}
    end = tx(sched[-1][3]) + 0.1
    for lane, y in lanes.items():
        ax.text(0.25, y + lane_h / 2, names[lane], fontsize=8.5, va="center", weight="bold")
        ax.plot([tx(0), end], [y, y], color="#DDDDDD", lw=0.6, zorder=0)
    for j, (start, landed, begin, released) in enumerate(sched):
        slot, fill = j % STAGES, j // STAGES
        # The consumers' release of tile j lets the producer load tile j + 2 (dotted guide).
        if j + STAGES < TILES:
            ax.plot([tx(released)] * 2, [lanes["consumers"] + lane_h, lanes["producer"]],
                    color=COLORS["s"], lw=0.9, ls=":", zorder=0)
        # Producer: a wait that blocks, then the copies.
        previous = 0.0 if j == 0 else sched[j - 1][1]
        if start > previous:
            box(ax, tx(previous), lanes["producer"], tx(start) - tx(previous), lane_h,
                face="white", edge=COLORS["muted"], lw=0.6, text="waits", fontsize=7,
                text_color=COLORS["muted"])
            ax.patches[-1].set_hatch("///")
        box(ax, tx(start), lanes["producer"], scale, lane_h, face=COLORS["k"],
            text=f"K/V {j}", fontsize=7.5, text_color="white", weight="bold")
        ax.text(tx(start) + scale / 2, lanes["producer"] + lane_h + 0.05,
                f"wait empty[{slot}]\nparity {(fill % 2) ^ 1}", ha="center", va="bottom",
                fontsize=6.5)
        # The slot: bytes landing, then the tile in use until released.
        sy = lanes[f"slot {slot}"]
        box(ax, tx(start), sy, scale, lane_h, face=LIGHT["tma"], text="bytes\nlanding",
            fontsize=6.5)
        box(ax, tx(landed), sy, tx(released) - tx(landed), lane_h, face=LIGHT["k"],
            text=f"tile {j} (fill {fill})", fontsize=7.5)
        ax.text(tx(landed) + 0.04, sy + lane_h + 0.04, f"full[{slot}] done, parity {fill % 2}",
                ha="left", va="bottom", fontsize=6.5, color=COLORS["q"], bbox=LABEL_BOX)
        ax.text(tx(released) - 0.04, sy - 0.04, f"empty[{slot}] done, parity {fill % 2}",
                ha="right", va="top", fontsize=6.5, color=COLORS["s"], bbox=LABEL_BOX)
        # Consumers.
        box(ax, tx(begin), lanes["consumers"], tx(released) - tx(begin), lane_h,
            face=COLORS["o"], text=f"wait full[{slot}] parity {fill % 2}\nS, softmax, PV: {j}",
            fontsize=6.5, text_color="white")
    ax.text(end, lanes["consumers"] - 0.2, "time", ha="right", va="center", fontsize=8,
            style="italic")
    ax.text(0.25, 4.2, "Schematic times (a load takes half a compute). Dotted: the 8 consumer "
            "warps arrive on empty[s] after their wgmma, which lets the producer refill slot s "
            "with tile j + 2.", fontsize=8, va="center")

    # The table: (label, height, cell text per tile or one text for the whole row).
    f = [j // STAGES for j in range(TILES)]
    rows = [
        ("tile j", 0.32, [str(j) for j in range(TILES)]),
        ("slot = j % 2", 0.32, [str(j % STAGES) for j in range(TILES)]),
        ("fill = j / 2", 0.32, [str(f[j]) for j in range(TILES)]),
        ("producer waits empty[slot],\nparity (fill % 2) ^ 1", 0.46,
         [f"{(f[j] % 2) ^ 1}" + (" (passes at once)" if j < STAGES else "")
          for j in range(TILES)]),
        ("producer: arrive_expect_bytes\non full[slot], then TMA copies", 0.46,
         "one arrival announcing kBlockN x d x 2 bytes (K), then the copies of the "
         "tile's 64-column panels; the same for V"),
        ("full[slot] completes\nwhen the bytes have landed", 0.46,
         [f"phase {f[j]}, parity {f[j] % 2}" for j in range(TILES)]),
        ("consumers wait full[slot],\nparity fill % 2", 0.46,
         [str(f[j] % 2) for j in range(TILES)]),
        ("8 consumer warps arrive on\nempty[slot]: completes parity", 0.46,
         [str(f[j] % 2) for j in range(TILES)]),
    ]
    tx0, label_w, col_w = 0.2, 2.75, 1.25
    y = 3.85
    for r, (label, h, cells) in enumerate(rows):
        y -= h
        face = "#F2F2F2" if r == 0 else "white"
        weight = "bold" if r == 0 else "normal"
        box(ax, tx0, y, label_w, h, face=face, edge="#BBBBBB", lw=0.6, text=label,
            fontsize=7.5, ha="left", weight=weight)
        if isinstance(cells, str):
            box(ax, tx0 + label_w, y, TILES * col_w, h, face=face, edge="#BBBBBB", lw=0.6,
                text=cells, fontsize=7.5)
            continue
        for j, text in enumerate(cells):
            box(ax, tx0 + label_w + j * col_w, y, col_w, h, face=face, edge="#BBBBBB", lw=0.6,
                text=text, fontsize=7.5, weight=weight,
                text_color=COLORS["k"] if r == 3 and j < STAGES else "black")
    note_x = tx0 + label_w + TILES * col_w + 0.15
    ax.text(note_x, 3.8, "A fresh barrier is in\nphase 0; a wait for\nparity 1 (the phase\n"
            "'before' it) returns\nat once.", fontsize=7.5, va="top")
    ax.text(note_x, 2.5, "K and V each have\ntheir own full/empty\npair; consumers free\n"
            "K after S = Q Kᵀ,\nV after O += P V.", fontsize=7.5, va="top")
    ax.text(note_x, 1.2, "Q: one full/empty\npair, one fill per\n128-row query tile.",
            fontsize=7.5, va="top")
    return save(fig, out_dir, "09_ring.png")


# ---------------------------------------------------------------------------------------------
# 09_schedules.png

GEMM = 1.0      # one warpgroup's S = Q K^T, or its O += P V, alone on the tensor cores
SOFTMAX = 1.3   # exponentials, maxima, sums of one tile
PACK = 0.3      # rescale O, pack P to 16 bits
SCHED_COLORS = {"S": COLORS["s"], "PV": COLORS["o"], "softmax": COLORS["partial"],
                "pack": "#F7DC9A"}


def serial_lanes(tiles=3):
    """Both consumers in step; their GEMMs share the tensor cores (two half-height bars).
    Tensor segments: (start, end, kind, tile, consumers); ALU: per consumer (start, end, kind,
    tile)."""
    tensor, alu = [], {1: [], 2: []}
    t = 0.0
    for j in range(tiles):
        tensor.append((t, t + 2 * GEMM, "S", j, (1, 2)))
        t += 2 * GEMM
        for c in (1, 2):
            alu[c].append((t, t + SOFTMAX + PACK, "softmax", j))
        t += SOFTMAX + PACK
        tensor.append((t, t + 2 * GEMM, "PV", j, (1, 2)))
        t += 2 * GEMM
    return tensor, alu, t


def overlap_lanes(tiles=4):
    """Both consumers in step; S of tile j+1 and P V of tile j are issued together, the
    softmax of j+1 runs while P V of j runs."""
    tensor, alu = [], {1: [], 2: []}
    tensor.append((0.0, 2 * GEMM, "S", 0, (1, 2)))
    t = 2 * GEMM
    for c in (1, 2):
        alu[c].append((t, t + SOFTMAX + PACK, "softmax", 0))
    t += SOFTMAX + PACK
    for j in range(tiles - 1):
        tensor.append((t, t + 2 * GEMM, "S", j + 1, (1, 2)))
        tensor.append((t + 2 * GEMM, t + 4 * GEMM, "PV", j, (1, 2)))
        for c in (1, 2):
            alu[c].append((t + 2 * GEMM, t + 2 * GEMM + SOFTMAX, "softmax", j + 1))
            alu[c].append((t + 4 * GEMM, t + 4 * GEMM + PACK, "pack", j + 1))
        t += 4 * GEMM + PACK
    return tensor, alu, t


def pingpong_lanes(horizon=17.0):
    """The consumers take turns to issue (named barriers); the tensor cores run the GEMMs in
    the order they were issued, one warpgroup's at a time. Each consumer: issue S(j+1) and
    P V(j), wait for S, softmax, wait for P V, pack, wait for its turn, issue again."""
    tensor, alu = [], {1: [], 2: []}
    tensor_free = 0.0
    turn_passed = {1: 0.0, 2: 0.0}   # when the other consumer last passed the turn
    ready = {1: 0.0, 2: 0.0}          # when the consumer can issue next
    tile = {1: 0, 2: 0}
    first = {1: True, 2: True}
    order = [1, 2]
    while True:
        progressed = False
        for c in order:
            other = 2 if c == 1 else 1
            issue = max(ready[c], turn_passed[c])
            if issue > horizon:
                continue
            progressed = True
            j = tile[c]
            start = max(issue, tensor_free)
            s_end = start + GEMM
            tensor.append((start, s_end, "S", j if first[c] else j + 1, (c,)))
            if first[c]:
                pv_end = s_end
                soft_end = s_end + SOFTMAX + PACK
                alu[c].append((s_end, soft_end, "softmax", j))
                ready[c] = soft_end
                first[c] = False
            else:
                pv_end = s_end + GEMM
                tensor.append((s_end, pv_end, "PV", j, (c,)))
                soft_end = s_end + SOFTMAX
                alu[c].append((s_end, soft_end, "softmax", j + 1))
                pack_start = max(soft_end, pv_end)
                alu[c].append((pack_start, pack_start + PACK, "pack", j + 1))
                ready[c] = pack_start + PACK
                tile[c] = j + 1
            tensor_free = pv_end
            turn_passed[other] = issue
        if not progressed:
            break
    return tensor, alu, horizon


def schedules(out_dir):
    fig, ax = new_figure(12.5, 8.4)
    ax.text(0.2, 8.15, "Three schedules of the consumer warpgroups (schematic, not measured)",
            fontsize=11.5, weight="bold", va="center")
    x0, scale, lane_h = 2.3, 0.6, 0.42
    panels = [
        ("serial: S GEMM, wait, softmax, P V GEMM, wait; the tensor cores idle during softmax",
         serial_lanes(), 7.35),
        ("overlap: S of tile j+1 issued with P V of tile j; softmax of j+1 runs under P V of j",
         overlap_lanes(), 4.85),
        ("ping-pong: the consumers take turns to issue (named barriers); one's softmax runs "
         "under the other's GEMMs", pingpong_lanes(), 2.35),
    ]
    horizon = 16.5
    for title, (tensor, alu, _), top in panels:
        ax.text(0.2, top + 0.05, title, fontsize=9.5, va="bottom", weight="bold")
        ys = {"tensor": top - 0.5, 1: top - 1.0, 2: top - 1.5}
        labels = {"tensor": "tensor cores", 1: "consumer 1\nALU / SFU", 2: "consumer 2\nALU / SFU"}
        for key, y in ys.items():
            ax.text(0.35, y + lane_h / 2, labels[key], fontsize=8, va="center")
            box(ax, x0, y, scale * horizon, lane_h, face="white", edge="#DDDDDD", lw=0.6,
                zorder=0)
        busy = []
        for start, end, kind, j, who in tensor:
            if start >= horizon:
                continue
            end = min(end, horizon)
            busy.append((start, end))
            h = lane_h / len(who)
            for n, c in enumerate(who):
                y = ys["tensor"] + lane_h - (n + 1) * h
                label = f"{kind} {j} ({c})"
                box(ax, x0 + scale * start, y, scale * (end - start), h,
                    face=SCHED_COLORS[kind], edge="white", lw=0.8, text=label,
                    fontsize=6.5 if len(who) > 1 else 7, text_color="white")
        # Idle stretches of the tensor cores.
        busy.sort()
        t = 0.0
        for start, end in busy + [(horizon, horizon)]:
            if start - t > 0.05:
                box(ax, x0 + scale * t, ys["tensor"], scale * (start - t), lane_h,
                    face="white", edge=COLORS["muted"], lw=0.5,
                    text="idle" if start - t > 0.6 else None, fontsize=6.5,
                    text_color=COLORS["muted"])
                ax.patches[-1].set_hatch("///")
            t = max(t, end)
        for c in (1, 2):
            for start, end, kind, j in alu[c]:
                if start >= horizon:
                    continue
                end = min(end, horizon)
                text = f"softmax {j}" if kind == "softmax" else ""
                box(ax, x0 + scale * start, ys[c], scale * (end - start), lane_h,
                    face=SCHED_COLORS[kind], edge="white", lw=0.8, text=text, fontsize=7)
    ax.text(0.2, 0.55, "S j: S = Q Kᵀ of K/V tile j; PV j: O += P V; (1), (2): the consumer "
            "whose GEMM it is (stacked: both run at once and share the tensor cores). "
            "Pale yellow: rescale O, pack P; blank: waiting.", fontsize=8, va="center")
    ax.text(0.2, 0.28, f"Assumed: one warpgroup's GEMM = 1 unit alone on the tensor cores, "
            f"softmax = {SOFTMAX}, rescale + pack = {PACK}. Time runs to the right.",
            fontsize=8, va="center")
    return save(fig, out_dir, "09_schedules.png")


# ---------------------------------------------------------------------------------------------
# 09_ladder.png


def ladder(out_dir):
    return ladder_bars("ladder09_h100.json", "bench_09 on the H100, N = 8192, bf16", out_dir,
                       "09_ladder.png", figsize=(11.5, 4.6))


def timeline(out_dir, first_step=16, steps=6):
    """Measured: docs/results/timeline09_h100.json (bench_09 --timeline), block 0, d = 128."""
    with open(os.path.join(REPO, "docs", "results", "timeline09_h100.json")) as f:
        data = json.load(f)
    kinds = [("waits for S", "#4C72B0"), ("softmax", "#DD8452"), ("waits for P V", "#8172B3")]
    fig, axes = plt.subplots(len(data["schedules"]), 1, figsize=(10.5, 4.6), sharex=False)
    for ax, sched in zip(axes, data["schedules"]):
        rows = [r for r in sched["steps"] if first_step <= r[1] < first_step + steps]
        t0 = min(r[2] for r in rows)
        for consumer, step, issue, s_ready, softmax_done, pv_done in rows:
            y = 1 - consumer
            for (start, end), (label, color) in zip(
                    ((issue, s_ready), (s_ready, softmax_done), (softmax_done, pv_done)), kinds):
                ax.barh(y, (end - start) / 1000.0, left=(start - t0) / 1000.0, height=0.6,
                        color=color, edgecolor="white", lw=0.5)
            ax.text((issue - t0) / 1000.0, y + 0.38, str(step), fontsize=6.5, color="#555555")
        per_step = {}
        for consumer in (0, 1):
            own = sorted((r for r in sched["steps"] if r[0] == consumer and first_step <= r[1]),
                         key=lambda r: r[1])
            if len(own) > 1:
                per_step[consumer] = (own[-1][2] - own[0][2]) / (len(own) - 1)
        mean = sum(per_step.values()) / max(1, len(per_step))
        ax.set_yticks([1, 0])
        ax.set_yticklabels(["consumer 1", "consumer 2"], fontsize=8.5)
        ax.set_title(f"{sched['name']}: one loop step every {mean:,.0f} cycles per consumer "
                     f"(steps {first_step} to {first_step + steps - 1} shown)", fontsize=9.5)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_ylim(-0.6, 1.8)
    axes[-1].set_xlabel("thousands of SM cycles (clock64) from the first step shown")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for _, c in kinds]
    fig.legend(handles, [k for k, _ in kinds], loc="upper right", fontsize=8, ncol=3)
    fig.suptitle("Measured: block 0 of bench_09 --timeline on the H100 (d = 128, N = 8192, bf16)",
                 fontsize=10.5, x=0.35)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return save(fig, out_dir, "09_timeline.png")


# ---------------------------------------------------------------------------------------------
# 09_vs_cudnn.png and 09_scheduler.png: one run of bench_09, compare_torch.py and bench_09_fp8

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
PANELS = ((64, False), (128, False), (64, True), (128, True))
# The measured run the two figures draw: bench_09 per N and compare_torch.py, one machine, one
# call; the FP8 rung from its own run.
LADDER = "ladder09_lazy_n{n}_h100.json"
TORCH = "bench09_lazy_h100_torch.json"
FP8 = "fp8_09_final_h100.json"
SOURCES = f"docs/results/{LADDER.format(n='*')}, {TORCH} (one run)"


def _results(name):
    with open(os.path.join(REPO, "docs", "results", name)) as f:
        return json.load(f)


def _ladder_rows():
    """{(rung, N, head_dim, causal): TFLOP/s} from LADDER."""
    rows = {}
    for n in SEQS:
        for r in _results(LADDER.format(n=n))["rows"]:
            if r["status"] == "ok":
                rows[(r["rung"], r["seq"], r["head_dim"], r["causal"])] = r["tflops"]
    return rows


def _torch_rows():
    return {(r["kernel"], r["seq_q"], r["head_dim"], r["causal"]): r["tflops"]
            for r in _results(TORCH)["results"] if r["status"] == "ok"}


def _panels(title, series, caption, name, out_dir, panels=PANELS, figsize=(13.5, 3.9),
            ncol=None):
    """One panel per (d, causal) of `panels`, TFLOP/s against N; series: (label, color,
    style, {(N, d, causal): TFLOP/s})."""
    fig, axes = plt.subplots(1, len(panels), figsize=figsize, sharey=False)
    for ax, (d, causal) in zip(axes, panels):
        for label, color, style, values in series:
            xs = [n for n in SEQS if (n, d, causal) in values]
            ax.plot(xs, [values[(n, d, causal)] for n in xs], style, color=color, label=label,
                    lw=1.6, ms=4)
        ax.set_xscale("log", base=2)
        ax.set_xticks(SEQS)
        ax.set_xticklabels([str(n) for n in SEQS], fontsize=7.5)
        ax.set_title(f"d = {d}" + (", causal" if causal else ""))
        ax.set_xlabel("N (16k tokens)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("TFLOP/s")
    handles, labels = axes[0].get_legend_handles_labels()
    ncol = ncol or len(series)
    rows = -(-len(series) // ncol)  # legend rows below the panels
    # Room below the panels for the legend and the caption: the same inches at any height.
    bottom = (0.12 + 0.06 * (rows - 1)) * 3.9 / figsize[1]
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False,
               bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(title)
    fig.text(0.5, bottom - 0.045 * 3.9 / figsize[1], caption, ha="center", fontsize=7.5,
             color="#555555")
    fig.tight_layout(rect=(0, bottom, 1, 0.95))
    return save_full_colour(fig, out_dir, name)


def vs_cudnn(out_dir):
    """Measured: forward() beside cuDNN, FlashAttention-2 and the FP8 rung, one run."""
    ladder_rows, torch_rows = _ladder_rows(), _torch_rows()
    fp8 = {(r["seq"], r["head_dim"], r["causal"]): r["tflops"]
           for r in _results(FP8)["rows"] if r["rung"] == "fp8" and r["status"] == "ok"}
    pick = lambda rows, key: {k[1:]: v for k, v in rows.items() if k[0] == key}  # noqa: E731
    series = [("module 09 forward()", COLORS["q"], "o-", pick(ladder_rows, "forward")),
              ("PyTorch cuDNN", COLORS["s"], "s-", pick(torch_rows, "torch_sdpa_cudnn")),
              ("PyTorch FlashAttention-2", COLORS["muted"], "^-", pick(torch_rows, "torch_sdpa_flash")),
              ("FP8 rung (e4m3, attention alone)", COLORS["v"], "d--", fp8)]
    return _panels("Module 09 on the H100, bf16 in and out",
                   series, f"{SOURCES}; FP8: {FP8} (the run before)", "09_vs_cudnn.png", out_dir)


def scheduler(out_dir):
    """Measured: the scheduler's rungs beside cuDNN on the causal shapes, same run as
    09_vs_cudnn.png."""
    ladder_rows, torch_rows = _ladder_rows(), _torch_rows()
    pick = lambda rows, key: {k[1:]: v for k, v in rows.items() if k[0] == key}  # noqa: E731
    series = [("early_q (round robin)", COLORS["muted"], "o-", pick(ladder_rows, "early_q")),
              ("dynamic, heads first", COLORS["k"], "^-", pick(ladder_rows, "dynamic")),
              ("dynamic, query blocks first", COLORS["q"], "s-", pick(ladder_rows, "dynamic_qblocks")),
              ("dynamic_qblocks_2wg (d=64: 2 consumers; d=128: O in Q's rows)", COLORS["o"], "d-",
               pick(ladder_rows, "dynamic_qblocks_2wg")),
              ("PyTorch cuDNN", COLORS["s"], "x--", pick(torch_rows, "torch_sdpa_cudnn"))]
    return _panels("Causal attention, persistent grids on the H100: who takes the next work tile, "
                   "in which order",
                   series, "bench_09 --rungs early_q,dynamic,dynamic_qblocks,dynamic_qblocks_2wg: "
                   + SOURCES, "09_scheduler.png", out_dir, panels=((64, True), (128, True)),
                   figsize=(10.5, 4.9), ncol=3)


TF32_BENCH, TF32_TORCH = "bench09_tf32_h200.json", "torch09_tf32_h200.json"


def fp32(out_dir):
    """Measured: the 3xTF32 rung on wgmma beside module 07's 3xTF32 and PyTorch's fp32 SDPA,
    one H200 run (bench_09_tf32, then compare_torch.py --dtype f32)."""
    ours = {}
    for r in _results(TF32_BENCH)["rows"]:
        if r["status"] == "ok":
            ours.setdefault(r["rung"], {})[(r["seq"], r["head_dim"], r["causal"])] = r["tflops"]
    torch = {(r["seq_q"], r["head_dim"], r["causal"]): r["tflops"]
             for r in _results(TF32_TORCH)["results"]
             if r["status"] == "ok" and r["kernel"] == "torch_sdpa_efficient"}
    series = [("module 09, 3xTF32 on wgmma (split pass included)", COLORS["q"], "o-",
               ours.get("3xtf32_wgmma", {})),
              ("module 09, plain TF32 (not fp32-accurate)", COLORS["muted"], "^--",
               ours.get("tf32_wgmma", {})),
              ("module 07, 3xTF32 on mma.sync", COLORS["k"], "s-", ours.get("3xtf32_07", {})),
              ("PyTorch fp32 SDPA (memory-efficient)", COLORS["s"], "x-", torch)]
    return _panels("fp32 attention on the H200: 3xTF32 on Hopper's wgmma",
                   series, f"docs/results/{TF32_BENCH}, {TF32_TORCH} (one run)", "09_fp32.png",
                   out_dir, ncol=2, figsize=(13.5, 4.3))


def make(out_dir):
    return [block(out_dir), ring(out_dir), schedules(out_dir), ladder(out_dir), timeline(out_dir),
            vs_cudnn(out_dir), scheduler(out_dir), fp32(out_dir)]


if __name__ == "__main__":
    for path in make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "docs", "img")):
        print(path)
