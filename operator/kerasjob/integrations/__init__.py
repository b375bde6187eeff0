"""Schedulers the operator works with, behind one interface (`integration`): Kueue
(`kueue` pure decisions, `kueue_sync` its I/O) and native gang scheduling (`gang`,
`gang_sync`)."""
