"""The local node agent: a tiny kubelet that runs Pods as processes on this machine.

It registers a Node, keeps it alive (Lease + status heartbeats), and runs each Pod bound to
it as a process in its own network namespace on a private bridge, with `/etc/hosts` entries
for every Pod's DNS name, volumes bind-mounted in a private mount namespace, and Pod status
reported the way a kubelet reports it. It exists so that real training runs under the real
operator on machines without Docker. See hack/localnode/README.md.

Modules, one concept each: `ipam` (pod IPs), `hosts` (DNS via /etc/hosts), `volumes`
(volume resolution), `status` (Pod status), `launch` (command line and environment of a
container), `netns` (bridge, namespaces, veths), `node` (Node, Lease, heartbeats), `kube`
(a minimal API client), `agent` (the reconcile loop), `__main__` (CLI).
"""
