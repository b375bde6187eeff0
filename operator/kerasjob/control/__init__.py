"""The controller and its wiring: kopf handlers and indices (`handlers`), what is known
(`observed`, `jobview`), the reconcile loop (`controller`), acting on a plan (`acting`),
the progress scraper, Events and the operator's metrics."""
