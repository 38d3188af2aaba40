"""Opcode family ``multus``: API effects of Multus automatic mode (design §6.8): a shadow
NetworkAttachmentDefinition per allocated device and the Pod's network selection of it."""
