"""Kernel access of the node: one module per kernel interface, one model per kernel object.

Below the opcode families and the agent, above the vocabulary. Everything that talks to the
kernel lives here:

* rtnetlink — :mod:`.rtnetlink.links` (the one :class:`LinkState` of a link, lookups by
  identity), :mod:`.rtnetlink.link_reader`/:mod:`.rtnetlink.link_writer` (the lean socket),
  :mod:`.rtnetlink.link_identity` (a link's recorded hardware and namespace identity),
  :mod:`.rtnetlink.representor` (a switchdev representor's identity);
* generic netlink — :mod:`.netlink_wire` (framing), :mod:`.devlink` (the one
  :class:`DevlinkPort`, eswitch modes), :mod:`.rdma` (RDMA devices, ports, namespaces);
* namespaces — :mod:`.netns` (verified namespace references, the per-call
  :class:`LinkEnvironment`), :mod:`.pins` (the agent's persistent sandbox pins),
  :mod:`.netns_sysfs` (sysfs as a namespace sees it);
* the inventory's readers — :mod:`.sysfs` (PCI functions, netdevs, RDMA devices),
  :mod:`.inventory_sources` (link, devlink and RDMA dumps, with recorded stand-ins),
  :mod:`.kernel_events` (uevents and rtnetlink events that ask for a rescan).

Opcode families build their effect semantics (before-images, postconditions, undo) on it, the
inventory its facts; neither imports the other's internals. Failures are :class:`HostError`
values with stable reason codes (:mod:`.errors`), or :class:`Unknown` facts (:mod:`.unknown`).
"""
