"""The data: a "full" store = N text memories, mixed sizes (<= 100 KiB), nested directories.

Deterministic for a seed, so every run (and both sides of scripts/bench-compare) measures the same
bytes. `build_stores` makes the whole set the bench seeds into its service.
"""

from __future__ import annotations

import random
from pathlib import Path

from benchmarks.config import MAX_CONTENT, Config

SEED = 20240601


def make_corpus(rng: random.Random, size: int) -> str:
    syll = ["ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "ve", "za", "an", "or", "ul", "ex", "in"]
    vocab = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(4000)]
    vocab += ["TODO", "memory", "agent", "user", "prefers", "config", "deploy", "error", "fixed", "note"]
    out: list[str] = []
    n = 0
    while n < size:
        line = " ".join(rng.choices(vocab, k=rng.randint(4, 16))) + "\n"
        out.append(line)
        n += len(line)
    return "".join(out)


def store_layout(rng: random.Random, count: int, total: int) -> list[tuple[str, int]]:
    """[(path, size)] with a log-normal size mix clipped to (0, 100 KiB], summing to about `total`."""
    sizes = [rng.lognormvariate(0, 1.1) for _ in range(count)]
    scale = total / sum(sizes)
    for _ in range(20):  # rescale until the clipped sizes sum to the target
        clipped = [min(MAX_CONTENT, max(120, int(s * scale))) for s in sizes]
        got = sum(clipped)
        if abs(got - total) < total * 0.001:
            break
        scale *= total / got
    topics = [f"topic-{i:02d}" for i in range(12)]
    out = []
    for i, size in enumerate(clipped):
        depth = rng.choice([0, 1, 1, 2, 2, 2, 3, 4])
        parts = [rng.choice(topics)] if depth else []
        parts += [f"sub-{rng.randint(0, 7)}" for _ in range(max(0, depth - 1))]
        out.append(("/" + "/".join([*parts, f"note-{i:04d}.md"]), size))
    return out


def store_contents(
    rng: random.Random, corpus: str, label: str, layout: list[tuple[str, int]]
) -> dict[str, str]:
    out = {}
    for path, size in layout:
        head = f"# {label} {path}\n"
        body_len = max(0, size - len(head))
        off = rng.randrange(0, len(corpus) - body_len - 1)
        out[path] = head + corpus[off : off + body_len]
    return out


def write_tree(root: Path, contents: dict[str, str]) -> None:
    for path, text in contents.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def build_stores(cfg: Config) -> dict[str, dict[str, str]]:
    """name -> {path: text} for the `cfg.stores` full stores, from the fixed seed."""
    rng = random.Random(SEED)
    corpus = make_corpus(rng, 4 * 2**20)
    stores: dict[str, dict[str, str]] = {}
    for k in range(cfg.stores):
        layout = store_layout(rng, cfg.memories, cfg.store_bytes)
        stores[f"full-{k}"] = store_contents(rng, corpus, f"full-{k}", layout)
    return stores
