# One control-plane image of the local kind node image (hack/kind/node-image.sh builds
# kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd and CoreDNS from
# the binaries of `make binaries`): the Debian rootfs, PACKAGES from the Debian mirror, the
# binary in /usr/local/bin, run by kubeadm's manifests by its name or as the entrypoint.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG PACKAGES=""
RUN if [ -n "$PACKAGES" ]; then apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PACKAGES \
      && rm -rf /var/lib/apt/lists/*; fi
ARG BINARY
COPY ${BINARY} /usr/local/bin/${BINARY}
RUN ln -s ${BINARY} /usr/local/bin/component
ENTRYPOINT ["/usr/local/bin/component"]
