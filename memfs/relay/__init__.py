"""`memfs serve --upstream URL`: the relay between a fleet's mounts and an upstream store service
(SPEC §5.9, docs/SEMANTICS.md#d-relay)."""
