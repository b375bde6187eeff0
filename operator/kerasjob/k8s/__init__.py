"""Talking to the API server: the client (`kube`), its credentials, bounded sizes and
concurrency (`bounded`), the API paths (`paths`) and the controller's work queue."""
