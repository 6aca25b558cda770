"""The engine's side of merging concurrent writers (SEMANTICS.md#d-merge): the three versions a
plan's `merge_wanted` names, merged into `Inputs.merges` for the plan made again.

The decision of what merges is plan.py's and merge.py's (both pure); this module only gathers the
content: the base and the agent's version from the state dir's blobs (the baseline and the view
keep their blobs alive), the store's from what the pull fetched or the blobs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

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


def merge_wanted(
    state: Journal,
    pulled: Pulled,
    wanted: Iterable[P.MergeWanted],
    policy: MergePolicy = DEFAULT_POLICY,
) -> dict[P.MergeKey, P.MergeResult]:
    """Merge every wanted conflict whose three versions are at hand. A file the policy does not
        merge, a side that is not UTF-8, or changes that overlap give MergeResult(None): a true
        conflict. A merged text joins the pull's content, where the plan's Materialise finds it (and
    stores it as a blob only when applied: a merge the plan drops leaves nothing behind)."""
    results: dict[P.MergeKey, P.MergeResult] = {}
    for w in wanted:
        base, store, local = (content(state, pulled, sha) for sha in w.key)
        if store is None:
            continue  # the store's version was not fetched yet (or moved on): the next round
        # The store's version becomes this memory's base whatever the plan makes of it: its blob
        # must be here for the next merge (a merged view never materialises it).
        state.put_blobs([(w.remote_sha, store)])
        if base is None or local is None:  # a base no longer held: no merge can be trusted
            results[w.key] = P.MergeResult(None)
            continue
        merged = merge_bytes(base, store, local) if policy.applies_to(w.path) else None
        if merged is None:
            results[w.key] = P.MergeResult(None)
            continue
        sha = hashlib.sha256(merged).hexdigest()
        pulled.contents[sha] = merged
        results[w.key] = P.MergeResult(sha, len(merged))
    return results
