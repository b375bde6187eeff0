"""The planner: one pure function, `reconcile.plan`, from a job, its stored status and its
Pods to a `planning.Plan` (the new status, the actions, the events). No API calls here.

Its vocabulary (`planning`, `scheduling`), the views of what was observed (`podview`,
`conditions`, `status`), the restart policy, and the steps over one typed state
(`planstate`): `accounting`, `running`, `elastic`, `finishing`, `suspension`,
`housekeeping`. See docs/architecture.md.
"""
