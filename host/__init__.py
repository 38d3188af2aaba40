"""Kernel access of the node: one module per kernel interface, one model per kernel object.

Below the opcode families and the agent's inventory, above the vocabulary. Everything that
talks to the kernel lives here: rtnetlink (:mod:`dmn.host.rtnetlink`), the devlink and RDMA
netlink families (:mod:`dmn.host.devlink`, :mod:`dmn.host.rdma`), network namespaces and the
agent's persistent pins (:mod:`dmn.host.netns`, :mod:`dmn.host.pins`) and sysfs. Opcode
families build their effect semantics (before-images, postconditions, undo) on it; the
inventory builds its facts on it; neither imports the other's internals.
"""
