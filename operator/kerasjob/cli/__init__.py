"""The command line: `kerasjob` / `kubectl kerasjob` (jobs, logs, status, convert) and the
operator's own entry point (`kerasjob run`); `app.main` is the program."""
