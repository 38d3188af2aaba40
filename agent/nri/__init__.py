"""NRI plugin side: connection multiplexer, ttrpc, and the plugin adapter over the coordinator."""
