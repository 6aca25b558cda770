"""`memfs serve --upstream URL`: the relay between a fleet's mounts and an upstream store service
(docs/SEMANTICS.md#d-relay)."""
