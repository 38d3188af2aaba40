"""``ip/*`` opcodes: layer-3 configuration (addresses, routes) of a granted sandbox link."""
