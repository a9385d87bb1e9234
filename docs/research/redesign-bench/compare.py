#!/usr/bin/env python3
"""Compares rampart's figures in two `rampart bench` results.json files (or .json.gz) (a run of the previous
release and one of this release, made back to back with the same options):

    python3 compare.py OLD/results.json NEW/results.json [PEER]

For every workload and metric of PEER (default rampart): both medians, both ranges (min-max of
the repetitions), the change, and whether the new median lies within the old run's spread
widened by the new run's own (the ranges overlap). Prints a Markdown table."""

import gzip
import json
import statistics
import sys


def figures(path, peer):
    out = {}
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    for w in data["workloads"]:
        for cell in w["cells"]:
            if cell["peer"] != peer:
                continue
            samples = {}
            for run in cell.get("runs", []):
                for m in run.get("metrics", []):
                    key = (w["id"], m["name"], m["unit"], m.get("x"))
                    samples.setdefault(key, []).append(m["value"])
            for key, values in samples.items():
                out[key] = values
    return out


def main():
    old_path, new_path = sys.argv[1], sys.argv[2]
    peer = sys.argv[3] if len(sys.argv) > 3 else "rampart"
    old, new = figures(old_path, peer), figures(new_path, peer)
    print("| workload | metric | previous: median [range] | this: median [range] | change | ranges overlap |")
    print("|---|---|---|---|---|---|")
    overlaps = total = 0
    for key in sorted(set(old) & set(new), key=str):
        wid, name, unit, x = key
        a, b = old[key], new[key]
        ma, mb = statistics.median(a), statistics.median(b)
        change = (mb - ma) / ma * 100 if ma else float("nan")
        overlap = max(min(a), min(b)) <= min(max(a), max(b))
        overlaps += overlap
        total += 1
        label = name if x is None else f"{name} (x={x})"
        print(f"| {wid} | {label} ({unit}) | {ma:,.4g} [{min(a):,.4g}–{max(a):,.4g}] | "
              f"{mb:,.4g} [{min(b):,.4g}–{max(b):,.4g}] | {change:+.1f} % | {'yes' if overlap else '**no**'} |")
    print(f"\n{overlaps} of {total} figures overlap.")


if __name__ == "__main__":
    main()
