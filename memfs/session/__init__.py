"""The composition layer: one mounted session, from the commands to the daemon.

It wires the filesystem (`memfs.mount`: the kernel-free core, its state dir, the pyfuse3 adapter)
to the sync engine (`memfs.sync`: the pure plan and the tick around it) and to the store client.
Both of those stay ignorant of each other; only this package imports both (tests/test_layers.py
checks the directions). It holds the daemon's lifecycle, both ends of the control socket, the
`memfs mount|sync|status|unmount|flush` commands and the offline answers from a state dir.
"""
