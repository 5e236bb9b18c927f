"""Declared studies (docs/studies.md): a scan of one key (the LR unless declared otherwise) on scan seeds, each
row's value chosen on validation, then the planned seeds at it.

    spec.py      the study as the claims file declares it (`studies:`): Study, validated
    protocol.py  the protocol as pure functions: read the scan, choose each row's value, flag grid edges
    command.py   `python -m mbexp.study NAME`: the sweeps, run as subprocesses, and their signals
"""
