"""The upstream lab backend: real Kubernetes components built from their Go modules."""
