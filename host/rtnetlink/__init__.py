"""rtnetlink: links read back (:mod:`.links`, :mod:`.link_reader`), the few link writes encoded
by hand (:mod:`.link_writer`) and a link's recorded hardware and namespace identity
(:mod:`.link_identity`)."""
