"""attnlab-compare's search mode (attnlab.sweeps.search_compare): a folder holding a search is
read as a search, alone; attnlab.cli.compare hands it here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnlab import programs
from attnlab.analysis.tables import markdown_table, text_table

PROG = programs.COMPARE
NO_ARM_STATISTICS = (
    "no arm statistics for a search: its trials differ in the values drawn, not only in the "
    "seed, so they are not seeds of one arm; rerun its best configs over seeds "
    "(--rerun-best K --seeds N) and compare those"
)


def main(args: argparse.Namespace, out_dir) -> int:
    """Print and write the search's views; 2 with one line on bad input."""
    from attnlab.sweeps import search_compare as sc

    if len(args.paths) != 1:
        others = [p for p in args.paths if not sc.is_search(p)] or args.paths[1:]
        print(f"{PROG}: error: a search is compared alone, not with {others[0]}; give its folder "
              "only (its reruns over seeds are compared together)", file=sys.stderr)  # fmt: skip
        return 2
    refused = [o for o, on in (("--plan", args.plan is not None), ("--markdown", args.markdown),
                               ("--wandb-view", args.wandb_view)) if on]  # fmt: skip
    if refused:
        why = "compares arms, and a search has none: rerun its best over seeds"
        print(f"{PROG}: error: {refused[0]} {why} (--rerun-best K --seeds N) and compare those",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.top < 1:
        print(f"{PROG}: error: --top {args.top}: expected the number of trials shown per arm, "
              ">= 1", file=sys.stderr)  # fmt: skip
        return 2
    if args.rerun_best is not None and not (args.rerun_best >= 1 and args.seeds >= 2):
        print(f"{PROG}: error: --rerun-best {args.rerun_best} --seeds {args.seeds}: expected "
              "K >= 1 configs and N >= 2 seeds", file=sys.stderr)  # fmt: skip
        return 2
    try:
        search = sc.read_search(Path(args.paths[0]))
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    out = out_dir(args)
    counts = {}
    for t in search.trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    done = ", ".join(f"{n} {s}" for s, n in counts.items())
    print(f"search {search.spec.get('name', '')}: {len(search.trials)} trials ({done}) in "
          f"{len(search.arms)} arm(s), {search.metric} to "
          f"{'maximize' if search.goal_max else 'minimize'}")  # fmt: skip
    print(NO_ARM_STATISTICS)
    table = sc.top_table(search, args.top)
    print(f"\nthe best {args.top} trials of each arm (pruned ones at their last validation, "
          "ranked after every completed one):")  # fmt: skip
    print(text_table(table))
    written = [out / "search_trials.csv", out / "comparison.md"]
    sc.write_trials_csv(search, written[0])
    figure = out / f"search_{search.metric.replace('/', '_')}.png"
    if sc.plot(search, figure):
        written.append(figure)
    md = [f"# Search {search.spec.get('name', '')}", "", NO_ARM_STATISTICS + ".", "",
          f"The best {args.top} trials of each arm:", "", markdown_table(table), ""]  # fmt: skip
    md += [f"![{figure.stem}]({figure.name})", ""] if figure in written else []
    if args.rerun_best is not None:
        md += _reruns(search, args, out, written)
    from attnlab.sweeps.search_report import write_search_views

    for line in write_search_views([search.folder], out):
        print(line)
    written.append(out / "search.md")
    (out / "comparison.md").write_text("\n".join(md) + "\n")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _reruns(search, args, out: Path, written: list[Path]) -> list[str]:
    """The rerun files, their commands printed; the lines for comparison.md."""
    from attnlab.sweeps import search_compare as sc

    files = sc.rerun_files(search, args.rerun_best, args.seeds, out / "rerun_best")
    written += files
    if not files:
        print("\n--rerun-best: no completed trial to rerun")
        return ["No completed trial to rerun.", ""]
    folders = [out / "rerun_best" / f.stem for f in files]
    lines = [
        f"attnlab-sweep {f} --out {d} --parallel 2" for f, d in zip(files, folders, strict=True)
    ]
    lines.append(
        "attnlab-compare " + " ".join(str(d) for d in folders) + f" --out {out / 'rerun_best'}"
    )
    print(f"\nthe best {args.rerun_best} of each arm over {args.seeds} seeds: run")
    for line in lines:
        print("  " + line)
    import shlex

    from attnlab.sweeps import expand_sweep

    for f in files:  # what each rerun trial runs: the search's command line kept
        print(f"  {f.name} runs: {shlex.join(expand_sweep(f)[0].command)}")
    return ["The best configs rerun over seeds:", "", "```", *lines, "```", ""]
