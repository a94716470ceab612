"""Writes the variant scripts, their fixed twins and manifest.json for one seed.

    python -m bench.variants.generate --seed 0 --out bench/out/variants
    python -m bench.variants.generate --seed 0 --out DIR --families loops,threads --per-family 20

Layout: DIR/<family>/<family>-NN.py (the variant), DIR/<family>/<family>-NN_fixed.py (its twin), and
DIR/manifest.json: for each variant its family, axes, the rules that count as detecting it, the environment of
each run ("{cores}" stands for the cores the runner may use), the steps and the extra diagnose options.
The same seed always writes the same files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.variants.families import NAMES, Variant, family, pick

PER_FAMILY = 24


def generate(seed: int, names: list[str] | None = None, per_family: int = PER_FAMILY) -> list[Variant]:
    out: list[Variant] = []
    for name in names or NAMES:
        out += pick(family(name), seed, per_family)
    return out


def manifest_entry(v: Variant) -> dict:
    fam = family(v.family)
    return {"name": v.name, "family": v.family, "axes": v.axes, "rules": v.rules, "healthy": v.healthy,
            "script": f"{v.family}/{v.name}.py", "fixed": f"{v.family}/{v.name}_fixed.py",
            "env": v.env, "fixed_env": v.fixed_env, "steps": fam.steps, "diagnose_args": list(fam.diagnose_args)}


def write(variants: list[Variant], out: Path, seed: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for v in variants:
        folder = out / v.family
        folder.mkdir(exist_ok=True)
        (folder / f"{v.name}.py").write_text(v.src)
        (folder / f"{v.name}_fixed.py").write_text(v.fixed_src)
    path = out / "manifest.json"
    path.write_text(json.dumps({"seed": seed, "variants": [manifest_entry(v) for v in variants]}, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--families", help=f"comma-separated, default all: {','.join(NAMES)}")
    parser.add_argument("--per-family", type=int, default=PER_FAMILY)
    args = parser.parse_args(argv)
    names = args.families.split(",") if args.families else None
    try:
        variants = generate(args.seed, names, args.per_family)
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return 2
    path = write(variants, args.out, args.seed)
    counts: dict[str, int] = {}
    for v in variants:
        counts[v.family] = counts.get(v.family, 0) + 1
    print(f"{len(variants)} variants and their twins in {args.out} ({path.name}):", file=sys.stderr)
    for name, n in counts.items():
        print(f"  {name:16} {n}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
