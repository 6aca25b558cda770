"""The memfs benchmark behind `scripts/bench` (docs/PERFORMANCE.md, "How it measures").

    config.py    sizes (full and --quick) and constants
    corpus.py    the seeded data: deterministic text stores of mixed sizes and depths
    admin.py     the service through its public HTTP API (stores, sessions, listings, /metrics)
    harness.py   `Bench`: the service of this run, proxies, sandboxes, the rows collected
    official.py  the official worker (`SessionMemoryStores`) driven as `EnvironmentWorker` drives it
    tools.py     the timed shell tools and load generators (each in a process of its own)
    rows/        one module per family of rows; `rows.GROUPS` is what `--only` chooses from
    report.py    the table, the issue order, the JSON file
    main.py      flags, set-up, the groups in order, tear-down
    measure/     measurement tools run by hand, one question each (`python -m benchmarks.measure.NAME`)

It builds only on public names: memfs's commands and control socket, the service's HTTP API,
tests/support's service, sandbox, proxy (the one proxy the tests use too) and seed helpers.
tests/test_layers.py checks that.
"""
