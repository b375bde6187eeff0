"""The children's manifests, built purely from a job: Pods (`children`, `templates/*.j2`,
`merge`), the headless Service and the NetworkPolicy; the identity env of each backend
(`runtimes`, `tf_config`); the semantic validation of a spec (`validation`)."""
