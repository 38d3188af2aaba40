"""Kubelet side: plugin registration and the DRA gRPC services, over unix sockets."""
