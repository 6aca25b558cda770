"""The engine's side of merging concurrent writers (SEMANTICS.md#d-merge): the three versions a
plan's `merge_wanted` names, merged into `Inputs.merges` for the plan made again.

The decision of what merges is plan.py's and merge.py's (both pure); this module only gathers the
content: the base and the agent's version from the state dir's blobs (the baseline and the view
keep their blobs alive), the store's from what the pull fetched or the blobs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import trio

from memfs.sync import plan as P
from memfs.sync.merge import DEFAULT_POLICY, MergePolicy, merge_bytes
from memfs.sync.ports import Journal
from memfs.sync.remote import Pulled


def content(state: Journal, pulled: Pulled, sha: str) -> bytes | None:
    """The content of `sha` if this pull or the state dir holds it (the empty base: b"")."""
    if sha == P.EMPTY_BASE:
        return b""
    data = pulled.contents.get(sha)
    if data is None and state.has_blob(sha):
        data = state.get_blob(sha)
    return data


def missing_content(state: Journal, pulled: Pulled, wanted: Iterable[P.MergeWanted]) -> dict[str, str]:
    """The store's versions still to fetch for these merges: sha -> memory id (what
    StoreReader.fetch takes). The base and the agent's version are in the state dir (the
    baseline's and the view's blobs); a base that is not is a conflict, never a guess."""
    return {w.remote_sha: w.memory_id for w in wanted if content(state, pulled, w.remote_sha) is None}


async def merge_wanted(
    state: Journal,
    pulled: Pulled,
    wanted: Iterable[P.MergeWanted],
    policy: MergePolicy = DEFAULT_POLICY,
) -> dict[P.MergeKey, P.MergeResult]:
    """Merge every wanted conflict whose three versions are at hand. A file the policy does not
    merge, a side that is not UTF-8, changes that overlap, or a base whose content is not held give
    MergeResult(None): a true conflict. The store's version is stored as a blob at once, since it
    becomes the memory's base (an unused one goes with the next blob sweep); a merged text joins the
    pull's content, where the plan's Materialise finds it (stored as a blob when applied).

    The merges themselves run on a worker thread: a large one takes a few hundred milliseconds
    (merge.py's edit bound), which the event loop, serving every FUSE request, must not wait for.
    Only bytes cross to the thread; the state dir and `pulled` are touched here."""
    results: dict[P.MergeKey, P.MergeResult] = {}
    jobs: list[tuple[P.MergeKey, bytes, bytes, bytes]] = []
    for w in wanted:
        base, store, local = (content(state, pulled, sha) for sha in w.key)
        if store is None:
            continue  # the store's version was not fetched yet (or moved on): the next round
        state.put_blobs([(w.remote_sha, store)])  # (a merged view never materialises it)
        if base is None or local is None or not policy.applies_to(w.path):
            results[w.key] = P.MergeResult(None)
        else:
            jobs.append((w.key, base, store, local))
    if jobs:
        merged_all = await trio.to_thread.run_sync(lambda: [merge_bytes(b, s, lo) for _, b, s, lo in jobs])
        for (key, *_), merged in zip(jobs, merged_all, strict=True):
            if merged is None:
                results[key] = P.MergeResult(None)
                continue
            sha = hashlib.sha256(merged).hexdigest()
            pulled.contents[sha] = merged
            results[key] = P.MergeResult(sha, len(merged))
    return results
