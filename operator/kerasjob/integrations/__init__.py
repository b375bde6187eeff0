"""Schedulers the operator works with, behind one interface (`integration`): Kueue
(`kueue/`: pure decisions, `kueue/sync.py` its I/O) and native gang scheduling (`gang/`:
the pure part in its ``__init__``, `gang/sync.py` its I/O). One package per integration."""
